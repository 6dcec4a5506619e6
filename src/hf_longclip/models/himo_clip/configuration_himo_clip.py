"""HiMo-CLIP configuration: a CLIP configuration with 248 text positions."""

from transformers import CLIPConfig

from hf_longclip.modeling_common.configuration import RefusesPlainCLIPMixin, sub_config_dict
from hf_longclip.modeling_common.saving import CodeBundleMixin

HIMO_TEXT_POSITIONS = 248  # Long-CLIP stretching of CLIP's 77 positions: 4 * 77 - 3 * 20


class HiMoCLIPConfig(CodeBundleMixin, RefusesPlainCLIPMixin, CLIPConfig):
    r"""
    Configuration of [`HiMoCLIPModel`]: a [`CLIPConfig`] whose text encoder defaults to 248 positions (Long-CLIP's
    stretching of CLIP's 77). MoLo's and HiDe's hyper-parameters (tau, lambda, ...) are training options, arguments
    of `hf_longclip.recipes.himo_clip.task.HiMoCLIPTask`, not part of the model.

    frozen_position_rows (`int`, defaults to 0):
        The first text position rows kept frozen in training (they receive no gradient; HiMo-CLIP's task also keeps
        them from weight decay): Long-CLIP's and HiMo-CLIP's fine-tuning keeps rows 0-19, the rows its stretching
        preserved from CLIP, and trains rows 20-247. `HiMoCLIPModel.from_clip` sets 20 when it stretches and the
        converted Long-CLIP / HiMo-CLIP checkpoints carry 20; a model built from a configuration trains every row
        (nothing was preserved).
    """

    model_type = "himo_clip"

    def __init__(self, text_config=None, vision_config=None, frozen_position_rows: int = 0, **kwargs):
        text_config = {"max_position_embeddings": HIMO_TEXT_POSITIONS, **sub_config_dict(text_config)}
        super().__init__(text_config=text_config, vision_config=sub_config_dict(vision_config), **kwargs)
        positions = self.text_config.max_position_embeddings
        if not 0 <= frozen_position_rows < positions:
            raise ValueError(f"frozen_position_rows must be in [0, {positions}) (the text positions), "
                             f"got {frozen_position_rows}")
        self.frozen_position_rows = frozen_position_rows


__all__ = ["HiMoCLIPConfig"]
