"""Why F-CAST trails its "w/o part" ablation in train_fcast.py's miniature: readings of how its two terms share the
hierarchical text encoder's stage 1 (docs/models/fcast.md).

    python examples/fcast_part_loss_readings.py --base_cache_dir outputs/bases --output_dir outputs/fcast-readings \
        --checkpoints outputs/fcast/seed-0/fcast,outputs/fcast/seed-0/fcast-no-part

For every variant of `--variants` with a part level, started from its cached base exactly as train_fcast.py starts
it under `--seed` (the same arguments give the same base; none is built here if it is cached): on each of the first
`--reading_batches` batches of `--per_device_train_batch_size` training scenes, each term, L_part's share from
positive pairs, each term's gradient norm on stage 1 and the cosine between the two gradients (`term_readings`, no
update), and their means over the batches. For every checkpoint of `--checkpoints` (train_fcast.py's
`<output_dir>/<variant>/`), the same readings of the paper's two terms (L_part + L_whole) on its weights; for every
start and checkpoint, the mean cosine between the sub-caption embeddings of different test captions
(`sub_caption_similarity`: the collapse of chunk embeddings).
Writes `<output_dir>/part_loss_readings.json` with its provenance.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from train_fcast import FCAST, LOOP_DEFAULTS, ScriptArguments, prepare

from hf_longclip import FCASTModel
from hf_longclip.recipes import provenance, start_run
from hf_longclip.recipes.fcast import (
    FCASTTask,
    has_part_level,
    sub_caption_collator,
    sub_caption_similarity,
    term_readings,
    variant_options,
)


@dataclass
class ReadingArguments(ScriptArguments):
    checkpoints: str = field(default="", metadata={"help": "comma list of trained FCASTModel checkpoints"})
    reading_batches: int = field(default=4, metadata={"help": "batches of training scenes read at the start"})


def mean_readings(batches: list[dict]) -> dict:
    """The mean over batches of every number of `term_readings` (nested dicts kept)."""
    return {key: mean_readings([batch[key] for batch in batches]) if isinstance(value, dict)
            else sum(batch[key] for batch in batches) / len(batches) for key, value in batches[0].items()}


def read(task: FCASTTask, processor, scenes, num_batches: int, size: int) -> dict:
    """`term_readings` of `task` on each of the first `num_batches` batches of training scenes, their mean (with
    `sub_caption_similarity` over the test captions), and the batches."""
    batches = [term_readings(task, task.collate_fn(list(scenes["train"].select(range(i * size, (i + 1) * size)))))
               for i in range(num_batches)]
    mean = {**mean_readings(batches),
            "sub_caption_similarity": sub_caption_similarity(task.model, processor, scenes["test"]["caption"])}
    return {"mean": mean, "batches": batches}


def main() -> None:
    started = start_run("fcast_part_loss_readings", ReadingArguments,
                        {**LOOP_DEFAULTS, "output_dir": "outputs/fcast-readings", "variants": "fcast"})
    args, loop_args, accelerator = started.script_args, started.loop_args, started.accelerator
    scenes, processors, _, bases = prepare(args, accelerator, loop_args)
    size = loop_args.per_device_train_batch_size
    readings = {"start": {}, "trained": {}}
    for name in args.variant_list:
        if not has_part_level(variant_options(name, args.part_loss_weight)):
            continue
        task, processor = FCAST.build_variant(name, args.init_from_checkpoint, processors, settings=args,
                                              seed=loop_args.seed, bases=bases)
        readings["start"][name] = read(task, processor, scenes, args.reading_batches, size)
        print(name, "at the start:", json.dumps(readings["start"][name]["mean"]))
    for path in filter(None, args.checkpoints.split(",")):
        task = FCASTTask(FCASTModel.from_pretrained(path).train(), sub_caption_collator(
            processors, True, args.num_sub_captions, loop_args.seed))  # the paper's two terms
        readings["trained"][path] = read(task, processors[True], scenes, args.reading_batches, size)
        print(path, json.dumps(readings["trained"][path]["mean"]))
    output = Path(loop_args.output_dir) / "part_loss_readings.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({**readings, "provenance": provenance(seed=loop_args.seed, batch=size)}, indent=2))
    print("wrote", output)


if __name__ == "__main__":
    main()
