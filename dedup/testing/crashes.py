"""A handler's process dying at a durable step's boundary, and the delivery after it: how a user
tests that their step handler survives a crash (docs/steps.md, "Testing your steps").

    testing.crash_at_step(place_order, event, step=2, at=Step.BEFORE_STEP)
    outcome = testing.deliver_after_crash(place_order, event, step=2)

Each helper takes one of two shapes:

* `(function, event)`: the function as written, `@trigger_once(...)` under a firebase-functions
  decorator (`@firestore_fn.on_document_created(...)`) or not, and the event it is called
  with: an `HttpEvent` of a builder (`testing.firestore_event(...)`), turned into the
  CloudEvent the platform passes, or any event the function takes. It runs on the
  deduplicator its deliveries use.
* `(deduplicator, event_id, suffix, handler)`: `handler(delivery)` run by
  `deduplicator.run(event_id, suffix, handler, **options)`.

Either may name its parameters (`function=`, `event=`; `deduplicator=`, `event_id=`, ...).
Anything else is a `TypeError` naming both shapes and what was given.

`crash_at_step` delivers once and dies, as a process would, at a boundary of the `step`-th step
the delivery runs (1-based; steps replayed from the record do not count): before it starts
(`Step.BEFORE_STEP`), after its call and before its record (`Step.AFTER_STEP_CALL`, the default:
the window a keyed step's idempotency key covers) or after its record
(`Step.AFTER_STEP_RECORD`). The death is a `SimulatedCrash`, a `BaseException` nothing of the
library handles: the lease is left held, as a killed process leaves it. A transactional step
has no `AFTER_STEP_CALL` (its call and its record commit in one transaction): there the
delivery runs to its end and the `Crash` returned says so, so a loop over every boundary of
every step works. `deliver_after_crash` then waits for the dead delivery's lease to expire
(`lease_seconds`, then while the database still counts it live; give the deduplicator a short
one) and delivers the event again.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dedup.entrances.triggers import DEDUPLICATOR_OF
from dedup.errors import LeaseHeld
from dedup.kernel.delivery import Outcome, OutcomeKind, Step, drive
from dedup.kernel.front_door import Deduplicator, DeduplicatorBase
from dedup.kinds import USES_DEDUP
from dedup.platform.firebase_internals import platform_wrapped
from dedup.testing.event import HttpEvent

STEP_BOUNDARIES = (Step.BEFORE_STEP, Step.AFTER_STEP_CALL, Step.AFTER_STEP_RECORD)
"""Where a step's delivery may be made to die (every one a plain or at-most-once step has)."""

BOUNDARIES_OF_KIND: dict[str, tuple[Step, ...]] = {
    "plain": STEP_BOUNDARIES,
    "at most once": STEP_BOUNDARIES,
    "transactional": (Step.BEFORE_STEP, Step.AFTER_STEP_RECORD),
}
"""The boundaries each kind of step has: a transactional step's call and record are one
commit, so it has no `AFTER_STEP_CALL`."""

SHAPES = (
    "(function, event), a @trigger_once function (under @firestore_fn.on_document_created(...) "
    "or not) with the event it is called with, or (deduplicator, event_id, suffix, handler) "
    "with handler(delivery)"
)
"""The two ways to call the crash helpers, as their errors name them."""
FUNCTION_PARAMETERS = ("function", "event")
DEDUPLICATOR_PARAMETERS = ("deduplicator", "event_id", "suffix", "handler")
"""The parameters of each shape, by name (either shape may give them by keyword)."""


class SimulatedCrash(BaseException):
    """The process dying at a step boundary (`crash_at_step`): nothing of the library catches
    it, so the delivery's lease stays held until it expires."""


@dataclass(frozen=True)
class Crash:
    """What `crash_at_step` did: the delivery died at `at` of its `step`-th step, or (`died`
    False) that step has no such boundary and the delivery ran to its end (`why`)."""

    step: int
    """The step (1-based, among those the delivery ran)."""
    at: Step
    """The boundary asked for."""
    died: bool
    """True: the delivery died there, its lease left held."""
    why: str
    """What happened, in words: where it died, or which step lacks the boundary and why."""


