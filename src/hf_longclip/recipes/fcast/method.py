"""F-CAST and FLAIR as the registry knows them (`hf_longclip.recipes.registry`): part/whole sigmoid losses over
sub-captions, F-CAST on CAST with the hierarchical text encoder, FLAIR on a ViT with the flat one."""

from hf_longclip.models.fcast.configuration_fcast import FCASTConfig
from hf_longclip.models.fcast.modeling_fcast import FCASTModel
from hf_longclip.recipes.fcast.card import CARD
from hf_longclip.recipes.fcast.task import FCASTTask
from hf_longclip.recipes.registry import SHORT_LENGTH, Method

SUB_CAPTIONS = 8  # sub-captions of 77 tokens per image
CHUNKS = 4  # F-CAST: the long caption's chunks, the first of the sub-captions


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
                    "tokens per image", _builder("flair"), _batcher(False), script="examples/train_fcast.py",
           card=CARD),
    Method("fcast", f"F-CAST (FCASTTask): CAST backbone, hierarchical text encoder over {CHUNKS} chunks, "
                    f"{SUB_CAPTIONS} sub-captions of 77 tokens per image, two-level loss",
           _builder("fcast"), _batcher(True), unavailable=_needs_cast, script="examples/train_fcast.py", card=CARD),
)
