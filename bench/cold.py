"""What dedup adds to a cold start, against `bench/bare_main.py` (same triggers and SDK imports,
no dedup).

* **Import**: the time to import `main.py` in a fresh interpreter with its target resolved
  (`FUNCTION_TARGET` set, as on the platform: main.py loads that function's module only),
  against importing `bench/bare_main.py` and resolving the same function. A third variant
  resolves every function of main.py (what an instance paid when main.py imported them all):
  the saving of loading only the served one. Each exported function's own import time is
  measured too (main.py, then that function resolved).
* **First event**: from starting `functions-framework --target sync_published_count` to the
  first answered event (a fresh Firestore event, 2xx), against the bare function: imports,
  gunicorn's start, the Firestore client's creation and the event's RPCs.

Both are measured as an instance runs them:

* **Compiled.** The Python buildpack that builds every deployed function runs
  `python3 -m compileall -f -q .` on the source (GoogleCloudPlatform/buildpacks,
  `cmd/python/functions_framework`), so an instance imports bytecode, never source. `measure`
  compiles main.py, `dedup`, `functions` and the bare file the same way first; without it, a
  machine with `PYTHONDONTWRITEBYTECODE` set would time Python's compiler on every import.
* **Served.** functions-framework imports itself (Flask, its CloudEvents support) before it
  loads the source, in both variants; the import figure starts after that, at the source.

Variants are run in turns, the order flipped every round (bare, main, main, bare, ...), so
that the rest of the machine's load and its drift hit both alike; each target figure is a
median of `runs` (15 by default). On a shared virtual machine one run can be 20-40 % slower
than its neighbour for reasons of the host, which moves a median of 7 by several percent
either way; the fastest run of each variant (`*_ratio_fastest`, no target) shows the cost
with less of that noise, since noise only ever adds time. Where valgrind is installed, the
instructions each import executes are counted too (`cold_import_instructions_ratio`, no
target): a figure the host cannot move.
"""

from __future__ import annotations

import compileall
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import requests
from google.cloud import firestore

from demo.events import firestore_event
from demo.serve import FUNCTIONS_FRAMEWORK, ROOT, free_port

BARE = Path(__file__).resolve().parent / "bare_main.py"
MAIN = ROOT / "main.py"
FUNCTION = "sync_published_count"
"""The function of the import and first-event ratios (it has no start-up setting to give)."""

PER_FUNCTION_RUNS = 3
"""Imports per exported function for `cold_import_s_<function>`, and of main.py with every
function resolved (medians; fewer when `runs` is smaller)."""

_IMPORT = (
    "import importlib.util, sys, time\n"
    "import functions_framework\n"  # the server, loaded before the source on an instance
    "t, c = time.perf_counter(), time.process_time()\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "spec = importlib.util.spec_from_file_location('main', sys.argv[2])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules['main'] = module\n"
    "spec.loader.exec_module(module)\n"
    "for name in sys.argv[3:]:\n"
    "    getattr(module, name)\n"
    "print(time.perf_counter() - t, time.process_time() - c)\n"
)


COMPILED = (MAIN, ROOT / "dedup", ROOT / "functions", BARE)
"""What `compile_sources` compiles: the source of both variants."""


def compile_sources() -> None:
    """Compile both variants' source to bytecode, as the buildpack does at deploy time."""
    for path in COMPILED:
        done = (
            compileall.compile_dir(path, quiet=1)
            if path.is_dir()
            else compileall.compile_file(path, quiet=1)
        )
        if not done:
            raise RuntimeError(f"compiling {path} failed")


def _environment() -> dict[str, str]:
    """This process's environment without a FUNCTION_TARGET (no function's start-up checks)."""
    return {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"}


def exported_functions() -> list[str]:
    """main.py's functions (its `FUNCTIONS`), read without importing any of them."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, main; print(json.dumps(sorted(main.FUNCTIONS)))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_environment(),
        check=True,
        timeout=120,
    )
    names: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return names


def import_seconds(
    source: Path, functions: tuple[str, ...] = (), target: str | None = None
) -> float:
    """Seconds to import `source` as `main` and resolve `functions` in a fresh interpreter;
    `target` is the instance's FUNCTION_TARGET (None: no function's start-up checks)."""
    return import_times(source, functions, target)[0]


def import_times(
    source: Path, functions: tuple[str, ...] = (), target: str | None = None
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the interpreter) of `import_seconds`'s import."""
    env = _environment() if target is None else {**_environment(), "FUNCTION_TARGET": target}
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT, str(ROOT), str(source), *functions],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"importing {source} failed: {done.stderr[-2000:]}")
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


_COLLECTED = re.compile(r"Collected : (\d+)")


