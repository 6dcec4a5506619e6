"""OneLIP's objective (Pan et al., "Unlocking and Improving Long-Text Representations of CLIP via One-Stage
Adaptation"): TRIM-Select (Eq. 4-5), TRIM-Refine (Eq. 6), L_coarse (Eq. 3), token-wise distillation (Eq. 7) and
the contrastive loss (Eq. 1), weighted by Eq. 10 with Sec. 4.1's step schedule.

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
from hf_longclip.objectives.losses import check_paired_embeddings, contrastive_loss, gather_rows_with_grad

_EPS = 1e-8


def _min_max(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each row rescaled to [0, 1] over its valid entries (0 where the row is constant or invalid)."""
    low = scores.masked_fill(~valid, float("inf")).amin(dim=-1, keepdim=True)
    high = scores.masked_fill(~valid, float("-inf")).amax(dim=-1, keepdim=True)
    scaled = (scores - low) / (high - low).clamp_min(_EPS)
    return scaled.masked_fill(~valid, 0.0)


TRIM_DECOMPOSITIONS = ("auto", "exact", "subspace")


def orthonormal_columns(matrix: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis of the column space of each (n, k) matrix of a batch (the Q of a thin QR, columns up to
    sign): classical Gram-Schmidt, each column projected off those before it three times (twice is as stable as
    Householder QR for a full-rank matrix; the third pass keeps the columns orthonormal when the matrix is
    rank-deficient, where a column's remainder is rounding noise), k steps of batched products whatever the batch
    size, where a batched QR on a GPU may run one solver call per matrix."""
    columns = []
    for column in matrix.unbind(-1):
        for _ in range(3 if columns else 0):
            basis = torch.stack(columns, dim=-1)
            column = column - (basis @ (basis.mT @ column[..., None]))[..., 0]
        columns.append(F.normalize(column, dim=-1, eps=_EPS))
    return torch.stack(columns, dim=-1)


def top_right_singular_vectors(matrix: torch.Tensor, rank: int, decomposition: str = "auto",
                               iterations: int = 4, oversampling: int = 8) -> torch.Tensor:
    """The top `rank` right singular vectors of each (L, d) matrix of `matrix` (B, L, d), as columns (B, d, r),
    largest singular value first.

    "exact": the top eigenvectors of the d x d Gram matrix Z^T Z from one float64 `eigh` per text. "subspace":
    subspace iteration in float32 (Halko et al. 2011, Alg. 4.4 on the Gram matrix): r + `oversampling` columns,
    `iterations` Gram products each orthonormalised (`orthonormal_columns`, batched), then Rayleigh-Ritz, an `eigh` of a (r + 8)-square matrix;
    its error falls as (sigma_{r+9} / sigma_r)^(2 x iterations). Batched `eigh` is slow on GPUs (1.1 s of a 1.4 s
    ViT-B/16 step at batch 256 on an H100, float64), subspace iteration is matrix products (54 ms there).
    "auto": exact on CPU, subspace on other devices. Columns are defined up to sign, which I(i) ignores."""
    if decomposition == "auto":
        decomposition = "exact" if matrix.device.type == "cpu" else "subspace"
    width = matrix.shape[-1]
    r = min(rank, *matrix.shape[1:])
    if decomposition == "exact":
        matrix = matrix.double()
        return torch.linalg.eigh(matrix.mT @ matrix).eigenvectors[..., -r:].flip(-1)  # eigenvalues ascending
    if decomposition != "subspace":
        raise ValueError(f"decomposition must be one of {TRIM_DECOMPOSITIONS}, got {decomposition!r}")
    gram = matrix.float().mT @ matrix.float()
    columns = min(width, r + oversampling)
    start = torch.randn(width, columns, generator=torch.Generator().manual_seed(0)).to(gram.device)
    basis = start.expand(gram.shape[0], -1, -1)
    for _ in range(iterations):
        basis = orthonormal_columns(gram @ basis)
    ritz = torch.linalg.eigh(basis.mT @ gram @ basis).eigenvectors[..., -r:].flip(-1)
    return basis @ ritz


@torch.no_grad()
def trim_scores(
    states: torch.Tensor, token_embeds: torch.Tensor, image_embeds: torch.Tensor, valid: torch.Tensor,
    rank: int, alpha: float, decomposition: str = "auto",
) -> torch.Tensor:
    """S(i) = (1 - alpha) I(i) + alpha A(i) (Eq. 5) for every token, -inf at invalid ones.

    I(i) = sum_{j<=r} |U_ij| sigma_j (Eq. 4) over the SVD Z = U Sigma V^T of each text's valid token states (padding
    rows are zeroed, which leaves the singular triplets of the valid rows unchanged and gives padding I = 0); A(i) the
    cosine of `token_embeds[i]` (the projected token state) with `image_embeds`. Both min-max scaled per text.
    `states` (B, L, d), `token_embeds` (B, L, P), `image_embeds` (B, P), `valid` (B, L) bool.

    Computed without a batched SVD: U_ij sigma_j = z_i . v_j, so I(i) = sum_{j<=r} |z_i . v_j| with the top r right
    singular vectors v_j (`top_right_singular_vectors`, `decomposition` "exact", "subspace" or "auto"). The same
    numbers as the SVD (tested, to float32 rounding) from a d x d instead of an L x d decomposition: on 2 CPU
    threads shared with other jobs the batched SVD took 23 of a 27 s OneLIP step (batch 64, 248 tokens, width 128)
    and the exact form 0.2 s.
    """
    matrix = states.float().masked_fill(~valid[..., None], 0.0)
    vectors = top_right_singular_vectors(matrix, rank, decomposition)
    importance = (matrix.to(vectors.dtype) @ vectors).abs().sum(dim=-1).float()
    relevance = (F.normalize(token_embeds.float(), dim=-1) * F.normalize(image_embeds.float(), dim=-1)[:, None]).sum(-1)
    scores = (1 - alpha) * _min_max(importance, valid) + alpha * _min_max(relevance, valid)
    return scores.masked_fill(~valid, float("-inf"))


def trim_select(states: torch.Tensor, scores: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TRIM-Select's compact sequence Z'_text: the states of the top-K tokens by `scores`, in text order, and which
    of them are real tokens (False for slots beyond a text's valid tokens when it has fewer than K, and for every
    slot past the sequence length). Gradient flows to the selected states."""
    k = min(top_k, scores.shape[1])
    top = scores.topk(k, dim=1)
    order = top.indices.argsort(dim=1)
    indices, kept = top.indices.gather(1, order), torch.isfinite(top.values.gather(1, order))
    selected = states.gather(1, indices[..., None].expand(-1, -1, states.shape[-1]))
    return selected, kept


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


def _raise_on_non_finite(inputs: dict) -> None:
    """A ValueError naming the `inputs` (name -> tensor or None) that hold NaN or inf, if any do."""
    broken = [name for name, tensor in inputs.items() if tensor is not None and not tensor.isfinite().all()]
    if broken:
        raise ValueError(f"OneLIP's loss is not finite: the {', '.join(broken)} contain NaN or inf")


class OneLIPLoss(nn.Module):
    """Eq. 10: `{"coarse_loss": lambda_1 L_coarse, "token_loss": lambda_2 L_token-wise, "contrastive_loss":
    lambda_3 (L_i-t + L_t-i)}`, the lambdas being `weights` before optimizer step `switch_step` and `weights_after`
    from it on (Sec. 4.1: 0.2/0.1/0.7, then 0.05/0.25/0.7 from step 5000). Runs in float32, autocast disabled.
    `distillation`: "trim" (OneLIP, Eq. 4-7) or "pooled" (the ablation without TRIM: `token_loss` is then the
    pooled distance, `pooled_distillation_loss`, and `refined_states` is not used). `decomposition`: how TRIM-Select finds
    the top singular directions (`top_right_singular_vectors`). See the module docstring for the
    choices made where the paper is silent."""

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

    def select_tokens(self, text_states: torch.Tensor, token_embeds: torch.Tensor, image_embeds: torch.Tensor,
                      valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """TRIM-Select (Eq. 4-5) with this objective's alpha, K and r, in float32 with autocast off: the top-K token
        states by S(i) (`trim_scores`, `trim_select`) and which are real; what
        `OneLIPForPreTraining.forward(select_tokens=...)` takes. `text_states` (B, L, d), `token_embeds` (B, L, P)
        the same projected (for A(i)), `image_embeds` (B, P), `valid` (B, L)."""
        with torch.autocast(device_type=text_states.device.type, enabled=False):
            states = text_states.float()
            try:
                scores = trim_scores(states, token_embeds, image_embeds.float(), valid, self.rank, self.alpha,
                                     self.decomposition)
            except torch.linalg.LinAlgError:
                _raise_on_non_finite({"long text encoder states": text_states, "image embeddings": image_embeds})
                raise
            return trim_select(states, scores, self.top_k)

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
        `select_tokens` kept (`OneLIPForPreTraining`'s `refined_text_states`; unused by "pooled").

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
            _raise_on_non_finite(inputs)
        check_on_device(finite, "OneLIP's loss is not finite: NaN or inf in its inputs (token states, embeddings, "
                                "logit scale) or in the terms")
        return terms
