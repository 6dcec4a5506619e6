"""What every dual-encoder model of the library shares: its output type, its saving behaviour and where it pools
a text."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.models.clip.modeling_clip import CLIPOutput
from transformers.utils import is_tracing

from hf_longclip.modeling_common.saving import CodeBundleMixin


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
    `pipeline("zero-shot-image-classification", model=path, trust_remote_code=True)` works. Also the joint forward
    pass every model's `forward` is made of: `encode_pair` (both towers through the model's `get_image_features` /
    `get_text_features`, L2-normalised) and `pair_output` (logits scaled by the model's `logit_scale`)."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        self.config.auto_map = {
            **(getattr(self.config, "auto_map", None) or {}),
            "AutoModelForZeroShotImageClassification": f"{type(self).__module__.split('.')[-1]}.{type(self).__name__}",
        }
        return super().save_pretrained(save_directory, *args, **kwargs)

    def encode_pair(self, input_ids, pixel_values, attention_mask=None, position_ids=None,
                    interpolate_pos_encoding: bool = False, **kwargs):
        """Both towers: (vision outputs, text outputs, L2-normalised image embeds, L2-normalised text embeds)."""
        vision_outputs = self.get_image_features(
            pixel_values=pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, return_dict=True, **kwargs
        )
        text_outputs = self.get_text_features(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, return_dict=True, **kwargs
        )
        image_embeds = F.normalize(vision_outputs.pooler_output, dim=-1)
        text_embeds = F.normalize(text_outputs.pooler_output, dim=-1)
        return vision_outputs, text_outputs, image_embeds, text_embeds

    def pair_output(self, vision_outputs, text_outputs, image_embeds, text_embeds, loss_terms=None):
        """CLIP's logits (cosine similarity times the logit scale) and every output, with the loss when given."""
        logits_per_text = self.logit_scale.exp() * text_embeds @ image_embeds.T
        return DualEncoderOutput(
            loss=None if loss_terms is None else sum_of_terms(loss_terms),
            loss_terms=loss_terms,
            logits_per_image=logits_per_text.T,
            logits_per_text=logits_per_text,
            text_embeds=text_embeds,
            image_embeds=image_embeds,
            text_model_output=text_outputs,
            vision_model_output=vision_outputs,
        )


def end_of_text_positions(input_ids: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """Where CLIP pools each text: its first end-of-text token (with CLIP's legacy `eos_token_id == 2`, its largest
    id, as transformers does). A text without the end-of-text token is a ValueError, checked in eager mode only
    (under torch.compile, torch.export or tracing a data-dependent branch would break the graph)."""
    if eos_token_id == 2:
        return input_ids.to(torch.int).argmax(dim=-1)
    is_end = input_ids == eos_token_id
    if not is_tracing(input_ids) and not is_end.any(dim=-1).all():
        raise ValueError(
            f"every text must contain the end-of-text token (id {eos_token_id}): CLIP pools its embedding there. "
            "Tokenize with the model's processor, which keeps it when truncating."
        )
    return is_end.int().argmax(dim=-1)
