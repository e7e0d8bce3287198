"""A soak function process: an HTTP server running the `soak.functions` through `dedup`.

    python -m soak.worker   # configured by SOAK_WORKER (JSON, see `WorkerSettings`)

`POST /<function>` with the event id as the body runs `Deduplicator.run(event_id, suffix,
handler, mode=...)` and answers like a function to the platform: 200 when the delivery
returned (ran, duplicate, failed, dead), 503 when it raised (the platform redelivers). One
`Deduplicator` and one Firestore client serve every request thread of the process; the
client's channel carries the `soak.faults.LostResponses` interceptor. Every injected fault is
appended as one line to `faults_file`, which survives the process being SIGKILLed.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dedup import DedupConfig, DedupError, Deduplicator
from soak.faults import LostResponses, faulty_client
from soak.functions import BY_NAME, Chaos, InjectedFailure, handler_for

UNANSWERED_FILE = "unanswered.log"
"""Beside the faults file: the id of each notification POST whose answer its handler never
got, one per line (see `soak.functions.Chaos.unanswered`)."""
POSTS_FILE = "posts.log"
"""Beside the faults file: `sent <id>` before each notification POST, `answered <id>` once its
answer reached the handler (see `soak.functions.Chaos.posts`)."""
SKIPPED_FILE = "skipped.log"
"""Beside the faults file: the event id of each `steps` delivery that found its at-most-once
step interrupted and carried on without it (see `soak.functions.Chaos.skipped`)."""


@dataclass(frozen=True)
class WorkerSettings:
    """What the driver tells a worker (env SOAK_WORKER, JSON of these fields)."""

    port: int
    project: str
    receiver_url: str
    faults_file: str
    lease_seconds: int
    max_attempts: int
    rpc_timeout_seconds: int
    function_timeout_seconds: int
    lost_response_rate: float
    refused_commit_rate: float
    read_fault_rate: float
    handler_failure_rate: float
    crash_rate: float
    seed: int


class FaultLog:
    """Appends one line per injected fault; each line is one write(2) with O_APPEND."""

    def __init__(self, path: str) -> None:
        """Append to `path`."""
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, kind: str) -> None:
        """Record one fault of this kind."""
        os.write(self._fd, f"{kind}\n".encode())


def _timeline(
    what: str, function: str, event_id: str, started: float, answer: str | None = None
) -> None:
    """One line of the worker's log per delivery's start and end, with wall-clock times, so a
    slow or stuck event's deliveries can be lined up across processes afterwards (a start
    with no end: the process died during it)."""
    now = started if what == "start" else time.time()
    line: dict[str, object] = {"soak": what, "function": function, "eventId": event_id}
    line["at"] = round(now, 3)
    if answer is not None:
        line |= {"answer": answer, "took": round(now - started, 3)}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


STALL_SECONDS = 1.0
"""A heartbeat of the process that comes this much later than due is logged as a stall."""


def _heartbeat(every: float = 0.1) -> None:
    """Log `{"soak": "stall"}` when this process was not run for `STALL_SECONDS` or more (the
    machine's other jobs, or a thread holding the GIL): a delivery that outlasted its
    deadline during a stall was held by the machine, not by its own waits."""
    last = time.monotonic()
    while True:
        time.sleep(every)
        now = time.monotonic()
        if now - last - every >= STALL_SECONDS:
            line = {"soak": "stall", "at": round(time.time(), 3), "s": round(now - last, 3)}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
        last = now


def serve(settings: WorkerSettings) -> None:
    """Serve the soak functions on 127.0.0.1:`port` until killed."""
    threading.Thread(target=_heartbeat, name="heartbeat", daemon=True).start()
    log = FaultLog(settings.faults_file)
    unanswered = FaultLog(str(Path(settings.faults_file).with_name(UNANSWERED_FILE)))
    posts = FaultLog(str(Path(settings.faults_file).with_name(POSTS_FILE)))
    skipped = FaultLog(str(Path(settings.faults_file).with_name(SKIPPED_FILE)))
    interceptor = LostResponses(
        write_rate=settings.lost_response_rate,
        read_rate=settings.read_fault_rate,
        refuse_rate=settings.refused_commit_rate,
        on_fault=log,
        seed=settings.seed,
    )
    client = faulty_client(interceptor, settings.project)
    config = DedupConfig(
        lease_seconds=settings.lease_seconds,
        max_attempts=settings.max_attempts,
        rpc_timeout_seconds=settings.rpc_timeout_seconds,
        function_timeout_seconds=settings.function_timeout_seconds,
        project=settings.project,
    )
    dedup = Deduplicator(config, client=client)
    rng_lock = threading.Lock()
    rng = random.Random(settings.seed + 1)

    def chaos() -> Chaos:
        with rng_lock:
            seed = rng.random()
        return Chaos(
            settings.handler_failure_rate,
            settings.crash_rate,
            log,
            random.Random(seed),
            unanswered=unanswered,
            posts=posts,
            skipped=skipped,
        )

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            function = BY_NAME.get(self.path.strip("/"))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if function is None:
                self._answer(404, {"error": f"no function {self.path}"})
                return
            event_id = body.decode()
            handler = handler_for(function, chaos(), settings.receiver_url)
            started = time.time()
            _timeline("start", function.name, event_id, started)
            try:
                outcome = dedup.run(event_id, function.suffix, handler, mode=function.mode)
            except Exception as exc:
                if not isinstance(exc, DedupError | InjectedFailure):
                    traceback.print_exc()  # unexpected: keep the stack in the worker's log
                _timeline("end", function.name, event_id, started, type(exc).__name__)
                self._answer(503, {"error": type(exc).__name__, "message": str(exc)[:300]})
                return
            _timeline("end", function.name, event_id, started, outcome.kind.value)
            self._answer(200, {"outcome": outcome.kind.value, "attempt": outcome.attempt})

        def _answer(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the driver counts outcomes."""

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # the driver's senders connect all at once

    server = Server(("127.0.0.1", settings.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


def main() -> None:
    """Read SOAK_WORKER and serve."""
    settings = WorkerSettings(**json.loads(os.environ["SOAK_WORKER"]))
    serve(settings)


if __name__ == "__main__":
    main()