@dataclass(frozen=True)
class _Target:
    """One way to deliver the event: the deduplicator its deliveries run on, and a delivery
    (its outcome, or None when none was seen)."""

    deduplicator: Deduplicator
    deliver: Callable[[], Outcome | None]


def crash_at_step(
    *target: Any, step: int, at: Step = Step.AFTER_STEP_CALL, **options: Any
) -> Crash:
    """Deliver the event once and die at `at` of the `step`-th step the delivery runs (see the
    module docstring for `target`); `options` go to `deduplicator.run` (second shape only).
    Returns a `Crash`; raises `TypeError` for another shape, `ValueError` for a boundary that
    is not a step's, `AssertionError` when the delivery ended with fewer steps or did not run
    the handler (naming which), and what the delivery raised."""
    return _crash(_target("crash_at_step", target, options), step, at)[0]


def deliver_after_crash(
    *target: Any, step: int, at: Step = Step.AFTER_STEP_CALL, **options: Any
) -> Outcome:
    """`crash_at_step`, then, once the dead delivery's lease expired, the delivery that takes
    over: its outcome (`ran` when it finished the handler). Where the step has no such boundary
    the first delivery ran to its end, and its outcome is returned (nothing to take over).
    Raises as `crash_at_step`, and what the second delivery raises."""
    chosen = _target("deliver_after_crash", target, options)
    crash, outcome = _crash(chosen, step, at)
    if crash.died:
        outcome = _after_lease(chosen)
    if outcome is None:
        raise AssertionError("the delivery after the crash never reached its deduplicator")
    return outcome


def _after_lease(chosen: _Target) -> Outcome | None:
    """Deliver once the dead delivery's lease expired: after `lease_seconds`, again every
    0.1 s while the database still counts it live (`LeaseHeld`), for one more lease at most."""
    lease = chosen.deduplicator.config.lease_seconds
    time.sleep(lease)
    deadline = time.monotonic() + lease + 1
    while True:
        try:
            return chosen.deliver()
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _crash(chosen: _Target, step: int, at: Step) -> tuple[Crash, Outcome | None]:
    """`crash_at_step` on the delivery `chosen`, and the outcome of a delivery that did not
    die."""
    if at not in STEP_BOUNDARIES or isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"at must be one of {[s.value for s in STEP_BOUNDARIES]}, step >= 1")
    watch = _Watch(step, at)
    stop = chosen.deduplicator.on_step(watch)
    try:
        outcome = chosen.deliver()
    except SimulatedCrash as died:
        return Crash(step, at, True, str(died)), None
    finally:
        stop()
    return watch.ended(chosen.deduplicator, outcome), outcome


class _Watch:
    """The step hook of one `crash_at_step`: counts the steps the calling thread's delivery
    starts and dies at the boundary asked for."""

    def __init__(self, step: int, at: Step) -> None:
        self.step, self.at = step, at
        self.thread = threading.get_ident()
        self.started = 0
        self.reached: dict[int, list[Step]] = {}
        self.key: str | None = None

    def __call__(self, reached: Step, key: str) -> None:
        if threading.get_ident() != self.thread:
            return  # another thread's delivery on the same deduplicator
        self.key = key
        if reached is Step.BEFORE_STEP:
            self.started += 1
        if reached in STEP_BOUNDARIES:
            self.reached.setdefault(self.started, []).append(reached)
        if reached is self.at and self.started == self.step:
            raise SimulatedCrash(f"died at {self.at.value} of step {self.step} of {key}")

    def ended(self, deduplicator: Deduplicator, outcome: Outcome | None) -> Crash:
        """The delivery returned without dying: a `Crash` that did not happen when its step
        lacks the boundary, else the `AssertionError` that says why it was never reached."""
        if self.started >= self.step:
            name = _step_name(deduplicator, self.key, self.started, self.step)
            named = f"step {self.step}" + (f" ({name!r})" if name else "")
            seen = self.reached.get(self.step, [])
            if Step.AFTER_STEP_CALL in seen or Step.AFTER_STEP_RECORD not in seen:
                reached = ", ".join(boundary.value for boundary in seen)
                raise AssertionError(
                    f"{named} reached {reached} but not {self.at.value}, and the delivery ran to "
                    "its end"
                )
            return Crash(
                self.step,
                self.at,
                False,
                f"{named} is transactional: its call and its record commit in one transaction, "
                f"so it has no {self.at.value} boundary (a transactional step's boundaries: "
                "before_step, after_step_record); the delivery ran to its end",
            )
        if outcome is None:
            raise AssertionError(
                "no delivery reached the deduplicator the helper watched: is the function "
                "decorated with @trigger_once(...)?"
            )
        if outcome.kind is not OutcomeKind.RAN:
            raise AssertionError(
                f"the delivery did not run the handler: its outcome is {outcome.kind.value} for "
                f"{outcome.key} (a duplicate: an earlier delivery recorded this event; clear the "
                "emulator with testing.firestore_emulator().clear(), or use another event)"
            )
        raise AssertionError(
            f"the delivery ran to its end having run {self.started} step(s) (steps replayed "
            f"from the record do not count): there is no step {self.step} to die at"
        )


