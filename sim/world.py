"""Virtual time, the deliveries as tasks, and every RPC's fate, all decided from one seed.

Each delivery runs in a greenlet of its own: the real kernel's code, unchanged, whose every
call to the store, pause and per-key turn (`sim.records`, `sim.seams`) switches back to the
hub here with a request. The hub is a discrete-event loop on virtual time: it decides how long
the request takes, whether it fails before it applies, applies and loses its answer, is slow,
whether the process dies at this await or freezes, and so which delivery goes on next.
Nothing sleeps for real; a run of minutes of event time takes milliseconds.

An RPC sent at `t` with timeout `d` reaches the server at `t + up` (dropped if that is past
`t + d`: gRPC's deadline travels with the call), applies there (or waits for a lock, then
applies or gives up at the deadline), and its answer arrives at `t + up + wait + down`; one
that would arrive after `t + d` is `DEADLINE_EXCEEDED` at `t + d`, applied or not.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import greenlet
from google.api_core import exceptions as api

from sim.server import Server, Waits, Write
from sim.trace import Trace

ERRORS_BEFORE = (api.ServiceUnavailable, api.DeadlineExceeded, api.Aborted)
_push, _pop = heapq.heappush, heapq.heappop


class Died(BaseException):
    """Raised inside a task whose process was killed, when the run ends (unwinds it)."""


@dataclass
class Faults:
    """How often each fault strikes while faults are on (until `until`, virtual seconds)."""

    until: float = 0.0
    error_before: float = 0.0
    lost_response: float = 0.0
    slow: float = 0.0
    slow_seconds: float = 5.0
    kill: float = 0.0
    pause: float = 0.0
    pause_seconds: float = 5.0
    disabled: frozenset[int] = frozenset()
    """Indexes of faults switched off (the shrinker's knob): the n-th fault drawn is skipped."""
    late_write: float = 0.5
    """The chance that a write whose caller gave up while it waited on a lock still applies
    once the lock is released. The emulator does so at times (a queued write is not withdrawn
    when its client's deadline passes), and Firestore promises neither, so the kernel must be
    right both ways. Drawn from a randomness of its own: the other draws of a seed stay."""


@dataclass
class Instance:
    """One process of the function: its front door, its clock and whether it lives."""

    name: str
    skew: float = 0.0
    """How far its wall clock is off the database's (seconds)."""
    frozen_wall: tuple[float, float] | None = None
    """A span of virtual time during which its wall clock stands still."""
    alive: bool = True
    frozen_until: float = 0.0
    front: Any = None
    entrance: Any = None
    """The process's decorated function of an HTTP or callable run (`sim.requests`)."""
    turns: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class Task:
    """One delivery: a greenlet running an entrance of the kernel."""

    id: int
    name: str
    instance: Instance
    event: str
    body: Callable[[], Any]
    glet: Any = None
    answer: Any = None
    done: bool = False
    dead: bool = False
    run: Any = None  # the kernel's Run, once made (sim.seams)
    tokens: set[str] = field(default_factory=set)
    started_at: float = 0.0
    answered_at: float | None = None
    handler_at: float | None = None
    """When the handler (or `reconcile`) was first called."""
    sends: list[tuple[float, str, float]] = field(default_factory=list)
    """(virtual time, what, timeout) of each RPC it sent."""


class World:
    """One run: the clock, the server, the tasks and the randomness that drives them."""

    def __init__(self, seed: int, mode: str, faults: Faults, *, detail: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)  # the schedule: latencies, ties
        self.fault_rng = random.Random(seed * 7919 + 1)  # the faults
        self._backoff_rng: random.Random | None = None  # the kernel's own jitter
        self._late_rng: random.Random | None = None  # abandoned writes that still apply
        self._slow_rng: random.Random | None = None
        self._values_rng: random.Random | None = None
        self.faults = faults
        self.server = Server(mode)
        self.now = 0.0
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = 0
        self.tasks: list[Task] = []
        self.current: Task | None = None
        self.hub = greenlet.getcurrent()
        self.trace = Trace(detail)
        self.tracing = detail
        self.fault_counts: dict[str, int] = {}
        self.fault_index = 0
        self.tokens = 0
        self.closing = False
        self.schedule_hash = 0
        self.lock_waiters: list[tuple[Any, ...]] = []
        self.late_writes: list[tuple[str, Any]] = []
        """(what, call) of writes whose caller gave up while they waited on a lock, and that
        will apply once it is released (`Faults.late_write`)."""
        self.user_values = False
        """The run's user data comes from the catalogue (`sim.runner.Env.catalogue`): the
        store reads its timestamps back as Firestore does (`sim.records.USER_FIELDS`)."""
        self.freezes: list[tuple[str, float, float]] = []
        """(instance, from, until) of each pause."""
        self.unencodable: list[tuple[str, str]] = []
        """(path, why) of record writes the client could not encode."""

    @property
    def backoff_rng(self) -> random.Random:
        """The kernel's backoff jitter and the client's retry pauses, made when first asked
        (a run with no retry never seeds it): the same draws as a generator made up front."""
        if self._backoff_rng is None:
            self._backoff_rng = random.Random(self.seed * 104729 + 2)
        return self._backoff_rng

    @property
    def late_rng(self) -> random.Random:
        """Whether an abandoned write still applies (`Faults.late_write`), made when first
        asked."""
        if self._late_rng is None:
            self._late_rng = random.Random(self.seed * 15485863 + 3)
        return self._late_rng

    @property
    def slow_rng(self) -> random.Random:
        """How long the user's code takes (`sim.runner.Env.user_time`), made when first asked
        (a run whose user code is slow)."""
        if self._slow_rng is None:
            self._slow_rng = random.Random(self.seed * 86028121 + 13)
        return self._slow_rng

    @property
    def values_rng(self) -> random.Random:
        """The user's data from the catalogue (`sim.catalogue`), made when first asked."""
        if self._values_rng is None:
            self._values_rng = random.Random(self.seed * 2654435761 + 17)
        return self._values_rng

    # --- the loop ----------------------------------------------------------------------

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        _push(self.heap, (when, self.seq, fn, args))

    def run(self, horizon: float) -> None:
        """Run events until none is left or virtual time passes `horizon`."""
        heap = self.heap
        while heap:
            when, _, fn, args = _pop(heap)
            if when > horizon:
                break
            if when > self.now:
                self.now = when
            fn(*args)

    def us(self) -> int:
        """The database clock now, in microseconds."""
        return int(self.now * 1e6)

    # --- tasks -------------------------------------------------------------------------

    def spawn(self, task: Task) -> None:
        self.tasks.append(task)
        task.started_at = self.now
        task.glet = greenlet.greenlet(self._body(task), parent=self.hub)
        if self.tracing:
            self.trace.add(
                self.now,
                task.name,
                "starts",
                "delivery of {} on {}",
                task.event,
                task.instance.name,
            )
        self._resume(task, None)

    def _body(self, task: Task) -> Callable[[], None]:
        def body(*_: Any) -> None:
            try:
                task.answer = task.body()
            except Died:
                return
            except Exception as exc:
                task.answer = exc
            task.done = True
            task.answered_at = self.now

        return body

    def _resume(self, task: Task, answer: Any) -> None:
        if task.dead or task.done:
            return
        if task.instance.frozen_until > self.now:  # a frozen process answers nothing yet
            self.at(task.instance.frozen_until, self._resume, task, answer)
            return
        self.current = task
        request = task.glet.switch(answer)
        self.current = None
        if task.done:
            self.on_answer(task)
        elif request is not None:
            self._handle(task, request)

    def on_answer(self, task: Task) -> None:
        """Set by the runner: the platform learns a delivery's answer."""

    def on_death(self, task: Task) -> None:
        """Set by the runner: the platform learns that a delivery's process died."""

    def ask(self, request: tuple[Any, ...]) -> Any:
        """From inside a task: hand `request` to the hub and wait for its answer."""
        if self.closing:
            raise Died()
        answer = self.hub.switch(request)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    # --- faults ------------------------------------------------------------------------

    def fault(self, kind: str, chance: float) -> bool:
        """Whether fault `kind` strikes now (while faults are on), counted."""
        if self.now >= self.faults.until or chance <= 0:
            return False
        if self.fault_rng.random() >= chance:
            return False
        self.fault_index += 1
        if self.fault_index in self.faults.disabled:
            return False
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1
        return True

    def kill(self, instance: Instance, where: str) -> None:
        instance.alive = False
        if self.tracing:
            self.trace.add(self.now, instance.name, "FAULT", "process killed at {}", where)
        for task in self.tasks:
            if task.instance is instance and not task.done and not task.dead:
                task.dead = True
                self.on_death(task)

    def _handle(self, task: Task, request: tuple[Any, ...]) -> None:
        kind = request[0]
        self.schedule_hash = hash((self.schedule_hash, task.id, kind))
        if self.now < self.faults.until and self._strikes(task, kind):
            return
        if kind == "sleep":
            if self.tracing:
                self.trace.add(self.now, task.name, "sleeps", "{:.3f} s", request[1])
            self.at(self.now + request[1], self._resume, task, None)
        elif kind == "turn":
            self._turn(task, request[1], request[2])
        elif kind == "rpc":
            self._rpc(task, request[1], request[2], request[3])
        elif kind == "effect":
            self._effect(task, request[1])
        else:  # pragma: no cover
            raise AssertionError(request)

    def _strikes(self, task: Task, kind: str) -> bool:
        """The process of `task` dies at this await (True: the request never leaves), or
        freezes, or neither."""
        instance = task.instance
        if kind != "sleep" and self.fault("kill", self.faults.kill):
            before = self.fault_rng.random() < 0.5
            if before or kind not in ("rpc", "effect"):
                self.kill(instance, f"{kind} (before sending)")
                return True
            self.kill(instance, f"{kind} (after sending)")
        elif self.fault("pause", self.faults.pause):
            pause = self.fault_rng.uniform(0.1, self.faults.pause_seconds)
            instance.frozen_until = max(instance.frozen_until, self.now + pause)
            self.freezes.append((instance.name, self.now, self.now + pause))
            if self.tracing:
                self.trace.add(
                    self.now, instance.name, "FAULT", "process frozen for {:.3f} s", pause
                )
        return False

    # --- per-key turns of one instance -------------------------------------------------

    def _turn(self, task: Task, key: str, timeout: float | None) -> None:
        waiting = task.instance.turns.setdefault(key, [])
        waiting.append(task)
        if len(waiting) == 1:
            self.at(self.now, self._resume, task, None)
            return
        if timeout is not None:
            self.at(self.now + timeout, self._turn_timeout, task, key)

    def _turn_timeout(self, task: Task, key: str) -> None:
        waiting = self.current_turns(task, key)
        if task in waiting[1:]:
            waiting.remove(task)
            from dedup.kernel.turns import TurnTimeout

            self._resume(task, TurnTimeout(f"no turn on {key}"))

    def current_turns(self, task: Task, key: str) -> list[Any]:
        return task.instance.turns.get(key, [])

    def release_turn(self, task: Task, key: str) -> None:
        """`task` leaves its turn on `key`: the next waiter's turn starts now."""
        waiting = task.instance.turns.get(key, [])
        if waiting and waiting[0] is task:
            waiting.pop(0)
            if waiting:
                self.at(self.now, self._resume, waiting[0], None)
        if not waiting:
            task.instance.turns.pop(key, None)

    # --- RPCs ----------------------------------------------------------------------------

    def latency(self) -> float:
        if self.now < self.faults.until and self.fault("slow", self.faults.slow):
            return self.fault_rng.uniform(0.5, self.faults.slow_seconds)
        return self.rng.uniform(0.001, 0.02)

    def _rpc(self, task: Task, what: str, call: Callable[[int], Any], timeout: float) -> None:
        task.sends.append((self.now, what, timeout))
        if self.tracing:
            self.trace.add(self.now, task.name, "→", "{} (timeout {:.3f} s)", what, timeout)
        state = {"answered": False}
        deadline = self.now + timeout
        self.at(deadline, self._deadline, task, what, state)
        if self.fault("error_before", self.faults.error_before):
            error = self.fault_rng.choice(ERRORS_BEFORE)(f"injected before {what} applied")
            self.at(self.now + self.latency(), self._answer, task, what, state, error)
            return
        self.at(self.now + self.latency(), self._apply, task, what, call, state, deadline)

    def _apply(
        self, task: Task, what: str, call: Any, state: dict[str, bool], deadline: float
    ) -> None:
        if self.now >= deadline:
            return  # the deadline passed on the way: the server drops it
        try:
            result: Any = call(self.us())
        except Waits as waits:
            wake = min(deadline, waits.until / 1e6 + 1e-6)
            if self.tracing:
                self.trace.add(
                    self.now,
                    "server",
                    "waits",
                    "{} on a lock of txns {}",
                    what,
                    sorted(waits.holders),
                )
            self.lock_waiters.append((task, what, call, state, deadline))
            self.at(wake, self._retry_waiter, task, what, call, state, deadline)
            return
        except api.GoogleAPICallError as error:
            result = error
        verb = "refused" if isinstance(result, Exception) else "applied"
        if self.tracing:
            self.trace.add(self.now, "server", verb, "{} → {}", what, _Shown(result))
        self.after_apply()
        if not isinstance(result, Exception) and self.fault(
            "lost_response", self.faults.lost_response
        ):
            lost = self.fault_rng.choice((api.ServiceUnavailable, api.DeadlineExceeded))
            result = lost(f"injected: the answer to {what} was lost after it applied")
        self.at(self.now + self.latency(), self._answer, task, what, state, result)

    def after_apply(self) -> None:
        """Locks may have been released: let the writes waiting on them try again."""
        if self.lock_waiters:
            waiters, self.lock_waiters = self.lock_waiters, []
            for waiter in waiters:
                self.at(self.now, self._retry_waiter, *waiter)
        if self.late_writes:
            late, self.late_writes = self.late_writes, []
            for what, call in late:
                self.at(self.now, self._apply_late, what, call)

    def _retry_waiter(
        self, task: Task, what: str, call: Any, state: dict[str, bool], deadline: float
    ) -> None:
        entry = (task, what, call, state, deadline)
        waited = entry in self.lock_waiters
        if waited:
            self.lock_waiters.remove(entry)
        if state["answered"] or self.now >= deadline:
            # Its caller gave up while it waited: the server may still hold it.
            if waited and self.late_rng.random() < self.faults.late_write:
                self._apply_late(what, call)
            return
        self._apply(task, what, call, state, deadline)

    def _apply_late(self, what: str, call: Any) -> None:
        """Apply a write its caller gave up on, as soon as no lock holds it; nobody is told."""
        try:
            result: Any = call(self.us())
        except Waits:
            self.late_writes.append((what, call))
            return
        except api.GoogleAPICallError as error:
            result = error
        if self.tracing:
            verb = "refused" if isinstance(result, Exception) else "applied"
            self.trace.add(self.now, "server", verb, "{} late → {}", what, _Shown(result))
        if not isinstance(result, Exception):
            self.after_apply()

    def _deadline(self, task: Task, what: str, state: dict[str, bool]) -> None:
        if not state["answered"]:
            self._answer(task, what, state, api.DeadlineExceeded(f"Deadline exceeded: {what}"))

    def _answer(self, task: Task, what: str, state: dict[str, bool], result: Any) -> None:
        if state["answered"]:
            return
        state["answered"] = True
        if self.tracing:
            self.trace.add(self.now, task.name, "←", _show, result)
        self._resume(task, result)

    # --- effects at a receiver -------------------------------------------------------------

    def _effect(self, task: Task, entry: Any) -> None:
        if self.tracing:
            self.trace.add(self.now, task.name, "effect", "{} →", entry)
        self.at(self.now + self.latency(), self._effect_applies, task, entry)

    def _effect_applies(self, task: Task, entry: Any) -> None:
        self.effect_applied(task, entry)
        self.at(self.now + self.latency(), self._resume, task, None)

    def effect_applied(self, task: Task, entry: Any) -> None:
        """Set by the runner: the receiver applies an effect."""

    # --- what the kernel's seams ask ---------------------------------------------------

    def monotonic(self) -> float:
        """An instance's monotonic clock: virtual time (it never stops, see docs)."""
        return self.now

    def sleep(self, seconds: float) -> None:
        self.ask(("sleep", max(0.0, seconds)))

    def token(self) -> str:
        """A deterministic owner token (uuid4 hex), remembered as the current task's."""
        self.tokens += 1
        value = f"{self.seed & 0xFFFFFFFF:08x}{self.tokens:024x}"
        if self.current is not None:
            self.current.tokens.add(value)
        return value

    def send(self, what: str, call: Callable[[int], Any], timeout: float) -> Any:
        """From inside a task: one RPC `call(now_us)` to the server."""
        return self.ask(("rpc", what, call, timeout))

    def commit(
        self, writes: list[Write], timeout: float, txn: int | None = None, what: str = "commit"
    ) -> int:
        return self.send(what, lambda now: self.server.commit(writes, now, txn), timeout)


class _Shown:
    """A result shown in a trace line when it is printed."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def __str__(self) -> str:
        return _show(self.result)


def _show(result: Any) -> str:
    if isinstance(result, Exception):
        return f"{type(result).__name__}: {result}"
    if isinstance(result, tuple) and len(result) == 3:
        data, read, updated = result
        return f"read at {read} (updated {updated}) {_brief(data)}"
    return str(result)


def _brief(data: Any) -> str:
    if not isinstance(data, dict):
        return "absent" if data is None else str(data)[:80]
    keys = ("state", "owner", "attempts", "leaseStartedAt", "steps", "counter")
    shown = {k: data[k] for k in keys if k in data}
    text = ", ".join(f"{k}={v!s:.40}" for k, v in shown.items())
    return "{" + text + "}"
