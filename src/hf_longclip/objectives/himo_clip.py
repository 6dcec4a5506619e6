"""HiMo-CLIP's objective (Wu et al., AAAI 2026): MoLo = global InfoNCE + lambda * InfoNCE against HiDe components,
HiDe being an in-batch PCA of the text embeddings (Eq. 1-4)."""

import torch
import torch.nn.functional as F
from torch import nn

from hf_longclip.modeling_common.dual_encoder import check_on_device
from hf_longclip.objectives.losses import (
    check_paired_embeddings,
    contrastive_loss,
    gather_rows_with_grad,
    gather_with_grad,
)

HIDE_SCOPES = ("global", "local")
HIDE_MODALITIES = ("text", "both")
# Relative gap (in squared singular values) under which two singular values are treated as tied.
_TIE_TOLERANCE = 1e-5


def num_principal_components(singular_values: torch.Tensor, tau: float) -> torch.Tensor:
    """Smallest m whose cumulative explained variance reaches tau (Sec. 3.2), widened so as not to split a tie, as
    a 0-dim int64 tensor on the singular values' device.

    Explained variance of component k is s_k^2 / sum_j s_j^2. If s_m equals s_{m+1} the top-m subspace is not
    unique, so m grows until the gap is real; this keeps HiDe (and its gradient) well defined. Returns 0 when
    the batch has no variance at all (every embedding equal). Computed on the device in float64 with no
    data-dependent shape (the first admissible m among 1..k), so a compiled step holds it without a host sync.
    """
    variances = singular_values.detach().double() ** 2
    count = variances.numel()
    total = variances.sum()
    explained = torch.cumsum(variances, 0) / total.clamp_min(torch.finfo(torch.float64).tiny)
    at_least = (explained < tau - 1e-7).sum().clamp_max(count - 1) + 1  # m before widening, in 1..k
    candidates = torch.arange(1, count + 1, device=variances.device)
    # m = j splits a tie when s_j and s_{j+1} are equal within the tolerance; m = k never does
    splits_tie = torch.cat([variances[:-1] - variances[1:] <= _TIE_TOLERANCE * variances[0],
                            variances.new_zeros(1, dtype=torch.bool)])
    admissible = (candidates >= at_least) & ~splits_tie
    m = torch.where(admissible, candidates, count).min()
    return torch.where(total <= torch.finfo(singular_values.dtype).tiny, 0, m)


class _LowRankReconstruction(torch.autograd.Function):
    """X -> X V_m V_m^T, the projection of centred rows onto their top-m principal directions.

    torch.linalg.svd's backward divides by s_i^2 - s_j^2 for every pair of singular values and returns NaN or inf
    whenever any two are equal (duplicated captions, rank-deficient batches, batches of one). The projection
    only depends on the top-m subspace, whose derivative involves pairs across the gap (i <= m < j) alone:

        dL/dX = G V1 V1^T + U1 U1^T G (I - V V^T) + U1 diag(s1) C V2^T + U2 diag(s2) C^T V1^T,
        C_ij = (s_i (U^T G V)_ij + s_j (U^T G V)_ji) / (s_i^2 - s_j^2),  i <= m < j,

    which is finite because `num_principal_components` never splits a tie at m. Every component is kept in the
    shapes and those past m are masked out (m is a device tensor): no shape depends on the data.
    """

    @staticmethod
    def forward(ctx, centered: torch.Tensor, tau: float) -> torch.Tensor:
        u, s, vh = torch.linalg.svd(centered, full_matrices=False)
        kept = torch.arange(s.numel(), device=s.device) < num_principal_components(s, tau)
        ctx.save_for_backward(u, s, vh, kept)
        return (u * (s * kept)) @ vh

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        u, s, vh, kept = ctx.saved_tensors
        v1 = vh.mT * kept  # V1 in place, zero columns past m
        u1 = u * kept
        grad_v = grad @ vh.mT
        grad_in = (grad @ v1) @ v1.mT + u1 @ (u1.mT @ (grad - grad_v @ vh))
        across = kept[:, None] & ~kept[None, :]  # the pairs (i <= m < j) of C
        a = u.mT @ grad_v
        gap = (s[:, None] ** 2 - s[None, :] ** 2).clamp_min(_TIE_TOLERANCE * s[0] ** 2)
        c = torch.where(across, (s[:, None] * a + s[None, :] * a.mT) / torch.where(across, gap, 1), 0)
        grad_in = grad_in + (u * s) @ (c + c.mT) @ vh
        return grad_in, None


