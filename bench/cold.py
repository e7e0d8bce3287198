"""What dedup adds to a cold start, against `bench/bare_main.py` (same triggers and SDK imports,
no dedup).

* **Import**: the time to import `main.py` in a fresh interpreter (what every instance pays
  before serving, whichever function it serves), against importing `bench/bare_main.py`.
  A third variant imports main.py plus the modules its functions used to import at start-up
  (the Pub/Sub client and requests): the saving of importing them where they are used.
* **First event**: from starting `functions-framework --target sync_published_count` to the
  first answered event (a fresh Firestore event, 2xx), against the bare function: imports,
  gunicorn's start, the Firestore client's creation and the event's RPCs.

Variants are run in turns (bare, main, bare, main...) so that the rest of the machine's load
hits both alike; each figure is a median of `runs`.
"""

from __future__ import annotations

import os
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
EAGER_SIBLING_MODULES = ("google.cloud.pubsub_v1", "requests")
"""What main.py's functions imported at start-up before they imported them where used."""

FUNCTION = "sync_published_count"

_IMPORT = (
    "import importlib.util, sys, time\n"
    "t = time.perf_counter()\n"
    "spec = importlib.util.spec_from_file_location('main', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules['main'] = module\n"
    "spec.loader.exec_module(module)\n"
    "for name in sys.argv[2:]:\n"
    "    __import__(name)\n"
    "print(time.perf_counter() - t)\n"
)


def _environment() -> dict[str, str]:
    """This process's environment without a FUNCTION_TARGET (no function's start-up checks)."""
    return {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"}


def import_seconds(source: Path, extra: tuple[str, ...] = ()) -> float:
    """Seconds to import `source` as `main` (then `extra` modules) in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT, str(source), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_environment(),
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"importing {source} failed: {done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


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


def measure(client: firestore.Client, runs: int = 7) -> dict[str, Any]:
    """Medians of `runs` imports of each variant and `runs` first events of each; ratios."""
    imports: dict[str, list[float]] = {"bare": [], "main": [], "main_eager_siblings": []}
    firsts: dict[str, list[float]] = {"bare": [], "main": []}
    for _ in range(runs):
        imports["bare"].append(import_seconds(BARE))
        imports["main"].append(import_seconds(MAIN))
        imports["main_eager_siblings"].append(import_seconds(MAIN, EAGER_SIBLING_MODULES))
    for _ in range(runs):
        firsts["bare"].append(first_event_seconds(BARE, client))
        firsts["main"].append(first_event_seconds(MAIN, client))
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
        "cold_first_event_ratio": round(first["main"] / first["bare"], 3),
        "lazy_import_saving_s": round(med["main_eager_siblings"] - med["main"], 4),
    }
