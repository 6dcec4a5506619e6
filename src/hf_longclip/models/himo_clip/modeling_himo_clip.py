"""HiMo-CLIP (Wu et al., "Modeling Semantic Hierarchy and Monotonicity in Vision-Language Alignment", AAAI 2026).

A CLIP with 248 text positions trained with MoLo = global InfoNCE + lambda * InfoNCE against HiDe components
(in-batch PCA of the text embeddings). Inference is plain CLIP cosine similarity.

This file is self-contained (torch + transformers) so that it runs as remote code next to a checkpoint.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers import CLIPModel
from transformers.models.clip.modeling_clip import CLIPOutput

from .configuration_himo_clip import HiMoCLIPConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-large-patch14"
LONGCLIP_KEEP_POSITIONS = 20
LONGCLIP_STRETCH_FACTOR = 4
# Relative gap (in squared singular values) under which two singular values are treated as tied.
_TIE_TOLERANCE = 1e-5


def stretch_position_embeddings(
    weight: torch.Tensor, keep: int = LONGCLIP_KEEP_POSITIONS, factor: int = LONGCLIP_STRETCH_FACTOR
) -> torch.Tensor:
    """Long-CLIP's knowledge-preserved stretching of a (L, D) position table to (factor * L - (factor - 1) * keep, D).

    Rows [0, keep) are kept; each later row i is followed by factor - 1 rows linearly interpolated towards row
    i + 1; the last row is extrapolated factor - 1 times along its difference to the row before. For CLIP,
    77 positions become 4 * 77 - 3 * 20 = 248.
    """
    length, dim = weight.shape
    if not 0 <= keep <= length - 2 or factor < 1:
        raise ValueError(f"cannot stretch {length} positions keeping {keep} with factor {factor}")
    frac = torch.arange(factor, dtype=weight.dtype, device=weight.device) / factor
    tail = weight[keep:]
    interpolated = tail[:-1, None] * (1 - frac)[None, :, None] + tail[1:, None] * frac[None, :, None]
    extrapolated = weight[-1] + frac[:, None] * (weight[-1] - weight[-2])
    return torch.cat([weight[:keep], interpolated.reshape(-1, dim), extrapolated])


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All-gather rows across processes keeping autograd; returns the global tensor and this rank's row offset."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor, 0
    from torch.distributed.nn.functional import all_gather

    sizes = [torch.zeros(1, dtype=torch.long, device=tensor.device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([tensor.shape[0]], device=tensor.device))
    sizes = [int(s) for s in sizes]
    if len(set(sizes)) != 1:
        raise ValueError(f"every process must contribute the same batch size to the contrastive loss, got {sizes}")
    return torch.cat(all_gather(tensor)), dist.get_rank() * tensor.shape[0]


def contrastive_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    all_image_embeds: torch.Tensor,
    all_text_embeds: torch.Tensor,
    logit_scale: torch.Tensor,
    offset: int = 0,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Symmetric InfoNCE (HiMo-CLIP Eq. 2) of this process's rows against the global batch.

    Row i of the local batch is row offset + i of the global one (open_clip's local-loss labelling); the mean
    over processes of this loss is the loss of one process on the concatenated batch, and so are its gradients.
    """
    labels = torch.arange(image_embeds.shape[0], device=image_embeds.device) + offset
    logits_per_image = logit_scale * image_embeds @ all_text_embeds.T
    logits_per_text = logit_scale * text_embeds @ all_image_embeds.T
    return (
        F.cross_entropy(logits_per_image, labels, label_smoothing=label_smoothing)
        + F.cross_entropy(logits_per_text, labels, label_smoothing=label_smoothing)
    ) / 2


def num_principal_components(singular_values: torch.Tensor, tau: float) -> int:
    """Smallest m whose cumulative explained variance reaches tau (Sec. 3.2), widened so as not to split a tie.

    Explained variance of component k is s_k^2 / sum_j s_j^2. If s_m equals s_{m+1} the top-m subspace is not
    unique, so m grows until the gap is real; this keeps HiDe (and its gradient) well defined. Returns 0 when
    the batch has no variance at all (every embedding equal).
    """
    variances = singular_values.double() ** 2
    total = variances.sum()
    if total <= torch.finfo(singular_values.dtype).tiny:
        return 0
    explained = torch.cumsum(variances, 0) / total
    m = min(int((explained < tau - 1e-7).sum()) + 1, variances.numel())
    while m < variances.numel() and variances[m - 1] - variances[m] <= _TIE_TOLERANCE * variances[0]:
        m += 1
    return m