def kept_components(embeds: torch.Tensor, tau: float) -> int:
    """m, the number of principal components HiDe keeps for this batch of embeddings (Sec. 3.2)."""
    centered = embeds.detach().float() - embeds.detach().float().mean(dim=0, keepdim=True)
    return int(num_principal_components(torch.linalg.svdvals(centered), tau))


def hide_components(text_embeds: torch.Tensor, tau: float) -> torch.Tensor:
    """HiDe (Eq. 1): u'_i = P^T (P (u_i - mean)) + mean, P the top-m principal directions of the batch.

    Computed in float32 whatever the input dtype; returns float32.
    """
    embeds = text_embeds.float()
    mean = embeds.mean(dim=0, keepdim=True)
    return _LowRankReconstruction.apply(embeds - mean, tau) + mean


class MoLoLoss(nn.Module):
    """MoLo (Eq. 4) over the global batch: `{"global_loss": L_global (Eq. 2), "component_loss": weight * L_comp
    (Eq. 3)}` (the component term is absent when `weight` is 0, the global one when `use_global` is False: Table 5's
    "L_comp" row).

    Takes this process's L2-normalised embeddings and the exponentiated logit scale. HiDe runs on the gathered
    batch (`scope="global"`) or per process (`scope="local"`, as the official code); components are re-normalised
    (`normalize_components`, the paper's cosine similarity) or, as the official code scores them, taken as
    reconstructed. `modalities="text"` decomposes the text embeddings only (the paper's method); `"both"`
    decomposes the image embeddings too and aligns components with components (Table 5's L_comp^{u,v}).
    `gather_grad=False` makes the gathered batch (this process's rows included) a constant, as the official code's
    plain `dist.all_gather` does: the image->text cross-entropy then trains the image side only, text->image the
    text side only. Runs in float32 with autocast disabled.
    """

    def __init__(self, tau: float = 0.9, weight: float = 1.0, scope: str = "global", label_smoothing: float = 0.0,
                 modalities: str = "text", use_global: bool = True, normalize_components: bool = True,
                 gather_grad: bool = True):
        super().__init__()
        if scope not in HIDE_SCOPES:
            raise ValueError(f"scope must be one of {HIDE_SCOPES}, got {scope!r}")
        if modalities not in HIDE_MODALITIES:
            raise ValueError(f"modalities must be one of {HIDE_MODALITIES}, got {modalities!r}")
        if not use_global and weight == 0:
            raise ValueError("MoLo without its global term needs a component weight > 0: there would be no loss")
        self.tau, self.weight, self.scope, self.label_smoothing = tau, weight, scope, label_smoothing
        self.modalities, self.use_global = modalities, use_global
        self.normalize_components, self.gather_grad = normalize_components, gather_grad

    def _components(self, local: torch.Tensor, gathered: torch.Tensor, offset: int) -> tuple[torch.Tensor, ...]:
        """(this process's, the global batch's) HiDe components of one modality, as scored (`_scored`)."""
        if self.scope == "global":
            all_components = self._scored(hide_components(gathered, self.tau))
            return all_components[offset : offset + local.shape[0]], all_components
        components = self._scored(hide_components(local, self.tau))
        return components, gather_with_grad(components)[0]

    def _scored(self, components: torch.Tensor) -> torch.Tensor:
        """HiDe's components as the similarities read them: re-normalised, or as reconstructed."""
        return F.normalize(components, dim=-1) if self.normalize_components else components

    def _negatives(self, gathered: torch.Tensor) -> torch.Tensor:
        """The gathered batch as the cross-entropies read it: with gradient, or a constant (`gather_grad=False`)."""
        return gathered if self.gather_grad else gathered.detach()

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor) -> dict:
        check_paired_embeddings(image_embeds, text_embeds)
        with torch.autocast(device_type=image_embeds.device.type, enabled=False):
            image, text = image_embeds.float(), text_embeds.float()
            (all_image, all_text), offset = gather_rows_with_grad(image, text)
            check_on_device(torch.isfinite(all_image).all() & torch.isfinite(all_text).all(),
                            "image or text embeddings contain NaN or inf")
            scale = logit_scale.float()
            terms = {}
            if self.use_global:
                terms["global_loss"] = contrastive_loss(image, text, self._negatives(all_image),
                                                        self._negatives(all_text), scale, offset, self.label_smoothing)
            if self.weight == 0:
                return terms
            components, all_components = self._components(text, all_text, offset)
            if self.modalities == "both":
                image, all_image = self._components(image, all_image, offset)
            component_loss = contrastive_loss(image, components, self._negatives(all_image),
                                              self._negatives(all_components), scale, offset, self.label_smoothing)
            terms["component_loss"] = self.weight * component_loss
            return terms
