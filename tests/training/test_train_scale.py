"""examples/train_himo.py at scale, on CPU under a real `accelerate launch`: 2-process DDP and DeepSpeed ZeRO-2/3
follow the single-process loss curve on the same global batch, a SIGKILLed run (or one of its processes: the launch
then fails, naming its rank) resumes to the same weights, the training options run, LoRA trains and merges, and
`--push_to_hub` publishes a checkpoint that loads by repo id.

Each launch trains one tiny HiMo-CLIP (width 32, one layer) on 128 synthetic scenes for a few steps.
"""

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModel

from helpers.fake_hub import FakeHub
from helpers.hub import TOKEN, hub_env, load_by_repo_id_without_the_library
from helpers.launch import (
    CONFIGS,
    NOISE_ONLY,
    accelerate_launch,
    kill_rank_when_written,
    kill_when_written,
    needs_deepspeed,
    run,
    script_env,
    weights,
)

TINY = ["--variants", "himo-clip", "--num_train", "128", "--num_test", "32", "--image_size", "32",
        "--hidden_size", "32", "--num_layers", "1", "--num_heads", "2", "--logging_steps", "1", "--warmup_steps", "1",
        "--base_steps", "0"]  # from scratch: what is compared is the variant's own training
GLOBAL_BATCH = 16
# Summation order differs between one process and gathered/all-reduced shards: float32 rounding only (measured:
# losses within 1e-7 relative, weights within 6e-8).
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-6

# Every test here launches examples/train_himo.py under accelerate launch: end to end, slow.
pytestmark = pytest.mark.slow


def launch_command(output_dir: Path, launch_args: list[str], *script_args: str) -> list[str]:
    return accelerate_launch("train_himo.py", output_dir, launch_args, *TINY, *script_args)


def losses(output_dir: Path) -> list[float]:
    return [record["loss"] for record in json.loads((output_dir / "results.json").read_text())["training"]["himo-clip"]]


@pytest.fixture(scope="module")
def single_process(tmp_path_factory, datasets_cache) -> Path:
    """The reference: one process with the whole global batch."""
    output_dir = tmp_path_factory.mktemp("single")
    run(launch_command(output_dir, ["--num_processes", "1"], "--max_steps", "4",
                       "--per_device_train_batch_size", str(GLOBAL_BATCH)),
        script_env(datasets_cache), output_dir)
    return output_dir


