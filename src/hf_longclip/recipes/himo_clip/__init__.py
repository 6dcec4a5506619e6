"""What trains HiMo-CLIP: MoLo/HiDe's task (`HiMoCLIPTask`, the paper's and the released presets), the long-caption
evaluation of the miniature and the Hub card information. Long-CLIP's task, its baseline: `hf_longclip.recipes`."""

from hf_longclip.recipes.himo_clip.card import CARD
from hf_longclip.recipes.himo_clip.evaluation import evaluate_long_captions
from hf_longclip.recipes.himo_clip.method import ABLATIONS, METHODS
from hf_longclip.recipes.himo_clip.task import PRESETS, HiMoCLIPTask

__all__ = ["ABLATIONS", "CARD", "METHODS", "PRESETS", "HiMoCLIPTask", "evaluate_long_captions"]
