"""F-CAST and FLAIR as the registry knows them (`hf_longclip.recipes.registry`): part/whole sigmoid losses over
sub-captions, F-CAST on CAST with the hierarchical text encoder, FLAIR on a ViT with the flat one; and the rows
between them that examples/train_fcast.py trains (Table 2, Table 5, two readings), each built by `build_variant` from
the miniature's towers started from a short-caption base (`pretrained_bases`), or from a given checkpoint."""

from collections.abc import Mapping

from accelerate.utils import set_seed

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.miniature.bases import cached_pretraining
from hf_longclip.models.fcast.configuration_fcast import FCASTConfig
from hf_longclip.models.fcast.modeling_fcast import FCASTModel
from hf_longclip.models.fcast.processing_fcast import FCASTProcessor
from hf_longclip.recipes.fcast.card import CARD
from hf_longclip.recipes.fcast.evaluation import evaluate_scenes
from hf_longclip.recipes.fcast.task import FCASTCollator, FCASTPretrainingTask, FCASTTask, start_from_base
from hf_longclip.recipes.registry import SHORT_LENGTH, Method
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import whole_model_init

SCRIPT = "examples/train_fcast.py"
SUB_CAPTIONS = 8  # sub-captions of 77 tokens per image
CHUNKS = 4  # F-CAST: the long caption's chunks, the first of the sub-captions


def _variant(vision_backbone: str, hierarchical: bool, objective: str, part_loss_weight: float = 1.0,
             nonpaper_detach_stage1_from_part_loss: bool = False) -> dict:
    return dict(vision_backbone=vision_backbone, hierarchical=hierarchical, objective=objective,
                part_loss_weight=part_loss_weight,
                nonpaper_detach_stage1_from_part_loss=nonpaper_detach_stage1_from_part_loss)


# name: the options train_fcast.py builds each variant with: its `vision_backbone` ("cast" or "vit"), a
# `hierarchical` text encoder or CLIP's flat one, its `objective` ("fcast": two-level; "flair": flat), L_part's
# weight and `FCASTTask`'s diagnostic switch (not the paper's)
VARIANTS = {  # Table 2's rows from FLAIR to F-CAST, then Table 5's ablation (the default run)
    "flair": _variant("vit", False, "flair"),
    "flair-cast": _variant("cast", False, "flair"),
    "flair-cast-hier": _variant("cast", True, "flair"),
    "fcast": _variant("cast", True, "fcast"),
    "fcast-no-part": _variant("cast", True, "fcast", part_loss_weight=0.0),
    # why "w/o part" beats F-CAST in the miniature (docs/models/fcast.md): a lighter L_part, or none in stage 1
    "fcast-part-0.1": _variant("cast", True, "fcast", part_loss_weight=0.1),
    "fcast-nonpaper-stage1-detached": _variant("cast", True, "fcast", nonpaper_detach_stage1_from_part_loss=True),
}
PAPER_ROWS = tuple(VARIANTS)[:5]
BASES = {"vit": "flair", "cast": "flair-cast"}  # vision backbone: the flat-text variant its base is built as


def has_part_level(options: Mapping) -> bool:
    """Whether a variant's `options` train a part level (F-CAST's objective with L_part weighted above 0)."""
    return options["objective"] == "fcast" and options["part_loss_weight"] > 0


def variant_options(name: str, part_loss_weight: float | None = None,
                    nonpaper_detach_stage1_from_part_loss: bool = False) -> dict:
    """Variant `name`'s options with train_fcast.py's `--part_loss_weight` and
    `--nonpaper_detach_stage1_from_part_loss` applied where it has a part level."""
    options = VARIANTS[name]
    if not has_part_level(options):
        return options
    return dict(options, part_loss_weight=options["part_loss_weight"] if part_loss_weight is None else part_loss_weight,
                nonpaper_detach_stage1_from_part_loss=(options["nonpaper_detach_stage1_from_part_loss"]
                                                       or nonpaper_detach_stage1_from_part_loss))


def fitting_variants(checkpoint: str) -> list[str]:
    """The variants whose structure (vision backbone, hierarchical text encoder) the FCASTModel at `checkpoint` has:
    those that can start from it."""
    config = FCASTConfig.from_pretrained(checkpoint)
    structure = (config.vision_backbone, config.text_config.num_stage2_layers > 0)
    return [name for name, options in VARIANTS.items()
            if (options["vision_backbone"], options["hierarchical"]) == structure]


