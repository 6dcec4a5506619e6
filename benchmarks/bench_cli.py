"""`hf-longclip`'s start-up (issue "What a new user sees", point 1): seconds until `--help` has printed, each in a
fresh interpreter, measured interleaved in one process (`common.compare`) with ratios against the package's import:

- `hf-longclip --help` and `hf-longclip shard --help` as the console script runs them (`python -m hf_longclip_cli`);
- before the fix: the same help reached through the package (`python -m hf_longclip.cli --help`), which imports
  `hf_longclip` (torch, transformers, OpenCV...) first; and `import hf_longclip` alone;
- `python -c pass`: the interpreter's own start-up, the floor.

`eval --help` is timed too: its epilog lists the tasks and benchmarks, read from their registries, which import the
package.

    python benchmarks/bench_cli.py            # ~1 min on 2 cores
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common import compare

SRC = str(Path(__file__).resolve().parents[1] / "src")
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "hf-longclip --help": ["-m", "hf_longclip_cli", "--help"],
    "hf-longclip shard --help": ["-m", "hf_longclip_cli", "shard", "--help"],
    "hf-longclip eval --help": ["-m", "hf_longclip_cli", "eval", "--help"],
    "before: python -m hf_longclip.cli --help": ["-m", "hf_longclip.cli", "--help"],
    "import hf_longclip": ["-c", "import hf_longclip"],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each command (median reported)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))

    def launcher(argv):
        return lambda: subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)

    seconds = compare({name: launcher(argv) for name, argv in COMMANDS.items()}, repeats=args.repeats, warmup=1)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs; median of {args.repeats}")
    print(f"{'command':<44}{'seconds':>9}{'vs import hf_longclip':>24}")
    for name, value in seconds.items():
        print(f"{name:<44}{value:>9.2f}{value / seconds['import hf_longclip']:>23.2f}x")


if __name__ == "__main__":
    main()
