"""The `hf-longclip` console script (`python -m hf_longclip_cli` runs it too).

It runs `hf_longclip/cli.py` without importing the `hf_longclip` package first: the package's import registers our
models with transformers' Auto classes (what `import hf_longclip` promises its users), which imports torch and takes
seconds, while parsing the command line and printing `--help` need none of it. A command's handler imports the
package when it runs. `find_spec` locates the package without executing it.
"""

import importlib.util
import sys
from pathlib import Path


def _load_cli():
    package_dir = Path(importlib.util.find_spec("hf_longclip").origin).parent
    spec = importlib.util.spec_from_file_location("hf_longclip_cli.cli", package_dir / "cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    _load_cli().main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
