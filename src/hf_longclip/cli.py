"""`hf-longclip`: the library's command line."""

# How to add a command (keeps `--help` light: the `hf-longclip` script runs this file without importing the
# `hf_longclip` package, see `hf_longclip_cli`; the package's import registers our models with transformers, which
# imports torch, seconds): import nothing of `hf_longclip`, torch or transformers at module level or while building
# the parser. Write a handler `_<command>(args)` that imports what it runs by absolute name (`from hf_longclip.export
# import ...`), register it with `add_command(...).set_defaults(run=_<command>)`, and compute any text the parser
# needs from the package only when asked: `epilog_lines=` (a function, called when the help is shown) or a `type=`
# function (called when the option is parsed). tests/cli/test_cli_startup.py checks each command's --help imports no
# torch.

import argparse
import sys
from pathlib import Path


def _export_code(args: argparse.Namespace) -> None:
    from hf_longclip.export import export_code, stale_files

    if args.check:
        stale = stale_files(args.output, args.cards_output)
        for path in stale:
            print(f"stale: {path}")
        if stale:
            raise SystemExit(f"{len(stale)} generated file(s) out of date: run `hf-longclip export-code`")
        print(f"{args.output}/ and {args.cards_output}/ are up to date")
        return
    for path in export_code(args.output, args.cards_output):
        print(f"wrote {path}")


def _install_metrics(args: argparse.Namespace) -> None:
    from hf_longclip.metrics import install_metrics

    for path in install_metrics():
        print(f"installed {path}")
    # evaluate finds a name that is not on the Hub in its cache only as a fallback, and always says so
    print("evaluate.load('<name>') now works offline, with evaluate's notice 'Using the latest cached version of the "
          "module' each time; hf_longclip.metrics.load('<name>') loads the packaged script without it")


def _eval(args: argparse.Namespace) -> None:
    import json

    from hf_longclip.evaluation import run_evaluation

    _image_policy(args)
    try:
        report = run_evaluation(args.model, args.dataset, args.data_dir, args.output_dir, args.split,
                                args.max_samples, args.tasks, args.batch_size, args.device,
                                trust_remote_code=args.trust_remote_code, scoring=args.scoring, topk=args.topk,
                                protocol=args.protocol, tie_rule=args.tie_rule)
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise
        raise ValueError(f"{error} On the command line: --trust-remote-code (only for code you trust).") from None
    print(json.dumps(report["metrics"], indent=2))
    rules = ", ".join(f"{task} {rule}" for task, rule in report["tie_rules"].items())
    print(f"report and plots in {args.output_dir}/ ({report['num_samples']} samples, "
          f"{report['num_skipped_images']} corrupt images skipped, ties credited {report['tie_rule']}"
          f"{f': {rules}' if report['tie_rule'] == 'official' and rules else ''})")
    from hf_longclip.data.caption_files import describe_truncation

    reasons = ", ".join(f"{reason} {count}" for reason, count in report["skipped_images"]["by_reason"].items())
    print(f"{f'skipped images by reason: {reasons}; ' if reasons else ''}captions: "
          f"{describe_truncation(report['caption_truncation'])}")
    if args.push_to_hub:
        from huggingface_hub import constants

        from hf_longclip.training.hub import push_eval_results, report_eval_results

        entries = report_eval_results(report, f"{constants.ENDPOINT}/{args.push_to_hub}",
                                      dataset_id=args.eval_dataset_id)
        print(f"pushed {len(entries)} evaluation results to {push_eval_results(args.push_to_hub, entries)}")


def _image_policy(args: argparse.Namespace) -> None:
    """`--bad-samples` and `--max-image-pixels`, set for this process and those it starts (`data.image_files`)."""
    from hf_longclip.data.image_files import set_bad_sample_policy, set_max_image_pixels

    if getattr(args, "bad_samples", None) is not None:
        set_bad_sample_policy(args.bad_samples)
    if getattr(args, "max_image_pixels", None) is not None:
        set_max_image_pixels(args.max_image_pixels)


