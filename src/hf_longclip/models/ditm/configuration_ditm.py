"""DITM configuration: a CLIP configuration plus the GPO image pooling."""

from transformers import CLIPConfig

from hf_longclip.modeling_common.configuration import RefusesPlainCLIPMixin, sub_config_dict
from hf_longclip.modeling_common.saving import CodeBundleMixin


class DITMConfig(CodeBundleMixin, RefusesPlainCLIPMixin, CLIPConfig):
    r"""
    Configuration of [`DITMModel`]. All [`CLIPConfig`] arguments apply (the text encoder keeps CLIP's 77 positions
    unless told otherwise). DITM-specific arguments (Jang et al., Descriptive Image-Text Matching with Graded
    Contextual Similarity); the objective's tau and lambda are arguments of `hf_longclip.recipes.ditm.task.DITMTask`:

    gpo_pe_dim (`int`, defaults to 32):
        Size of GPO's sin/cos encoding of the sorted index (VSE-infinity's `d_pe`).
    gpo_hidden_dim (`int`, defaults to 32):
        Hidden size of GPO's bidirectional GRU (VSE-infinity's `d_hidden`).
    gpo_temperature (`float`, defaults to 0.1):
        Softmax temperature of GPO's pooling weights (VSE-infinity's code).
    """

    model_type = "ditm"

    def __init__(self, text_config=None, vision_config=None, gpo_pe_dim: int = 32, gpo_hidden_dim: int = 32,
                 gpo_temperature: float = 0.1, **kwargs):
        if gpo_pe_dim < 2 or gpo_pe_dim % 2:
            raise ValueError(f"gpo_pe_dim must be a positive even number, got {gpo_pe_dim}")
        if gpo_hidden_dim < 1 or gpo_temperature <= 0:
            raise ValueError(f"gpo_hidden_dim must be >= 1 and gpo_temperature > 0, got {gpo_hidden_dim} and "
                             f"{gpo_temperature}")
        super().__init__(text_config=sub_config_dict(text_config), vision_config=sub_config_dict(vision_config),
                         **kwargs)
        self.gpo_pe_dim, self.gpo_hidden_dim, self.gpo_temperature = gpo_pe_dim, gpo_hidden_dim, gpo_temperature


__all__ = ["DITMConfig"]