def import_instructions(source: Path | None) -> int | None:
    """Instructions the interpreter executes to import `source` with its target resolved (None:
    functions-framework alone), counted by valgrind's callgrind; None without valgrind.

    Unlike times, the count does not move with the rest of the machine's load (the same total
    run after run, to a tenth of a percent): the work an import does, without what a shared
    host adds (memory faults served by the hypervisor, other tenants)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    code = "import functions_framework" if source is None else _IMPORT
    arguments = [] if source is None else [str(ROOT), str(source), FUNCTION]
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
         code, *arguments],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**_environment(), "FUNCTION_TARGET": FUNCTION},
        check=False,
        timeout=600,
    )  # fmt: skip
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind on {source} failed: {done.stderr[-2000:]}")
    return int(found.group(1))


def instructions_ratio() -> float | None:
    """Instructions of main.py's import / the bare file's, functions-framework's own import
    taken out of both (None without valgrind)."""
    server = import_instructions(None)
    bare, main = import_instructions(BARE), import_instructions(MAIN)
    if server is None or bare is None or main is None:
        return None
    return round((main - server) / (bare - server), 3)


def first_event_seconds(source: Path, client: firestore.Client) -> float:
    """Seconds from starting functions-framework on `source` to its first 2xx answer."""
    post = client.collection("posts").document(f"bench-cold-{uuid.uuid4().hex[:10]}")
    post.set({"authorId": "bench-cold-author", "published": True})
    event = firestore_event(post.path, None, post.get(), project=client.project)
    port = free_port()
    command = [
        str(FUNCTIONS_FRAMEWORK),
        "--source", str(source),
        "--target", FUNCTION,
        "--signature-type", "cloudevent",
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    env = {**_environment(), "FUNCTION_TARGET": FUNCTION}
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"functions-framework on {source.name} exited before serving")
            try:
                answer = requests.post(
                    f"http://127.0.0.1:{port}/",
                    data=event.body,
                    headers=dict(event.headers),
                    timeout=60,
                )
                break
            except requests.ConnectionError:
                time.sleep(0.005)
        elapsed = time.perf_counter() - started
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if not 200 <= answer.status_code < 300:
        raise RuntimeError(f"{source.name} answered its first event with {answer.status_code}")
    return elapsed


VARIANTS = (("bare", BARE), ("main", MAIN))


def in_turns(round_number: int) -> tuple[tuple[str, Path], ...]:
    """The variants in this round's order: bare first in even rounds, main first in odd ones."""
    return VARIANTS if round_number % 2 == 0 else VARIANTS[::-1]


def measure(client: firestore.Client, runs: int = 15) -> dict[str, Any]:
    """Medians of `runs` interleaved imports of each variant and `runs` interleaved first
    events of each, their ratios (and those of the fastest runs), and each exported function's
    import time."""
    compile_sources()
    functions = exported_functions()
    imports: dict[str, list[float]] = {"bare": [], "main": [], "main_every_function": []}
    firsts: dict[str, list[float]] = {"bare": [], "main": []}
    cpu: dict[str, list[float]] = {"bare": [], "main": []}
    for round_number in range(runs):
        for name, source in in_turns(round_number):
            wall, used = import_times(source, (FUNCTION,), FUNCTION)
            imports[name].append(wall)
            cpu[name].append(used)
    for round_number in range(runs):
        for name, source in in_turns(round_number):
            firsts[name].append(first_event_seconds(source, client))
    per_function: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(min(runs, PER_FUNCTION_RUNS)):
        imports["main_every_function"].append(import_seconds(MAIN, tuple(functions)))
        for name in functions:
            per_function[name].append(import_seconds(MAIN, (name,)))
    instructions = instructions_ratio()
    med = {k: statistics.median(v) for k, v in imports.items()}
    first = {k: statistics.median(v) for k, v in firsts.items()}
    return {
        "runs": runs,
        "function": FUNCTION,
        "import_s": {k: round(v, 4) for k, v in med.items()},
        "import_runs_s": {k: [round(x, 4) for x in v] for k, v in imports.items()},
        "first_event_s": {k: round(v, 4) for k, v in first.items()},
        "first_event_runs_s": {k: [round(x, 4) for x in v] for k, v in firsts.items()},
        "cold_import_ratio": round(med["main"] / med["bare"], 3),
        "import_cpu_s": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
        "cold_import_cpu_ratio": round(
            statistics.median(cpu["main"]) / statistics.median(cpu["bare"]), 3
        ),
        "cold_first_event_ratio": round(first["main"] / first["bare"], 3),
        "cold_import_instructions_ratio": instructions,
        "cold_import_ratio_fastest": round(min(imports["main"]) / min(imports["bare"]), 3),
        "cold_first_event_ratio_fastest": round(min(firsts["main"]) / min(firsts["bare"]), 3),
        "lazy_import_saving_s": round(med["main_every_function"] - med["main"], 4),
        "per_function_import_s": {
            name: round(statistics.median(v), 4) for name, v in per_function.items()
        },
    }


def per_function_imports(runs: int = PER_FUNCTION_RUNS) -> dict[str, float]:
    """Each exported function's import time alone (`per_function_import_s`): the median of
    `runs` imports of main.py with that function resolved, the functions in turn, as `measure`
    takes them."""
    compile_sources()
    per_function: dict[str, list[float]] = {name: [] for name in exported_functions()}
    for _ in range(runs):
        for name in per_function:
            per_function[name].append(import_seconds(MAIN, (name,)))
    return {name: round(statistics.median(v), 4) for name, v in per_function.items()}
