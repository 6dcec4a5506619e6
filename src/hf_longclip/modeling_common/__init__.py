"""Modelling code shared by every model, written once. Each module imports only torch, transformers and its
siblings; `code_bundle` copies the ones a model uses into that model's remote-code bundle."""

from .code_bundle import CodeBundleMixin, bundle_sources, write_bundle
from .dual_encoder import DualEncoderMixin, DualEncoderOutput, end_of_text_positions
from .gpo import GPO, sinusoidal_encoding
from .losses import (
    check_paired_embeddings,
    contrastive_loss,
    gather_with_grad,
    sigmoid_loss,
)
from .pooling import AttentionPool
from .positions import (
    RotaryEmbedding,
    apply_rotary,
    ntk_inverse_frequencies,
    stretch_position_embeddings,
)

__all__ = [
    "AttentionPool",
    "CodeBundleMixin",
    "DualEncoderMixin",
    "DualEncoderOutput",
    "GPO",
    "RotaryEmbedding",
    "apply_rotary",
    "bundle_sources",
    "check_paired_embeddings",
    "contrastive_loss",
    "end_of_text_positions",
    "gather_with_grad",
    "ntk_inverse_frequencies",
    "sigmoid_loss",
    "sinusoidal_encoding",
    "stretch_position_embeddings",
    "write_bundle",
]
