"""A word-level tokenizer trained locally on given texts (e.g. the synthetic scenes'), saved with the models trained
on them."""

from collections.abc import Iterable

from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from tokenizers.processors import TemplateProcessing
from tokenizers.trainers import WordLevelTrainer
from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD, UNK = "<|startoftext|>", "<|endoftext|>", "<|pad|>", "<|unk|>"
SPECIAL_TOKENS = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}  # ids 0, 1, 2, 3
MAX_VOCAB_SIZE = 2**31 - 1  # no cap: keep every word seen


def train_scene_tokenizer(texts: Iterable[str], model_max_length: int = 248) -> PreTrainedTokenizerFast:
    """Train a lowercase word-level tokenizer (each word and each punctuation mark is one token) on `texts`.

    Every encoded sequence is `<|startoftext|> ... <|endoftext|>`; truncation keeps both special tokens.
    """
    backend = Tokenizer(WordLevel(unk_token=UNK))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    trainer = WordLevelTrainer(
        vocab_size=MAX_VOCAB_SIZE, min_frequency=1, special_tokens=list(SPECIAL_TOKENS.values()), show_progress=False
    )
    backend.train_from_iterator(texts, trainer=trainer)
    backend.post_processor = TemplateProcessing(
        single=f"{BOS} $A {EOS}",
        pair=f"{BOS} $A {EOS} {BOS}:1 $B:1 {EOS}:1",
        special_tokens=[(BOS, backend.token_to_id(BOS)), (EOS, backend.token_to_id(EOS))],
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=model_max_length, **SPECIAL_TOKENS)
