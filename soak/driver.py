"""The platform of the soak: function processes, deliveries, redeliveries and the chaos.

`Soak(settings).run()` starts the emulator (`soak.emulator`), the recording receiver
(`demo.receiver`) and `workers` function processes (`soak.worker`), then for `seconds`:

* creates events (slug ids, some extending another by `-batch`, see `soak.functions`) while
  fewer than `inflight_events` are unacknowledged; each event goes to the four functions,
  `copies` concurrent copies each;
* delivers every copy by HTTP to a random process; anything but a 200 (5xx, a refused or
  dropped connection, a timeout) is delivered again after a short, growing, jittered delay,
  like the platform's retry, until acknowledged;
* SIGKILLs a random process every `kill_interval` seconds on average (respawned at once),
  restarts the emulator every `restart_interval` seconds, scripts failures, delays and
  outages into the receiver every `receiver_fault_interval` seconds (`soak.receiver_chaos`).

Then it drains (no more kills, restarts or receiver faults; the processes keep their
in-process faults, their own SIGKILLs included) until the rule of `soak.drain` ends it, and
hands what it observed to `soak.checks`; `soak.report` reads the effects and builds the
results.
"""

from __future__ import annotations

import heapq
import http.client
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud import firestore

from demo.receiver import Receiver
from soak.checks import Observed, check
from soak.drain import Drain, wait_for
from soak.emulator import SoakEmulator
from soak.functions import FUNCTIONS
from soak.processes import Processes
from soak.receiver_chaos import receiver_chaos
from soak.report import Stats, observe, results
from soak.settings import SoakSettings
from soak.worker import POSTS_FILE, SKIPPED_FILE, UNANSWERED_FILE

WORDS = ("order", "post", "user", "invoice", "launch", "ticket")
DELIVERY_TIMEOUT_SECONDS = 60.0


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


class Soak:
    """One soak run; `run()` returns the results dictionary (also written by `__main__`)."""

    def __init__(self, settings: SoakSettings) -> None:
        """Prepare a run with `settings` (nothing starts before `run`)."""
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.workdir = Path(settings.workdir)
        self.stats = Stats()
        self.drain = Drain(settings.drain_seconds, settings.drain_cap_seconds)
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
        self._refused_until: dict[int, float] = {}
        """Port -> until when deliveries avoid it (it refused a connection: restarting)."""
        self._worker_exits: list[str] = []

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
        (self.workdir / SKIPPED_FILE).write_text("")
        self.emulator = SoakEmulator(self.s.project, self.workdir)
        self.receiver = Receiver()
        self.emulator.start()
        self.receiver.up()
        threads: list[threading.Thread] = []
        self.processes = Processes(
            self.s,
            self.workdir,
            emulator_host=self.emulator.host,
            receiver_url=self.receiver.base_url,
            faults_file=self.faults_file,
            rng=self.rng,
            on_exit=self._exited,
        )
        self.ports = self.processes.ports
        try:
            self.processes.start()
            for i in range(self.s.senders):
                threads.append(self._thread(self._sender, f"sender-{i}"))
            chaos = [
                self._thread(self._killer, "killer"),
                self._thread(self._restarter, "restarter"),
                self._thread(self._receiver_chaos, "receiver-chaos"),
            ]
            self._generate(time.monotonic() + self.s.seconds)  # from when all is up
            self._calm.set()
            for thread in chaos:
                thread.join()  # the driver's last kill, restart and receiver fault are over
            self._timeline("drain")
            drained = wait_for(self.drain, self._unacknowledged)
            self._timeline(f"drain ends: {drained[0].value}, {drained[1]:.1f} s")
            with self._wake:
                self._stop_senders = True
                self._wake.notify_all()
            for thread in threads:
                thread.join(timeout=DELIVERY_TIMEOUT_SECONDS + 5)
            self.processes.stop()
            seen = self._observe()
        finally:
            self.processes.stop()
            self.receiver.down()
            self.emulator.stop()
        return results(
            seen,
            check(seen),
            stats=self.stats,
            settings=self.s,
            restarts=self.emulator.restarts,
            receiver=self.receiver,
            faults_log=self.faults_file.read_text(),
            drain=self.drain,
            drain_ended=drained,
            driver_stalls=self.processes.stalls,
            wall=time.monotonic() - began,
        )

    def _unacknowledged(self) -> int:
        """Copies not acknowledged yet."""
        with self._lock:
            return sum(self._pending.values())

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
            self.stats.answered(chain.event_id, chain.function, chain.last, ended - started)
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

    # --- processes and chaos -------------------------------------------------------------------

    def _exited(self, port: int, code: int) -> None:
        """A function process died (`soak.processes`): the drain counts it."""
        self.drain.death(time.monotonic())
        self._timeline(f"exit {port} {code}")
        with self._lock:
            if code == -signal.SIGKILL:
                self.stats.kills += 1
            else:
                self._worker_exits.append(
                    f"process on port {port} exited with {code}; see "
                    f"{self.workdir / f'worker-{port}.log'}"
                )

    def _timeline(self, what: str) -> None:
        """Append `<wall-clock time> <what>` to the workdir's timeline.log (kills, the drain's
        start, restarts), to line up with the workers' `soak` lines afterwards."""
        with (self.workdir / "timeline.log").open("a") as out:
            out.write(f"{time.time():.3f} {what}\n")

    def _killer(self) -> None:
        while not self._calm.wait(self.rng.expovariate(1 / self.s.kill_interval)):
            port = self.rng.choice(self.ports)
            if self.processes.kill(port):
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
        receiver_chaos(
            self.receiver,
            random.Random(self.rng.random()),
            self._calm,
            self.s.receiver_fault_interval,
            self._receiver_faults,
        )

    def _receiver_faults(self, n: int) -> None:
        with self._lock:
            self.stats.receiver_faults += n

    # --- observation -------------------------------------------------------------------------

    def _observe(self) -> Observed:
        os.environ["FIRESTORE_EMULATOR_HOST"] = self.emulator.direct_host
        return observe(
            firestore.Client(project=self.s.project),
            self.receiver,
            self.workdir,
            events=self._events,
            excused=self._excused,
            unacknowledged=[
                (c.event_id, c.function, f"{c.tries} tries, last answer {c.last}")
                for c in self._chains
                if not c.acked
            ],
            worker_exits=self._worker_exits,
            settings=self.s,
        )


def _outcome(status: int, body: bytes) -> tuple[str, str]:
    """(outcome or error name, error message) of a worker's answer."""
    try:
        answer = json.loads(body)
    except ValueError:
        return f"http-{status}", body[:300].decode(errors="replace")
    if status == 200:
        return str(answer.get("outcome")), ""
    return str(answer.get("error", f"http-{status}")), str(answer.get("message", ""))
