"""The simulator's cost a run, repeatable, and proof that the runs measured stay the same runs.

    venv/bin/python -m tools.sim_cost --callgrind                 # instructions a kernel run
    venv/bin/python -m tools.sim_cost --first 0 --count 1500 --all-surfaces \\
        --digest /tmp/sim_digest_before.txt                       # what each run did
    diff /tmp/sim_digest_before.txt /tmp/sim_digest_after.txt     # nothing: the same runs

What it guarantees:

* **The runs are `make simulate`'s.** Seeds `--first` to `--first + --count - 1` run in this one
  process, each as `sim.batch.run_seeds` runs a seed: `sim.runs.run_one(seed)` (no trace
  detail), under `sim.seams.quiet()`, after the same `gc.collect()` + `gc.freeze()` of what the
  imports made (`sim.runs` and `sim.holes` imported first, as `run_batch` and `run_seeds` do).
  Only `run_seeds`' tally of the results is left out (a few microseconds a run).
* **The kernel's surface** by default: the seeds whose drawn surface
  (`sim.surfaces.drawn_surface`, a draw of the seed's own, made before the run) is the
  kernel's, i.e. runs of `Deduplicator.run` / `AsyncDeduplicator.run`, reported as `kernel`
  or `steps` by their handler. About 80% of the seeds; the count is printed.
  `--all-surfaces` keeps every seed (HTTP, callable, operators too).
* **`--callgrind`**: this command runs twice under `valgrind --tool=callgrind`, once with the
  runs and once the same in every other way with the loop left out (imports, scenario
  filtering, gc, `seams.quiet`); instructions a run = (the first's total - the second's) /
  runs, each total read from the `summary:`/`totals:` line of its callgrind output file. The
  first runs of a process pay for what the runs import lazily and the caches they fill: that
  is counted, spread over the runs, as `make simulate`'s workers pay it. Both runs and the
  CPU timing have PYTHONHASHSEED=0 and no PYTHONDONTWRITEBYTECODE (`steady_env`: this
  command starts itself again if its environment is not so), and the CPU timing, first,
  writes the bytecode the callgrind runs then load: two measurements of the same code do the
  same work, to a few instructions. CPU time a run is `time.process_time()` over the loop,
  without valgrind, the best of `--passes` (3) passes, after the same gc set-up.
* **Which code** is measured is printed first: where `dedup` and `sim` were imported from
  (the current directory's, so run it from the checkout to measure) and that tree's commit
  and changes to dedup/ and sim/.
* **`--digest PATH`**: one line a seed, `seed surface sha256`, the sha256 of the run's full
  description (`describe`): its scenario, answers (each with its record then), effects,
  records (complete, none cut short), violations, deliveries, faults drawn and struck, the
  freezes, the schedule's hash (`Result.interleaving`, a hash of str: only in a process
  with PYTHONHASHSEED=0, as this command's), and the trace `python -m sim --seed N` prints
  (every await, store answer and fault in virtual time), from a second run of the seed with
  trace detail. That second run must
  describe the first exactly apart from the trace; if it ever does not, the line says
  `TRACE-DIFFERS` (and the digest covers both). Two files from before and after a change are
  compared with `diff`: no output, the same runs. A run's description depends neither on the
  runs before it in the process nor on the hash seed (seeds 0 to 199 compared in reverse order
  and under two other PYTHONHASHSEEDs, the schedule's hash left out).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIRST, COUNT, PASSES = 2000, 200, 3
KERNELS = "kernel"
"""`drawn_surface` of a seed the kernel's scenario runs (reported as `kernel` or `steps`)."""
HASH_SEED = "0"


def steady_env() -> dict[str, str]:
    """This process's environment with PYTHONHASHSEED=0 (str hashes, so dict and set layouts,
    the same in every run) and without PYTHONDONTWRITEBYTECODE (as the Makefile: imports load
    bytecode written once, rather than compiling every module again in every process)."""
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


TOTALS = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def chosen_seeds(first: int, count: int, *, all_surfaces: bool = False) -> list[int]:
    """Seeds `first` to `first + count - 1`, only the kernel's unless `all_surfaces`."""
    from sim.surfaces import drawn_surface

    seeds = range(first, first + count)
    return list(seeds) if all_surfaces else [s for s in seeds if drawn_surface(s) == KERNELS]


def prepare() -> None:
    """What `sim.batch` does before its runs: import every surface's runner (and the holes),
    collect, and freeze what lives now so that the collector does not scan it at each run."""
    import sim.holes  # run_seeds imports it before its loop
    import sim.runs  # noqa: F401  (run_batch imports it before forking its workers)

    gc.collect()
    gc.freeze()


