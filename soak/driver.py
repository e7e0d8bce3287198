"""The platform of the soak: function processes, deliveries, redeliveries and the chaos.

`Soak(settings).run()` starts the emulator (`soak.emulator`), the recording receiver
(`demo.receiver`) and `workers` function processes (`soak.worker`), then for `seconds`:

* creates events (slug ids, some extending another by `-batch`, see `soak.functions`) while
  fewer than `inflight_events` are unacknowledged; each event goes to the three functions,
  `copies` concurrent copies each;
* delivers every copy by HTTP to a random process; anything but a 200 (5xx, a refused or
  dropped connection, a timeout) is delivered again after a short, growing, jittered delay,
  like the platform's retry, until acknowledged;
* SIGKILLs a random process every `kill_interval` seconds on average (respawned at once),
  restarts the emulator every `restart_interval` seconds, scripts failures, delays and
  outages into the receiver every `receiver_fault_interval` seconds.

Then it drains (no more kills, restarts or receiver faults; the processes keep their
in-process faults) until every copy is acknowledged or `drain_seconds` pass, and hands what it
observed to `soak.checks`.
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.cloud import firestore

from dedup import Record, State
from demo.receiver import Receiver
from soak.checks import Observed, RecordView, Violation, check, effects, unanswered_posts
from soak.emulator import ROOT, SoakEmulator, free_port
from soak.functions import (
    BATCH_COLLECTION,
    COUNT_COLLECTION,
    FUNCTIONS,
    NOTIFY_PATH,
    POST_ID_HEADER,
)
from soak.worker import POSTS_FILE, UNANSWERED_FILE, WorkerSettings

WORDS = ("order", "post", "user", "invoice", "launch", "ticket")
DELIVERY_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class SoakSettings:
    """Every knob of a soak run (`python -m soak --help` lists them)."""

    seconds: float = 600.0
    workers: int = 4
    copies: int = 3
    inflight_events: int = 30
    senders: int = 48
    kill_interval: float = 8.0
    crash_rate: float = 0.01
    restart_interval: float = 60.0
    lost_response_rate: float = 0.03
    refused_commit_rate: float = 0.01
    read_fault_rate: float = 0.01
    handler_failure_rate: float = 0.03
    receiver_fault_interval: float = 2.0
    collision_rate: float = 0.03
    lease_seconds: int = 15
    max_attempts: int = 10
    rpc_timeout_seconds: int = 5
    function_timeout_seconds: int = 10
    """The timeout the soak's functions declare (`DedupConfig.function_timeout_seconds`, their
    time budget): the longest the lease covers, `lease_seconds` - `rpc_timeout_seconds`. The
    results report the longest delivery beside it (`longest_delivery_s`)."""
    drain_seconds: float = 90.0
    seed: int = 1
    project: str = "demo-soak"
    workdir: str = str(ROOT / ".cache" / "soak")


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    chain: _Chain = field(compare=False)


@dataclass
class _Chain:
    """One copy of one (event, function), delivered until acknowledged."""

    event_id: str
    function: str
    tries: int = 0
    acked: bool = False
    last: str = ""
    """The last answer it got, for the report."""


@dataclass
class _Stats:
    deliveries: int = 0
    refused: int = 0
    dropped: int = 0
    kills: int = 0
    receiver_faults: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    error_samples: dict[str, list[str]] = field(default_factory=dict)
    restart_outages: list[float] = field(default_factory=list)
    longest_delivery: float = 0.0
    """The longest delivery a worker answered (seconds from the request to the answer)."""
    longest_delivery_of: tuple[str, str, str] = ("", "", "")
    """(event id, function, answer) of that delivery."""
    longest_by_function: dict[str, float] = field(default_factory=dict)


class Soak:
    """One soak run; `run()` returns the results dictionary (also written by `__main__`)."""

    def __init__(self, settings: SoakSettings) -> None:
        """Prepare a run with `settings` (nothing starts before `run`)."""
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.workdir = Path(settings.workdir)
        self.stats = _Stats()
        self._lock = threading.Lock()
        self._heap: list[_Due] = []
        self._seq = 0
        self._wake = threading.Condition(self._lock)
        self._events: list[str] = []
        self._pending: Counter[str] = Counter()
        """Unacknowledged chains per event."""
        self._chains: list[_Chain] = []
        self._excused: list[tuple[str, float, float]] = []
        """(event, start, end) of notify deliveries that were killed, overlapped a restart or
        outlasted the lease: the documented windows of a repeated POST."""
        self._restart_windows: list[tuple[float, float]] = []
        self._restarting_since: float | None = None
        self._stop_senders = False
        self._calm = threading.Event()
        self._workers: dict[int, subprocess.Popen[bytes]] = {}
        self._refused_until: dict[int, float] = {}
        """Port -> until when deliveries avoid it (it refused a connection: restarting)."""
        self._worker_exits: list[str] = []
        self._stopping = False

    # --- run ---------------------------------------------------------------------------------

    def run(self) -> dict[str, object]:
        """Run the soak; returns the results (see docs/soak.md)."""
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for old in self.workdir.glob("*.log"):
            old.unlink()  # logs of an earlier run
        self.faults_file = self.workdir / "faults.log"
        self.faults_file.write_text("")
        self.unanswered_file = self.workdir / UNANSWERED_FILE
        self.unanswered_file.write_text("")
        self.posts_file = self.workdir / POSTS_FILE
        self.posts_file.write_text("")
        self.emulator = SoakEmulator(self.s.project, self.workdir)
        self.receiver = Receiver()
        self.emulator.start()
        self.receiver.up()
        threads: list[threading.Thread] = []
        try:
            self.ports = [free_port() for _ in range(self.s.workers)]
            for port in self.ports:
                self._spawn(port)
            for i in range(self.s.senders):
                threads.append(self._thread(self._sender, f"sender-{i}"))
            chaos = [
                self._thread(self._monitor, "monitor"),
                self._thread(self._killer, "killer"),
                self._thread(self._restarter, "restarter"),
                self._thread(self._receiver_chaos, "receiver-chaos"),
            ]
            self._generate(time.monotonic() + self.s.seconds)  # from when all is up
            self._calm.set()
            self._timeline("drain")
            for thread in chaos[1:]:
                thread.join()
            deadline = time.monotonic() + self.s.drain_seconds
            while time.monotonic() < deadline and any(self._pending.values()):
                time.sleep(0.2)
            with self._wake:
                self._stop_senders = True
                self._wake.notify_all()
            for thread in threads:
                thread.join(timeout=DELIVERY_TIMEOUT_SECONDS + 5)
            self._stopping = True
            chaos[0].join()
            self._stop_workers()
            seen = self._observe()
        finally:
            self._stopping = True
            self._stop_workers()
            self.receiver.down()
            self.emulator.stop()
        violations = check(seen)
        return self._results(seen, violations, time.monotonic() - began)

    def _thread(self, target: object, name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        return thread

    # --- events and deliveries ---------------------------------------------------------------

    def _generate(self, until: float) -> None:
        n = 0
        while time.monotonic() < until:
            with self._lock:
                busy = sum(1 for c in self._pending.values() if c) >= self.s.inflight_events
            if busy:
                time.sleep(0.01)
                continue
            n += 1
            event = f"{self.rng.choice(WORDS)}-{n}"
            if self._events and self.rng.random() < self.s.collision_rate:
                event = f"{self.rng.choice(self._events)}-batch"
                if event in self._events:
                    continue
            now = time.monotonic()
            with self._wake:
                self._events.append(event)
                for function in FUNCTIONS:
                    for _ in range(self.s.copies):
                        chain = _Chain(event, function.name)
                        self._chains.append(chain)
                        self._pending[event] += 1
                        self._push(chain, now + self.rng.uniform(0, 0.05))
                self._wake.notify_all()

    def _push(self, chain: _Chain, at: float) -> None:
        self._seq += 1
        heapq.heappush(self._heap, _Due(at, self._seq, chain))

    def _sender(self) -> None:
        rng = random.Random(self.rng.random())
        while True:
            with self._wake:
                while True:
                    if self._stop_senders:
                        return
                    now = time.monotonic()
                    if self._heap and self._heap[0].at <= now:
                        chain = heapq.heappop(self._heap).chain
                        break
                    wait = self._heap[0].at - now if self._heap else 0.5
                    self._wake.wait(timeout=min(wait, 0.5))
            acked = self._deliver(chain, rng)
            with self._wake:
                if acked:
                    chain.acked = True
                    self._pending[chain.event_id] -= 1
                else:
                    chain.tries += 1
                    delay = min(0.2 * 2 ** (chain.tries - 1), 3.0) * rng.uniform(0.5, 1.5)
                    self._push(chain, time.monotonic() + delay)
                    self._wake.notify()

    def _deliver(self, chain: _Chain, rng: random.Random) -> bool:
        """One delivery to a live process (a refused connection is routed to another)."""
        for _ in range(4 * len(self.ports)):
            now = time.monotonic()
            live = [p for p in self.ports if self._refused_until.get(p, 0.0) <= now]
            port = rng.choice(live or self.ports)
            acked = self._deliver_to(port, chain)
            if acked is not None:
                return acked
            self._refused_until[port] = time.monotonic() + 0.3  # starting up: try the others
            if not live:
                time.sleep(0.05)
        return False

    def _deliver_to(self, port: int, chain: _Chain) -> bool | None:
        """True if acknowledged, False if not, None if the process refused the connection."""
        started = time.monotonic()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=DELIVERY_TIMEOUT_SECONDS)
        try:
            try:
                connection.request("POST", f"/{chain.function}", body=chain.event_id.encode())
            except ConnectionRefusedError:
                with self._lock:
                    self.stats.refused += 1  # the process is restarting: never delivered
                return None
            with self._lock:
                self.stats.deliveries += 1
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            ended = time.monotonic()
            with self._lock:
                chain.last = "connection dropped (process killed?)"
                self.stats.dropped += 1
                self.stats.outcomes["dropped"] += 1
                if chain.function == "notify":  # its process died (or hung) mid-delivery
                    self._excused.append((chain.event_id, started, ended))
            return False
        finally:
            connection.close()
        ended = time.monotonic()
        outcome, message = _outcome(response.status, body)
        with self._lock:
            chain.last = f"{outcome}: {message}" if message else outcome
            took = self.stats.longest_by_function.get(chain.function, 0.0)
            self.stats.longest_by_function[chain.function] = max(took, ended - started)
            if ended - started > self.stats.longest_delivery:
                self.stats.longest_delivery = ended - started
                self.stats.longest_delivery_of = (chain.event_id, chain.function, chain.last)
            self.stats.outcomes[outcome] += 1
            samples = self.stats.error_samples.setdefault(outcome, [])
            if message and len(samples) < 3:
                samples.append(message)
            slower_than_lease = ended - started >= self.s.lease_seconds
            # The store refused "sent" until (about) the lease's end, after the POST: the
            # takeover repeats it under the same key, the documented window (docs/guarantees.md).
            # The delivery may end up to one retry pause before lease_seconds have passed.
            sent_never_recorded = outcome == "StoreUnavailable" and "could not mark sent" in message
            if chain.function == "notify" and (
                slower_than_lease or sent_never_recorded or self._overlaps_restart(started, ended)
            ):
                self._excused.append((chain.event_id, started, ended))
        return response.status == 200

    def _overlaps_restart(self, started: float, ended: float) -> bool:
        if self._restarting_since is not None and self._restarting_since <= ended:
            return True
        return any(a <= ended and started <= b for a, b in self._restart_windows)

    # --- processes ---------------------------------------------------------------------------

    def _spawn(self, port: int) -> None:
        settings = WorkerSettings(
            port=port,
            project=self.s.project,
            receiver_url=self.receiver.base_url,
            faults_file=str(self.faults_file),
            lease_seconds=self.s.lease_seconds,
            max_attempts=self.s.max_attempts,
            rpc_timeout_seconds=self.s.rpc_timeout_seconds,
            function_timeout_seconds=self.s.function_timeout_seconds,
            lost_response_rate=self.s.lost_response_rate,
            refused_commit_rate=self.s.refused_commit_rate,
            read_fault_rate=self.s.read_fault_rate,
            handler_failure_rate=self.s.handler_failure_rate,
            crash_rate=self.s.crash_rate,
            seed=self.rng.randrange(2**31),
        )
        env = {
            **os.environ,
            "SOAK_WORKER": json.dumps(asdict(settings)),
            "FIRESTORE_EMULATOR_HOST": self.emulator.host,
            "GOOGLE_CLOUD_PROJECT": self.s.project,
            "PYTHONPATH": str(ROOT),
        }
        log = (self.workdir / f"worker-{port}.log").open("ab")
        self._workers[port] = subprocess.Popen(
            [sys.executable, "-m", "soak.worker"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def _monitor(self) -> None:
        while not self._stopping:
            for port, process in list(self._workers.items()):
                code = process.poll()
                if code is None or self._stopping:
                    continue
                with self._lock:
                    if code == -signal.SIGKILL:
                        self.stats.kills += 1
                    else:
                        self._worker_exits.append(
                            f"process on port {port} exited with {code}; see "
                            f"{self.workdir / f'worker-{port}.log'}"
                        )
                self._spawn(port)
            time.sleep(0.05)

    def _timeline(self, what: str) -> None:
        """Append `<wall-clock time> <what>` to the workdir's timeline.log (kills, the drain's
        start, restarts), to line up with the workers' `soak` lines afterwards."""
        with (self.workdir / "timeline.log").open("a") as out:
            out.write(f"{time.time():.3f} {what}\n")

    def _killer(self) -> None:
        while not self._calm.wait(self.rng.expovariate(1 / self.s.kill_interval)):
            port = self.rng.choice(self.ports)
            process = self._workers[port]
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
                self._timeline(f"kill {port}")

    def _restarter(self) -> None:
        while not self._calm.wait(self.s.restart_interval * self.rng.uniform(0.7, 1.3)):
            with self._lock:
                self._restarting_since = time.monotonic()
            try:
                self._timeline("restart")
                outage = self.emulator.restart()
            except Exception as exc:  # reported as a violation: the run did not do its job
                with self._lock:
                    self._worker_exits.append(f"emulator restart failed: {exc!r}")
                    self._restarting_since = None
                return
            with self._lock:
                assert self._restarting_since is not None
                self._restart_windows.append((self._restarting_since, time.monotonic()))
                self._restarting_since = None
                self.stats.restart_outages.append(outage)

    def _receiver_chaos(self) -> None:
        rng = random.Random(self.rng.random())
        while not self._calm.wait(rng.expovariate(1 / self.s.receiver_fault_interval)):
            k = rng.randint(1, 6)
            kind = rng.choice(("fail", "slow", "slow-fail", "down"))
            if kind == "down":
                self.receiver.down()
                self._calm.wait(rng.uniform(0.3, 1.5))
                self.receiver.up()
                k = 1
            elif kind == "fail":
                self.receiver.script(
                    NOTIFY_PATH, *[(rng.choice((500, 502, 503)), 0.0) for _ in range(k)]
                )
            elif kind == "slow":
                self.receiver.script(NOTIFY_PATH, *[(200, rng.uniform(0.2, 2.0)) for _ in range(k)])
            else:
                self.receiver.script(NOTIFY_PATH, *[(503, rng.uniform(0.2, 1.5)) for _ in range(k)])
            with self._lock:
                self.stats.receiver_faults += k

    def _stop_workers(self) -> None:
        self._stopping = True
        for process in self._workers.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    # --- observation -------------------------------------------------------------------------

    def _observe(self) -> Observed:
        os.environ["FIRESTORE_EMULATOR_HOST"] = self.emulator.direct_host
        client = firestore.Client(project=self.s.project)

        def counters(collection: str) -> dict[str, int]:
            return {
                str(d.get("event")): int(d.get("n")) for d in client.collection(collection).stream()
            }

        records: list[RecordView] = []
        for snapshot in client.collection("triggerEvents").stream():
            record = Record.from_snapshot(snapshot)
            assert record is not None
            records.append(
                RecordView(
                    key=record.key,
                    event_id=record.event_id,
                    suffix=record.suffix,
                    state=record.state.value,
                    attempts=record.attempts,
                    lease_expired=record.state is State.IN_PROGRESS
                    and record.has_lease
                    and not record.lease_live(snapshot.read_time),
                    retried_seconds=_retried_seconds(record),
                )
            )
        applied = [
            (a.idempotency_key or "", a.body.decode(), a.arrived)
            for a in self.receiver.applied(NOTIFY_PATH)
        ]
        unanswered_ids = unanswered_posts(
            self.posts_file.read_text(), self.unanswered_file.read_text()
        )
        unanswered = [
            (a.body.decode(), a.arrived)
            for a in self.receiver.applied(NOTIFY_PATH)
            if _header(a.headers, POST_ID_HEADER) in unanswered_ids
        ]
        self._states = Counter(r.state for r in records)
        return Observed(
            events=list(self._events),
            counts=counters(COUNT_COLLECTION),
            batches=counters(BATCH_COLLECTION),
            notify_applied=applied,
            records=records,
            excused=list(self._excused),
            unanswered=unanswered,
            unacknowledged=[
                (c.event_id, c.function, f"{c.tries} tries, last answer {c.last}")
                for c in self._chains
                if not c.acked
            ],
            worker_exits=list(self._worker_exits),
            max_attempts=self.s.max_attempts,
            copies=self.s.copies,
        )

    def _results(
        self, seen: Observed, violations: list[Violation], wall: float
    ) -> dict[str, object]:
        injected = Counter(
            line for line in self.faults_file.read_text().splitlines() if line.strip()
        )
        receiver_attempts = self.receiver.attempts_to(NOTIFY_PATH)
        by_check = Counter(v.check for v in violations)
        return {
            "events": len(seen.events),
            "deliveries": self.stats.deliveries,
            "kills": self.stats.kills,
            "restarts": self.emulator.restarts,
            "injected_faults": sum(injected.values()) + self.stats.receiver_faults,
            "effects": effects(seen),
            "violations": len(violations),
            "violation_examples": _examples(violations),
            "wall_s": round(wall, 1),
            "longest_delivery_s": round(self.stats.longest_delivery, 2),
            "function_timeout_s": self.s.function_timeout_seconds,
            "details": {
                "settings": asdict(self.s),
                "violations_by_check": dict(by_check),
                "injected_by_kind": {**dict(injected), "receiver": self.stats.receiver_faults},
                "outcomes": dict(self.stats.outcomes),
                "error_samples": self.stats.error_samples,
                "refused_connections": self.stats.refused,
                "record_states": dict(self._states),
                "receiver_attempts": len(receiver_attempts),
                "receiver_applied": len(seen.notify_applied),
                "receiver_applied_unanswered": len(seen.unanswered),
                "receiver_distinct_keys": len({k for k, _, _ in seen.notify_applied}),
                "restart_outage_s": [round(x, 1) for x in self.stats.restart_outages],
                "longest_delivery_by_function_s": {
                    name: round(took, 2) for name, took in self.stats.longest_by_function.items()
                },
            },
        }


def _retried_seconds(record: Record) -> float:
    """From a record's first attempt to its last (0 when either is missing)."""
    first, last = record.first_attempt_at, record.last_attempt_at
    return (last - first).total_seconds() if first and last else 0.0


def _outcome(status: int, body: bytes) -> tuple[str, str]:
    """(outcome or error name, error message) of a worker's answer."""
    try:
        answer = json.loads(body)
    except ValueError:
        return f"http-{status}", body[:300].decode(errors="replace")
    if status == 200:
        return str(answer.get("outcome")), ""
    return str(answer.get("error", f"http-{status}")), str(answer.get("message", ""))


def _examples(violations: list[Violation], per_check: int = 5) -> list[str]:
    """Up to `per_check` examples of each broken invariant."""
    shown: Counter[str] = Counter()
    examples = []
    for v in violations:
        if shown[v.check] < per_check:
            shown[v.check] += 1
            examples.append(v.example())
    return examples


def _header(headers: dict[str, str], name: str) -> str | None:
    """A request header by name, whatever its case."""
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)
