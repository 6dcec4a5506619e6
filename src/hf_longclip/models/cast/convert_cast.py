"""CAST (Ke et al., ICLR 2024, arXiv:2210.00314; github.com/twke18/CAST) checkpoints as a [`CASTVisionModel`], or a
[`CASTForImageClassification`] when the checkpoint has a linear classifier.

Layouts, all read by `load_original_checkpoint` + `convert`:
- MoCo v3 pre-training (`moco-v3/main_moco_suppix.py`, `checkpoint_0099.pth.tar`): `module.base_encoder.*` is kept,
  the momentum encoder and predictor are dropped, and so is the self-supervised projector `head.{i}.*` (training
  state): a `CASTVisionModel`.
- MoCo v3 linear probe (`moco-v3/main_lincls_suppix.py`, `model_best.pth.tar`: `state_dict` with `module.` keys
  beside `best_acc1` and the optimizer) and any plain state dict with a linear `head`: a classifier.
- DeiT supervised training (`deit/main_suppix.py`, `best_checkpoint.pth`: `model` beside the EMA copy, the
  optimizer and the argparse command line), whose model is `cast_models/cast_deit.py`: a classifier.

The released model (`cast.py`, a timm `VisionTransformer` subclass) keeps its blocks twice in the state dict
(`blocks.{i}` and their stage aliases `blocks1..4.{j}`, the same tensors), a convolutional stem (`patch_embed.proj`,
BatchNorm), fixed 2-D sin-cos `pos_embed` (checked against ours, not copied) and a zero `pe_token` added to the
[CLS] token, graph poolings `pool{1..4}.pool_block.{centroid_fc, fc1, fc2}`, of which the fourth runs after the last
stage's output is taken (dropped here, as F-CAST drops it), and `norm`, `head`. `cast_deit.py` has a learned
`pos_embed` of 1 + grid^2 rows instead (row 0 added to [CLS], folded into our [CLS] token here) and no `pe_token`.
The converted configuration sets the released details ours has as options: `position_layout="blocks"` (or
`position_embedding_type="learned"`), `pooling_layer_norm_eps=1e-5`, `segment_pooling="cells"` and
`empty_segments="zero_tokens"`; the image processor computes SEEDS superpixels as the script that trained the
layout did (`RELEASED_PREPROCESSING`).
"""

import math
import re

import torch

from hf_longclip.models.conversion import SourceInfo, check_consumed, load_converted, pop_weight

from .configuration_cast import STEM_STRIDE, CASTVisionConfig
from .image_processing_cast import CASTImageProcessor
from .modeling_cast import CASTForImageClassification, CASTVisionModel
from .segments import sincos_2d_positions

CAST_HEADS = 12  # every released CAST variant (cast_small, cast_base, their deep versions) uses 12 heads
CAST_CLUSTERS = (64, 32, 16)  # num_clusters [64, 32, 16, 8] of the released variants, the last pooling unused
CAST_SEGMENTS = 196  # superpixels of the released training and linear-probe code
EVAL_CROP_RATIO = 0.875  # 256 px resized, 224 px centre crop: both the MoCo v3 linear probe's and DeiT's evaluation
# how each training script prepared images and their SEEDS superpixels (twke18/CAST ec85adf): moco-v3/main_lincls_
# suppix.py + moco-v3/suppix_utils/datasets_seeds.py (Resize(256) bilinear, SEEDS on the [0, 1] tensor x 255, 15
# bins, 20 iterations), deit/main_suppix.py + deit/datasets.py + deit/datasets_seeds.py (Resize(256) bicubic, SEEDS
# on the normalised tensor mapped back, 5 bins, 15 iterations); LAB, one level, prior 2 in both
RELEASED_PREPROCESSING = {
    "cast.py": dict(resample="bilinear", seeds_histogram_bins=15, seeds_iterations=20, superpixel_input="crop"),
    "cast_deit.py": dict(resample="bicubic", seeds_histogram_bins=5, seeds_iterations=15,
                         superpixel_input="denormalized"),
}
MOCO_PROJECTOR = re.compile(r"head\.\d+\.")  # MoCo v3's projector MLP (training state), not a classifier