def _shard(args: argparse.Namespace) -> None:
    import json

    from hf_longclip.data.image_files import SkippedSamples
    from hf_longclip.data.shards import shard_source, write_shards

    _image_policy(args)
    dataset = shard_source(args.source, args.data_dir, args.split, args.max_samples)
    manifest = write_shards(dataset, args.output_dir, args.shard_size, args.workers,
                            description=f"{args.source} {args.split or ''}".strip())
    written = json.loads(manifest.read_text())
    skipped = SkippedSamples("skip")
    skipped.merge(written["skipped"])
    cleaned = written["captions_cleaned"]
    print(f"{written['num_samples']} samples in {args.output_dir}/ ({skipped.describe()}"
          f"{f', {cleaned} caption(s) cleaned of control characters' if cleaned else ''}; manifest: {manifest})")


def _convert(args: argparse.Namespace) -> None:
    from hf_longclip.models.conversion import conversion_card, convert_checkpoint, save_converted

    model, processor = convert_checkpoint(args.format, args.checkpoint, args.tokenizer, args.bpe_file)
    if args.as_clip:
        from hf_longclip.models.himo_clip.export_clip import save_as_clip

        output = save_as_clip(model, processor, args.output_dir)
    elif args.text_encoder_only:
        from hf_longclip.integrations.diffusion import save_text_encoder

        output = save_text_encoder(model, processor, args.output_dir)
    else:
        output = save_converted(model, processor, args.output_dir)
    what = "text encoder" if args.text_encoder_only else "CLIPModel" if args.as_clip else type(model).__name__
    print(f"wrote the {what} converted from {args.checkpoint} to {output}/"
          + ("" if processor is not None else " (no processor: pass --tokenizer or --bpe-file to add one)"))
    _write_single_file(model, args.single_file)
    if args.push_to_hub:
        from hf_longclip.training.hub import push_to_hub

        card = conversion_card(args.format, args.push_to_hub, args.text_encoder_only, model=model,
                               checkpoint=args.checkpoint, output_dir=output)
        url = push_to_hub(output, args.push_to_hub, card=card,
                          commit_message=f"Convert the released {args.format} weights with hf-longclip")
        print(f"pushed: {url}")


def _export_clip(args: argparse.Namespace) -> None:
    from hf_longclip import HiMoCLIPModel, HiMoCLIPProcessor
    from hf_longclip.models.himo_clip.export_clip import save_as_clip

    model = HiMoCLIPModel.from_pretrained(args.model)  # the library's class: no code of the checkpoint runs
    processor = HiMoCLIPProcessor.from_pretrained(args.model)
    output = save_as_clip(model, processor, args.output_dir)
    print(f"wrote a CLIPModel and CLIPProcessor ({model.config.text_config.max_position_embeddings} text positions) "
          f"to {output}/: they load with transformers' CLIPModel / CLIPProcessor, no remote code")
    _write_single_file(model, args.single_file)


def _write_single_file(model, path: Path | None) -> None:
    """`--single-file`: the text encoder as one .safetensors file, for ComfyUI, Forge, kohya, OneTrainer."""
    if path is None:
        return
    from hf_longclip.integrations.diffusion import save_single_file_text_encoder

    save_single_file_text_encoder(model, path)
    positions = model.config.text_config.max_position_embeddings
    print(f"wrote the text encoder ({positions} positions, width {model.config.text_config.hidden_size}) as one "
          f"file, {path}: the layout ComfyUI's CLIP loaders, Forge and kohya read")


def _dataset_name(value: str) -> str:
    """`--dataset`: a name `hf_longclip.data.eval_datasets.load_eval_dataset` takes, checked before anything loads."""
    from hf_longclip.data.eval_datasets import dataset_names

    if value not in dataset_names():
        raise argparse.ArgumentTypeError(f"unknown benchmark {value!r}; choose among {', '.join(dataset_names())}")
    return value


