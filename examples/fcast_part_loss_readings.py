"""Why F-CAST trails its "w/o part" ablation in train_fcast.py's miniature: readings of how its two terms share the
hierarchical text encoder's stage 1 (docs/models/fcast.md).

    python examples/fcast_part_loss_readings.py --base_cache_dir outputs/bases --output_dir outputs/fcast-readings \
        --checkpoints outputs/fcast/seed-0/fcast,outputs/fcast/seed-0/fcast-no-part

For every variant of `--variants` with a part level, started from its cached base exactly as train_fcast.py starts
it under `--seed` (the same arguments give the same base; none is built here if it is cached): on the first
`--per_device_train_batch_size` training scenes, each term, L_part's share from positive pairs, each term's gradient
norm on stage 1 and the cosine between the two gradients (`term_readings`, no update). For every checkpoint of
`--checkpoints` (train_fcast.py's `<output_dir>/<variant>/`) and every start: the mean cosine between the
sub-caption embeddings of different test captions (`sub_caption_similarity`: the collapse of chunk embeddings).
Writes `<output_dir>/part_loss_readings.json` with its provenance.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from train_fcast import LOOP_DEFAULTS, ScriptArguments, prepare, variant_task

from hf_longclip import FCASTModel
from hf_longclip.recipes import provenance, start_run
from hf_longclip.recipes.fcast import sub_caption_similarity, term_readings


@dataclass
class ReadingArguments(ScriptArguments):
    checkpoints: str = field(default="", metadata={"help": "comma list of trained FCASTModel checkpoints"})


def main() -> None:
    args, _, loop_args, _, _, accelerator, _ = start_run(
        "fcast_part_loss_readings", ReadingArguments,
        {**LOOP_DEFAULTS, "output_dir": "outputs/fcast-readings", "variants": "fcast,fcast-nonpaper-stage1-detached"},
        backbone=False)
    scenes, processors, _, bases = prepare(args, accelerator, loop_args)
    captions = scenes["test"]["caption"]
    rows = scenes["train"].select(range(loop_args.per_device_train_batch_size))
    readings = {"start": {}, "trained": {}}
    for name in args.variant_list:
        if not args.variant(name).has_part_level:
            continue
        task, processor = variant_task(name, args, processors, bases, loop_args.seed)
        start = term_readings(task, task.collate_fn(list(rows)))
        start["sub_caption_similarity"] = sub_caption_similarity(task.model, processor, captions)
        readings["start"][name] = start
        print(name, "at the start:", json.dumps(start))
    for path in filter(None, args.checkpoints.split(",")):
        similarity = sub_caption_similarity(FCASTModel.from_pretrained(path), processors[True], captions)
        readings["trained"][path] = {"sub_caption_similarity": similarity}
        print(path, "sub-caption similarity:", similarity)
    output = Path(loop_args.output_dir) / "part_loss_readings.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({**readings, "provenance": provenance(seed=loop_args.seed,
                                                                       batch=len(rows))}, indent=2))
    print("wrote", output)


if __name__ == "__main__":
    main()
