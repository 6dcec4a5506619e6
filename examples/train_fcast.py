"""Train FLAIR, F-CAST and the rows between them on the synthetic scenes and print a miniature of F-CAST's Table 2
(from FLAIR to F-CAST) and Table 5 (no part-level alignment), with grounding measured on the scenes' boxes and drawn
like Fig. 7.

    accelerate launch examples/train_fcast.py                                  # CPU, minutes
    torchrun --nproc_per_node 2 examples/train_fcast.py --per_device_train_batch_size 32   # 2 processes, same batch

As the paper's models start from pretrained towers, every variant starts from a short-caption base: for the ViT and
for CAST, a flat-text model pretrained with the whole level's sigmoid loss on the first `--base_sentences` sentences
of each training caption for `--base_steps` (once, cached under `--base_cache_dir` and shared by every seed and later
run; `--base_steps 0`: every variant from scratch). A variant takes its base's towers and projections (the
hierarchical encoder's stage 1 from the flat encoder's first layers); its pooling, stage 2 and part level start new.
Variants, trained identically (same seed, data order, sub-captions, optimiser and steps), each an `FCASTModel`:
  flair            FLAIR: ViT + CLIP's flat text encoder (captions truncated to 77 tokens) + FLAIR's flat loss
  flair-cast       + ViT -> CAST (FLAIR's loss grounds in CAST's top stage)
  flair-cast-hier  + CLIP text encoder -> hierarchical (t^long joins the sub-captions as a positive of L_mps)
  fcast            + flat loss -> two-level loss: F-CAST, L = L_part + L_whole (Eq. 7-8)
  fcast-no-part    F-CAST without the part-level loss (Table 5's "w/o Part alignment"; LoTLIP-style whole level only)
and, not run by default, two readings of why the last row beats F-CAST in this miniature (docs/models/fcast.md):
  fcast-part-0.1                   F-CAST with L = 0.1 L_part + L_whole
  fcast-nonpaper-stage1-detached   F-CAST with L_part's gradient kept out of the text encoder's stage 1 (NOT the
                                   paper's: `FCASTTask(nonpaper_detach_stage1_from_part_loss=True)`)
`--part_loss_weight` and `--nonpaper_detach_stage1_from_part_loss` set these for every variant with a part level.
Batches hold B images with K sub-captions each (`--num_sub_captions`; the first N = 4 are the random chunks of the
long caption, App. C); the flat-text rows see the same K sub-captions and read a long caption as one 77-token text.
Evaluation on the test scenes: R@1 both ways with the long captions (balanced chunking), and within the
hard-negative pairs whose captions differ only after token 77 (chance 50). Grounding: every object sentence of a test
scene names one object whose box is known; its AttnPool attention (Eq. 6) is carried to the pixels (per superpixel
or patch, spread over its area): the pointing game (is the attention peak inside the box? The peak is a whole
superpixel or patch, so the share of its pixels inside the box counts) and the attention mass inside the box,
against the box's share of the image (what a uniform map scores), and how much the maps of one image differ between
its object sentences (total variation; a pooling that ignores the text scores 0).

Writes `<output_dir>/<variant>/` checkpoints (AutoModel/AutoProcessor with trust_remote_code=True), `results.json`,
`loss_curves.png`, `summary.json` (+ `.png`: --seeds) and `grounding-fcast.png` / `grounding-flair.png` (three
sub-captions per image, head-averaged attention, F-CAST's and FLAIR's models, Fig. 4 right / Fig. 7). Seeds
(`--seeds 0,1,2`), resume, LoRA and Hub push of the F-CAST variants (with `hf_longclip/recipes/fcast/model_card.md`) as
in train_himo.py. The rows as data and how each is built: `hf_longclip.recipes.fcast.method` (`VARIANTS`,
`build_variant`, `pretrained_bases`).
"""

from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from hf_longclip import CASTImageProcessor, FCASTProcessor
from hf_longclip.miniature import BaseArguments, load_synthetic_scenes, scene_corpus
from hf_longclip.recipes import (
    Run,
    late_difference_pairs,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
)
from hf_longclip.recipes.fcast import (
    PAPER_ROWS,
    evaluate_bases,
    fitting_variants,
    plot_grounding,
    pretrained_bases,
    sub_caption_processors,
    train_scene_tokenizer,
    with_superpixels,
)
from hf_longclip.recipes.registry import method