def _eval_epilog() -> list[str]:
    from hf_longclip.data.benchmarks import describe_benchmarks, describe_protocols
    from hf_longclip.evaluation.tasks import describe_tasks

    return ["tasks (each runs where the rows carry its columns):", *(f"  {line}" for line in describe_tasks()),
            "", "benchmarks read from --data-dir (besides synthetic):",
            *(f"  {line}" for line in describe_benchmarks()),
            "", "protocols (--protocol) and the tree each expects under --data-dir (docs/evaluation.md):",
            *(f"  {line}" for line in describe_protocols())]


def _format_name(value: str) -> str:
    """`convert`'s FORMAT: a name of `hf_longclip.models.conversion.FORMATS`, checked when the command runs."""
    from hf_longclip.models.conversion import FORMATS

    if value not in FORMATS:
        raise argparse.ArgumentTypeError(f"unknown format {value!r}; choose among {', '.join(FORMATS)}")
    return value


def _convert_epilog() -> list[str]:
    from hf_longclip.models.conversion import FORMATS

    return [f"formats: {', '.join(FORMATS)}", "docs/converting.md gives each format's source and how to reproduce "
            "its parity check"]


class _CommandParser(argparse.ArgumentParser):
    """A command's parser; `epilog_lines` (a function) gives an epilog computed only when the help is shown."""

    def __init__(self, *args, epilog_lines=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.epilog_lines = epilog_lines

    def format_help(self) -> str:
        if self.epilog_lines is not None:
            self.epilog = "\n".join(self.epilog_lines())
        return super().format_help()


def _export_onnx(args: argparse.Namespace) -> None:
    from hf_longclip.evaluation import load_model
    from hf_longclip.integrations.onnx import export_onnx

    model, processor = load_model(args.model, device="cpu", trust_remote_code=args.trust_remote_code)
    for tower, path in export_onnx(model, processor, args.output_dir).items():
        print(f"wrote {path} ({tower} tower, its weights in {path.name}.data)")
    print(f"wrote the processor ({type(processor).__name__}) to {args.output_dir}/")


def _demo(args: argparse.Namespace) -> None:
    from hf_longclip.demo.app import require_gradio

    try:
        require_gradio()
    except ImportError as error:  # one line with the install command, not a traceback
        raise SystemExit(f"hf-longclip: error: {error}") from None
    if args.write_space:
        from hf_longclip.demo.space import write_space

        for path in write_space(args.write_space, args.model or [], args.images, args.dataset, args.data_dir,
                                args.trust_remote_code):
            print(f"wrote {path}")
        return
    from hf_longclip.demo.app import main_job_checkpoints, run_demo

    if args.model is None and args.images is None and args.dataset is None:
        models, dataset, trust = main_job_checkpoints(), "synthetic", True  # the main job's own checkpoints
    elif args.model is None or (args.images is None) == (args.dataset is None):
        raise ValueError("pass --model PATH_OR_HUB_ID (repeatable) and one of --images DIR or --dataset NAME (or "
                         "nothing, to serve outputs/himo/'s checkpoints over the synthetic test scenes)")
    else:
        models, dataset, trust = args.model, args.dataset, args.trust_remote_code
    if args.dataset not in (None, "synthetic") and args.data_dir is None:
        raise ValueError(f"--data-dir is required for the {args.dataset!r} benchmark")
    run_demo(models, args.images, dataset, args.data_dir, trust, args.port, args.share, args.cache_dir, args.device,
             args.batch_size)


def _plan_epilog() -> list[str]:
    """`plan`'s methods and sizes, read from the registry when the help is shown (`hf_longclip.recipes.registry`)."""
    from hf_longclip.recipes.registry import SIZES, method, method_names

    return ["methods (--method):", *(f"  {name}: {method(name).summary}" for name in method_names()),
            "", f"sizes (--size): {', '.join(SIZES)}"]


def _plan(args: argparse.Namespace) -> None:
    import json

    from hf_longclip.recipes.planner import PlanSettings, format_plan, plan_memory

    settings = PlanSettings(size=args.size, method=args.method, precision=args.precision,
                            gradient_checkpointing=args.gradient_checkpointing, zero_stage=args.zero_stage,
                            processes=args.processes, chunk=args.chunk, lora_r=args.lora_r, lock=args.lock,
                            hard_negatives=args.hard_negatives, bank_captions=args.bank_captions, target=args.target,
                            batch_sizes=tuple(args.batch_sizes or ()))
    plan = plan_memory(settings)
    print(format_plan(plan))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
        print(f"written: {args.json}")


def _batch_sizes(value: str) -> list[int]:
    """`--batch-sizes`: a comma list of two or more increasing positive integers."""
    sizes = [_positive_int(item.strip()) for item in value.split(",") if item.strip()]
    if len(sizes) < 2 or sorted(set(sizes)) != sizes:
        raise argparse.ArgumentTypeError(f"expected two or more increasing batch sizes, got {value!r}")
    return sizes


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's lines; appends "(default: ...)" to an option's help unless it already tells its default
    (or the option is required)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "default" in help_text or action.required:
            return help_text
        return super()._get_help_string(action)


def _task_list(value: str) -> list[str] | None:
    """`--tasks`: a comma list of `TASKS` names, checked before anything is loaded."""
    from hf_longclip.evaluation.tasks import TASKS

    tasks = [task.strip() for task in value.split(",") if task.strip()]
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown task{'s' * (len(unknown) > 1)} {', '.join(unknown)}; "
                                         f"choose among {', '.join(TASKS)}")
    return tasks or None