@pytest.mark.parametrize("engine", [
    pytest.param(["--config_file", str(CONFIGS / "multi_gpu.yaml")], id="ddp"),  # on a CPU machine: gloo
    pytest.param(["--config_file", str(CONFIGS / "zero2.yaml")], id="zero2", marks=needs_deepspeed),
    pytest.param(["--config_file", str(CONFIGS / "zero3.yaml")], id="zero3", marks=needs_deepspeed),
])
def test_two_processes_follow_the_single_process_loss_curve(engine, single_process, datasets_cache, tmp_path):
    run(launch_command(tmp_path, [*engine, "--num_processes", "2"], "--max_steps", "4",
                       "--per_device_train_batch_size", str(GLOBAL_BATCH // 2)),
        script_env(datasets_cache), tmp_path)
    reference = losses(single_process)
    assert len(reference) == 4
    assert losses(tmp_path) == pytest.approx(reference, rel=LOSS_RTOL)
    # The final checkpoint (under ZeRO-3: gathered from the shards) round-trips through AutoModel with the
    # weights of the single-process run.
    model = AutoModel.from_pretrained(tmp_path / "himo-clip", trust_remote_code=True)
    expected = weights(single_process / "himo-clip")
    compared = [name for name in expected if not name.endswith(NOISE_ONLY)]
    assert len(compared) > 30
    for name in compared:
        torch.testing.assert_close(model.state_dict()[name], expected[name], atol=WEIGHT_ATOL, rtol=0, msg=name)
    assert json.loads((tmp_path / "results.json").read_text())["results"]["himo-clip"]["r1_i2t"] == pytest.approx(
        json.loads((single_process / "results.json").read_text())["results"]["himo-clip"]["r1_i2t"])


PROCESSES = 2
DDP = ["--config_file", str(CONFIGS / "multi_gpu.yaml"), "--num_processes", str(PROCESSES)]
# with gradient caching: each process's contrastive batch encoded 4 samples at a time
KILLED_STEPS = ["--max_steps", "60", "--checkpointing_steps", "10", "--save_total_limit", "2", "--eval_steps", "20",
                "--contrastive_batch_size", str(GLOBAL_BATCH // PROCESSES), "--per_device_train_batch_size", "4"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, datasets_cache) -> Path:
    """What a killed run, resumed, must end with: the same two DDP processes, never killed."""
    output_dir = tmp_path_factory.mktemp("uninterrupted")
    run(launch_command(output_dir, DDP, *KILLED_STEPS), script_env(datasets_cache), output_dir)
    return output_dir


def assert_same_weights(run_dir: Path, expected_dir: Path) -> None:
    resumed, expected = weights(run_dir / "himo-clip"), weights(expected_dir / "himo-clip")
    assert resumed.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(resumed[name], expected[name], atol=1e-6, rtol=0, msg=name)


def test_killed_run_resumes_to_the_weights_of_an_uninterrupted_run(uninterrupted, datasets_cache, tmp_path):
    """The loop's resume after a kill, end to end, once for every model (no per-model kill test): two DDP processes
    with gradient caching, killed after its first checkpoint, resumed from `latest` to the uninterrupted run's
    weights and history; the only test that kills a multi-process run of the loop and resumes it with the checkpoint
    rotation (`--save_total_limit`) at work. A model's own state across a resume is tested where it has some: the
    task-state test (training/test_task_state.py), PO-HNM's queues (recipes/onelip) and the streamed shards'
    position (data/test_shards.py)."""
    interrupted = tmp_path / "interrupted"
    command = launch_command(interrupted, DDP, *KILLED_STEPS)
    first_checkpoint = interrupted / "checkpoints" / "himo-clip" / "step_00000010"
    kill_when_written(command, first_checkpoint, script_env(datasets_cache), tmp_path)
    assert not (interrupted / "himo-clip").exists(), "the run finished before it was killed"

    run([*command, "--resume_from_checkpoint", "latest"], script_env(datasets_cache), tmp_path)
    assert_same_weights(interrupted, uninterrupted)
    history = json.loads((interrupted / "results.json").read_text())["training"]["himo-clip"]
    expected_history = json.loads((uninterrupted / "results.json").read_text())["training"]["himo-clip"]
    assert [h["step"] for h in history] == list(range(1, 61))
    assert [sorted(h) for h in history] == [sorted(h) for h in expected_history]  # eval_loss at the same steps
    for key in ("loss", "lr", "logit_scale", "eval_loss"):
        values = [[h[key] for h in rows if key in h] for rows in (history, expected_history)]
        assert values[0] == pytest.approx(values[1], rel=1e-6), key
    kept = sorted(p.name for p in (interrupted / "checkpoints" / "himo-clip").iterdir())
    assert kept == ["step_00000050", "step_00000060"]


def test_one_killed_process_ends_the_launch_naming_its_rank_and_the_run_resumes(uninterrupted, datasets_cache,
                                                                                 tmp_path):
    """SIGKILL of rank 1 alone, mid-step after the first checkpoint: its peer, left waiting in a gloo collective,
    does not hang the run: torchrun's agent ends it and the launch fails within seconds, its report naming rank 1
    and the signal; `latest` then resumes to the uninterrupted run's weights."""
    interrupted = tmp_path / "interrupted"
    command = launch_command(interrupted, DDP, *KILLED_STEPS)
    first_checkpoint = interrupted / "checkpoints" / "himo-clip" / "step_00000010"
    launch, killed = kill_rank_when_written(command, first_checkpoint, 1, script_env(datasets_cache), tmp_path,
                                            exit_within=120)
    assert launch.returncode == 1, launch.stdout[-3000:]
    assert re.search(rf"rank +: 1 \(local_rank: 1\)\n +exitcode +: -9 \(pid: {killed}\) +\(SIGKILL\)",
                     launch.stdout), launch.stdout[-3000:]
    assert not (interrupted / "himo-clip").exists(), "the run finished before it was killed"

    run([*command, "--resume_from_checkpoint", "latest"], script_env(datasets_cache), tmp_path)
    assert_same_weights(interrupted, uninterrupted)


def test_training_options_run_together(datasets_cache, tmp_path):
    """Gradient accumulation, gradient checkpointing, bf16 autocast, periodic validation and TensorBoard."""
    run(launch_command(tmp_path, ["--num_processes", "1"], "--max_steps", "4", "--per_device_train_batch_size", "8",
                       "--gradient_accumulation_steps", "2", "--gradient_checkpointing", "--mixed_precision", "bf16",
                       "--eval_steps", "2", "--report_to", "tensorboard"),
        script_env(datasets_cache), tmp_path)
    history = json.loads((tmp_path / "results.json").read_text())["training"]["himo-clip"]
    assert [h["step"] for h in history] == [1, 2, 3, 4]  # optimizer steps, 2 micro-batches each
    assert [h["step"] for h in history if "eval_loss" in h] == [2, 4]
    assert all(torch.isfinite(torch.tensor([h["loss"] for h in history])))
    assert list((tmp_path / "train_himo").rglob("events.out.tfevents.*"))


def test_lora_trains_adapters_and_merges_into_a_loadable_checkpoint(datasets_cache, tmp_path):
    run(launch_command(tmp_path, ["--num_processes", "1"], "--max_steps", "3", "--per_device_train_batch_size",
                       "16", "--learning_rate", "1e-2", "--lora_r", "4", "--lora_target_modules", "q_proj,v_proj"),
        script_env(datasets_cache), tmp_path)
    from peft import PeftModel

    base = AutoModel.from_pretrained(tmp_path / "himo-clip-lora" / "base", trust_remote_code=True)
    base_weights = {name: value.clone() for name, value in base.state_dict().items()}
    merged = AutoModel.from_pretrained(tmp_path / "himo-clip", trust_remote_code=True)
    changed = {name for name, value in merged.state_dict().items() if not torch.equal(value, base_weights[name])}
    assert changed and all(name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed)
    adapted = PeftModel.from_pretrained(base, tmp_path / "himo-clip-lora" / "adapter").merge_and_unload()
    for name, value in merged.state_dict().items():
        torch.testing.assert_close(adapted.state_dict()[name], value, atol=1e-6, rtol=0, msg=name)


def test_push_to_hub_publishes_a_checkpoint_that_loads_by_repo_id(datasets_cache, tmp_path):
    with FakeHub(token=TOKEN) as hub:
        env = {**hub_env(hub, tmp_path / "home"), "HF_DATASETS_CACHE": str(datasets_cache)}
        result = run(launch_command(tmp_path, ["--num_processes", "1"], "--max_steps", "2",
                                    "--per_device_train_batch_size", "16", "--push_to_hub",
                                    "--hub_model_id", "lab/himo-tiny"), env, tmp_path)
        assert f"pushed himo-clip to {hub.url}/lab/himo-tiny/commit/" in result.stdout
        card = hub.file("lab/himo-tiny", "README.md").decode()
        r1 = json.loads((tmp_path / "results.json").read_text())["results"]["himo-clip"]["r1_i2t"]
        assert "model-index" in card and f"value: {r1}" in card
        pushed = yaml.safe_load(hub.file("lab/himo-tiny", ".eval_results/synthetic-long-caption-scenes_r1_i2t.yaml"))
        assert pushed[0]["value"] == r1 and "texts up to 248 tokens" in pushed[0]["source"]["name"]  # and the Hub's
        loaded = load_by_repo_id_without_the_library(hub, "lab/himo-tiny", tmp_path / "fresh")
    assert loaded["module"].startswith("transformers_modules.")
    local = AutoModel.from_pretrained(tmp_path / "himo-clip", trust_remote_code=True)
    assert loaded["checksum"] == pytest.approx(sum(p.double().sum().item() for p in local.parameters()), rel=1e-12)
