"""Modelling code shared by the models, written once. Each module imports only torch, transformers and its
siblings; `hf_longclip.export` copies the ones a model uses into that model's remote-code bundle."""

from .dual_encoder import DualEncoderMixin, DualEncoderOutput, end_of_text_positions
from .gpo import GPO
from .positions import RotaryEmbedding, ntk_inverse_frequencies, sinusoidal_encoding, stretch_position_embeddings
from .saving import CodeBundleMixin
from .transformer import EncoderLayer, apply_rotary

__all__ = [
    "CodeBundleMixin",
    "DualEncoderMixin",
    "DualEncoderOutput",
    "EncoderLayer",
    "GPO",
    "RotaryEmbedding",
    "apply_rotary",
    "end_of_text_positions",
    "ntk_inverse_frequencies",
    "sinusoidal_encoding",
    "stretch_position_embeddings",
]
