"""Where a script's towers come from in the miniature: a CLIP checkpoint, or small towers from scratch with a
word-level tokenizer trained on the synthetic scenes' texts (`BackboneArguments`), and the small base those towers
are pretrained into first (`BaseArguments`, built by `hf_longclip.miniature.bases`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import datasets
from transformers import AutoImageProcessor, AutoTokenizer, CLIPImageProcessorPil

from hf_longclip.data.synthetic import generator_texts
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.training.arguments import NO_TOWER_LOCKS, LoopArguments


def scene_corpus(dataset_dict: datasets.DatasetDict) -> Iterator[str]:
    """The generator's fixed vocabulary, then every caption, level and distractor of the train split only: what the
    scenes' tokenizer is trained on."""
    yield from generator_texts()
    for row in dataset_dict["train"].select_columns(["caption", "levels", "distractor"]):
        yield row["caption"]
        yield from row["levels"]
        yield row["distractor"]


@dataclass
class BaseArguments:
    """The small base that a script's variants fine-tune when no pretrained model is given: pretrained once from
    scratch on the synthetic scenes and cached (`cached_pretraining`)."""

    base_steps: int = field(default=300, metadata={
        "help": "without --init_from_clip: optimizer steps of the small base pretrained from scratch on the scenes "
                "(global contrastive loss) that the variants fine-tune; 0: train_himo and train_fcast train their "
                "variants from scratch"})
    base_learning_rate: float = field(default=5e-4, metadata={"help": "peak learning rate of that base"})
    base_sentences: int = field(default=2, metadata={
        "help": "the short captions of the short-caption base: the first N sentences of each training caption (2: "
                "the scene and its largest object; the first sentence alone names only the count and background)"})
    base_seed: int = field(default=0, metadata={"help": "seed of that base (fixed across --seeds: the variance "
                                                        "measured is the fine-tuning's)"})
    base_cache_dir: str = field(default="outputs/bases", metadata={
        "help": "where the pretrained bases are cached (train_himo and train_onelip's short-caption CLIP-77, "
                "train_ditm's), one directory per (data, towers, training), and reused by every later run"})

    def pretraining_loop(self, loop_args: LoopArguments, **overrides) -> LoopArguments:
        """`loop_args` with the base's steps, learning rate and seed, every parameter at that rate and no tower
        locked (a base from scratch trains both towers)."""
        return replace(loop_args, max_steps=self.base_steps, learning_rate=self.base_learning_rate,
                       seed=self.base_seed, lr_multipliers="", layer_decay=1.0, **{**NO_TOWER_LOCKS, **overrides})

    def short_captions(self, dataset) -> dict:
        """The train and validation splits of the scenes with `caption` their first `base_sentences` sentences: the
        short captions a short-caption base is pretrained on."""
        return {split: dataset[split].map(lambda row: {"caption": " ".join(row["sentences"][:self.base_sentences])})
                for split in ("train", "validation")}


@dataclass
class BackboneArguments(BaseArguments):
    """Where a script's CLIP towers come from: a CLIP checkpoint, or a small model from scratch on the synthetic
    scenes (with a tokenizer trained on their texts)."""

    init_from_clip: str | None = field(
        default=None, metadata={"help": "CLIPModel Hub id or directory to start from; None: a small model from scratch"}
    )
    trust_remote_code: bool = field(default=False, metadata={
        "help": "run the code a checkpoint given by name ships (--init_from_clip, --base_checkpoint) if it needs its "
                "own; off: only transformers' classes and the library's load (docs/safety.md)"})
    image_size: int = field(default=64, metadata={"help": "side in pixels of the synthetic images and of the "
                                                          "scratch model's input"})
    hidden_size: int = field(default=128, metadata={"help": "width of both encoders when training from scratch"})
    num_layers: int = field(default=2, metadata={"help": "transformer layers of each encoder when training from "
                                                         "scratch"})
    num_heads: int = field(default=4, metadata={"help": "attention heads of each layer when training from scratch"})
    patch_size: int = field(default=8, metadata={"help": "vision patch side in pixels when training from scratch"})

    def processor_parts(self, dataset, positions: int):
        """(tokenizer, image processor): the checkpoint's, or a tokenizer trained on `dataset`'s texts with
        `positions` positions and a CLIP image processor at `image_size`."""
        if self.init_from_clip:
            return (AutoTokenizer.from_pretrained(self.init_from_clip, trust_remote_code=self.trust_remote_code),
                    AutoImageProcessor.from_pretrained(self.init_from_clip, trust_remote_code=self.trust_remote_code))
        size = self.image_size
        return (train_scene_tokenizer(scene_corpus(dataset), model_max_length=positions),
                CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size}))

    def start(self, dataset, positions: int) -> tuple:
        """(where a model with `positions` text positions starts: the checkpoint `init_from_clip` or the keyword
        arguments of `scratch_towers`, and the (tokenizer, image processor) it reads: `processor_parts`), as a
        method's `build_variant` takes them."""
        parts = self.processor_parts(dataset, positions)
        return self.init_from_clip or self.scratch_towers(parts[0], positions), parts

    def scratch_towers_key(self) -> dict:
        """What sets the shape of a model from scratch (for cache keys)."""
        return {name: getattr(self, name) for name in ("image_size", "hidden_size", "num_layers", "num_heads",
                                                       "patch_size")}

    def scratch_towers(self, tokenizer, positions: int) -> dict:
        """`text_config`, `vision_config` and `projection_dim` of a small CLIP-like model from scratch."""
        width = dict(hidden_size=self.hidden_size, intermediate_size=4 * self.hidden_size,
                     num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads)
        return dict(
            text_config=dict(width, vocab_size=len(tokenizer), max_position_embeddings=positions,
                             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id),
            vision_config=dict(width, image_size=self.image_size, patch_size=self.patch_size),
            projection_dim=self.hidden_size,
        )
