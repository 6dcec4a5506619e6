"""`hf-longclip`: the library's command line."""

import argparse
from pathlib import Path


def _export_code(args: argparse.Namespace) -> None:
    from .export import export_code

    for path in export_code(args.output):
        print(f"wrote {path}")


def _install_metrics(args: argparse.Namespace) -> None:
    from .metrics import install_metrics

    for path in install_metrics():
        print(f"installed {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hf-longclip", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    export = commands.add_parser("export-code", help="regenerate modeling/<arch>/, the remote-code bundles")
    export.add_argument("--output", type=Path, default=Path("modeling"), help="destination (default: ./modeling)")
    export.set_defaults(run=_export_code)

    install = commands.add_parser(
        "install-metrics", help="install the evaluate modules so evaluate.load('<name>') works offline"
    )
    install.set_defaults(run=_install_metrics)

    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