FCAST = method("fcast")  # its variants (`FCAST.variants`, FLAIR's too) and how each is built (`FCAST.build_variant`)
FIGURES = ("fcast", "flair")  # variants whose grounding is drawn; `--push_to_hub` publishes the F-CAST ones
RETRIEVAL_METRICS = ("r1_i2t", "r1_t2i", "hard_r1_i2t", "hard_r1_t2i")
METRICS = (*RETRIEVAL_METRICS, "pointing_game", "box_mass", "map_difference")  # grounding: with superpixels
CHUNK_TOKENS = 77
FIGURE_ROWS = (0, 2, 4)  # test scenes of three different hard-negative groups (rows 2g and 2g + 1 share one)
# Each variant fine-tunes its base (300 steps, cached) for 200 steps: a first run within 15 minutes on 2 CPU cores.
# The text-grounded pooling is new on top of the pretrained towers and learns at 10x their rate: at 1x its attention
# stays almost uniform over the segments (maps independent of the sub-caption), docs/models/fcast.md.
LOOP_DEFAULTS = dict(output_dir="outputs/fcast", max_steps=200, per_device_train_batch_size=64,
                     learning_rate=1e-3, lr_multipliers="grounding_pool=10", weight_decay=0.05, warmup_steps=25,
                     logging_steps=25, dataloader_num_workers=1, base_steps=300, base_learning_rate=1e-3)


