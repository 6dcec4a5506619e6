"""Short queries padded to the longest of the batch (the processors' default) against padding to 248 tokens:
`get_text_features` time per batch of zero-shot prompts ("a photo of a {class}."), and the largest difference of the
L2-normalised features (what cosine similarity reads).

    python benchmarks/bench_padding.py [--batch-size 100] [--repeats 10] [--vit-b16] [--bpe-file PATH]

The tokenizer is OpenAI's CLIP BPE (`bpe_simple_vocab_16e6.txt.gz`, from the installed open_clip by default), the
model a HiMoCLIPModel of the main job's size (128 wide, 2 layers) or, with `--vit-b16`, of CLIP ViT-B/16's text
tower (512 wide, 12 layers, 8 heads); random weights (time does not depend on them). CPU seconds of the process
(`time.process_time`), interleaved medians (`common.compare`).
"""

import argparse
import importlib.util
import json
from pathlib import Path

import torch
from common import clip_config, compare
from transformers import CLIPImageProcessorPil, CLIPModel

from hf_longclip import HiMoCLIPModel, HiMoCLIPProcessor
from hf_longclip.models.conversion import clip_tokenizer

CLASSES = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead shark", "electric ray", "stingray",
           "rooster", "hen", "ostrich", "brambling", "goldfinch", "house finch", "junco", "indigo bunting",
           "American robin", "bulbul", "jay", "magpie", "chickadee"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--vit-b16", action="store_true", help="CLIP ViT-B/16's text tower size")
    parser.add_argument("--bpe-file", default=None, help="OpenAI's BPE file (default: the installed open_clip's)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    bpe_file = args.bpe_file or Path(importlib.util.find_spec("open_clip").submodule_search_locations[0]) / \
        "bpe_simple_vocab_16e6.txt.gz"
    tokenizer = clip_tokenizer(bpe_file=bpe_file, max_length=248)
    config = clip_config(vocab_size=len(tokenizer))
    config.text_config.eos_token_id = tokenizer.eos_token_id
    config.text_config.bos_token_id = tokenizer.bos_token_id
    config.text_config.pad_token_id = 0
    if args.vit_b16:
        for key, value in dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                               num_attention_heads=8).items():
            setattr(config.text_config, key, value)
    torch.manual_seed(0)
    model = HiMoCLIPModel.from_clip(CLIPModel(config), stretch_positions=False).eval()
    processor = HiMoCLIPProcessor(CLIPImageProcessorPil(), tokenizer, max_length=248)
    prompts = [f"a photo of a {CLASSES[i % len(CLASSES)]}." for i in range(args.batch_size)]
    longest, full = processor(text=prompts), processor(text=prompts, padding="max_length")

    def features(inputs):
        with torch.inference_mode():
            return model.get_text_features(**inputs).pooler_output

    def unit(features):
        return torch.nn.functional.normalize(features, dim=-1)

    difference = (unit(features(longest)) - unit(features(full))).abs().max().item()
    times = compare({"longest": lambda: features(longest), "max_length": lambda: features(full)},
                    repeats=args.repeats, clock=__import__("time").process_time)
    figures = {
        "tower": "ViT-B/16 text (512 wide, 12 layers)" if args.vit_b16 else "main job (128 wide, 2 layers)",
        "batch": args.batch_size, "tokens_longest": longest["input_ids"].shape[1],
        "tokens_max_length": full["input_ids"].shape[1], "threads": torch.get_num_threads(),
        "ms_longest": round(times["longest"] * 1e3, 1), "ms_max_length": round(times["max_length"] * 1e3, 1),
        "speedup": round(times["max_length"] / times["longest"], 1), "max_abs_difference_unit_features": difference,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
