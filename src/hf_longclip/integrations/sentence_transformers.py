"""Our dual encoders as sentence-transformers models: `SentenceTransformer(path, trust_remote_code=True).encode`
takes long captions and PIL images and returns the model's normalised embeddings.

sentence-transformers' own `Transformer` module runs any transformers model through the methods a *modality config*
names; ours is `get_text_features` for text and `get_image_features` for images, each read at `pooler_output` (the
projected embedding, as every dual encoder here returns it), then its `Normalize` module. So the checkpoint needs no
module code of its own: `save_sentence_transformer` writes sentence-transformers' files (`modules.json`,
`sentence_bert_config.json`, `1_Normalize/`) beside the model's weights, code and processor. Texts go through the
model's own processor, which truncates at the model's length (`processor.max_length`: 248 for HiMo-CLIP, T_g for
OneLIP; F-CAST's processor chunks the caption), never at CLIP's 77.

Supported: HiMoCLIPModel (and converted Long-CLIP checkpoints), DITMModel, OneLIPModel, FCASTModel. CAST is an image
model alone (no text tower).
"""

from pathlib import Path

from transformers import PreTrainedModel, ProcessorMixin

FEATURES = {
    "text": {"method": "get_text_features", "method_output_name": "pooler_output"},
    "image": {"method": "get_image_features", "method_output_name": "pooler_output"},
}


def save_sentence_transformer(model: PreTrainedModel, processor: ProcessorMixin, directory: str | Path):
    """Save `model` and `processor` to `directory` as a checkpoint that both `AutoModel` and
    `SentenceTransformer(directory, trust_remote_code=True)` load; returns the `SentenceTransformer`.

    The processor must cut texts at the model's length (`processor.max_length ==
    text_config.max_position_embeddings`, per chunk for F-CAST): sentence-transformers truncates with it. The model and
    processor classes are this library's (registered with transformers' Auto classes on import), so
    no code is read back from `directory` here."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer

    if not all(callable(getattr(model, method, None)) for method in ("get_text_features", "get_image_features")):
        raise TypeError(f"{type(model).__name__} is not a dual encoder: sentence-transformers needs a model with "
                        "get_text_features and get_image_features (HiMo-CLIP, DITM, OneLIP, F-CAST)")
    model_length = model.config.text_config.max_position_embeddings
    processor_length = getattr(processor, "max_length", model_length)
    if processor_length != model_length:
        raise ValueError(f"the processor cuts texts at {processor_length} tokens, the model reads "
                         f"{model_length}: build the processor with max_length={model_length}")
    directory = Path(directory)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    encoder = Transformer(str(directory), modality_config=FEATURES, module_output_name="sentence_embedding")
    sentence_transformer = SentenceTransformer(modules=[encoder, Normalize()], device=str(model.device))
    sentence_transformer.save(str(directory))
    return sentence_transformer


__all__ = ["save_sentence_transformer"]
