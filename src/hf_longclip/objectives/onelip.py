"""OneLIP's objective (Pan et al., "Unlocking and Improving Long-Text Representations of CLIP via One-Stage
Adaptation"): TRIM-Select (Eq. 4-5), TRIM-Refine (Eq. 6), L_coarse (Eq. 3), token-wise distillation (Eq. 7) and
the contrastive loss (Eq. 1), weighted by Eq. 10 with Sec. 4.1's step schedule. TRIM-Select and TRIM-Refine run in
`OneLIPForPreTraining.forward` (`hf_longclip.models.onelip.modeling_onelip`; TRIM-Select's functions are re-exported
here), with the options `OneLIPLoss.token_selection()` gives; the loss terms are computed here.

Choices where the paper is silent:

- Token states Z_text are the long encoder's last hidden states after its final LayerNorm (width d of the text
  tower), and Z_hat_text the base (teacher) encoder's, computed the same way on the first T_f = 77 tokens. The
  student is initialised from the teacher, so both share a width and no projection is added; a teacher of another
  width is an error.
- Valid tokens are those up to the first end-of-text token and inside the attention mask. Padding is never selected,
  never attended by TRIM-Refine and never distilled (teacher positions past a text's end are left out of Eq. 3 and 7).
- Cross-modal relevance A(i) is the cosine, in the joint embedding space, between token i projected by the text
  projection and the projected pooled image embedding: the text and vision towers have different widths
  (512 vs 768 at ViT-B/16), so the inner product of Sec. 3.2 needs the projection; the cosine leaves magnitude to I.
- Common scale: I and A are each min-max normalised to [0, 1] over the valid tokens of their text before Eq. 5
  (a constant score maps to 0), so alpha weighs two quantities of equal range whatever the norms of the states.
- Selection is training-free: the scores are computed without gradient (no SVD backward); the gradient reaches the
  selected token states through TRIM-Refine.
- TRIM-Refine is Eq. 6 as written: single-head scaled dot-product attention of L2 learnable queries over the
  selected tokens, no projections, so Z_agg is a convex combination of token states, in the teacher's space.
- Eq. 3 is one cosine of the two (tokens x d) matrices (Frobenius inner product over norms, valid tokens only), as
  written; Eq. 7 the mean of per-token cosines. The student's first 77 output states on the whole text are
  Z_text(x<=77): its attention is causal, as CLIP's, so no second forward pass is needed.
- The contrastive term is lambda_3 (L_i-t + L_t-i), the sum of both directions as Eq. 10 writes it, over the
  global batch gathered with gradient, between the image embedding and the projected end-of-text embedding of the
  long encoder. Sec. 3.3 names Z_agg, but Z_agg depends on the image (through A(i)) and is a set of 77 vectors:
  retrieval, zero-shot classification and text-to-image conditioning (Tables 1-3, Sec. 4.4) need an image-free
  text embedding. The pooled embedding is what inference uses; TRIM shapes the token states it pools over.

The ablation "OneLIP without TRIM" (Table 4's CLIP baseline plus distillation, the "pooling-based" distillation of
Sec. 1) is `distillation="pooled"`: TRIM-Select and TRIM-Refine are skipped and `token_loss` is lambda_2 (1 - cos) of
the mean of the long encoder's valid token states over the whole text with the mean of the teacher's valid states on
its first T_f tokens, everything else (L_coarse, the contrastive term, the weights and their schedule) unchanged.
Mean, not end-of-text, pooling: the teacher sees a long text cut at T_f without its end token, so it has no
end-of-text state to pool at. Late tokens are then pulled towards a summary that never saw them, which is the
truncation-based alignment the paper argues against.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import is_tracing

from hf_longclip.modeling_common.dual_encoder import check_on_device
from hf_longclip.models.onelip.modeling_onelip import (  # noqa: F401 (TRIM-Select, re-exported)
    TRIM_DECOMPOSITIONS,
    orthonormal_columns,
    raise_on_non_finite,
    select_tokens,
    top_right_singular_vectors,
    trim_scores,
    trim_select,
)
from hf_longclip.objectives.losses import check_paired_embeddings, contrastive_loss, gather_rows_with_grad

_EPS = 1e-8


def coarse_loss(states: torch.Tensor, teacher_states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """L_coarse (Eq. 3): mean over texts of 1 - <Z, Z_hat>_F / (|Z|_F |Z_hat|_F) over each text's valid tokens."""
    mask = valid[..., None].to(states.dtype)
    inner = (states * teacher_states * mask).sum(dim=(1, 2))
    norms = (states.square() * mask).sum(dim=(1, 2)).sqrt() * (teacher_states.square() * mask).sum(dim=(1, 2)).sqrt()
    return (1 - inner / norms.clamp_min(_EPS)).mean()


