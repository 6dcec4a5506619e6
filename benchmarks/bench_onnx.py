"""ONNX Runtime against PyTorch on the same inputs (issue "Long texts wherever users run text encoders"): the text
tower on long captions (every one 248 tokens) and the image tower, of the main job's HiMo-CLIP (benchmarks/common.py:
128 wide, 2 layers, 64 px) exported with `hf_longclip.integrations.onnx.export_onnx`; median seconds per batch,
interleaved, and
the ratio ORT / PyTorch (below 1: ORT faster), with the largest difference between the two outputs.

    python benchmarks/bench_onnx.py                # CPU, ~1 min on 2 cores
    python benchmarks/bench_onnx.py --batch_size 64 --threads 2
"""

import argparse
import tempfile
from functools import partial

import onnxruntime as ort
import torch
from common import clip_config, compare
from PIL import Image
from transformers import CLIPImageProcessor

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from hf_longclip.data.synthetic import generator_texts
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.integrations.onnx import export_onnx


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="intra-op threads of both PyTorch and ONNX Runtime")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    texts = list(generator_texts())
    tokenizer = train_scene_tokenizer(texts)
    torch.manual_seed(0)
    model = HiMoCLIPModel(HiMoCLIPConfig(**clip_config(vocab_size=len(tokenizer)).to_dict())).eval()
    image_processor = CLIPImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64})
    processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=248)
    long_caption = " ".join(texts * 3)  # truncated to 248 tokens
    generator = torch.Generator().manual_seed(0)
    images = [Image.fromarray((torch.rand(72, 80, 3, generator=generator) * 255).byte().numpy())
              for _ in range(args.batch_size)]
    inputs = {"text": processor(text=[long_caption] * args.batch_size, return_tensors="pt"),
              "image": processor(images=images, return_tensors="pt")}
    assert inputs["text"]["input_ids"].shape == (args.batch_size, 248)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    with tempfile.TemporaryDirectory() as directory:
        paths = export_onnx(model, processor, directory)
        sessions = {tower: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                    for tower, path in paths.items()}
    features = {"text": model.get_text_features, "image": model.get_image_features}
    print(f"HiMo-CLIP (main job size), batch {args.batch_size}, {args.threads} threads, CPU")
    for tower, session in sessions.items():
        feeds = {i.name: inputs[tower][i.name].numpy() for i in session.get_inputs()}
        pytorch = torch.no_grad()(partial(features[tower], **{name: inputs[tower][name] for name in feeds}))
        onnxruntime = partial(session.run, None, feeds)
        difference = (torch.from_numpy(onnxruntime()[0]) - pytorch().pooler_output).abs().max().item()
        times = compare({"pytorch": pytorch, "onnxruntime": onnxruntime}, repeats=args.repeats)
        print(f"{tower:5s}: PyTorch {1000 * times['pytorch']:.1f} ms, ONNX Runtime {1000 * times['onnxruntime']:.1f} "
              f"ms, ratio ORT/PyTorch {times['onnxruntime'] / times['pytorch']:.2f}, max |difference| {difference:.1e}")

if __name__ == "__main__":
    main()
