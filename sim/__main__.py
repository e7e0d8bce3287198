"""`make simulate`: run seeds for a time or a count, write sim/results.json; or replay one.

    python -m sim --seconds 60            # as many seeds as fit in 60 s, on every core
    python -m sim --seeds 5000            # that many seeds
    python -m sim --seed 1443             # replay one run and print its trace
    python -m sim --seed 1443 --disable 2,5   # the same with faults 2 and 5 switched off

Exit status: 0 when no invariant broke (but as a hole whose fix is not merged yet does:
`sim.holes`, `open`), 1 when one did (each violation printed with the seed that reproduces it
and the command that replays it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from sim.batch import Summary, run_batch
from sim.shrink import replay

RESULTS = Path(__file__).resolve().parent / "results.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="run seeds for this long")
    parser.add_argument("--seeds", type=int, default=None, help="run this many seeds")
    parser.add_argument("--seed", type=int, default=None, help="replay this seed, print its trace")
    parser.add_argument(
        "--first", type=int, default=None, help="the first seed (default: from the clock)"
    )
    parser.add_argument("--disable", default="", help="faults to switch off in a replay (1,2,...)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-shrink", action="store_true", help="replay without shrinking")
    args = parser.parse_args(argv)
    if args.seed is not None:
        disabled = frozenset(int(n) for n in args.disable.split(",") if n.strip())
        return replay(args.seed, disabled, shrink=not args.no_shrink)
    if args.seconds is None and args.seeds is None:
        args.seconds = 60.0
    first = args.first if args.first is not None else int(time.time()) % 1_000_000_000 * 1000
    summary = run_batch(first, seconds=args.seconds, count=args.seeds, workers=args.workers)
    write(summary, args.results)
    print(summary.text())
    return 1 if summary.unexplained else 0


def write(summary: Summary, path: Path) -> None:
    """sim/results.json: the counts the issue asks for, and each violation's seed."""
    path.write_text(json.dumps(summary.as_json(), indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
