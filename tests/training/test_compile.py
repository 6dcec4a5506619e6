"""`--torch_compile` (`hf_longclip.training.compile`): every task's training step (`Task.device_step`: the model's
encoders and the objective, HiMo-CLIP's MoLo with HiDe, OneLIP's Eq. 10 with TRIM, its teacher and PO-HNM's logits,
DITM's triplet and ordering terms, F-CAST's two levels, FLAIR's, CAST classification) compiles whole with
`fullgraph=True` (0 graph breaks, so no data-dependent shape and no host read), and the compiled step gives the
eager step's loss terms and gradients in float32; the loop trains with it, also under gradient caching.

The compiled steps use the `aot_eager` backend: it traces the forward and backward graphs exactly as Inductor
receives them, without generating code (Inductor's C++ compilation of six models takes many minutes on two cores:
`benchmarks/bench_compile.py` measures Inductor and checks its loss)."""

import pytest
import torch

from helpers.training_cases import CASES
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.compile import compile_step
from hf_longclip.training.task import sum_of_terms

ROWS = 8
RTOL = 1e-5  # float32: the compiled graph may order reductions differently


def _step(task, model, batch, device_step) -> tuple[dict, dict]:
    """The loss terms and every parameter's gradient after one forward and backward of `device_step`."""
    model.zero_grad(set_to_none=True)
    terms, _ = device_step(model, batch)
    sum_of_terms(terms).backward()
    return ({key: value.detach() for key, value in terms.items()},
            {key: param.grad.clone() for key, param in model.named_parameters() if param.grad is not None})


@pytest.mark.parametrize("name", list(CASES))
def test_the_whole_step_compiles_without_graph_break_and_equals_eager(name, accelerator, tmp_path):
    task, rows = CASES[name](tmp_path)
    task.restore_files(None, accelerator)  # OneLIP: its PO-HNM queues, whose negatives join the step's logits
    model = task.model.train()
    batch = task.prepare_step(model, task.collate_fn(rows[:ROWS]))
    torch._dynamo.reset()
    compiled = compile_step(task.device_step, backend="aot_eager", fullgraph=True)  # a graph break is an error
    torch.manual_seed(0)
    compiled_terms, compiled_grads = _step(task, model, batch, compiled)
    torch.manual_seed(0)
    eager_terms, eager_grads = _step(task, model, batch, task.device_step)

    assert compiled_terms.keys() == eager_terms.keys()
    for key, value in eager_terms.items():
        torch.testing.assert_close(compiled_terms[key], value, rtol=RTOL, atol=0, msg=key)
    assert compiled_grads.keys() == eager_grads.keys() and len(eager_grads) > 10
    errors = torch.stack([(compiled_grads[key] - grad).norm() for key, grad in eager_grads.items()])
    norms = torch.stack([grad.norm() for grad in eager_grads.values()])
    assert errors.norm() <= RTOL * norms.norm()
    significant = norms > 1e-6 * norms.norm()  # the others have a true gradient of 0 and hold rounding noise
    assert ((errors / norms)[significant] <= 10 * RTOL).all()


def test_a_graph_break_fails_the_fullgraph_check(accelerator, tmp_path):
    """The check above can fail: a host read in the step (as HiDe's m was before it stayed on the device) is an
    error under fullgraph=True."""
    task, rows = CASES["himo"](tmp_path)
    batch = task.collate_fn(rows[:ROWS])

    def step_with_host_read(model, batch):
        terms, encoded = task.device_step(model, batch)
        if terms["global_loss"] > 0:  # data-dependent branch: a host sync
            terms = {**terms, "global_loss": terms["global_loss"] * 1}
        return terms, encoded

    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        compile_step(step_with_host_read, backend="aot_eager", fullgraph=True)(task.model, batch)


@pytest.mark.parametrize("cached", [False, True], ids=["whole", "gradient_cache"])
def test_the_loop_trains_compiled_as_eager(cached, accelerator, tmp_path):
    """`--torch_compile` in the loop: the compiled run's losses follow the eager run's (OneLIP: teacher and PO-HNM
    queues, read and refreshed outside the compiled step), with and without gradient caching."""
    from hf_longclip.training.loop import train

    sizes = dict(per_device_train_batch_size=4, contrastive_batch_size=8) if cached else \
        dict(per_device_train_batch_size=8)
    histories = []
    for compiled in (True, False):
        task, rows = CASES["onelip"](tmp_path / str(compiled))
        task.step = 0
        args = LoopArguments(output_dir=str(tmp_path / str(compiled)), max_steps=3, warmup_steps=0, logging_steps=1,
                             learning_rate=1e-3, torch_compile=compiled, torch_compile_backend="aot_eager", **sizes)
        torch._dynamo.reset()
        histories.append(train(task, rows[:24], args, accelerator)[1])
    compiled, eager = ([record["loss"] for record in history] for history in histories)
    assert len(compiled) == 3 and compiled == pytest.approx(eager, rel=RTOL)
    assert histories[0][-1]["queues_refreshed"] == histories[1][-1]["queues_refreshed"] > 0


def test_a_task_that_overrides_compute_loss_is_refused(accelerator, tmp_path):
    """The loop compiles `device_step`: a task whose own `compute_loss` would bypass it gets a clear error."""
    from hf_longclip.training.loop import train

    task, rows = CASES["himo"](tmp_path)

    class OwnLoss(type(task)):
        def compute_loss(self, model, batch):
            return super().compute_loss(model, batch)

    task.__class__ = OwnLoss
    args = LoopArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=8, torch_compile=True)
    with pytest.raises(ValueError, match="OwnLoss overrides compute_loss"):
        train(task, rows[:16], args, accelerator)