def _scoring_mode(value: str) -> str:
    """`--scoring`: a mode of `hf_longclip.evaluation.scoring.SCORING_MODES`."""
    from hf_longclip.evaluation.scoring import SCORING_MODES

    if value not in SCORING_MODES:
        raise argparse.ArgumentTypeError(f"unknown scoring {value!r}; choose among {', '.join(SCORING_MODES)}")
    return value


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def _add_image_policy(command: argparse.ArgumentParser) -> None:
    """The options of what a command does with a sample that cannot be read (docs/data.md)."""
    command.add_argument("--bad-samples", choices=("skip", "error"),
                         help="a sample whose image is missing, empty, truncated, not an image or too large (or whose "
                              "caption is empty): skip it and count it by reason in the manifest / report (default; "
                              "or HF_LONGCLIP_BAD_SAMPLES), or stop with an error naming its file and id")
    command.add_argument("--max-image-pixels", metavar="N",
                         help="images with more pixels are refused as possible decompression bombs, before they are "
                              "decoded (default: Pillow's limit, 89478485, or HF_LONGCLIP_MAX_IMAGE_PIXELS; 'none': "
                              "no limit)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-longclip", description=__doc__, formatter_class=_HelpFormatter)
    debug = dict(action="store_true", help="on an error, show the full traceback instead of a one-line message "
                                           "(default: off)")
    parser.add_argument("--debug", **debug)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    def add_command(name: str, help_text: str, **kwargs) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text, description=help_text, formatter_class=_HelpFormatter,
                                      **kwargs)
        command.add_argument("--debug", **debug, default=argparse.SUPPRESS)  # also after the command name
        return command

    export = add_command("export-code", "regenerate modeling/, every model's remote code (each file once), and "
                                        "model_cards/<arch>.md, the models' card templates")
    export.add_argument("--output", type=Path, default=Path("modeling"), help="destination directory of the code")
    export.add_argument("--cards-output", type=Path, default=Path("model_cards"),
                        help="destination directory of the model cards")
    export.add_argument("--check", action="store_true",
                        help="write nothing; exit non-zero if any generated file is stale (default: off)")
    export.set_defaults(run=_export_code)

    install = add_command("install-metrics", "install the evaluate modules so evaluate.load('<name>') works offline")
    install.set_defaults(run=_install_metrics)

    evaluate = add_command("eval", "evaluate a model on a benchmark: JSON report and plots",
                           epilog_lines=_eval_epilog)
    evaluate.add_argument("--model", required=True,
                          help="checkpoint directory or Hub id, ours or a CLIPModel (required)")
    evaluate.add_argument("--trust-remote-code", action="store_true",
                          help="let a checkpoint that needs code of its own run it in this process; without it only "
                               "transformers' and hf-longclip's own model types load (default: off)")
    evaluate.add_argument("--dataset", required=True, type=_dataset_name,
                          help="benchmark to evaluate on: synthetic or one listed below (required)")
    evaluate.add_argument("--data-dir", help="the benchmark's files, required except for synthetic (for synthetic: "
                                             "its cache directory; default: the datasets cache)")
    evaluate.add_argument("--protocol", help="how the benchmark's files are laid out and read, each the one of a "
                                             "paper's evaluation code, e.g. --dataset coco --protocol longclip "
                                             "(default: the benchmark's first protocol; all listed below)")
    evaluate.add_argument("--split", help="split to evaluate (default: the benchmark's evaluation split)")
    evaluate.add_argument("--max-samples", type=int, help="evaluate the first N samples only (default: all)")
    evaluate.add_argument("--tasks", type=_task_list,
                          help="comma list of the tasks listed below (default: all the data supports)")
    evaluate.add_argument("--batch-size", type=int, default=64, help="images or texts encoded per forward pass")
    evaluate.add_argument("--scoring", type=_scoring_mode, default="global",
                          help="how retrieval scores a pair: global (default): the global embeddings (every model); "
                               "conditioned: the image pooled once per text (FLAIR, F-CAST); conditioned-topk: the "
                               "global ranking, then each image's --topk texts re-scored conditioned")
    evaluate.add_argument("--topk", type=_positive_int, default=128,
                          help="texts re-scored per image with --scoring conditioned-topk (default 128)")
    evaluate.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    evaluate.add_argument("--tie-rule", choices=("official", "fair", "optimistic", "pessimistic", "first", "last"),
                          default="official",
                          help="how tied scores count: official (default: as the benchmark protocol's own evaluation "
                               "code, see docs/evaluation.md; fair where that code's tie order is undefined), fair "
                               "(their expected credit when ties are broken at random), optimistic (as hits), "
                               "pessimistic (as misses), first / last (by position: the lower / higher index first)")
    evaluate.add_argument("--output-dir", type=Path, default=Path("outputs/eval"),
                          help="where report.json and the plots go (outputs/ is git-ignored)")
    evaluate.add_argument("--push-to-hub", metavar="REPO_ID",
                          help="commit the metrics to this existing model repo as the Hub's .eval_results/ files, one "
                               "per benchmark and metric, the protocol (split, text length, tie rule) in each source "
                               "(default: none)")
    evaluate.add_argument("--eval-dataset-id",
                          help="the benchmark's Hub dataset named in those files (default: the benchmark's known "
                               "dataset, e.g. BeichenZhang/Urban1k, else its name)")
    _add_image_policy(evaluate)
    evaluate.set_defaults(run=_eval)

    convert = add_command("convert", "convert released weights (Long-CLIP, HiMo-CLIP, OpenAI CLIP, open_clip, ...) "
                                     "into a checkpoint that loads with AutoModel / AutoProcessor",
                          epilog_lines=_convert_epilog)
    convert.add_argument("format", type=_format_name, help="the checkpoint's release format (listed below)")
    convert.add_argument("checkpoint", type=Path, help="the released .pt / .pth / .bin / .safetensors file (read "
                                                        "as weights only: no code from it runs)")
    convert.add_argument("output_dir", type=Path, help="where the converted checkpoint goes")
    text = convert.add_mutually_exclusive_group()
    text.add_argument("--tokenizer", help="a transformers CLIP tokenizer (Hub id or folder) for the processor")
    text.add_argument("--bpe-file", type=Path, help="OpenAI's bpe_simple_vocab_16e6.txt.gz: builds the CLIP "
                                                     "tokenizer offline")
    written = convert.add_mutually_exclusive_group()
    written.add_argument("--text-encoder-only", action="store_true",
                         help="write the text tower alone as a plain transformers text model (for diffusers / "
                              "ComfyUI; default: off)")
    written.add_argument("--as-clip", action="store_true",
                         help="longclip / himo: write a plain transformers CLIPModel + CLIPProcessor (248 text "
                              "positions) that loads with no remote code (default: off)")
    convert.add_argument("--single-file", type=Path, metavar="FILE.safetensors",
                         help="also write the CLIP text encoder (with its projection) as one .safetensors file in the "
                              "layout ComfyUI, Forge and kohya load (longclip / himo; default: not written)")
    convert.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload it, with a model card, to this Hub "
                                                                   "repository (default: no upload)")
    convert.set_defaults(run=_convert)

    export_clip = add_command("export-clip", "write a HiMo-CLIP / Long-CLIP checkpoint as a plain transformers "
                                             "CLIPModel + CLIPProcessor that loads with no remote code")
    export_clip.add_argument("model", help="a HiMoCLIPModel checkpoint directory or Hub id (no code of it runs)")
    export_clip.add_argument("output_dir", type=Path, help="where the CLIPModel and CLIPProcessor go")
    export_clip.add_argument("--single-file", type=Path, metavar="FILE.safetensors",
                             help="also write the text encoder (with its projection) as one .safetensors file in the "
                                  "layout ComfyUI, Forge and kohya load (default: not written)")
    export_clip.set_defaults(run=_export_clip)

    shard = add_command("shard", "write training data as WebDataset tar shards with a manifest, for --train_shards")
    shard.add_argument("source", help="'synthetic', a benchmark name, a CSV / JSON Lines file (image path, caption) "
                                      "or an image folder with metadata.csv / metadata.jsonl")
    shard.add_argument("output_dir", type=Path, help="where the shards and manifest.json go")
    shard.add_argument("--data-dir", help="a benchmark's files (for synthetic: its cache directory)")
    shard.add_argument("--split", help="split of a benchmark or of the synthetic scenes (default: train)")
    shard.add_argument("--max-samples", type=int, help="the first N samples only (default: all)")
    shard.add_argument("--shard-size", type=int, default=1000, help="samples per shard")
    shard.add_argument("--workers", type=int, default=1, help="processes writing shards in parallel")
    _add_image_policy(shard)
    shard.set_defaults(run=_shard)

    onnx = add_command("export-onnx", "export a dual encoder's text and image towers to ONNX (docs/integrations.md)")
    onnx.add_argument("--model", required=True, help="checkpoint directory or Hub id, one of our dual encoders "
                                                     "(required)")
    onnx.add_argument("--output-dir", type=Path, default=Path("onnx"), help="where text.onnx and image.onnx go")
    onnx.add_argument("--trust-remote-code", action="store_true",
                      help="let a checkpoint that needs code of its own run it in this process (default: off)")
    onnx.set_defaults(run=_export_onnx)

    demo = add_command("demo", "serve a long-caption search and grounding app on this computer (docs/demo.md; "
                               "needs hf-longclip[demo]); without arguments: outputs/himo/'s checkpoints over the "
                               "synthetic test scenes")
    demo.add_argument("--model", action="append", help="checkpoint directory or Hub id; repeat it to compare models "
                                                        "side by side")
    source = demo.add_mutually_exclusive_group()
    source.add_argument("--images", help="folder of images to search (subfolders included)")
    source.add_argument("--dataset", type=_dataset_name, help="search a benchmark's images instead (as in eval)")
    demo.add_argument("--data-dir", help="the benchmark's files (for synthetic: its cache directory)")
    demo.add_argument("--trust-remote-code", action="store_true",
                      help="let a checkpoint that needs code of its own run it in this process (default: off)")
    demo.add_argument("--port", type=_positive_int, help="port on 127.0.0.1 (default: gradio's, 7860 or the next "
                                                         "free one)")
    demo.add_argument("--share", action="store_true", help="also open a public gradio.live link (default: off)")
    demo.add_argument("--cache-dir", type=Path, help="where image embeddings are cached (default: "
                                                    "~/.cache/hf_longclip/demo)")
    demo.add_argument("--batch-size", type=_positive_int, default=32, help="images encoded per forward pass")
    demo.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    demo.add_argument("--write-space", type=Path, metavar="DIR", help="write a Hugging Face Space (app.py, "
                      "requirements.txt, README.md) running this app with the --model Hub ids, and exit")
    demo.set_defaults(run=_demo)

    plan = add_command("plan", "memory per process of a method's training step at a released size, by part, and the "
                               "largest batch that fits 24, 40, 80 and 141 GB GPUs (traced on fake tensors; "
                               "docs/training.md)", epilog_lines=_plan_epilog)
    plan.add_argument("--size", default="ViT-B/16",
                      help="model size: ViT-B/16, ViT-L/14, ViT-L/14-336 (CLIP's), ViT-bigG-14 (OpenCLIP's, whose "
                           "text tower is SDXL's second text encoder; --lock image trains that tower alone), tiny "
                           "(the tests')")
    plan.add_argument("--method", default="himo", help="a method of the registry (listed below)")
    plan.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                      help="bf16: mixed precision (accelerate's autocast; DeepSpeed's bf16 under --zero-stage)")
    plan.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward "
                                                                            "(default: off)")
    plan.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), default=0,
                      help="DeepSpeed ZeRO stage (0: none; DDP with --processes > 1)")
    plan.add_argument("--processes", type=_positive_int, default=1, help="processes (GPUs) the batch is spread over")
    plan.add_argument("--chunk", type=int, default=0,
                      help="gradient caching's chunk (--per_device_train_batch_size under --contrastive_batch_size); "
                           "0: off (default)")
    plan.add_argument("--lora-r", type=int, default=0, help="LoRA rank on the attention projections (0: full "
                                                            "fine-tuning, the default)")
    plan.add_argument("--lock", choices=("none", "image", "text"), default="none",
                      help="a tower frozen (open_clip's --lock-image / --lock-text)")
    plan.add_argument("--hard-negatives", type=int, default=1024, help="onelip: PO-HNM's M, negatives queued per "
                                                                       "sample (0: none)")
    plan.add_argument("--bank-captions", type=int, default=1_200_000,
                      help="onelip: captions in the negative bank held on the GPU (ShareGPT4V's 1.2M by default)")
    plan.add_argument("--target", choices=("gpu", "cpu"), default="gpu",
                      help="gpu: AdamW's multi-tensor kernels and memory set aside per card; cpu: PyTorch's CPU "
                           "defaults, nothing set aside")
    plan.add_argument("--batch-sizes", type=_batch_sizes, help="batches traced (default: 8,16,24; with --chunk C: "
                                                               "2C,3C,4C)")
    plan.add_argument("--json", type=Path, help="also write the plan as JSON here (default: no file)")
    plan.set_defaults(run=_plan)
    return parser


# What a user's input causes (a missing file, a malformed value, a model that cannot be downloaded): reported in one
# line with exit status 2, like argparse's own errors. Anything else is a bug and keeps its traceback.
USER_ERRORS = (OSError, ValueError)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except USER_ERRORS as err:
        if args.debug:
            raise
        message = " ".join(str(getattr(err, "problem", err)).split()) or type(err).__name__
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        if getattr(err, "layout", None):  # a benchmark's missing file: the tree it expected, as is
            print(err.layout, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