def runs(seeds: Iterable[int], *, traced: bool = False) -> Iterator[tuple[Any, Any]]:
    """Each seed's `sim.runs.Result`, run as `sim.batch.run_seeds` runs it; with `traced`,
    beside it the seed's run again with its trace (detail), as `python -m sim --seed N` runs
    it (else None)."""
    from sim import seams
    from sim.runs import run_one

    with seams.quiet():
        for seed in seeds:
            plain = run_one(seed)
            yield plain, run_one(seed, detail=True) if traced else None


def loop(seeds: list[int]) -> float:
    """Run `seeds`; the CPU seconds it took (`time.process_time`)."""
    from sim import seams
    from sim.runs import run_one

    with seams.quiet():
        began = time.process_time()
        for seed in seeds:
            run_one(seed)
        return time.process_time() - began


# --- the digest ------------------------------------------------------------------------


def _answer(answer: Any) -> str:
    if isinstance(answer, BaseException):
        return f"raised {type(answer).__name__}: {answer}"
    if hasattr(answer, "status_code") and hasattr(answer, "get_data"):  # an HTTP response
        return f"HTTP {answer.status_code} {sorted(answer.headers.items())} {answer.get_data()!r}"
    return f"returned {answer!r}"


def describe(result: Any, *, trace: bool = True) -> str:
    """Everything a run's `Result` tells of what happened, as text; with `trace`, the trace
    lines too (empty for a run without detail)."""
    world, env = result.world, result.env
    lines = [
        f"surface {result.surface}",
        result.scenario.describe(),
        f"deliveries {result.deliveries}",
        f"faults drawn {world.fault_index}, struck {sorted(world.fault_counts.items())}",
        f"freezes {world.freezes!r}",
        f"unencodable {world.unencodable!r}",
        f"virtual time {world.now!r}",
    ]
    if sys.flags.hash_randomization == 0:  # Result.interleaving hashes str: PYTHONHASHSEED=0
        lines.append(f"interleaving {result.interleaving}")
    if trace:
        lines += ["trace:", *world.trace.render()]
    lines.append("answers:")
    for a in result.answers:
        lines.append(f"  {a.at!r} {a.task.name} {a.task.event}: {_answer(a.answer)}")
        lines.append(f"    record {a.record!r}")
    lines.append("effects:")
    lines += [f"  {e!r}" for e in env.effects]
    for name in ("mismatches", "seen", "refused"):
        if hasattr(env, name):
            lines.append(f"{name} {getattr(env, name)!r}")
    lines.append("records:")
    for path, (data, stamp) in sorted(world.server.docs.items()):
        lines.append(f"  {path} @{stamp}: {data!r}")
    lines.append(f"violations {result.violations!r}")
    # a user's text may hold lone surrogates (`sim.catalogue`): hashed escaped
    return "\n".join(lines)


def digest_lines(seeds: Iterable[int]) -> Iterator[str]:
    """`seed surface sha256` for each seed: its run as `make simulate` runs it, described with
    the trace of the same seed run again with detail (`TRACE-DIFFERS` appended if the second
    run is not the first)."""
    for plain, traced in runs(seeds, traced=True):
        text = describe(plain, trace=False)
        same = describe(traced, trace=False) == text
        if not same:
            text += "\n===== traced run =====\n" + describe(traced)
        else:
            text += "\n" + "\n".join(traced.world.trace.render())
        sha = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()
        yield f"{plain.seed} {plain.surface} {sha}" + ("" if same else " TRACE-DIFFERS")


# --- callgrind -------------------------------------------------------------------------


def callgrind_total(path: Path) -> int:
    """The instructions a callgrind output file counts (its `summary:` or `totals:` line)."""
    found = None
    with path.open(errors="replace") as lines:
        for line in lines:
            if match := TOTALS.match(line):
                found = int(match.group(1))
    if found is None:
        raise SystemExit(f"no summary: or totals: line in {path}")
    return found


