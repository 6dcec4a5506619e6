"""What every dual-encoder model of the library shares: its output type and its saving behaviour."""

from dataclasses import dataclass

import torch
from transformers.models.clip.modeling_clip import CLIPOutput

from hf_longclip.modeling_common.code_bundle import CodeBundleMixin


@dataclass
class DualEncoderOutput(CLIPOutput):
    r"""
    [`CLIPOutput`] plus the named terms of the training objective when `return_loss=True`.

    loss_terms (`dict[str, torch.FloatTensor]`, *optional*):
        The objective's terms (e.g. `global_loss`, `component_loss`); `loss` is their sum.
    """

    loss_terms: dict[str, torch.FloatTensor] | None = None


def sum_of_terms(terms: dict[str, torch.Tensor]) -> torch.Tensor:
    """The loss an objective's named terms add up to."""
    return sum(terms.values())


class DualEncoderMixin(CodeBundleMixin):
    """Saving of a dual-encoder model: its code bundle goes next to the weights, and the config also maps
    `AutoModelForZeroShotImageClassification` to the class, so that
    `pipeline("zero-shot-image-classification", model=path, trust_remote_code=True)` works."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        self.config.auto_map = {
            **(getattr(self.config, "auto_map", None) or {}),
            "AutoModelForZeroShotImageClassification": f"{type(self).__module__.split('.')[-1]}.{type(self).__name__}",
        }
        return super().save_pretrained(save_directory, *args, **kwargs)
