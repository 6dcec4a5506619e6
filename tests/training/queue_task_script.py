"""A run of the shared loop whose task keeps state across steps: a memory queue of past text embeddings that join
the contrastive denominator (MoCo-style). Used by test_task_state.py under a real `accelerate launch`.

    accelerate launch tests/training/queue_task_script.py OUTPUT_DIR [--resume]
"""

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import CLIPImageProcessorPil

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.miniature import scene_corpus
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import make_accelerator, save_model, train

QUEUE_SIZE = 24


class MemoryQueueTask(HiMoCLIPTask):
    """HiMo-CLIP's task's objective (MoLo) plus an image-to-text InfoNCE whose negatives also include the text
    embeddings of the last `QUEUE_SIZE` samples, enqueued after each optimizer step."""

    def __init__(self, model, collate_fn):
        super().__init__(model, collate_fn)
        self.queue = torch.zeros(0, model.config.projection_dim)
        self.pending = []

    def compute_loss(self, model, batch):
        out = model(**batch)
        terms = self.objective(out.image_embeds, out.text_embeds, out.logit_scale)
        texts = torch.cat([out.text_embeds, self.queue])
        logits = self.model.logit_scale.exp() * out.image_embeds @ texts.T
        labels = torch.arange(len(out.image_embeds))
        self.pending.append(out.text_embeds.detach())
        return {**terms, "queue_loss": F.cross_entropy(logits, labels)}

    def after_optimizer_step(self, model, accelerator):
        self.queue = torch.cat([*reversed(self.pending), self.queue])[:QUEUE_SIZE]
        self.pending = []
        return {**super().after_optimizer_step(model, accelerator), "queue_length": len(self.queue)}

    def state_dict(self):
        return {"queue": self.queue}

    def load_state_dict(self, state):
        self.queue = state["queue"]


def main() -> None:
    output_dir, resume = Path(sys.argv[1]), "--resume" in sys.argv
    args = LoopArguments(output_dir=str(output_dir), max_steps=12, per_device_train_batch_size=8, warmup_steps=1,
                         logging_steps=1, checkpointing_steps=4, save_total_limit=0,
                         resume_from_checkpoint="latest" if resume else None)
    accelerator = make_accelerator(args)
    dataset = load_synthetic_scenes(seed=0, num_train=64, num_test=8, image_size=32)
    tokenizer = train_scene_tokenizer(scene_corpus(dataset), model_max_length=248)
    torch.manual_seed(0)
    width = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    model = HiMoCLIPModel(HiMoCLIPConfig(
        text_config=dict(width, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id),
        vision_config=dict(width, image_size=32, patch_size=8), projection_dim=16))
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)
    task = MemoryQueueTask(model, ImageTextCollator(processor))
    model, history = train(task, dataset["train"], args, accelerator, run_name="queue")
    save_model(accelerator, model, output_dir / "model")
    torch.save(task.state_dict(), output_dir / "task_state.pt")
    (output_dir / "history.json").write_text(json.dumps(history))


if __name__ == "__main__":
    main()
