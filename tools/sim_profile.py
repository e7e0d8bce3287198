"""Where the instructions of the simulator's kernel runs go: callgrind profiles of the runs
`tools.sim_cost` measures, each less the same process without the runs.

    venv/bin/python -m tools.sim_profile --out /tmp/sim_profile.md --dir /tmp/sim_prof

runs `tools.sim_cost`'s loop (seeds 2,000 to 2,199, the kernel's surface; `--first`, `--count`,
`--all-surfaces` as there) four times under callgrind, about seven minutes in all (`--reuse`
reads the files a previous run left in `--dir` instead), and writes a summary in Markdown:

* **C functions, exact.** The plain runs' callgrind files: each function's own (self)
  instructions, the runs' file less the set-up-only file's, and their share by the binary the
  code lives in: the interpreter (libpython), extension modules, libc, ld.so. callgrind_annotate's
  own listings (exclusive and `--inclusive=yes`) are left beside them in `--dir`; its inclusive
  figures for the interpreter's recursive functions (the evaluation loop calls itself through
  every Python call) pass 100% many times over and mean nothing.
* **Python functions, attributed.** Callgrind sees only C. Under `python -X perf` each Python
  code object runs through a trampoline of its own, named in /tmp/perf-<pid>.map, and with
  `--separate-callers=10` callgrind keeps each C function's cost apart by its ten nearest
  callers: every instruction goes to the innermost Python function among them (its bytecode's
  evaluation and the C it calls, allocation and deallocation included); what has no Python
  function within ten callers is counted apart. A delivery's frames are suspended at every
  await by a greenlet switch; after the switch callgrind's call stack is the other greenlet's,
  but the frames resumed return through their own trampolines, which are recognised, so self
  instructions stay with the right function. Inclusive figures do not: callgrind sees a
  function's frame end at its task's first switch, so the inclusive count of a function that
  awaits (marked) covers only its part before its first await. `-X perf` itself costs
  instructions (every Python call goes through the trampoline and is no longer inlined by the
  interpreter; greenlet switches copy the deeper C stack): shares are of that run's total.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from tools.sim_cost import (
    FIRST,
    ROOT,
    callgrind_total,
    chosen_seeds,
    steady_env,
    under_callgrind,
)

SEPARATE_CALLERS = 10
RECURSION = re.compile(r"'\d+$")
"""callgrind's recursion level suffix (`_PyEval_EvalFrameDefault'2`)."""
STDLIB = sysconfig.get_paths()["stdlib"]


@dataclass
class Profile:
    """One callgrind output file, read: each context's self cost and object, and the calls."""

    names: dict[int, str] = field(default_factory=dict)
    objects: dict[int, str] = field(default_factory=dict)
    self_cost: collections.Counter[int] = field(default_factory=collections.Counter)
    calls: collections.Counter[tuple[int, int]] = field(default_factory=collections.Counter)
    call_counts: collections.Counter[tuple[int, int]] = field(default_factory=collections.Counter)
    total: int = 0


def _ref(text: str, table: dict[int, str]) -> int:
    """`(id) name` or `(id)`: the id, its name remembered."""
    number, _, name = text.partition(")")
    key = int(number.lstrip("("))
    if name.strip():
        table[key] = name.strip()
    return key


def read_profile(path: Path) -> Profile:
    """A callgrind output file (compressed names, one event: Ir)."""
    profile = Profile(total=callgrind_total(path))
    objects: dict[int, str] = {}
    fn = callee = obj = 0
    pending = 0  # the call count when the next cost line is a call's inclusive cost
    with path.open(errors="replace") as lines:
        for line in lines:
            first = line[:1]
            if first.isdigit() or first in "+-*":
                cost = int(line.split()[-1])
                if pending:
                    profile.calls[fn, callee] += cost
                    profile.call_counts[fn, callee] += pending
                    pending = 0
                else:
                    profile.self_cost[fn] += cost
            elif line.startswith("fn="):
                fn = _ref(line[3:], profile.names)
                profile.objects.setdefault(fn, objects.get(obj, "?"))
            elif line.startswith("cfn="):
                callee = _ref(line[4:], profile.names)
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0]) or 1
            elif line.startswith("ob="):
                obj = _ref(line[3:], objects)
            elif line.startswith("cob="):  # names an object too
                _ref(line[4:], objects)
    return profile


class PerfMap:
    """/tmp/perf-<pid>.map of a `-X perf` run: each trampoline's address range and name."""

    def __init__(self, path: Path) -> None:
        rows = []
        for line in path.read_text().splitlines():
            start, size, name = line.split(" ", 2)
            rows.append((int(start, 16), int(size, 16), name.removeprefix("py::")))
        rows.sort()
        self.starts = [row[0] for row in rows]
        self.rows = rows
        self.found: dict[str, tuple[str | None, bool]] = {}

    def find(self, name: str) -> tuple[str | None, bool]:
        """The Python function whose trampoline holds the code `name` (`0x...`, callgrind's
        name for code without a symbol), and whether that is the trampoline's entry (False: a
        return into it, a frame resumed)."""
        if not name.startswith("0x"):
            return None, False
        if name not in self.found:
            address = int(name, 16)
            index = bisect.bisect_right(self.starts, address) - 1
            self.found[name] = None, False
            if index >= 0:
                start, size, function = self.rows[index]
                if start <= address < start + size:
                    self.found[name] = function, address == start
        return self.found[name]


NO_PYTHON = "(C with no Python function within ten callers)"


def python_view(profile: Profile, perf: PerfMap) -> tuple[collections.Counter[str], ...]:
    """Per Python function (`qualname:file`): self instructions, inclusive instructions (calls
    into its trampoline, recursion within ten callers left out), calls; and the functions
    seen resumed after a switch (their inclusive figure covers their first part only)."""
    own: collections.Counter[str] = collections.Counter()
    resumed: collections.Counter[str] = collections.Counter()
    innermost: dict[int, str] = {}
    for key, cost in profile.self_cost.items():
        for name in profile.names.get(key, "").split("'"):
            function, entry = perf.find(name)
            if function is not None:
                own[function] += cost
                innermost[key] = function
                if not entry:
                    resumed[function] += cost
                break
        else:
            own[NO_PYTHON] += cost
    inclusive: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for (caller, callee), cost in profile.calls.items():
        function, entry = perf.find(profile.names.get(callee, "").split("'")[0])
        if function is None or not entry:
            continue
        callers = {perf.find(n)[0] for n in profile.names.get(caller, "").split("'")}
        if function in callers:
            continue
        inclusive[function] += cost
        calls[function] += profile.call_counts[caller, callee]
    return own, inclusive, calls, resumed


def c_view(profile: Profile) -> collections.Counter[tuple[str, str]]:
    """Per C function (its recursion levels and inlined files together) and binary: self."""
    own: collections.Counter[tuple[str, str]] = collections.Counter()
    for key, cost in profile.self_cost.items():
        name = RECURSION.sub("", profile.names.get(key, "?").split("'")[0])
        own[name, profile.objects.get(key, "?")] += cost
    return own


def c_inclusive(profile: Profile, function: str) -> int:
    """The instructions of the calls into C `function` from any other function (for one
    that does not call itself through others)."""
    total = 0
    for (caller, callee), cost in profile.calls.items():
        name = RECURSION.sub("", profile.names.get(callee, ""))
        if name == function and RECURSION.sub("", profile.names.get(caller, "")) != function:
            total += cost
    return total


def python_group(function: str) -> str:
    path = function.rpartition(":")[2]
    for top in ("dedup", "sim", "tools"):
        if path.startswith(f"{ROOT}/{top}/"):
            return f"{top}/"
    if "site-packages" in path:
        return "site-packages"
    if path.startswith(STDLIB) or path.startswith("<frozen"):
        return "standard library"
    if path == "<string>":
        return "code made at run time (<string>: dataclass __init__s, namedtuples)"
    return "(C, no Python function within ten callers)" if function == NO_PYTHON else path


def c_group(obj: str) -> str:
    if "libpython" in obj or re.search(r"/python3\.\d+$", obj):
        return "the interpreter (libpython)"
    if "site-packages" in obj:
        return f"extension module: {obj.split('site-packages/')[1].split('/')[0]}"
    if "lib-dynload" in obj:
        return f"standard library extension: {Path(obj).name.split('.')[0]}"
    if "ld-linux" in obj:
        return "ld.so (__tls_get_addr: libpython's reads of its thread state)"
    if "libc.so" in obj:
        return "libc (memcpy, memset, malloc...)"
    return obj


def diff[K](runs: collections.Counter[K], setup: collections.Counter[K]) -> collections.Counter[K]:
    """The runs' counts less the set-up's."""
    out = collections.Counter(runs)
    out.subtract(setup)
    return out


def short(function: str) -> str:
    name, _, path = function.rpartition(":")
    return f"`{name}` ({path.removeprefix(f'{ROOT}/')})" if name else function


def shares(by_group: collections.Counter[str], total: int, runs: int) -> list[str]:
    lines = ["| where | instructions a run | share |", "| --- | ---: | ---: |"]
    for group, cost in by_group.most_common():
        if cost > 0:
            lines.append(f"| {group} | {cost / runs:,.0f} | {cost / total:.1%} |")
    return lines


def collect(args: argparse.Namespace, where: Path) -> None:
    """The four callgrind runs: plain and `-X perf`, each with the runs and set-up only."""
    where.mkdir(parents=True, exist_ok=True)
    # once without valgrind first, so that every run under it loads the bytecode this writes
    child = ["-m", "tools.sim_cost", f"--first={args.first}", f"--count={args.count}"]
    child += ["--all-surfaces"] if args.all_surfaces else []
    subprocess.run([sys.executable, *child, "--child-run"], cwd=ROOT, env=steady_env(), check=True)
    for kind, valgrind_arg, python_arg in (
        ("plain", [], []),
        ("perf", [f"--separate-callers={SEPARATE_CALLERS}"], ["-X", "perf"]),
    ):
        options = argparse.Namespace(**vars(args), valgrind_arg=valgrind_arg, python_arg=python_arg)
        for part in ("runs", "setup"):
            out = where / f"{kind}.{part}.out"
            if args.reuse and out.exists():
                continue
            under_callgrind(options, out, setup_only=part == "setup")
    for part in ("runs", "setup"):  # callgrind_annotate's own listings, kept beside them
        for flag, suffix in (([], "self"), (["--inclusive=yes"], "inclusive")):
            with (where / f"plain.{part}.annotate.{suffix}.txt").open("w") as listing:
                command = ["callgrind_annotate", *flag, "--threshold=100"]
                subprocess.run([*command, str(where / f"plain.{part}.out")], stdout=listing)


def report(args: argparse.Namespace, where: Path, runs: int) -> str:
    top = args.top
    plain = {part: read_profile(where / f"plain.{part}.out") for part in ("runs", "setup")}
    perf = {part: read_profile(where / f"perf.{part}.out") for part in ("runs", "setup")}
    maps = {part: PerfMap(where / f"perf.{part}.out.map") for part in ("runs", "setup")}
    plain_total = plain["runs"].total - plain["setup"].total
    perf_total = perf["runs"].total - perf["setup"].total
    c_own = diff(c_view(plain["runs"]), c_view(plain["setup"]))
    views = {part: python_view(perf[part], maps[part]) for part in ("runs", "setup")}
    own, inclusive, calls, resumed = (
        diff(r, s) for r, s in zip(views["runs"], views["setup"], strict=True)
    )
    seeds = f"seeds {args.first} to {args.first + args.count - 1}"
    out = [
        "# Where a simulator run's instructions go",
        "",
        f"{runs} runs ({seeds}, {'all surfaces' if args.all_surfaces else 'the kernel surface'}"
        f"), `tools/sim_profile.py` (files in {where}). Plain: **{plain_total / runs:,.0f} "
        f"instructions a run**; under `-X perf` (the Python view): {perf_total / runs:,.0f}.",
        "",
        "How to read it (the docstring of tools/sim_profile.py says more): every figure is the "
        "runs' callgrind count less the same process's without the runs (imports, set-up), "
        "over the runs. The Python view gives each instruction to the innermost Python "
        "function among its ten nearest C callers: a function's *self* count is its bytecode's "
        "evaluation and the C that does for it (allocation, dict look-ups, deallocation). "
        "Inclusive counts come from callgrind's calls into a function; a frame suspended at an "
        "await (a greenlet switch) ends there for callgrind, so a function marked † is counted "
        "only up to its first await. The C view is exact, with no trampolines.",
        "",
        "## Python functions in dedup/ (attributed through `-X perf` trampolines)",
        "",
        f"### Top {top} by self instructions (the function's bytecode and the C it calls)",
        "",
        "| # | function | self a run | share | calls a run |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    mine = [(f, c) for f, c in own.most_common() if python_group(f) == "dedup/"]
    for n, (function, cost) in enumerate(mine[:top], 1):
        out.append(
            f"| {n} | {short(function)} | {cost / runs:,.0f} | {cost / perf_total:.2%} "
            f"| {calls[function] / runs:,.1f} |"
        )
    out += [
        "",
        f"### Top {top} by inclusive instructions (†: it awaits; counted up to its first await)",
        "",
        "| # | function | inclusive a run | share | calls a run |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    mine = [(f, c) for f, c in inclusive.most_common() if python_group(f) == "dedup/"]
    for n, (function, cost) in enumerate(mine[:top], 1):
        mark = " †" if resumed[function] > 0 else ""
        out.append(
            f"| {n} | {short(function)}{mark} | {cost / runs:,.0f} | {cost / perf_total:.2%} "
            f"| {calls[function] / runs:,.1f} |"
        )
    by_file: collections.Counter[str] = collections.Counter()
    for function, cost in own.items():
        by_file[python_group(function)] += cost
    out += ["", "### Self instructions by where the Python function lives", ""]
    out += shares(by_file, perf_total, runs)
    out += ["", "### Top 25 Python functions anywhere, by self instructions", ""]
    out += ["| function | self a run | share |", "| --- | ---: | ---: |"]
    for function, cost in own.most_common(25):
        out.append(f"| {short(function)} | {cost / runs:,.0f} | {cost / perf_total:.2%} |")
    by_binary: collections.Counter[str] = collections.Counter()
    for (_, obj), cost in c_own.items():
        by_binary[c_group(obj)] += cost
    out += ["", "## C functions (exact: the plain runs)", "", "### Self instructions by binary", ""]
    out += shares(by_binary, plain_total, runs)
    collector = c_inclusive(plain["runs"], "gc_collect_main")
    collector -= c_inclusive(plain["setup"], "gc_collect_main")
    out += [
        "",
        f"The cyclic collector (`gc_collect_main`, inclusive): {collector / runs:,.0f} a run "
        f"({collector / plain_total:.1%}).",
    ]
    out += ["", "### Top 25 C functions by self instructions", ""]
    out += ["| function | binary | self a run | share |", "| --- | --- | ---: | ---: |"]
    for (name, obj), cost in c_own.most_common(25):
        out.append(
            f"| `{name}` | {Path(obj).name} | {cost / runs:,.0f} | {cost / plain_total:.2%} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sim_profile")
    parser.add_argument("--first", type=int, default=FIRST)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--all-surfaces", action="store_true")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/sim_prof"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/sim_profile.md"))
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--reuse", action="store_true", help="use the callgrind files in --dir")
    args = parser.parse_args(argv)
    runs = len(chosen_seeds(args.first, args.count, all_surfaces=args.all_surfaces))
    collect(args, args.dir)
    args.out.write_text(report(args, args.dir, runs))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
