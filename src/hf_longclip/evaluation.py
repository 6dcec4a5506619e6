"""Evaluation of a CLIP-style model on long captions: retrieval and HiMo@K monotonicity (HiMo-CLIP Sec. 4.2)."""

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .data.text import cumulative_segments
from .metrics.himo import himo_at_k
from .metrics.retrieval import recall_at_k


@torch.no_grad()
def _encode(items: Sequence, embed, batch_size: int, progress: bool, description: str) -> torch.Tensor:
    """L2-normalised float32 embeddings of `items`, `embed` applied batch by batch."""
    starts = tqdm(range(0, len(items), batch_size), desc=description, disable=not progress, leave=False)
    return F.normalize(torch.cat([embed(list(items[i : i + batch_size])).float() for i in starts]), dim=-1)


def encode_texts(model, processor, texts: Sequence[str], batch_size: int = 128, progress: bool = False) -> torch.Tensor:
    """L2-normalised text embeddings, in batches padded to their longest text."""

    def embed(batch):
        return model.get_text_features(**processor(text=batch, padding="longest").to(model.device)).pooler_output

    return _encode(texts, embed, batch_size, progress, "texts")


def encode_images(model, processor, images: Sequence, batch_size: int = 128, progress: bool = False) -> torch.Tensor:
    """L2-normalised image embeddings."""

    def embed(batch):
        return model.get_image_features(**processor(images=batch).to(model.device)).pooler_output

    return _encode(images, embed, batch_size, progress, "images")


def prefix_scores(image_embeds: torch.Tensor, prefixes: Sequence[Sequence[str]], encode) -> list[list[float]]:
    """Cosine similarity of image i with each of its cumulative caption prefixes t_1..t_K (ragged over images)."""
    flat = [text for group in prefixes for text in group]
    owners = torch.tensor([i for i, group in enumerate(prefixes) for _ in group])
    scores = (encode(flat) * image_embeds[owners]).sum(dim=-1).tolist()
    out, start = [], 0
    for group in prefixes:
        out.append(scores[start : start + len(group)])
        start += len(group)
    return out


def evaluate_long_captions(model, processor, dataset, batch_size: int = 128, progress: bool = True) -> dict:
    """R@1 both ways on full captions, HiMo@2 / HiMo@3 (Eq. 6) on K cumulative segments, HiMo@K (Eq. 5) on all
    sentence prefixes, and the mean similarity at each prefix length (for plots).

    `dataset` rows need `image`, `caption` and `sentences`.
    """
    model.eval()

    def encode(texts):
        return encode_texts(model, processor, texts, batch_size, progress)

    image_embeds = encode_images(model, processor, dataset["image"], batch_size, progress)
    similarity = image_embeds @ encode(dataset["caption"]).T
    sentences = dataset["sentences"]
    all_prefixes = [cumulative_segments(s, len(s)) for s in sentences]
    scores = prefix_scores(image_embeds, all_prefixes, encode)
    results = {
        "r1_i2t": recall_at_k(similarity, 1),
        "r1_t2i": recall_at_k(similarity.T, 1),
    }
    for k in (2, 3):  # the K-segment prefixes t_k are among the sentence prefixes already scored
        segment_scores = [
            [score[prefixes.index(text)] for text in cumulative_segments(sents, k)]
            for score, prefixes, sents in zip(scores, all_prefixes, sentences)
        ]
        results[f"himo@{k}"] = himo_at_k(segment_scores, method="accuracy")["himo_at_k"]
    results["himo@k"] = himo_at_k(scores, method="pearson")["himo_at_k"]
    longest = max(len(s) for s in scores)
    results["mean_similarity_by_prefix"] = [
        sum(s[k] for s in scores if len(s) > k) / sum(len(s) > k for s in scores) for k in range(longest)
    ]
    return results


def plot_prefix_similarity(curves: dict[str, Sequence[float]], path: str | Path, title: str = "") -> Path:
    """Save a PNG of mean image-text similarity against the number of caption sentences, one line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, marker="o", label=name)
    ax.set_xlabel("caption prefix length (sentences)")
    ax.set_ylabel("mean cosine similarity with the image")
    ax.set_title(title or "Semantic monotonicity: similarity vs. caption completeness")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