def under_callgrind(args: argparse.Namespace, out: Path, *, setup_only: bool) -> int:
    """Run this command's loop (or only its set-up) under callgrind, with `args.valgrind_arg`
    and `args.python_arg`; the instructions counted. A perf map the Python writes (`-X perf`:
    /tmp/perf-<pid>.map, the names of its trampolines) is moved beside `out` (`<out>.map`)."""
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        *args.valgrind_arg,
        sys.executable,
        *args.python_arg,
        "-m",
        "tools.sim_cost",
        f"--first={args.first}",
        f"--count={args.count}",
        *(["--all-surfaces"] if args.all_surfaces else []),
        "--child-setup-only" if setup_only else "--child-run",
    ]
    print("$", " ".join(command), flush=True)
    with subprocess.Popen(
        command, cwd=ROOT, env=steady_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        _, err = child.communicate()
    perf_map = Path(f"/tmp/perf-{child.pid}.map")
    if perf_map.exists():
        perf_map.replace(out.with_name(out.name + ".map"))
    if child.returncode:
        sys.stderr.write(err.decode(errors="replace")[-4000:])
        raise SystemExit(f"callgrind run failed ({child.returncode})")
    return callgrind_total(out)


def sources() -> dict[str, float]:
    """The modification times of the Python files of dedup/, sim/ and tools/*.py: a file changed
    while a measurement goes on makes one process compile it and the other not."""
    files = [*(ROOT / "dedup").rglob("*.py"), *(ROOT / "sim").rglob("*.py")]
    return {str(p): p.stat().st_mtime for p in [*files, *(ROOT / "tools").glob("*.py")]}


def measure(args: argparse.Namespace, seeds: list[int]) -> None:
    before = sources()
    prepare()
    best = min(loop(seeds) for _ in range(args.passes))
    per_run = best / len(seeds) * 1e6
    print(f"CPU: {per_run:.0f} µs a run (best of {args.passes} passes, without valgrind)")
    if not args.callgrind:
        return
    keep = Path(args.out_dir) if args.out_dir else Path(tempfile.mkdtemp(prefix="sim_cost."))
    keep.mkdir(parents=True, exist_ok=True)
    total = under_callgrind(args, keep / "callgrind.runs.out", setup_only=False)
    setup = under_callgrind(args, keep / "callgrind.setup.out", setup_only=True)
    print(f"callgrind: {total:,} instructions with the runs, {setup:,} without (set-up)")
    per_run = (total - setup) / len(seeds)
    print(f"callgrind: {per_run:,.0f} instructions a run ({len(seeds)} runs; files in {keep})")
    if sources() != before:
        raise SystemExit("files of dedup/, sim/ or tools/ changed during the measurement: again")


def provenance() -> str:
    """Which code runs: where `dedup` and `sim` were imported from, and that tree's commit and
    its changes to them (a measurement names the code it measured)."""
    import dedup
    import sim

    where = {Path(m.__file__ or "").resolve().parent.parent for m in (dedup, sim)}
    text = f"code: dedup and sim from {', '.join(map(str, sorted(where)))}"
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        return text + " (not a git checkout)"
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--", "dedup", "sim"], capture_output=True, text=True
    ).stdout.splitlines()
    state = f"{len(changed)} files of dedup/ and sim/ changed" if changed else "clean"
    return text + f", at {head.stdout.strip()} ({state})"


# --- the command -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.sim_cost", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--first", type=int, default=FIRST, help=f"first seed ({FIRST})")
    parser.add_argument("--count", type=int, default=COUNT, help=f"seeds from there ({COUNT})")
    parser.add_argument("--all-surfaces", action="store_true", help="not only the kernel's")
    parser.add_argument("--digest", metavar="PATH", help="write `seed surface sha256` lines")
    parser.add_argument("--callgrind", action="store_true", help="instructions a run")
    parser.add_argument("--passes", type=int, default=PASSES, help="CPU timing: best of")
    parser.add_argument("--out-dir", help="keep the callgrind files here (default: a temp dir)")
    parser.add_argument(
        "--valgrind-arg", action="append", default=[], help="one more valgrind option"
    )
    parser.add_argument(
        "--python-arg", action="append", default=[], help="one more option of the Python run"
    )
    parser.add_argument("--child-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-setup-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if argv is None and dict(os.environ) != steady_env():  # the same hashes and bytecode
        command = [sys.executable, "-m", "tools.sim_cost", *sys.argv[1:]]
        os.execve(sys.executable, command, steady_env())

    seeds = chosen_seeds(args.first, args.count, all_surfaces=args.all_surfaces)
    if args.child_run or args.child_setup_only:
        prepare()
        if args.child_run:
            loop(seeds)
        return 0
    which = "all surfaces" if args.all_surfaces else "the kernel's surface (kernel, steps)"
    print(provenance())
    print(f"seeds {args.first} to {args.first + args.count - 1}: {len(seeds)} of {which}")
    if args.digest:
        prepare()
        lines = list(digest_lines(seeds))
        Path(args.digest).write_text("\n".join(lines) + "\n")
        differs = sum(line.endswith("TRACE-DIFFERS") for line in lines)
        print(f"digest: {len(lines)} runs in {args.digest} ({differs} TRACE-DIFFERS)")
        return 0
    if not seeds:
        raise SystemExit("no seed to run")
    measure(args, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