class _LowRankReconstruction(torch.autograd.Function):
    """X -> X V_m V_m^T, the projection of centred rows onto their top-m principal directions.

    torch.linalg.svd's backward divides by s_i^2 - s_j^2 for every pair of singular values and returns NaN or inf
    whenever any two are equal (duplicated captions, rank-deficient batches, batches of one). The projection
    only depends on the top-m subspace, whose derivative involves pairs across the gap (i <= m < j) alone:

        dL/dX = G V1 V1^T + U1 U1^T G (I - V V^T) + U1 diag(s1) C V2^T + U2 diag(s2) C^T V1^T,
        C_ij = (s_i (U^T G V)_ij + s_j (U^T G V)_ji) / (s_i^2 - s_j^2),  i <= m < j,

    which is finite because `num_principal_components` never splits a tie at m.
    """

    @staticmethod
    def forward(ctx, centered: torch.Tensor, tau: float) -> torch.Tensor:
        u, s, vh = torch.linalg.svd(centered, full_matrices=False)
        m = num_principal_components(s, tau)
        ctx.m = m
        ctx.save_for_backward(u, s, vh)
        return (u[:, :m] * s[:m]) @ vh[:m]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        u, s, vh = ctx.saved_tensors
        m = ctx.m
        if m == 0:
            return torch.zeros_like(grad), None
        v = vh.mT
        u1, u2, s1, s2, v1, v2 = u[:, :m], u[:, m:], s[:m], s[m:], v[:, :m], v[:, m:]
        grad_v = grad @ v
        grad_in = (grad @ v1) @ v1.mT + u1 @ (u1.mT @ (grad - grad_v @ vh))
        if m < s.numel():
            a = u.mT @ grad_v
            gap = (s1[:, None] ** 2 - s2[None, :] ** 2).clamp_min(_TIE_TOLERANCE * s[0] ** 2)
            c = (s1[:, None] * a[:m, m:] + s2[None, :] * a[m:, :m].mT) / gap
            grad_in = grad_in + (u1 * s1) @ c @ v2.mT + (u2 * s2) @ c.mT @ v1.mT
        return grad_in, None


def hide_components(text_embeds: torch.Tensor, tau: float) -> torch.Tensor:
    """HiDe (Eq. 1): u'_i = P^T (P (u_i - mean)) + mean, P the top-m principal directions of the batch.

    Computed in float32 whatever the input dtype; returns float32.
    """
    embeds = text_embeds.float()
    mean = embeds.mean(dim=0, keepdim=True)
    return _LowRankReconstruction.apply(embeds - mean, tau) + mean


