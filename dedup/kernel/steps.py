"""Durable steps: a lease-mode handler with several effects runs each of them once, recorded in
the event's own record (docs/steps.md).

`delivery.step(name, fn, ...)` calls `fn` and records its value under `name` in the record's
`steps`, with one write fenced by the delivery's lease (`dedup.kernel.lease.Lease`) that also renews
the lease. A later delivery of the same event (a take-over after a crash, a retry after a
failure) finds the step recorded, in the record its claim already read, and returns the value
without calling `fn`.

* plain: `fn(*args)`, then its record (one write). At least once; once at a receiver that
  honours the step's key (`step_key`), which is the same on every delivery.
* `transactional=True`: `fn(transaction, *args)`, its record in that same transaction, fenced
  by the lease. Exactly once.
* `on_interrupted="skip"`: its start recorded, `fn(*args)`, its record (two writes). At most
  once: a later delivery that finds a start without an end raises `StepInterrupted`.

The mismatch rule: each step is recorded with its place among the handler's steps (0, 1, ...).
A delivery must call the recorded steps in the recorded order: the n-th step it calls has the
n-th recorded name, and it calls each name once; otherwise `StepMismatch`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dedup.errors import ConfigError, StepInterrupted, StepMismatch, StepTooLarge
from dedup.kernel.record import STEP_NAME

MAX_STEP_BYTES = 64 * 1024
"""The largest value one step may record (its JSON rendering, UTF-8)."""
MAX_STEPS = 100
"""The most steps one event may record."""
MAX_STEPS_BYTES = 512 * 1024
"""The most all steps of one event may hold together: half of Firestore's 1 MiB document,
leaving the rest of the record (notes, result) room."""
DONE, STARTED = "done", "started"
"""A recorded step's `state`: its value is recorded, or (at most once) only its start."""
SKIP = "skip"
"""`on_interrupted="skip"`: the step runs at most once."""

type StepCall = Callable[[Any], Awaitable[Any]]
"""`await call(writer)`: the step's `fn` with its arguments; `writer` is the transaction of a
transactional step, else None."""


def check_name(name: object) -> None:
    """Refuse (`ConfigError`) a step name that is not 1 to 100 of `[A-Za-z0-9_.-]`."""
    if not isinstance(name, str) or not re.fullmatch(STEP_NAME, name):
        raise ConfigError(f"step name {name!r} must be 1 to 100 of [A-Za-z0-9_.-]")


def step_key(key: str, name: str) -> str:
    """The idempotency key of step `name` of the record `key`, `<key>/<name>`: the same on
    every delivery of the event, different for each step; `ConfigError` for a bad name."""
    check_name(name)
    return f"{key}/{name}"


def step_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    transactional: bool,
    awaited: bool,
) -> StepCall:
    """`fn` with its arguments as a step's call: given the transaction first when
    `transactional`, its result awaited when `awaited` (an `AsyncDelivery`'s `fn`)."""

    async def call(writer: Any) -> Any:
        result = fn(writer, *args, **kwargs) if transactional else fn(*args, **kwargs)
        return await result if awaited else result

    return call


def at_most_once(transactional: bool, on_interrupted: str | None) -> bool:
    """Whether a step of these options runs at most once; `ConfigError` for an `on_interrupted`
    other than None or "skip", or one given to a transactional step (exactly once already)."""
    if on_interrupted not in (None, SKIP):
        raise ConfigError(f'on_interrupted={on_interrupted!r}: use None or "skip"')
    if transactional and on_interrupted is not None:
        raise ConfigError("a transactional step is exactly once: on_interrupted does not apply")
    return on_interrupted == SKIP


class StepLog:
    """The steps of one delivery: those its record held when the lease was claimed (then its
    own, as it records them), and the names it called so far."""

    def __init__(self, recorded: Mapping[str, Any] | None = None) -> None:
        """Start from the record's `steps` (None: none recorded)."""
        self.recorded: dict[str, Any] = dict(recorded or {})
        self.called: list[str] = []

    def replay(self, name: str, path: str) -> tuple[bool, Any]:
        """(True, value) for a step recorded done, (False, None) for one to call now; its place
        is the number of steps this delivery called before it. Raises `StepMismatch` against
        the mismatch rule, `StepInterrupted` for an at-most-once step started and never ended."""
        check_name(name)
        index = len(self.called)
        if name in self.called:
            raise StepMismatch(f"{path}: step {name!r} is called twice by one delivery")
        self.called.append(name)
        entry = self.recorded.get(name)
        if entry is None:
            other = next((n for n, e in self.recorded.items() if e.get("index") == index), None)
            if other is not None:
                raise StepMismatch(
                    f"{path}: step {index} was recorded as {other!r}, this delivery calls "
                    f"{name!r} there; call the steps in the same order on every delivery"
                )
            return False, None
        if entry.get("index") != index:
            raise StepMismatch(
                f"{path}: step {name!r} was recorded as step {entry.get('index')}, this "
                f"delivery calls it as step {index}; call the steps in the same order"
            )
        if entry.get("state") == DONE:
            return True, entry.get("value")
        raise StepInterrupted(
            f"{path}: step {name!r} runs at most once and an earlier delivery started it "
            "without recording its end: it is not called again"
        )

    def landed(self, steps: Mapping[str, Any]) -> None:
        """The record now holds `steps` (a write of this delivery's committed)."""
        self.recorded = dict(steps)

    def with_entry(self, name: str, state: str, value: Any = None) -> dict[str, Any]:
        """The steps once `name` (this delivery's last called) is recorded in `state`; raises
        `StepTooLarge` past `MAX_STEP_BYTES`, `MAX_STEPS` or `MAX_STEPS_BYTES`."""
        entry: dict[str, Any] = {"index": len(self.called) - 1, "state": state}
        if state == DONE:
            entry["value"] = value
            size = _size(value)
            if size > MAX_STEP_BYTES:
                raise StepTooLarge(f"step {name!r} returned {size} bytes, over {MAX_STEP_BYTES}")
        steps = {**self.recorded, name: entry}
        if len(steps) > MAX_STEPS:
            raise StepTooLarge(f"step {name!r} is step {len(steps)}, over {MAX_STEPS} steps")
        if (total := _size(steps)) > MAX_STEPS_BYTES:
            raise StepTooLarge(
                f"the steps with {name!r} hold {total} bytes, over {MAX_STEPS_BYTES}"
            )
        return steps


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str, ensure_ascii=False).encode())
