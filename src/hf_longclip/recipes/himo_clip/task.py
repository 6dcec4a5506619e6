"""HiMo-CLIP's training task: MoLo (Eq. 4) over the global batch, HiDe's in-batch PCA of the text embeddings, with
the paper's formula or the official code's choices (`PRESETS`). Its baseline, Long-CLIP's fine-tuning, is
`hf_longclip.recipes.longclip.LongCLIPTask`."""

from collections.abc import Callable

from torch import nn

from hf_longclip.objectives.himo_clip import HIDE_MODALITIES, HIDE_SCOPES, MoLoLoss
from hf_longclip.recipes.longclip import KeptPositionsTask

# MoLo's options of each preset. "paper": Eq. 1-4 as written. "released": what the official training computes
# (github.com/UnicomAI/HiMo-CLIP, model/model_himo.py `CLIP.forward` and train/run_scripts/run_train.sh at commit
# f235e973a29014e640ef437ccf02b334d3a4bef6): HiDe per process with pca_ratio 0.9, its reconstruction scored as it is
# (mean added back, not re-normalised), the gathered features without gradient, label smoothing 0.1, lambda 1.
PRESETS = {
    "paper": dict(hide_tau=0.9, molo_lambda=1.0, hide_scope="global", label_smoothing=0.0, hide_modalities="text",
                  molo_global=True, normalize_components=True, gather_grad=True),
    "released": dict(hide_tau=0.9, molo_lambda=1.0, hide_scope="local", label_smoothing=0.1, hide_modalities="text",
                     molo_global=True, normalize_components=False, gather_grad=False),
}


class HiMoCLIPTask(KeptPositionsTask):
    """A HiMo-CLIP (or any dual encoder) trained with `MoLoLoss`; `molo_lambda=0` is plain CLIP training with the
    global InfoNCE alone (the CLIP-77 / CLIP-248 baselines).

    preset: "paper" (Eq. 1-4 as written, the default) or "released" (the official training's choices, see
        `PRESETS` and docs/models/himo_clip.md): sets every option below that is not given; a given one overrides it.
    hide_tau: HiDe's explained-variance threshold tau (Sec. 3.2): m is the smallest number of principal components
        whose cumulative explained variance reaches it.
    molo_lambda: weight lambda of the component loss (Eq. 4).
    hide_scope: "global", HiDe's PCA over the whole gathered batch (the paper's batch of 1024 spans 8 GPUs: the
        result does not depend on the number of processes), or "local", each process's own batch as the official
        code does, components gathered afterwards as negatives.
    label_smoothing: of both InfoNCE cross-entropies (the paper: none; the official code: 0.1).
    hide_modalities: "text" (the paper's method) or "both", which also decomposes the image embeddings (Table 5's
        L_comp^{u,v}).
    molo_global: keep the global term (Eq. 2); False trains on the component loss alone (Table 5's L_comp).
    normalize_components: score the images against the re-normalised HiDe components (the paper's cosine
        similarity); False scores the reconstruction as it is, mean added back (the official code).
    gather_grad: the gathered batch carries gradient into every process and both towers; False makes it a
        constant, as the official code's plain `dist.all_gather` (each cross-entropy trains its local side only).

    Text position rows kept frozen by the model are restored after every step (`KeptPositionsTask`).
    """

    def __init__(self, model: nn.Module, collate_fn: Callable, hide_tau: float | None = None,
                 molo_lambda: float | None = None, hide_scope: str | None = None, label_smoothing: float | None = None,
                 hide_modalities: str | None = None, molo_global: bool | None = None,
                 normalize_components: bool | None = None, gather_grad: bool | None = None, preset: str = "paper"):
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {list(PRESETS)}, got {preset!r}")
        given = dict(hide_tau=hide_tau, molo_lambda=molo_lambda, hide_scope=hide_scope,
                     label_smoothing=label_smoothing, hide_modalities=hide_modalities, molo_global=molo_global,
                     normalize_components=normalize_components, gather_grad=gather_grad)
        options = {**PRESETS[preset], **{name: value for name, value in given.items() if value is not None}}
        if not 0.0 < options["hide_tau"] <= 1.0:
            raise ValueError(f"hide_tau must be in (0, 1], got {options['hide_tau']}")
        if options["molo_lambda"] < 0:
            raise ValueError(f"molo_lambda must be >= 0, got {options['molo_lambda']}")
        if not 0.0 <= options["label_smoothing"] < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {options['label_smoothing']}")
        if options["hide_scope"] not in HIDE_SCOPES:
            raise ValueError(f"hide_scope must be one of {HIDE_SCOPES}, got {options['hide_scope']!r}")
        if options["hide_modalities"] not in HIDE_MODALITIES:
            raise ValueError(f"hide_modalities must be one of {HIDE_MODALITIES}, got {options['hide_modalities']!r}")
        if not options["molo_global"] and options["molo_lambda"] == 0:
            raise ValueError("molo_global=False needs molo_lambda > 0: there would be no loss")
        super().__init__(model, collate_fn, MoLoLoss(
            options["hide_tau"], options["molo_lambda"], options["hide_scope"], options["label_smoothing"],
            options["hide_modalities"], options["molo_global"], options["normalize_components"],
            options["gather_grad"]))

    def options(self) -> dict:
        objective = self.objective
        return dict(hide_tau=objective.tau, molo_lambda=objective.weight, hide_scope=objective.scope,
                    label_smoothing=objective.label_smoothing, hide_modalities=objective.modalities,
                    molo_global=objective.use_global, normalize_components=objective.normalize_components,
                    gather_grad=objective.gather_grad)


__all__ = ["PRESETS", "HiMoCLIPTask"]
