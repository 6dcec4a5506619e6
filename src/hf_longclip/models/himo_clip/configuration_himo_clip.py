"""HiMo-CLIP configuration: a CLIP configuration with 248 text positions."""

from transformers import CLIPConfig

from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.configuration import drop_training_options

HIMO_TEXT_POSITIONS = 248  # Long-CLIP stretching of CLIP's 77 positions: 4 * 77 - 3 * 20
# MoLo/HiDe options that configurations saved before they moved to `HiMoCLIPTask` still carry
TRAINING_OPTIONS = ("hide_tau", "molo_lambda", "hide_scope", "label_smoothing", "hide_modalities", "molo_global")


class HiMoCLIPConfig(CodeBundleMixin, CLIPConfig):
    r"""
    Configuration of [`HiMoCLIPModel`]: a [`CLIPConfig`] whose text encoder defaults to 248 positions (Long-CLIP's
    stretching of CLIP's 77). MoLo's and HiDe's hyper-parameters (tau, lambda, ...) are training options, arguments
    of `hf_longclip.models.himo_clip.task.HiMoCLIPTask`, not part of the model.
    """

    model_type = "himo_clip"

    def __post_init__(self, **kwargs):
        if self.text_config is None:
            self.text_config = {"max_position_embeddings": HIMO_TEXT_POSITIONS}
        elif isinstance(self.text_config, dict):
            self.text_config.setdefault("max_position_embeddings", HIMO_TEXT_POSITIONS)
        super().__post_init__(**drop_training_options(kwargs, TRAINING_OPTIONS, "HiMoCLIPTask"))


__all__ = ["HiMoCLIPConfig"]
