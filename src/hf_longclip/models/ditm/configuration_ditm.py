"""DITM configuration: a CLIP configuration plus the GPO image pooling and the objective's hyper-parameters."""

from transformers import CLIPConfig

from hf_longclip.modeling_common.saving import CodeBundleMixin


class DITMConfig(CodeBundleMixin, CLIPConfig):
    r"""
    Configuration of [`DITMModel`]. All [`CLIPConfig`] arguments apply (the text encoder keeps CLIP's 77 positions
    unless told otherwise). DITM-specific arguments (Jang et al., Descriptive Image-Text Matching with Graded
    Contextual Similarity):

    margin_scale (`float`, defaults to 6.0):
        tau of the adaptive margins (Eq. 4): the margins are (delta(t) + delta(t^-)) / tau and 2 delta(t) / tau.
    order_weight (`float`, defaults to 0.07):
        lambda of the ordering loss (Eq. 7). 0 trains with the adaptive triplet loss alone.
    gpo_pe_dim (`int`, defaults to 32):
        Size of GPO's sin/cos encoding of the sorted index (VSE-infinity's `d_pe`).
    gpo_hidden_dim (`int`, defaults to 32):
        Hidden size of GPO's bidirectional GRU (VSE-infinity's `d_hidden`).
    gpo_temperature (`float`, defaults to 0.1):
        Softmax temperature of GPO's pooling weights (VSE-infinity's code).
    """

    model_type = "ditm"

    margin_scale: float = 6.0
    order_weight: float = 0.07
    gpo_pe_dim: int = 32
    gpo_hidden_dim: int = 32
    gpo_temperature: float = 0.1

    def __post_init__(self, **kwargs):
        if self.margin_scale <= 0:
            raise ValueError(f"margin_scale (tau) must be positive, got {self.margin_scale}")
        if self.order_weight < 0:
            raise ValueError(f"order_weight must be >= 0, got {self.order_weight}")
        if self.gpo_pe_dim < 2 or self.gpo_pe_dim % 2:
            raise ValueError(f"gpo_pe_dim must be a positive even number, got {self.gpo_pe_dim}")
        if self.gpo_hidden_dim < 1 or self.gpo_temperature <= 0:
            raise ValueError(f"gpo_hidden_dim must be >= 1 and gpo_temperature > 0, got {self.gpo_hidden_dim} and "
                             f"{self.gpo_temperature}")
        super().__post_init__(**kwargs)


__all__ = ["DITMConfig"]
