"""Train HiMo-CLIP and the baselines it is compared with, then evaluate them on long captions.

    accelerate launch examples/train_himo.py                       # small models from scratch, synthetic scenes, CPU
    accelerate launch examples/train_himo.py --init_from_clip openai/clip-vit-large-patch14 ...

Each variant is trained identically (same data order, steps and optimiser) with its own objective:
  clip-77    CLIP with 77 text positions, global InfoNCE only
  clip-248   the same with 248 positions (Long-CLIP stretching when starting from CLIP), global InfoNCE only
  himo-clip  248 positions, MoLo = global + lambda * HiDe component InfoNCE (HiMo-CLIP Eq. 4)
Writes `<output_dir>/<variant>/` checkpoints (loadable with AutoModel/AutoProcessor and trust_remote_code=True),
`eval/<variant>.json`, `results.json`, `prefix_similarity.png` and `loss_curves.png`.

The same script runs on one CPU or across GPUs and machines (`--config_file examples/accelerate_configs/
{single,multi_gpu,zero2,zero3}.yaml`), saves its full state every `--checkpointing_steps` and continues exactly
with `--resume_from_checkpoint latest`, trains LoRA adapters with `--lora_r 16`, and publishes each checkpoint
with a model card with `--push_to_hub --hub_model_id ORG/NAME`.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from transformers import AutoImageProcessor, AutoTokenizer, CLIPImageProcessorPil, HfArgumentParser

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.data.tokenizer import scene_corpus, train_scene_tokenizer
from hf_longclip.evaluation import evaluate_long_captions, plot_loss_curves, plot_prefix_similarity
from hf_longclip.fileio import write_atomic
from hf_longclip.training.hub import build_model_card, push_to_hub
from hf_longclip.training.lora import LoraArguments, apply_lora, count_parameters, merge_lora
from hf_longclip.training.loop import TrainingArguments, make_accelerator, save_model, train, whole_model_init

VARIANTS = {  # name: (text positions, MoLo lambda or None for the configured one)
    "clip-77": (77, 0.0),
    "clip-248": (248, 0.0),
    "himo-clip": (248, None),
}
MODEL_CARD = Path(__file__).resolve().parents[1] / "model_cards" / "himo_clip.md"
logger = get_logger(__name__)
METRICS = ("r1_i2t", "r1_t2i", "himo@2", "himo@3", "himo@k")


@dataclass
class ScriptArguments:
    variants: str = field(default="clip-77,clip-248,himo-clip", metadata={"help": f"comma list of {list(VARIANTS)}"})
    init_from_clip: str | None = field(
        default=None, metadata={"help": "CLIPModel Hub id or directory to start from; default: small model from scratch"}
    )
    hide_tau: float = field(default=0.9, metadata={"help": "HiDe explained-variance threshold (Sec. 3.2)"})
    molo_lambda: float = field(default=1.0, metadata={"help": "MoLo component-loss weight (Eq. 4)"})
    hide_scope: str = field(default="global", metadata={"help": "'global' (gathered batch) or 'local' PCA"})
    dataset_seed: int = field(default=0)
    num_train: int = field(default=4000)
    num_test: int = field(default=512)
    image_size: int = field(default=64)
    hidden_size: int = field(default=128, metadata={"help": "width of both encoders when training from scratch"})
    num_layers: int = field(default=2)
    num_heads: int = field(default=4)
    patch_size: int = field(default=8)
    push_to_hub: bool = field(default=False, metadata={"help": "upload each trained variant with its model card"})
    hub_model_id: str | None = field(default=None, metadata={
        "help": "ORG/NAME; with several variants each goes to ORG/NAME-<variant>"})
    hub_private: bool = field(default=False)

    def __post_init__(self):
        if self.push_to_hub and not self.hub_model_id:
            raise ValueError("--push_to_hub needs --hub_model_id ORG/NAME")


def scratch_model(args: ScriptArguments, tokenizer, positions: int, molo_lambda: float) -> HiMoCLIPModel:
    width = dict(hidden_size=args.hidden_size, intermediate_size=4 * args.hidden_size,
                 num_hidden_layers=args.num_layers, num_attention_heads=args.num_heads)
    config = HiMoCLIPConfig(
        text_config=dict(width, vocab_size=len(tokenizer), max_position_embeddings=positions,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id),
        vision_config=dict(width, image_size=args.image_size, patch_size=args.patch_size),
        projection_dim=args.hidden_size,
        hide_tau=args.hide_tau, molo_lambda=molo_lambda, hide_scope=args.hide_scope,
    )
    return HiMoCLIPModel(config)


def build(args: ScriptArguments, dataset, variant: str, seed: int) -> tuple[HiMoCLIPModel, HiMoCLIPProcessor]:
    positions, molo_lambda = VARIANTS[variant]
    molo_lambda = args.molo_lambda if molo_lambda is None else molo_lambda
    set_seed(seed)  # identical initialisation for every variant
    if args.init_from_clip:
        tokenizer = AutoTokenizer.from_pretrained(args.init_from_clip)
        image_processor = AutoImageProcessor.from_pretrained(args.init_from_clip)
        model = HiMoCLIPModel.from_clip(
            args.init_from_clip, stretch_positions=positions > 77,
            hide_tau=args.hide_tau, molo_lambda=molo_lambda, hide_scope=args.hide_scope,
        )
    else:
        tokenizer = train_scene_tokenizer(scene_corpus(dataset), model_max_length=positions)
        size = args.image_size
        image_processor = CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
        model = scratch_model(args, tokenizer, positions, molo_lambda)
    return model, HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=positions)


def print_table(results: dict) -> None:
    header = f"{'model':<12}" + "".join(f"{name:>10}" for name in METRICS)
    print(header + "\n" + "-" * len(header))
    for variant, metrics in results.items():
        print(f"{variant:<12}" + "".join(f"{metrics[name]:>10.3f}" for name in METRICS))


def hub_repo_ids(script_args: ScriptArguments, variants: list[str]) -> dict[str, str]:
    if len(variants) == 1:
        return {variants[0]: script_args.hub_model_id}
    return {variant: f"{script_args.hub_model_id}-{variant}" for variant in variants}


def main() -> None:
    parser = HfArgumentParser((ScriptArguments, TrainingArguments, LoraArguments))
    script_args, training_args, lora_args = parser.parse_args_into_dataclasses()
    variants = [v.strip() for v in script_args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    accelerator = make_accelerator(training_args)
    zero_stage = getattr(accelerator.state.deepspeed_plugin, "zero_stage", None)
    if lora_args.lora_r > 0 and zero_stage == 3:
        raise SystemExit("LoRA under ZeRO-3 is not supported (merging needs whole weights): use ZeRO-2 or DDP")
    accelerator.init_trackers("train_himo", config={**asdict(script_args), **asdict(training_args),
                                                    **asdict(lora_args)})
    output_dir = Path(training_args.output_dir)
    with accelerator.main_process_first():
        dataset = load_synthetic_scenes(
            seed=script_args.dataset_seed, num_train=script_args.num_train, num_test=script_args.num_test,
            image_size=script_args.image_size,
        )
    results, histories = {}, {}
    for variant in variants:
        eval_file = output_dir / "eval" / f"{variant}.json"  # written last: a resumed run skips finished variants
        if training_args.resume_from_checkpoint and eval_file.is_file():
            results[variant], histories[variant] = json.loads(eval_file.read_text()).values()
            continue
        with whole_model_init(accelerator):
            model, processor = build(script_args, dataset, variant, training_args.seed)
        if lora_args.lora_r > 0:
            base_dir = output_dir / f"{variant}-lora" / "base"
            save_model(accelerator, model, base_dir, processor)  # what the adapter applies to
            model = apply_lora(model, lora_args, base_model_name_or_path=str(base_dir))
            trainable, total = count_parameters(model)
            logger.info(f"{variant}: LoRA trains {trainable:,} of {total:,} parameters", main_process_only=True)
        model, histories[variant] = train(
            model, dataset["train"], ImageTextCollator(processor), training_args, accelerator, run_name=variant,
            eval_dataset=dataset["validation"],
        )
        if lora_args.lora_r > 0:
            save_model(accelerator, model, output_dir / f"{variant}-lora" / "adapter")
            model = merge_lora(model)
        save_model(accelerator, model, output_dir / variant, processor)
        if accelerator.is_main_process:  # evaluate what was saved: the same under every engine, ZeRO-3 included
            with whole_model_init(accelerator):
                saved = HiMoCLIPModel.from_pretrained(output_dir / variant, dtype=torch.float32)
            results[variant] = evaluate_long_captions(saved.to(accelerator.device), processor, dataset["test"],
                                                      training_args.per_device_eval_batch_size)
            eval_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(eval_file, json.dumps({"results": results[variant], "history": histories[variant]}))
        accelerator.wait_for_everyone()
        accelerator.free_memory()
    if accelerator.is_main_process:
        (output_dir / "results.json").write_text(json.dumps({"results": results, "training": histories}, indent=2))
        plot_prefix_similarity({v: r["mean_similarity_by_prefix"] for v, r in results.items()},
                               output_dir / "prefix_similarity.png")
        plot_loss_curves(histories, output_dir / "loss_curves.png")
        print_table(results)
        print(f"\ncheckpoints, results.json and plots in {output_dir}/")
        if script_args.push_to_hub:
            for variant, repo_id in hub_repo_ids(script_args, variants).items():
                config = json.loads((output_dir / variant / "config.json").read_text())
                card = build_model_card(
                    MODEL_CARD, repo_id=repo_id, results=results[variant], config=config,
                    training_args={**asdict(script_args), **asdict(training_args), **asdict(lora_args),
                                   "variant": variant},
                    base_model=script_args.init_from_clip,
                )
                url = push_to_hub(output_dir / variant, repo_id, card=card, private=script_args.hub_private)
                print(f"pushed {variant} to {url}")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
