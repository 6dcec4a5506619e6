"""Retrieval recall for one-to-one image-text pairs."""

import torch


def recall_at_k(similarity: torch.Tensor, k: int = 1) -> float:
    """Percent of queries (rows) whose paired item (the same index) is among the k most similar columns."""
    if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1] or similarity.shape[0] == 0:
        raise ValueError(f"expected a non-empty square query x item similarity matrix, got {tuple(similarity.shape)}")
    if not torch.isfinite(similarity).all():
        raise ValueError("similarity contains NaN or inf")
    k = min(k, similarity.shape[1])
    paired = similarity.diagonal().unsqueeze(1)
    # rank of the paired item = number of items scored strictly higher (ties count in the query's favour)
    rank = (similarity > paired).sum(dim=1)
    return (rank < k).double().mean().item() * 100