@dataclass
class ScriptArguments(BaseArguments):
    variants: str = field(default=",".join(PAPER_ROWS), metadata={"help": f"comma list of {list(FCAST.variants)}"})
    part_loss_weight: float | None = field(default=None, metadata={
        "help": "L_part's weight in every variant with a part level (default: each variant's own, fcast's 1)"})
    nonpaper_detach_stage1_from_part_loss: bool = field(default=False, metadata={
        "help": "NOT the paper's (a diagnostic): keep L_part's gradient out of the text encoder's stage 1 in every "
                "variant with a part level (it still trains the projection, the pooling and CAST)"})
    image_size: int = field(default=64, metadata={"help": "image side in pixels (scenes rendered at it)"})
    num_segments: int = field(default=49, metadata={"help": "CAST's superpixels per image"})
    vit_patch_size: int = field(default=8, metadata={"help": "the ViT's patch side (8 px at 64 px: 64 patches)"})
    num_clusters: str = field(default="16,8", metadata={"help": "segments after each graph pooling; F-CAST grounds "
                                                               "sub-captions in the second stage's (the first entry)"})
    hidden_size: int = field(default=64, metadata={"help": "width of both towers and of the joint space"})
    stage1_layers: int = field(default=2, metadata={"help": "L1 (the paper's 8)"})
    stage2_layers: int = field(default=1, metadata={"help": "L2 (the paper's 4)"})
    num_sub_captions: int = field(default=4, metadata={
        "help": "K sub-captions per image (the paper's 8; at least N = 4)"})
    num_train: int = field(default=3000, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=300, metadata={"help": "synthetic test scenes"})
    grounding_images: int = field(default=100, metadata={"help": "test scenes whose object sentences are grounded"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes"})
    logit_bias_init: float = field(default=-10.0,
                                   metadata={"help": "initial sigmoid bias of every level (Sec. 4.1: -10)"})
    init_from_checkpoint: str | None = field(default=None, metadata={
        "help": "an FCASTModel checkpoint with its processor (directory or Hub id: `hf-longclip convert flair` "
                "output, or a trained F-CAST) to fine-tune instead of models from scratch; --variants must be rows "
                "of its structure (a converted FLAIR: flair)"})

    def __post_init__(self):
        self.variant_list = [name.strip() for name in self.variants.split(",") if name.strip()]
        if not self.variant_list or set(self.variant_list) - set(FCAST.variants):
            raise ValueError(f"--variants takes a comma list of {list(FCAST.variants)}, got {self.variants!r}")
        self.cluster_list = [int(n) for n in self.num_clusters.split(",")]


def run(started: Run, scenes, processors: dict[bool, FCASTProcessor], pairs, bases: dict[str, str],
        base_results: dict[str, dict]) -> dict[str, dict]:
    """One seed's run (`started.loop_args` are the seed's): the bases' rows (`base_results`, `evaluate_bases`), then
    every variant built, started from its pretrained base (`bases`, unless empty), trained, saved, reloaded and
    evaluated; Fig. 7 of F-CAST's and FLAIR's models; results. `processors[hierarchical]`: N = 4 chunks, or the flat
    encoder's one 77-token text per caption."""
    args, loop_args, accelerator = started.script_args, started.loop_args, started.accelerator
    test, output_dir, built = scenes["test"], Path(loop_args.output_dir), []
    build = partial(FCAST.build_variant, start=args.init_from_checkpoint, processor=processors, settings=args,
                    seed=loop_args.seed, bases=bases)

    def build_task(variant: str):
        built.append(variant)
        return build(variant)

    def evaluate(model, processor):
        result = FCAST.evaluate(model, processor, test, pairs, loop_args.per_device_eval_batch_size,
                                args.grounding_images)
        if processor.needs_superpixels and built[-1] in FIGURES:  # the variant just trained
            plot_grounding(model, processor, [test[i] for i in FIGURE_ROWS], output_dir / f"grounding-{built[-1]}.png",
                           built[-1])
        return result

    results = dict(base_results)
    trained, histories = train_variants(accelerator, args.variant_list, build_task, evaluate, scenes, loop_args,
                                        started.lora_args, run_args=started.run_args)
    results.update(trained)
    publish(accelerator, results, histories, output_dir=output_dir, metrics=METRICS, card=FCAST.card,
            hub_args=started.hub_args, run_args=started.run_args,  # the F-CAST variants, not the baselines
            push_variants=[name for name in args.variant_list if FCAST.variants[name]["objective"] == "fcast"])
    if accelerator.is_main_process:
        print(f"\nF-CAST miniature ({len(test)} test scenes; {len(pairs)} hard pairs differ only after token "
              f"{CHUNK_TOKENS}, chance 50; grounding over object sentences, uniform-map box mass "
              f"{next(iter(results.values())).get('uniform_box_mass', float('nan')):.1f}%; map difference: total "
              f"variation between the maps of two sentences of one image, "
              f"{next(iter(results.values())).get('box_map_difference', float('nan')):.1f}% for maps uniform over each "
              f"named box)")
    return results


def prepare(args: ScriptArguments, accelerator, loop_args):
    """(scenes, {hierarchical: processor}, hard pairs, {vision backbone: base checkpoint}) of a run: the synthetic
    scenes (the training ones with superpixels), the processors (a tokenizer trained on the scenes, or the given
    checkpoint's), the pairs differing after token 77 and the short-caption bases (`pretrained_bases`)."""
    with accelerator.main_process_first():
        scenes = load_synthetic_scenes(seed=args.dataset_seed, num_train=args.num_train, num_test=args.num_test,
                                       num_validation=2, image_size=args.image_size)
    warn_synthetic_fine_tuning(args.init_from_checkpoint, loop_args)
    if args.init_from_checkpoint:  # its tokenizer and image processor; its structure decides the rows it can start
        given = FCASTProcessor.from_pretrained(args.init_from_checkpoint)
        fitting = fitting_variants(args.init_from_checkpoint)
        if set(args.variant_list) - set(fitting):
            raise SystemExit(f"--init_from_checkpoint {args.init_from_checkpoint}: its structure fits --variants "
                             f"{','.join(fitting)}, not {args.variants}")
        tokenizer, image_processor, needs_superpixels, chunk_tokens = (given.tokenizer, given.image_processor,
                                                                       given.needs_superpixels, given.max_length)
    else:
        tokenizer = train_scene_tokenizer(scene_corpus(scenes), model_max_length=CHUNK_TOKENS)
        image_processor = CASTImageProcessor(size=args.image_size, num_segments=args.num_segments)
        needs_superpixels, chunk_tokens = True, CHUNK_TOKENS
    processors = sub_caption_processors(tokenizer, image_processor, chunk_tokens, needs_superpixels)
    if needs_superpixels:  # computed once (and cached with the scenes), not in every epoch of every variant
        with accelerator.main_process_first():
            scenes["train"] = with_superpixels(scenes["train"], image_processor)
    pairs = late_difference_pairs(scenes["test"], tokenizer, chunk_tokens)
    # a given checkpoint is every variant's start; else each starts from its cached short-caption base
    bases = {} if args.init_from_checkpoint else pretrained_bases(args, accelerator, scenes, processors[False],
                                                                  loop_args)
    return scenes, processors, pairs, bases


def main() -> None:
    started = start_run("train_fcast", ScriptArguments, LOOP_DEFAULTS)
    args, accelerator, loop_args = started.script_args, started.accelerator, started.loop_args
    scenes, processors, pairs, bases = prepare(args, accelerator, loop_args)
    needs_superpixels = processors[True].needs_superpixels
    base_results = evaluate_bases(accelerator, bases, processors[False], scenes["test"], pairs,
                                  loop_args.per_device_eval_batch_size, args.grounding_images)  # fixed across seeds
    run_over_seeds(accelerator, loop_args, started.hub_args,
                   lambda seed_args: run(replace(started, loop_args=seed_args), scenes, processors, pairs, bases,
                                         base_results),
                   METRICS if needs_superpixels else RETRIEVAL_METRICS, title="train_fcast")
    accelerator.end_training()


if __name__ == "__main__":
    main()