SOURCES = {
    "cast": SourceInfo(
        name="CAST", paper="Ke et al., Learning Hierarchical Image Segmentation For Recognition and By Recognition, "
                           "ICLR 2024, arXiv:2210.00314",
        url="https://github.com/twke18/CAST (weights: twke/CAST on the Hub)", license="mit",
        checked="images (features, class logits and the first pooling's assignments)",
        test_file="tests/conversion/test_convert_cast.py"),  # the paper is not in this environment: no numbers quoted
}


def _split_qkv(prefix: str, qkv_prefix: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    converted = {}
    for name in ("weight", "bias"):
        for part, tensor in zip(("q", "k", "v"), pop_weight(state, f"{qkv_prefix}.qkv.{name}").chunk(3)):
            converted[f"{prefix}.{part}_proj.{name}"] = tensor
        converted[f"{prefix}.out_proj.{name}"] = pop_weight(state, f"{qkv_prefix}.proj.{name}")
    return converted


def convert(
    state_dict: dict[str, torch.Tensor], tokenizer=None, *, num_heads: int = CAST_HEADS,
    num_clusters: tuple[int, ...] = CAST_CLUSTERS, num_segments: int = CAST_SEGMENTS,
    superpixel_method: str = "seeds",
) -> tuple[CASTVisionModel | CASTForImageClassification, CASTImageProcessor]:
    """A CAST state dict (as `load_original_checkpoint` reads it) as our CAST model in float32 and its image
    processor: `num_segments` superpixels by `superpixel_method` ("seeds" with the settings of the script that
    trained this layout, see `RELEASED_PREPROCESSING`; or "slic"), after the release's 256 px resize and 224 px
    centre crop. CAST is an image model: a `tokenizer` is refused."""
    if tokenizer is not None:
        raise ValueError("CAST is an image model and takes no tokenizer (leave out --tokenizer / --bpe-file)")
    state = {key: value.float() if value.is_floating_point() else value for key, value in state_dict.items()}
    for key in [key for key in state if re.match(r"blocks[1-9]\.", key)]:  # stage aliases of blocks.{i}
        state.pop(key)
    stages = len({match.group(1) for key in state if (match := re.match(r"pool(\d+)\.", key))})
    cls_token, pos_embed = pop_weight(state, "cls_token"), pop_weight(state, "pos_embed")[0]
    hidden, pe_token = cls_token.shape[-1], state.pop("pe_token", None)
    script = "cast.py" if pe_token is not None else "cast_deit.py"
    if pe_token is None:  # cast_deit.py: a learned table whose row 0 is added to the [CLS] token
        cls_token, pos_embed = cls_token + pos_embed[:1], pos_embed[1:]
    else:
        cls_token = cls_token + pe_token
    grid = math.isqrt(pos_embed.shape[0])
    if grid * grid != pos_embed.shape[0]:
        raise ValueError(f"pos_embed has {pos_embed.shape[0] + (pe_token is None)} rows: neither cast.py's square grid "
                         "(with a pe_token) nor cast_deit.py's [CLS] row plus a square grid (without one)")
    if pe_token is not None and not torch.allclose(
            pos_embed, sincos_2d_positions(grid, grid, hidden, layout="blocks"), atol=1e-5):
        raise ValueError("pos_embed is not CAST's fixed 2-D sin-cos table: not a CAST checkpoint this converter knows")
    converted = {"embeddings.cls_token": cls_token}
    if pe_token is None:
        converted["embeddings.position_embedding"] = pos_embed
    for key in [key for key in state if key.startswith("patch_embed.proj.")]:
        converted[key.replace("patch_embed.proj.", "embeddings.stem.layers.")] = state.pop(key)
    blocks = sorted({int(key.split(".")[1]) for key in state if key.startswith("blocks.")})
    layers = []
    for index in blocks:
        block, layer = f"blocks.{index}", {}
        layer.update(_split_qkv("self_attn", f"{block}.attn", state))
        for ours, theirs in (("layer_norm1", "norm1"), ("layer_norm2", "norm2"), ("mlp.fc1", "mlp.fc1"),
                             ("mlp.fc2", "mlp.fc2")):
            for name in ("weight", "bias"):
                layer[f"{ours}.{name}"] = pop_weight(state, f"{block}.{theirs}.{name}")
        layers.append(layer)
    stage_depths = _stage_depths(state_dict, stages)
    start = 0
    for stage, depth in enumerate(stage_depths):
        for offset in range(depth):
            for key, value in layers[start + offset].items():
                converted[f"stages.{stage}.layers.{offset}.{key}"] = value
        start += depth
    for stage in range(len(stage_depths)):
        source = f"pool{stage + 1}.pool_block"
        if stage == len(stage_depths) - 1:  # runs after the output is taken: never used
            for key in [key for key in state if key.startswith(f"pool{stage + 1}.")]:
                state.pop(key)
            continue
        target = f"pools.{stage}"
        converted.update(_split_qkv(f"{target}.grouping.attention", f"{source}.centroid_fc.attn", state))
        converted[f"{target}.grouping.bias"] = pop_weight(state, f"{source}.centroid_fc.bias")
        for name in ("weight", "bias"):
            converted[f"{target}.grouping.layer_norm.{name}"] = pop_weight(state, f"{source}.centroid_fc.norm.{name}")
            for mlp in ("fc1.0", "fc1.1", "fc2.0", "fc2.1"):
                converted[f"{target}.{mlp}.{name}"] = pop_weight(state, f"{source}.{mlp}.{name}")
    for name in ("weight", "bias"):
        converted[f"post_layernorm.{name}"] = pop_weight(state, f"norm.{name}")
    for key in [key for key in state if MOCO_PROJECTOR.match(key)]:
        state.pop(key)
    classifier = {key: state.pop(key) for key in ("head.weight", "head.bias") if key in state}
    if len(classifier) == 1:
        raise ValueError(f"a linear classifier needs head.weight and head.bias; the checkpoint has only "
                         f"{list(classifier)}")
    check_consumed(state, "CAST")
    config = CASTVisionConfig(
        hidden_size=hidden, num_attention_heads=num_heads,
        intermediate_size=converted["stages.0.layers.0.mlp.fc1.weight"].shape[0], image_size=grid * STEM_STRIDE,
        num_segments=num_segments, depths=list(stage_depths), num_clusters=list(num_clusters[: len(stage_depths) - 1]),
        position_layout="blocks", pooling_layer_norm_eps=1e-5, segment_pooling="cells",
        position_embedding_type="learned" if pe_token is None else "sincos", empty_segments="zero_tokens",
        num_labels=classifier["head.weight"].shape[0] if classifier else 2,
    )
    if classifier:
        converted = {f"cast.{key}": value for key, value in converted.items()}
        converted.update({"classifier.weight": classifier["head.weight"], "classifier.bias": classifier["head.bias"]})
    model = load_converted(CASTForImageClassification if classifier else CASTVisionModel, config, converted)
    processor = CASTImageProcessor(size=config.image_size, num_segments=num_segments,
                                   resize_size=int(config.image_size / EVAL_CROP_RATIO),
                                   superpixel_method=superpixel_method, **RELEASED_PREPROCESSING[script])
    return model, processor


def _stage_depths(state_dict: dict[str, torch.Tensor], stages: int) -> list[int]:
    """Blocks per stage, read from the aliases `blocks{s}.{j}` the released model saves for every stage."""
    depths = []
    for stage in range(1, stages + 1):
        indices = {int(match.group(1)) for key in state_dict if (match := re.match(rf"blocks{stage}\.(\d+)\.", key))}
        if not indices:
            raise ValueError(f"the checkpoint has no blocks{stage}.*: CAST's stage aliases are needed for its depths")
        depths.append(len(indices))
    return depths


__all__ = ["CAST_CLUSTERS", "CAST_HEADS", "CAST_SEGMENTS", "RELEASED_PREPROCESSING", "convert"]