def _step_name(deduplicator: Deduplicator, key: str | None, started: int, step: int) -> str | None:
    """The name of the `step`-th of the `started` steps a finished delivery ran, read from its
    record (the last `started` ones recorded), or None when it cannot be read."""
    if key is None:
        return None
    try:
        snapshot = drive(deduplicator.records_for()[0].read(key, action="read"))
        steps = getattr(getattr(snapshot, "record", None), "steps", None) or {}
        names = sorted(steps, key=lambda n: steps[n].get("index", 0))
    except Exception:
        return None
    ran = names[len(names) - started :] if len(names) >= started else []
    return ran[step - 1] if len(ran) >= step else None


def _target(where: str, target: tuple[Any, ...], options: dict[str, Any]) -> _Target:
    """The delivery `target` describes (see the module docstring); `TypeError` naming the
    shapes and what was given otherwise."""
    target = _completed(target, options)
    if len(target) == 2 and not isinstance(target[0], DeduplicatorBase):
        function, event = target
        if options:
            raise TypeError(
                f"{where}(function, event) takes no {', '.join(options)}: the function's own "
                "@trigger_once(...) arguments apply"
            )
        return _function_target(where, function, event)
    if len(target) == 4 and isinstance(target[0], Deduplicator):
        deduplicator: Deduplicator = target[0]
        event_id, suffix, handler = target[1:]
        _check_delivery_handler(where, handler)

        def run() -> Outcome:
            return deduplicator.run(event_id, suffix, handler, **options)

        return _Target(deduplicator, run)
    given = ", ".join(_described(value) for value in target)
    raise TypeError(f"{where} takes {SHAPES}; it was given ({given})")


def _completed(target: tuple[Any, ...], options: dict[str, Any]) -> tuple[Any, ...]:
    """`target` with the parameters of its shape given by name taken out of `options`
    (`function=`, `event=`; `deduplicator=`, `event_id=`, `suffix=`, `handler=`)."""
    deduplicator = target[0] if target else options.get("deduplicator")
    names: tuple[str, ...] = FUNCTION_PARAMETERS
    if isinstance(deduplicator, DeduplicatorBase):
        names = DEDUPLICATOR_PARAMETERS
    completed = list(target)
    for name in names[len(target) :]:
        if name in options:
            completed.append(options.pop(name))
    return tuple(completed)


def _function_target(where: str, function: Any, event: Any) -> _Target:
    """A @trigger_once `function` called with `event` as the platform calls it."""
    resolve = getattr(function, DEDUPLICATOR_OF, None)
    if not callable(resolve):
        raise TypeError(
            f"{where}(function, event): {_described(function)} is not a @trigger_once "
            f"function; it takes {SHAPES}. A handler of (event, delivery) without "
            "@trigger_once runs as (deduplicator, event_id, suffix, lambda delivery: "
            "handler(event, delivery))"
        )
    deduplicator = resolve()
    if not isinstance(deduplicator, Deduplicator):
        raise TypeError(
            f"{where}: {_described(function)} is an async function; the crash helpers run "
            "`def` handlers (dedup.Deduplicator) only"
        )
    function, called = _as_called(where, function, event)

    def deliver() -> Outcome | None:
        with _outcomes(deduplicator) as seen:
            function(called)
        return seen[-1] if seen else None

    return _Target(deduplicator, deliver)