def sub_caption_processors(tokenizer, image_processor, chunk_tokens: int,
                           needs_superpixels: bool) -> dict[bool, FCASTProcessor]:
    """{hierarchical: processor}: the hierarchical encoder's, N = `CHUNKS` chunks of `chunk_tokens` per caption, and
    the flat encoder's, one `chunk_tokens`-token text per caption."""
    return {hierarchical: FCASTProcessor(image_processor, tokenizer, max_length=chunk_tokens,
                                         num_chunks=CHUNKS if hierarchical else 1, needs_superpixels=needs_superpixels)
            for hierarchical in (True, False)}


def sub_caption_collator(processors: dict[bool, FCASTProcessor], hierarchical: bool, num_sub_captions: int,
                         seed: int) -> FCASTCollator:
    """Every variant's batches: K = `num_sub_captions` per image, the first N the long caption's chunks (the same
    sub-captions for the flat-text rows, `processors[False]`)."""
    return FCASTCollator(processors[hierarchical], num_sub_captions, seed=seed, num_chunks=processors[True].num_chunks)


def miniature_model(options: Mapping, towers, processor: FCASTProcessor) -> FCASTModel:
    """The model of a variant's `options` from scratch, its sizes `towers` (train_fcast.py's arguments: `hidden_size`,
    `stage1_layers`, `stage2_layers`, `image_size`, `num_segments`, `vit_patch_size`, `cluster_list`,
    `logit_bias_init`), with equal width and heads everywhere; the flat text encoder has stage 1 and stage 2's blocks
    in one stack (the same total depth, as CLIP's 12 against F-CAST's 8 + 4), the ViT as many blocks as CAST."""
    tokenizer, width = processor.tokenizer, towers.hidden_size
    stage2 = towers.stage2_layers if options["hierarchical"] else 0
    text = dict(vocab_size=len(tokenizer), hidden_size=width, intermediate_size=4 * width, num_attention_heads=4,
                num_hidden_layers=towers.stage1_layers + towers.stage2_layers - stage2, num_stage2_layers=stage2,
                num_chunks=processor.num_chunks, max_position_embeddings=SHORT_LENGTH,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    blocks = len(towers.cluster_list) + 1
    tower = dict(hidden_size=width, num_attention_heads=4, intermediate_size=4 * width, image_size=towers.image_size)
    if options["vision_backbone"] == "vit":
        vision = dict(tower, num_hidden_layers=blocks, patch_size=towers.vit_patch_size)
    else:
        vision = dict(tower, num_segments=towers.num_segments, depths=[1] * blocks, num_clusters=towers.cluster_list)
    grounding_stage = blocks - 1 if options["objective"] == "flair" else 1  # FLAIR: the top layer; F-CAST: v^fine
    return FCASTModel(FCASTConfig(text_config=text, vision_config=vision, vision_backbone=options["vision_backbone"],
                                  grounding_stage=grounding_stage, projection_dim=width, pool_heads=4,
                                  part_logit_bias_init_value=towers.logit_bias_init,
                                  whole_logit_bias_init_value=towers.logit_bias_init))


def build_variant(variant: str, start: str | None, processor: dict[bool, FCASTProcessor], *, settings, seed: int,
                  bases: Mapping[str, str] | None = None) -> tuple[FCASTTask, FCASTProcessor]:
    """Variant `variant`'s task and processor as it starts training under `seed`: its model the FCASTModel at `start`,
    or the miniature's (`miniature_model`) started from its vision backbone's pretrained base in `bases` (unless
    empty); `processor`: `sub_caption_processors`' two. `settings`: train_fcast.py's arguments (the towers,
    `num_sub_captions`, `part_loss_weight`, `nonpaper_detach_stage1_from_part_loss`)."""
    set_seed(seed)
    options = variant_options(variant, settings.part_loss_weight, settings.nonpaper_detach_stage1_from_part_loss)
    processors, processor = processor, processor[options["hierarchical"]]
    model = FCASTModel.from_pretrained(start) if start else miniature_model(options, settings, processor)
    if bases:
        start_from_base(model, FCASTModel.from_pretrained(bases[options["vision_backbone"]]))
    collate = sub_caption_collator(processors, options["hierarchical"], settings.num_sub_captions, seed)
    return FCASTTask(model, collate, options["objective"], options["part_loss_weight"],
                     options["nonpaper_detach_stage1_from_part_loss"]), processor


def pretrained_bases(settings, accelerator, scenes, processor: FCASTProcessor,
                     loop_args: LoopArguments) -> dict[str, str]:
    """{vision backbone: checkpoint} of the short-caption bases the variants start from: for the ViT and for CAST, a
    flat-text model (`BASES`) pretrained with `FCASTPretrainingTask` on the first `--base_sentences` sentences of
    each training caption, once (cached under `--base_cache_dir`, the same for every seed); {} with
    `--base_steps 0` (every variant from scratch). `settings`: train_fcast.py's arguments (`BaseArguments` and the
    towers)."""
    if settings.base_steps <= 0:
        return {}
    short = settings.short_captions(scenes)
    base_args = settings.pretraining_loop(loop_args, warmup_steps=max(1, settings.base_steps // 10))
    towers = {name: getattr(settings, name) for name in ("image_size", "num_segments", "vit_patch_size",
                                                         "num_clusters", "hidden_size", "stage1_layers",
                                                         "stage2_layers")}
    bases = {}
    for backbone, variant in BASES.items():
        def build_base(options=VARIANTS[variant]):
            set_seed(settings.base_seed)
            model = miniature_model(options, settings, processor)
            return FCASTPretrainingTask(model, ImageTextCollator(processor)), processor

        recipe = {"data": scenes["train"]._fingerprint, "towers": towers, "vision": backbone,
                  "sentences": settings.base_sentences, "warmup_steps": base_args.warmup_steps}
        bases[backbone], _ = cached_pretraining(accelerator, settings.base_cache_dir, f"fcast-{backbone}",
                                                f"base-{backbone}", recipe, build_base, short, base_args,
                                                label=f"base {backbone}")
    return bases


def evaluate_bases(accelerator, bases: Mapping[str, str], processor: FCASTProcessor, test, pairs, batch_size: int,
                   grounding_images: int) -> dict[str, dict]:
    """{`base-<backbone>`: results} of the pretrained bases evaluated as they are (their pooling never trained,
    `evaluate_scenes`), on the main process ({} elsewhere): the starting points of every seed's variants."""
    results = {}
    if accelerator.is_main_process:
        for backbone, path in bases.items():
            with whole_model_init(accelerator):  # loaded whole on this process alone, even under ZeRO-3
                base = FCASTModel.from_pretrained(path)
            results[f"base-{backbone}"] = evaluate_scenes(base.to(accelerator.device), processor, test, pairs,
                                                          batch_size, grounding_images)
    return results


def stage1_layers(text_layers: int) -> int:
    """F-CAST's split of a text tower: stage 1 (per chunk) takes two thirds of the layers, stage 2 the rest."""
    return 2 * text_layers // 3


def fcast_model(size, backbone: str) -> FCASTModel:
    """F-CAST at `size` ("cast": CAST, the hierarchical text encoder over `CHUNKS` chunks) or FLAIR ("vit": the ViT,
    CLIP's flat text encoder)."""
    if backbone == "cast":
        stage1 = stage1_layers(size.text_layers)
        text = dict(size.text_config(SHORT_LENGTH, stage1), num_stage2_layers=size.text_layers - stage1,
                    num_chunks=CHUNKS)
        vision = size.cast_config()
    else:
        text = dict(size.text_config(SHORT_LENGTH), num_stage2_layers=0, num_chunks=1)
        vision = size.vision_config()
    return FCASTModel(FCASTConfig(text_config=text, vision_config=vision, vision_backbone=backbone,
                                  projection_dim=size.projection_dim, pool_heads=size.text_heads))


def _builder(objective: str):
    def build(size, options):
        model = fcast_model(size, "cast" if objective == "fcast" else "vit")
        return model, FCASTTask(model, None, objective=objective)
    return build


def _batcher(superpixels: bool):
    def example_batch(size, rows, inputs, options) -> dict:
        texts = inputs.texts(rows * SUB_CAPTIONS, SHORT_LENGTH)
        batch = {key: value.view(rows, SUB_CAPTIONS, SHORT_LENGTH) for key, value in texts.items()}
        batch["pixel_values"] = inputs.images(rows)
        if superpixels:  # CASTImageProcessor's label maps
            batch["superpixels"] = inputs.superpixels(rows)
        return batch
    return example_batch


def _needs_cast(size) -> str | None:
    return None if size.cast else "F-CAST's CAST backbone is defined where CAST is (CAST-B at ViT-B/16)"


METHODS = (
    Method("flair", f"FLAIR (FCASTTask, objective flair): ViT, flat text encoder, {SUB_CAPTIONS} sub-captions of 77 "
                    "tokens per image", _builder("flair"), _batcher(False), script=SCRIPT, variants=VARIANTS,
           build_variant=build_variant, card=CARD, evaluate=evaluate_scenes),
    Method("fcast", f"F-CAST (FCASTTask): CAST backbone, hierarchical text encoder over {CHUNKS} chunks, "
                    f"{SUB_CAPTIONS} sub-captions of 77 tokens per image, two-level loss",
           _builder("fcast"), _batcher(True), unavailable=_needs_cast, script=SCRIPT, variants=VARIANTS,
           build_variant=build_variant, card=CARD, evaluate=evaluate_scenes),
)
