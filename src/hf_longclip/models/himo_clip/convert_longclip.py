"""Long-CLIP's and HiMo-CLIP's released weights (`longclip-B.pt`, `longclip-L.pt`, `himo-clip_L.pt`, ...) into a
`HiMoCLIPModel`.

Both release a bare OpenAI-CLIP state dict (see `hf_longclip.models.convert_clip`) with two 248-row text position
tables: the forward of Long-CLIP's `model_longclip.py` adds `positional_embedding * mask1 + positional_embedding_res
* mask2`, mask1 selecting rows 0-19 and mask2 rows 20-247. They fold exactly into one table: rows 0-19 of the
first, rows 20-247 of the second. The converted configuration keeps rows 0-19 frozen in training
(`frozen_position_rows=20`), as their fine-tuning does.
"""

from __future__ import annotations

import torch

from hf_longclip.modeling_common.positions import LONGCLIP_KEEP_POSITIONS
from hf_longclip.models.conversion import ReportedResult, SourceInfo, load_converted, reported_retrieval
from hf_longclip.models.convert_clip import check_tokenizer, clip_image_processor, clip_state_dict

from .configuration_himo_clip import HiMoCLIPConfig
from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor

_TABLE1, _TABLE2, _TABLE3 = (f"HiMo-CLIP paper, Table {n}" for n in (1, 2, 3))
_HIMO_REPO = "https://github.com/UnicomAI/HiMo-CLIP"  # its README shows Tables 1-3 (checked at f235e97)


def _himo_tables(b16: tuple, l14: tuple) -> tuple[ReportedResult, ...]:
    """Figures of HiMo-CLIP's Tables 1 (Urban1k, DOCCI, Long-DCI) and 2 (Flickr30k, COCO) for one method's ViT-B/16
    and ViT-L/14 rows: (urban1k, docci, long_dci, flickr30k, coco), each an (I2T, T2I) pair."""
    datasets = (("Urban1k", _TABLE1), ("DOCCI", _TABLE1), ("Long-DCI", _TABLE1), ("Flickr30k", _TABLE2),
                ("COCO", _TABLE2))
    return tuple(result for backbone, rows in (("ViT-B/16", b16), ("ViT-L/14", l14))
                 for (dataset, table), pair in zip(datasets, rows)
                 for result in reported_retrieval(dataset, *pair, table, backbone, _HIMO_REPO))


SOURCES = {
    "longclip": SourceInfo(
        name="Long-CLIP", paper="Zhang et al., Long-CLIP: Unlocking the Long-Text Capability of CLIP, ECCV 2024, "
                                "arXiv:2403.15378",
        url="https://huggingface.co/BeichenZhang/LongCLIP-L (code: https://github.com/beichenzbc/Long-CLIP, checked "
            "at 3966af9: Apache-2.0 LICENSE)",
        license="apache-2.0",
        reported=_himo_tables(b16=((78.9, 79.5), (63.2, 71.5), (42.2, 48.4), (87.3, 70.7), (57.6, 40.4)),
                              l14=((82.7, 86.1), (66.5, 78.6), (46.5, 54.3), (89.0, 76.7), (62.8, 46.3)))
        + (ReportedResult("HiMo-Docci", "HiMo@K", -0.55, _TABLE3, "ViT-L/14", _HIMO_REPO, "pearsonr"),)),
    "himo": SourceInfo(
        name="HiMo-CLIP", paper="Wu et al., Modeling Semantic Hierarchy and Monotonicity in Vision-Language "
                                "Alignment, AAAI 2026",
        url="https://huggingface.co/5RJ/HiMo-CLIP (code: https://github.com/UnicomAI/HiMo-CLIP, checked at f235e97: "
            "Apache-2.0 LICENSE)",
        license="apache-2.0",
        reported=_himo_tables(b16=((89.2, 89.6), (77.8, 79.9), (58.6, 57.1), (88.4, 72.1), (60.6, 40.8)),
                              l14=((93.0, 93.1), (82.4, 84.4), (62.2, 61.9), (92.5, 78.2), (65.1, 47.2)))
        + (ReportedResult("HiMo-Docci", "HiMo@K", 0.88, _TABLE3, "ViT-L/14", _HIMO_REPO, "pearsonr"),)),
}


def fold_position_tables(state_dict: dict[str, torch.Tensor], keep: int = LONGCLIP_KEEP_POSITIONS) -> torch.Tensor:
    """The one text position table equal to Long-CLIP's `positional_embedding * mask1 + positional_embedding_res *
    mask2`: rows [0, keep) of the first table, the rest of the second."""
    if "positional_embedding_res" not in state_dict:
        raise ValueError("the checkpoint has no positional_embedding_res: not a Long-CLIP / HiMo-CLIP release "
                         "(an OpenAI CLIP converts with the 'openai' format)")
    kept, trained = state_dict["positional_embedding"], state_dict["positional_embedding_res"]
    if kept.shape != trained.shape:
        raise ValueError(f"the two position tables differ in shape: {tuple(kept.shape)} and {tuple(trained.shape)}")
    return torch.cat([kept[:keep], trained[keep:]])


def convert_longclip(state_dict: dict[str, torch.Tensor], tokenizer=None):
    """A Long-CLIP (or HiMo-CLIP) release into `HiMoCLIPModel` (QuickGELU, OpenAI's activation, which both keep)
    and, given a tokenizer, a `HiMoCLIPProcessor` reading 248 tokens."""
    weights = {name: value for name, value in state_dict.items() if name != "positional_embedding_res"}
    state, config = clip_state_dict(weights, "quick_gelu", text_positions=fold_position_tables(state_dict))
    check_tokenizer(tokenizer, config["text_config"], "Long-CLIP")
    model = load_converted(HiMoCLIPModel, HiMoCLIPConfig(**config, frozen_position_rows=LONGCLIP_KEEP_POSITIONS),
                           state)
    if tokenizer is None:
        return model, None
    max_length = config["text_config"]["max_position_embeddings"]
    tokenizer.model_max_length = max_length
    processor = HiMoCLIPProcessor(image_processor=clip_image_processor(config["vision_config"]["image_size"]),
                                  tokenizer=tokenizer, max_length=max_length)
    return model, processor


convert_himo = convert_longclip  # the same release layout; the formats differ in their model cards (SOURCES)
