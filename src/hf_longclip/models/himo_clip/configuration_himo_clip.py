"""HiMo-CLIP configuration: a CLIP configuration with 248 text positions and the HiDe/MoLo hyper-parameters."""

from transformers import CLIPConfig

from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.objectives.molo import HIDE_MODALITIES, HIDE_SCOPES

HIMO_TEXT_POSITIONS = 248  # Long-CLIP stretching of CLIP's 77 positions: 4 * 77 - 3 * 20


class HiMoCLIPConfig(CodeBundleMixin, CLIPConfig):
    r"""
    Configuration of [`HiMoCLIPModel`]. All [`CLIPConfig`] arguments apply; the text encoder defaults to
    248 positions. HiMo-specific arguments (HiMo-CLIP, Wu et al., AAAI 2026):

    hide_tau (`float`, defaults to 0.9):
        HiDe explained-variance threshold tau (Sec. 3.2): the number m of principal components kept is the
        smallest whose cumulative explained variance reaches tau.
    molo_lambda (`float`, defaults to 1.0):
        Weight lambda of the component loss in MoLo (Eq. 4). 0 gives plain CLIP training.
    hide_scope (`str`, defaults to `"global"`):
        Which text embeddings HiDe's PCA sees in multi-process training. `"global"`: the whole gathered batch
        (the paper's batch of 1024 spans 8 GPUs; the result then does not depend on the number of processes
        and equals one process on the concatenated batch). `"local"`: each process's own batch, as the
        official code does; components are gathered afterwards as negatives.
    label_smoothing (`float`, defaults to 0.0):
        Label smoothing of the InfoNCE cross-entropies. The paper's InfoNCE has none; the official code uses 0.1.
    hide_modalities (`str`, defaults to `"text"`):
        What HiDe decomposes: `"text"` (the paper's method) or `"both"`, which also decomposes the image embeddings
        and aligns image with text components (Table 5's L_comp^{u,v} ablation).
    molo_global (`bool`, defaults to `True`):
        Whether MoLo keeps its global term (Eq. 2); `False` trains on the component loss alone (Table 5's L_comp).
    """

    model_type = "himo_clip"

    hide_tau: float = 0.9
    molo_lambda: float = 1.0
    hide_scope: str = "global"
    label_smoothing: float = 0.0
    hide_modalities: str = "text"
    molo_global: bool = True

    def __post_init__(self, **kwargs):
        if self.text_config is None:
            self.text_config = {"max_position_embeddings": HIMO_TEXT_POSITIONS}
        elif isinstance(self.text_config, dict):
            self.text_config.setdefault("max_position_embeddings", HIMO_TEXT_POSITIONS)
        if not 0.0 < self.hide_tau <= 1.0:
            raise ValueError(f"hide_tau must be in (0, 1], got {self.hide_tau}")
        if self.molo_lambda < 0:
            raise ValueError(f"molo_lambda must be >= 0, got {self.molo_lambda}")
        if self.hide_scope not in HIDE_SCOPES:
            raise ValueError(f"hide_scope must be one of {HIDE_SCOPES}, got {self.hide_scope!r}")
        if self.hide_modalities not in HIDE_MODALITIES:
            raise ValueError(f"hide_modalities must be one of {HIDE_MODALITIES}, got {self.hide_modalities!r}")
        if not self.molo_global and self.molo_lambda == 0:
            raise ValueError("molo_global=False needs molo_lambda > 0: there would be no loss")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        super().__post_init__(**kwargs)


__all__ = ["HiMoCLIPConfig"]