def _check_embeddings(image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> None:
    if image_embeds.ndim != 2 or text_embeds.ndim != 2:
        raise ValueError(
            f"expected (batch, dim) embeddings, got image {tuple(image_embeds.shape)} and text {tuple(text_embeds.shape)}"
        )
    if image_embeds.shape[0] == 0:
        raise ValueError("the contrastive loss needs a non-empty batch")
    if image_embeds.shape != text_embeds.shape:
        raise ValueError(
            f"image and text embeddings must pair up one to one, got {tuple(image_embeds.shape)} and {tuple(text_embeds.shape)}"
        )


def molo_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    logit_scale: torch.Tensor,
    tau: float = 0.9,
    weight: float = 1.0,
    scope: str = "global",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """MoLo (Eq. 4): L_global (Eq. 2) + weight * L_comp (Eq. 3), over the global batch under torch.distributed.

    `image_embeds` and `text_embeds` are this process's L2-normalised embeddings; `logit_scale` is the
    (already exponentiated) temperature. HiDe runs on the gathered batch (`scope="global"`) or per process
    (`scope="local"`); components are re-normalised, so both branches use cosine similarity. Runs in float32
    with autocast disabled.
    """
    _check_embeddings(image_embeds, text_embeds)
    with torch.autocast(device_type=image_embeds.device.type, enabled=False):
        image, text = image_embeds.float(), text_embeds.float()
        all_image, offset = gather_with_grad(image)
        all_text, _ = gather_with_grad(text)
        if not (torch.isfinite(all_image).all() and torch.isfinite(all_text).all()):
            raise ValueError("image or text embeddings contain NaN or inf")
        scale = logit_scale.float()
        loss = contrastive_loss(image, text, all_image, all_text, scale, offset, label_smoothing)
        if weight == 0:
            return loss
        if scope == "global":
            all_components = F.normalize(hide_components(all_text, tau), dim=-1)
            components = all_components[offset : offset + image.shape[0]]
        elif scope == "local":
            components = F.normalize(hide_components(text, tau), dim=-1)
            all_components, _ = gather_with_grad(components)
        else:
            raise ValueError(f"scope must be 'global' or 'local', got {scope!r}")
        component_loss = contrastive_loss(image, components, all_image, all_components, scale, offset, label_smoothing)
        return loss + weight * component_loss


class HiMoCLIPModel(CLIPModel):
    """CLIP with 248 text positions whose `forward(..., return_loss=True)` returns the MoLo loss (Eq. 4).

    `get_text_features`, `get_image_features` and `logits_per_image` are CLIP's (Appendix C.1: no HiDe at
    inference). The logit scale is a shape-(1,) parameter (DeepSpeed rejects 0-dim parameters).
    """

    config: HiMoCLIPConfig
    config_class = HiMoCLIPConfig

    def __init__(self, config: HiMoCLIPConfig):
        super().__init__(config)
        self.logit_scale = nn.Parameter(torch.tensor([config.logit_scale_init_value]))

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, stretch_positions: bool = True, **config_kwargs
    ) -> "HiMoCLIPModel":
        """Build a HiMo-CLIP from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`).

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (a 77-token baseline); `config_kwargs` set HiMo options (`hide_tau`, ...).
        """
        if not isinstance(clip, CLIPModel):
            clip = CLIPModel.from_pretrained(clip)
        state = clip.state_dict()
        key = "text_model.embeddings.position_embedding.weight"
        if stretch_positions:
            state[key] = stretch_position_embeddings(state[key])
        state["logit_scale"] = state["logit_scale"].reshape(1)
        text_config = clip.config.text_config.to_dict()
        text_config["max_position_embeddings"] = state[key].shape[0]
        config = HiMoCLIPConfig(
            text_config=text_config,
            vision_config=clip.config.vision_config.to_dict(),
            projection_dim=clip.config.projection_dim,
            logit_scale_init_value=clip.config.logit_scale_init_value,
            **config_kwargs,
        )
        model = cls(config)
        model.load_state_dict(state, strict=False)
        missing = set(model.state_dict()) - set(state)
        if any(not name.endswith("position_ids") for name in missing):
            raise ValueError(f"weights missing from the CLIP checkpoint: {sorted(missing)}")
        return model.to(clip.dtype)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also map AutoModelForZeroShotImageClassification to this class, so that
        `pipeline("zero-shot-image-classification", model=path, trust_remote_code=True)` works."""
        self.config.auto_map = {
            **(getattr(self.config, "auto_map", None) or {}),
            "AutoModelForZeroShotImageClassification": f"{type(self).__module__.split('.')[-1]}.{type(self).__name__}",
        }
        return super().save_pretrained(save_directory, *args, **kwargs)

    def get_text_features(self, input_ids: torch.Tensor, *args, **kwargs):
        eos_token_id = self.config.text_config.eos_token_id
        if eos_token_id != 2 and not (input_ids == eos_token_id).any(dim=-1).all():
            raise ValueError(
                f"every text must contain the end-of-text token (id {eos_token_id}): CLIP pools its embedding there. "
                "Tokenize with the model's processor, which keeps it when truncating."
            )
        return super().get_text_features(input_ids, *args, **kwargs)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        return_loss: bool | None = None,
        interpolate_pos_encoding: bool = False,
        **kwargs,
    ) -> CLIPOutput:
        vision_outputs = self.get_image_features(
            pixel_values=pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, return_dict=True, **kwargs
        )
        text_outputs = self.get_text_features(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, return_dict=True, **kwargs
        )
        image_embeds = F.normalize(vision_outputs.pooler_output, dim=-1)
        text_embeds = F.normalize(text_outputs.pooler_output, dim=-1)
        logit_scale = self.logit_scale.exp()
        logits_per_text = logit_scale * text_embeds @ image_embeds.T
        loss = None
        if return_loss:
            config = self.config
            loss = molo_loss(
                image_embeds,
                text_embeds,
                logit_scale,
                tau=config.hide_tau,
                weight=config.molo_lambda,
                scope=config.hide_scope,
                label_smoothing=config.label_smoothing,
            )
        return CLIPOutput(
            loss=loss,
            logits_per_image=logits_per_text.T,
            logits_per_text=logits_per_text,
            text_embeds=text_embeds,
            image_embeds=image_embeds,
            text_model_output=text_outputs,
            vision_model_output=vision_outputs,
        )


__all__ = [
    "HiMoCLIPModel",
    "contrastive_loss",
    "gather_with_grad",
    "hide_components",
    "molo_loss",
    "num_principal_components",
    "stretch_position_embeddings",
]