def _as_called(where: str, function: Any, event: Any) -> tuple[Any, Any]:
    """(the function to call, the event to call it with): an `HttpEvent` of a builder becomes
    the CloudEvent the platform passes; an event firebase-functions already made (a
    `firestore_fn.Event`) goes to the function under its decorator, as the SDK passes it;
    any other event goes as it is, except to a firebase-functions function."""
    from cloudevents.abstract import CloudEvent
    from firebase_functions.core import CloudEvent as SdkEvent

    if isinstance(event, HttpEvent):
        if not any(name.lower() == "ce-id" for name in event.headers):
            raise TypeError(f"{where}: {event.description or event.id} is not a CloudEvent")
        from cloudevents.http import from_http

        return function, from_http(dict(event.headers), event.body)
    if not platform_wrapped(function) or isinstance(event, CloudEvent):
        return function, event
    if isinstance(event, SdkEvent):
        inner = function
        while platform_wrapped(inner) and callable(getattr(inner, "__wrapped__", None)):
            inner = inner.__wrapped__
        if not platform_wrapped(inner):
            return inner, event
    raise TypeError(
        f"{where}(function, event): {_described(function)} is decorated by firebase-functions, "
        "which is called with the CloudEvent the platform sends: pass a builder's event "
        "(testing.firestore_event(...)), a cloudevents CloudEvent or the firebase-functions "
        f"event, not {_described(event)}"
    )


def _check_delivery_handler(where: str, handler: Any) -> None:
    """Refuse, naming both shapes, a handler that is not `handler(delivery)`."""
    name = getattr(handler, "__name__", repr(handler))
    if getattr(handler, USES_DEDUP, None) is not None:
        raise TypeError(
            f"{where}(deduplicator, event_id, suffix, handler) calls handler(delivery), and "
            f"{name} is a @trigger_once function, which is called with its event: pass it "
            f"with its event, {where}({name}, event, step=...)"
        )
    if not callable(handler):
        raise TypeError(f"{where} takes {SHAPES}; its handler is {_described(handler)}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(
            f"{where}(deduplicator, event_id, suffix, handler) calls handler(delivery), and "
            f"{name}{signature} cannot be called so: pass `lambda delivery: {name}(event, "
            f"delivery)`, or decorate it with @trigger_once(...) and pass it with its event, "
            f"{where}({name}, event, step=...)"
        ) from None


def _described(value: Any) -> str:
    """`value` as an error names it: a function by name and decorators, else its type."""
    if isinstance(value, DeduplicatorBase):
        return type(value).__name__
    if isinstance(value, str):
        return repr(value)
    if callable(value) and hasattr(value, "__name__"):
        kinds = []
        if platform_wrapped(value):
            kinds.append("a firebase-functions function")
        if getattr(value, USES_DEDUP, None) is not None:
            kinds.append("@trigger_once")
        return f"{value.__name__} ({', '.join(kinds) or 'a plain function'})"
    return f"a {type(value).__module__}.{type(value).__qualname__}"


@contextmanager
def _outcomes(deduplicator: Deduplicator) -> Iterator[list[Outcome]]:
    """The outcomes of the deliveries the calling thread makes through `deduplicator` inside
    the block (a trigger_once function returns none): its `run_event` watched meanwhile."""
    seen: list[Outcome] = []
    thread = threading.get_ident()
    original = deduplicator.run_event

    def watched(*args: Any, **kwargs: Any) -> Outcome:
        outcome = original(*args, **kwargs)
        if threading.get_ident() == thread:
            seen.append(outcome)
        return outcome

    setattr(deduplicator, "run_event", watched)  # noqa: B010 (an instance attribute, undone below)
    try:
        yield seen
    finally:
        vars(deduplicator).pop("run_event", None)
