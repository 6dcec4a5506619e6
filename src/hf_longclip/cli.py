"""`hf-longclip`: the library's command line."""

import argparse
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

    tasks = [task.strip() for task in args.tasks.split(",")] if args.tasks else None
    report = run_evaluation(args.model, args.dataset, args.data_dir, args.output_dir, args.split, args.max_samples,
                            tasks, args.batch_size, args.device)
    print(json.dumps(report["metrics"], indent=2))
    print(f"report and plots in {args.output_dir}/ ({report['num_samples']} samples, "
          f"{report['num_skipped_images']} corrupt images skipped)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hf-longclip", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    export = commands.add_parser("export-code", help="regenerate modeling/<arch>/, the remote-code bundles")
    export.add_argument("--output", type=Path, default=Path("modeling"), help="destination (default: ./modeling)")
    export.add_argument("--check", action="store_true",
                        help="write nothing; exit non-zero if any generated file is stale (default: off)")
    export.set_defaults(run=_export_code)

    install = commands.add_parser(
        "install-metrics", help="install the evaluate modules so evaluate.load('<name>') works offline"
    )
    install.set_defaults(run=_install_metrics)

    from .data.benchmarks import BENCHMARKS
    from .eval_tasks import TASKS, describe_tasks

    evaluate = commands.add_parser("eval", help="evaluate a model on a benchmark: JSON report and plots",
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog="tasks (each runs where the rows carry its columns):\n"
                                          + "\n".join(f"  {line}" for line in describe_tasks()))
    evaluate.add_argument("--model", required=True, help="checkpoint directory or Hub id (ours or a CLIPModel)")
    evaluate.add_argument("--dataset", required=True, choices=["synthetic", *sorted(BENCHMARKS)])
    evaluate.add_argument("--data-dir", help="the benchmark's files (for synthetic: its cache directory)")
    evaluate.add_argument("--split", help="default: the benchmark's evaluation split")
    evaluate.add_argument("--max-samples", type=int, help="evaluate the first N samples only")
    evaluate.add_argument("--tasks", help=f"comma list among {', '.join(TASKS)}; default: all the data supports")
    evaluate.add_argument("--batch-size", type=int, default=64)
    evaluate.add_argument("--device", help="default: cuda when available, else cpu")
    evaluate.add_argument("--output-dir", type=Path, default=Path("eval"))
    evaluate.set_defaults(run=_eval)

    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
