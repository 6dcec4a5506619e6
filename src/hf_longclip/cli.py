"""`hf-longclip`: the library's command line."""

import argparse
import sys
from pathlib import Path


def _export_code(args: argparse.Namespace) -> None:
    from .export import export_code, stale_files

    if args.check:
        stale = stale_files(args.output)
        for path in stale:
            print(f"stale: {path}")
        if stale:
            raise SystemExit(f"{len(stale)} generated file(s) out of date: run `hf-longclip export-code`")
        print(f"{args.output}/ is up to date")
        return
    for path in export_code(args.output):
        print(f"wrote {path}")


def _install_metrics(args: argparse.Namespace) -> None:
    from .metrics import install_metrics

    for path in install_metrics():
        print(f"installed {path}")


def _eval(args: argparse.Namespace) -> None:
    import json

    from .evaluation import run_evaluation

    try:
        report = run_evaluation(args.model, args.dataset, args.data_dir, args.output_dir, args.split,
                                args.max_samples, args.tasks, args.batch_size, args.device,
                                trust_remote_code=args.trust_remote_code)
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise
        raise ValueError(f"{error} On the command line: --trust-remote-code (only for code you trust).") from None
    print(json.dumps(report["metrics"], indent=2))
    print(f"report and plots in {args.output_dir}/ ({report['num_samples']} samples, "
          f"{report['num_skipped_images']} corrupt images skipped)")


def _shard(args: argparse.Namespace) -> None:
    from .data.shards import shard_source, write_shards

    dataset = shard_source(args.source, args.data_dir, args.split, args.max_samples)
    manifest = write_shards(dataset, args.output_dir, args.shard_size, args.workers,
                            description=f"{args.source} {args.split or ''}".strip())
    print(f"{len(dataset)} samples in {args.output_dir}/ (manifest: {manifest})")


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
    from .evaluation.tasks import TASKS

    tasks = [task.strip() for task in value.split(",") if task.strip()]
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown task{'s' * (len(unknown) > 1)} {', '.join(unknown)}; "
                                         f"choose among {', '.join(TASKS)}")
    return tasks or None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-longclip", description=__doc__, formatter_class=_HelpFormatter)
    debug = dict(action="store_true", help="on an error, show the full traceback instead of a one-line message "
                                           "(default: off)")
    parser.add_argument("--debug", **debug)
    commands = parser.add_subparsers(dest="command", required=True)

    def add_command(name: str, help_text: str, **kwargs) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text, description=help_text, formatter_class=_HelpFormatter,
                                      **kwargs)
        command.add_argument("--debug", **debug, default=argparse.SUPPRESS)  # also after the command name
        return command

    export = add_command("export-code", "regenerate modeling/<arch>/, the remote-code bundles")
    export.add_argument("--output", type=Path, default=Path("modeling"), help="destination directory")
    export.add_argument("--check", action="store_true",
                        help="write nothing; exit non-zero if any generated file is stale (default: off)")
    export.set_defaults(run=_export_code)

    install = add_command("install-metrics", "install the evaluate modules so evaluate.load('<name>') works offline")
    install.set_defaults(run=_install_metrics)

    from .data.benchmarks import describe_benchmarks
    from .data.eval_datasets import dataset_names
    from .evaluation.tasks import TASKS, describe_tasks

    evaluate = add_command("eval", "evaluate a model on a benchmark: JSON report and plots",
                           epilog="tasks (each runs where the rows carry its columns):\n"
                                  + "\n".join(f"  {line}" for line in describe_tasks())
                                  + "\n\nbenchmarks read from --data-dir (besides synthetic):\n"
                                  + "\n".join(f"  {line}" for line in describe_benchmarks()))
    evaluate.add_argument("--model", required=True,
                          help="checkpoint directory or Hub id, ours or a CLIPModel (required)")
    evaluate.add_argument("--trust-remote-code", action="store_true",
                          help="let a checkpoint that needs code of its own run it in this process; without it only "
                               "transformers' and hf-longclip's own model types load (default: off)")
    evaluate.add_argument("--dataset", required=True, choices=dataset_names(),
                          help="benchmark to evaluate on (required)")
    evaluate.add_argument("--data-dir", help="the benchmark's files, required except for synthetic (for synthetic: "
                                             "its cache directory; default: the datasets cache)")
    evaluate.add_argument("--split", help="split to evaluate (default: the benchmark's evaluation split)")
    evaluate.add_argument("--max-samples", type=int, help="evaluate the first N samples only (default: all)")
    evaluate.add_argument("--tasks", type=_task_list,
                          help=f"comma list among {', '.join(TASKS)} (default: all the data supports)")
    evaluate.add_argument("--batch-size", type=int, default=64, help="images or texts encoded per forward pass")
    evaluate.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    evaluate.add_argument("--output-dir", type=Path, default=Path("eval"), help="where report.json and the plots go")
    evaluate.set_defaults(run=_eval)

    shard = add_command("shard", "write training data as WebDataset tar shards with a manifest, for --train_shards")
    shard.add_argument("source", help="'synthetic', a benchmark name, a CSV / JSON Lines file (image path, caption) "
                                      "or an image folder with metadata.csv / metadata.jsonl")
    shard.add_argument("output_dir", type=Path, help="where the shards and manifest.json go")
    shard.add_argument("--data-dir", help="a benchmark's files (for synthetic: its cache directory)")
    shard.add_argument("--split", help="split of a benchmark or of the synthetic scenes (default: train)")
    shard.add_argument("--max-samples", type=int, help="the first N samples only (default: all)")
    shard.add_argument("--shard-size", type=int, default=1000, help="samples per shard")
    shard.add_argument("--workers", type=int, default=1, help="processes writing shards in parallel")
    shard.set_defaults(run=_shard)
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
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
