"""CAST's tiny classifier, shared by tests/models/cast/ and the gradient-cache tests."""

import torch

from hf_longclip import CASTForImageClassification, CASTVisionConfig


def tiny_classifier() -> CASTForImageClassification:
    torch.manual_seed(0)
    config = CASTVisionConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32,
                              num_segments=16, depths=[1, 1, 1], num_clusters=[6, 3], num_labels=5)
    model = CASTForImageClassification(config).train()
    model.cast.embeddings.stem.apply(lambda m: m.eval() if isinstance(m, torch.nn.BatchNorm2d) else None)
    return model
