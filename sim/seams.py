"""Where the kernel reads clocks, sleeps and draws randomness, and how the simulator takes
them over while it runs (and gives them back after: `kernel_seams`).

What the kernel offers as a seam, and what it does not (docs/simulation.md):

* `DedupConfig.clock` (the instance's wall clock, for `expireAt` and the maximum event age) is
  injectable: each simulated instance gets its own, skewed or standing still.
* Both front doors pause and take per-key turns through their `FlowIO` (`sleep`, `turn`):
  the simulated store's (`sim.records.SimFlowIO`) serves both, on virtual time.
* A delivery's time budget, lease end and retry deadlines are its `dedup.kernel.budget.Budget`'s,
  on `DedupConfig.budget_clock` (None: `time.monotonic`, looked up when a budget is made).
* **No seam**: the kernel draws its backoff jitter from the `random` module
  (`dedup.kernel.store.backoff`) and owner tokens from `uuid.uuid4()` (`lease`, `atomic`), and
  reads `time` for its pauses and the instance's memory of keys (`dedup.kernel.run`); the HTTP
  and callable adapters wait for a running request with `time.sleep` (`dedup.http.replay`).
  The simulator replaces the `time`, `random` and `uuid` names inside those modules (and
  `dedup.kernel.budget`'s `time`) while a run is going on.
"""

from __future__ import annotations

import importlib
import logging
import time as real_time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dedup.kernel import atomic, budget, lease, run, store

http_replay = importlib.import_module("dedup.http.replay")
"""The module (`dedup.http` exports a function of the same name)."""

CURRENT: Any = None
"""The world of the run going on (`sim.world.World`)."""


class _Time:
    """The `time` module as the kernel's modules see it during a run."""

    @staticmethod
    def monotonic() -> float:
        return float(CURRENT.monotonic())

    @staticmethod
    def sleep(seconds: float) -> None:
        CURRENT.sleep(seconds)

    time = staticmethod(real_time.time)
    perf_counter = staticmethod(real_time.perf_counter)


class _Random:
    """The `random` module as `dedup.kernel.store.backoff` sees it: the run's seeded stream."""

    @staticmethod
    def uniform(low: float, high: float) -> float:
        return float(CURRENT.backoff_rng.uniform(low, high))


class _Token:
    def __init__(self, hex_: str) -> None:
        self.hex = hex_


class _Uuid:
    """The `uuid` module as the flows see it: deterministic owner tokens, each remembered as
    the current delivery's (so the invariants know whose a record's owner is)."""

    @staticmethod
    def uuid4() -> _Token:
        return _Token(CURRENT.token())


_ORIGINAL_INIT = run.Run.__init__


def _init(self: run.Run, *args: Any, **kwargs: Any) -> None:
    _ORIGINAL_INIT(self, *args, **kwargs)
    task = CURRENT.current
    if task is not None:
        task.run = self


_PATCHES: list[tuple[Any, str, Any]] = [
    *((module, "time", _Time) for module in (budget, run, store, http_replay)),
    (store, "random", _Random),
    (lease, "uuid", _Uuid),
    (atomic, "uuid", _Uuid),
    (run.Run, "__init__", _init),
]


@contextmanager
def kernel_seams() -> Iterator[None]:
    """The kernel's clocks, sleeps and randomness are the simulator's inside this block."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _PATCHES]
    for owner, name, value in _PATCHES:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


@contextmanager
def quiet() -> Iterator[None]:
    """The kernel's seams taken over and its log line off (every delivery logs one)."""
    loggers = [logging.getLogger(name) for name in ("dedup", "dedup.http")]
    was = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        with kernel_seams(), warnings.catch_warnings():
            # The simulator's step functions are closures on purpose (each run's own ledger):
            # the kernel's advice against them is for users, once per place, and costs here.
            warnings.filterwarnings("ignore", message="step .* calls a ")
            yield
    finally:
        for logger, disabled in zip(loggers, was, strict=True):
            logger.disabled = disabled