def pooled_distillation_loss(states: torch.Tensor, teacher_states: torch.Tensor, valid: torch.Tensor,
                              teacher_valid: torch.Tensor) -> torch.Tensor:
    """The ablation without TRIM: mean over texts of 1 - cos(mean of `states` over `valid`, mean of `teacher_states`
    over `teacher_valid`) (see the module docstring)."""

    def mean_over(tensor, mask):
        return (tensor * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp_min(1)

    student, teacher = mean_over(states, valid), mean_over(teacher_states, teacher_valid)
    return (1 - F.cosine_similarity(student, teacher, dim=-1, eps=_EPS)).mean()


def token_wise_loss(aggregated: torch.Tensor, teacher_states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """L_token-wise (Eq. 7): mean over texts of the mean over valid positions i of 1 - cos(Z_agg[i], Z_hat[i])."""
    distance = (1 - F.cosine_similarity(aggregated, teacher_states, dim=-1, eps=_EPS)) * valid
    return (distance.sum(dim=1) / valid.sum(dim=1).clamp_min(1)).mean()


class OneLIPLoss(nn.Module):
    """Eq. 10: `{"coarse_loss": lambda_1 L_coarse, "token_loss": lambda_2 L_token-wise, "contrastive_loss":
    lambda_3 (L_i-t + L_t-i)}`, the lambdas being `weights` before optimizer step `switch_step` and `weights_after`
    from it on (Sec. 4.1: 0.2/0.1/0.7, then 0.05/0.25/0.7 from step 5000). Runs in float32, autocast disabled.
    `distillation`: "trim" (OneLIP, Eq. 4-7) or "pooled" (the ablation without TRIM: `token_loss` is then the
    pooled distance, `pooled_distillation_loss`, and `refined_states` is not used). `decomposition`: how TRIM-Select
    finds the top singular directions (`top_right_singular_vectors`). See the module docstring for the choices made
    where the paper is silent."""

    DISTILLATIONS = ("trim", "pooled")

    def __init__(
        self, alpha: float = 0.5, top_k: int = 100, rank: int = 8, weights: tuple = (0.2, 0.1, 0.7),
        weights_after: tuple = (0.05, 0.25, 0.7), switch_step: int = 5000, distillation: str = "trim",
        decomposition: str = "auto",
    ):
        super().__init__()
        if distillation not in self.DISTILLATIONS:
            raise ValueError(f"distillation must be one of {self.DISTILLATIONS}, got {distillation!r}")
        if decomposition not in TRIM_DECOMPOSITIONS:
            raise ValueError(f"decomposition must be one of {TRIM_DECOMPOSITIONS}, got {decomposition!r}")
        self.distillation, self.decomposition = distillation, decomposition
        self.alpha, self.top_k, self.rank = alpha, top_k, rank
        self.weights, self.weights_after, self.switch_step = tuple(weights), tuple(weights_after), switch_step

    def token_selection(self) -> dict:
        """TRIM-Select's options (Eq. 4-5: K, alpha, r and the decomposition) as the arguments of
        `OneLIPForPreTraining.forward` that make it select the tokens TRIM-Refine attends over
        (`hf_longclip.models.onelip.modeling_onelip.select_tokens`); none for "pooled", whose `token_loss` does not
        use TRIM-Refine's output."""
        if self.distillation != "trim":
            return {}
        return {"trim_top_k": self.top_k, "trim_alpha": self.alpha, "trim_rank": self.rank,
                "trim_decomposition": self.decomposition}

    def loss_weights(self, step: int) -> tuple[float, float, float]:
        """(lambda_1, lambda_2, lambda_3) at optimizer step `step` (0 for the first)."""
        return self.weights if step < self.switch_step else self.weights_after

    def forward(
        self,
        image_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        logit_scale: torch.Tensor,
        text_states: torch.Tensor,
        valid: torch.Tensor,
        teacher_states: torch.Tensor,
        refined_states: torch.Tensor | None,
        step: int = 0,
        hard_negative_embeds: torch.Tensor | None = None,
        hard_negative_mask: torch.Tensor | None = None,
    ) -> dict:
        """`image_embeds`, `text_embeds`: (B, P) L2-normalised; `text_states` (B, L, d) the long encoder's token
        states, `valid` (B, L) its valid tokens; `teacher_states` (B, min(L, T_f), d) the base encoder's states on
        the first T_f tokens; `refined_states` (B, L2, d) Z_agg, TRIM-Refine's output (Eq. 6) over the tokens
        TRIM-Select kept (`OneLIPForPreTraining`'s `refined_text_states` with `token_selection()`'s arguments;
        unused by "pooled").

        PO-HNM (Sec. 3.2): `hard_negative_embeds` (B, M, P), each image's queued negative captions as the frozen
        base encoder embedded them (L2-normalised, no gradient), with `hard_negative_mask` (B, M) marking filled
        slots, join the image-to-text denominator of Eq. 1 (`hf_longclip.recipes.onelip.hard_negatives`); M = 0 or None
        is plain OneLIP."""
        check_paired_embeddings(image_embeds, text_embeds)
        batch, length, width = text_states.shape
        if teacher_states.ndim != 3 or teacher_states.shape[0] != batch or teacher_states.shape[1] > length:
            raise ValueError(
                f"teacher states must be (batch={batch}, tokens<={length}, {width}), one per text on its first "
                f"tokens, got {tuple(teacher_states.shape)}"
            )
        if teacher_states.shape[-1] != width:
            raise ValueError(
                f"the base (teacher) encoder's width {teacher_states.shape[-1]} differs from the long text encoder's "
                f"{width}: token-wise distillation (Eq. 3, 7) compares their token states one to one"
            )
        # NaN or inf in an input that matters reaches the terms (or stops the exact decomposition): one check of
        # three scalars per step, without a host sync (`check_on_device`); on the CPU a failure then searches the
        # (B, L, d) inputs for the culprit
        inputs = {"long text encoder states": text_states, "teacher states": teacher_states,
                  "image embeddings": image_embeds, "text embeddings": text_embeds,
                  "hard-negative embeddings": hard_negative_embeds, "logit scale": logit_scale}
        lambda_coarse, lambda_token, lambda_contrastive = self.loss_weights(step)
        with torch.autocast(device_type=text_states.device.type, enabled=False):
            states, teacher = text_states.float(), teacher_states.float()
            image, text = image_embeds.float(), text_embeds.float()
            base_length = teacher.shape[1]
            teacher_valid = valid[:, :base_length]
            coarse = coarse_loss(states[:, :base_length], teacher, teacher_valid)
            if self.distillation == "pooled":
                token = pooled_distillation_loss(states, teacher, valid, teacher_valid)
            else:
                aggregated = refined_states.float()
                n = min(aggregated.shape[1], base_length)
                token = token_wise_loss(aggregated[:, :n], teacher[:, :n], teacher_valid[:, :n])
            (all_image, all_text), offset = gather_rows_with_grad(image, text)
            extra = None
            if hard_negative_embeds is not None:
                if hard_negative_embeds.shape[:1] + hard_negative_embeds.shape[2:] != image.shape or (
                        hard_negative_mask is None or hard_negative_mask.shape != hard_negative_embeds.shape[:2]):
                    raise ValueError(
                        f"hard negatives must be (batch={batch}, M, {image.shape[1]}) embeddings with a (batch, M) "
                        f"mask, got {tuple(hard_negative_embeds.shape)} and "
                        f"{None if hard_negative_mask is None else tuple(hard_negative_mask.shape)}"
                    )
                extra = logit_scale.float() * torch.einsum("bp,bmp->bm", image, hard_negative_embeds.float())
                extra = extra.masked_fill(~hard_negative_mask, float("-inf"))
            contrastive = 2 * contrastive_loss(image, text, all_image, all_text, logit_scale.float(), offset,
                                               extra_text_logits=extra)
        terms = {
            "coarse_loss": lambda_coarse * coarse,
            "token_loss": lambda_token * token,
            "contrastive_loss": lambda_contrastive * contrastive,
        }
        finite = torch.isfinite(torch.stack(list(terms.values()))).all()
        if finite.device.type == "cpu" and not is_tracing(finite) and not finite:  # free there: name the culprits
            raise_on_non_finite(inputs, "OneLIP's loss")
        check_on_device(finite, "OneLIP's loss is not finite: NaN or inf in its inputs (token states, embeddings, "
                                "logit scale) or in the terms")
        return terms
