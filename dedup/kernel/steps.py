"""The rules of durable steps (docs/steps.md): a step's name (`check_name`) and key
(`step_key`), its call's fingerprint (`fingerprint`), its kind (`at_most_once`), the limits, and
one delivery's steps (`StepLog`: replay, the mismatch rule, one step at a time). No I/O: the
writes are `dedup.kernel.step_writes`'.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.base_document import BaseDocumentReference
from google.cloud.firestore_v1.vector import Vector

from dedup.errors import ConfigError, RecordRefused, StepInterrupted, StepMismatch, StepTooLarge
from dedup.kernel.budget import LEASE_MARGIN as LEASE_MARGIN
from dedup.kernel.record import STEP_NAME, Field
from dedup.platform.firestore_refusals import field_name_refusal, refusal
from dedup.platform.firestore_sizes import MAX_DOCUMENT_BYTES, value_size

MAX_STEP_BYTES = 64 * 1024
"""The largest value one step may record, as Firestore measures it
(`dedup.platform.firestore_values.value_size`: an integer 8 bytes, a string its UTF-8 bytes + 1)."""
MAX_STEPS = 100
"""The most steps one event may record."""
MAX_STEPS_BYTES = 512 * 1024
"""The most all steps of one event may hold together, measured the same way."""
DONE, STARTED = "done", "started"
"""A recorded step's `state`: its value is recorded, or (at most once) only its start."""
REFUSED = "refused"
"""An at-most-once step recorded done without its value, which Firestore refused: `True`."""
SKIP = "skip"
"""`on_interrupted="skip"`: the step runs at most once."""
FN, ARGS = "fn", "args"
"""A recorded step's fingerprint: its function's qualified name, the hash of its arguments."""


def check_name(name: object) -> None:
    """Refuse (`ConfigError`) a step name that is not 1 to 100 of `[A-Za-z0-9_.-]`, or that
    Firestore reserves as a field name (`__.*__`)."""
    if not isinstance(name, str) or not re.fullmatch(STEP_NAME, name):
        raise ConfigError(f"step name {name!r} must be 1 to 100 of [A-Za-z0-9_.-]")
    reason = field_name_refusal(name)
    if reason is not None:
        raise ConfigError(f"step name {name!r} cannot be a key of the record: {reason}")


def step_key(key: str, name: str) -> str:
    """The idempotency key of step `name` of the record `key`, `<key>/<name>`, the same on
    every delivery; `ConfigError` for a bad name."""
    check_name(name)
    return f"{key}/{name}"


@dataclass(frozen=True)
class StepCall:
    """`await call(writer)`: a step's `fn` with its arguments, the transaction (`writer`) first
    when `transactional`, its result awaited when `awaited`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    transactional: bool
    awaited: bool

    async def __call__(self, writer: Any) -> Any:
        """Call `fn` (with `writer` first when transactional); its value."""
        args = (writer, *self.args) if self.transactional else self.args
        result = self.fn(*args, **self.kwargs)
        return await result if self.awaited else result

    def fingerprint(self) -> dict[str, str]:
        """What the step is recorded as called with (`fingerprint`)."""
        return fingerprint(self.fn, self.args, self.kwargs)


def step_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    transactional: bool,
    awaited: bool,
) -> StepCall:
    """`fn` with its arguments as a step's call (`StepCall`)."""
    return StepCall(fn, args, kwargs, transactional, awaited)


_WARNED: set[str] = set()


def warn_if_anonymous(name: str, fn: Callable[..., Any]) -> None:
    """Warn (`UserWarning`, once per qualified name and process) when step `name`'s `fn` is a
    lambda or a closure, whose captures are not fingerprinted (docs/steps.md)."""
    while isinstance(fn, partial):
        fn = fn.func
    qualname = str(getattr(fn, "__qualname__", "") or "")
    if "<lambda>" not in qualname and "<locals>" not in qualname:
        return
    if qualname in _WARNED or len(_WARNED) >= 1024:
        return
    _WARNED.add(qualname)
    kind = "a lambda" if qualname.endswith("<lambda>") else "a function defined inside another"
    warnings.warn(
        f"step {name!r} calls {kind} ({qualname}): a step is recorded by its function's "
        "qualified name and a hash of its arguments, not by what a lambda or closure captures, "
        "so another lambda or closure of the same name on a later delivery (lambda: refund(10) "
        "for lambda: charge(10)) replays the recorded value without being called. Pass a "
        "module-level function and its arguments: delivery.step(name, charge, 10)",
        UserWarning,
        stacklevel=4,
    )


def fingerprint(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, str]:
    """`{FN: fn's __qualname__, ARGS: a hash of args and kwargs}` (a `functools.partial` by its
    function and all arguments). An argument Firestore could store is hashed by the value a
    replay gives back, any other by its type's name alone."""
    while isinstance(fn, partial):
        args, kwargs = (*fn.args, *args), {**fn.keywords, **kwargs}
        fn = fn.func
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    canonical = [[_canonical(a, 0) for a in args], {k: _canonical(v, 0) for k, v in kwargs.items()}]
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return {FN: str(name), ARGS: hashlib.sha256(text.encode()).hexdigest()[:32]}


def _canonical(value: Any, depth: int) -> Any:
    if depth > 64:
        return ["?", type(value).__qualname__]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return ["n", int(value)] if -(2**63) <= value < 2**63 else ["?", "int"]
    if isinstance(value, float):
        exact = value.is_integer() and abs(value) < 2**53
        return ["n", int(value)] if exact else ["n", repr(float(value))]
    if isinstance(value, str):
        return ["s", str.__str__(value)]
    if isinstance(value, bytes):
        return ["b", value.hex()]
    if isinstance(value, datetime):
        utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return ["t", utc.isoformat(timespec="microseconds")]
    if isinstance(value, GeoPoint):
        return ["g", _canonical(value.latitude, depth + 1), _canonical(value.longitude, depth + 1)]
    if isinstance(value, BaseDocumentReference):
        return ["r", value.path]
    if isinstance(value, Vector):
        return ["v", [float(x) for x in value]]
    if isinstance(value, list | tuple):
        return ["l", [_canonical(v, depth + 1) for v in value]]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return ["m", {str.__str__(k): _canonical(v, depth + 1) for k, v in value.items()}]
    return ["?", type(value).__qualname__]


def at_most_once(transactional: bool, on_interrupted: str | None) -> bool:
    """Whether a step of these options runs at most once; `ConfigError` for an `on_interrupted`
    other than None or "skip", or one given to a transactional step (exactly once already)."""
    if on_interrupted not in (None, SKIP):
        raise ConfigError(f'on_interrupted={on_interrupted!r}: use None or "skip"')
    if transactional and on_interrupted is not None:
        raise ConfigError("a transactional step is exactly once: on_interrupted does not apply")
    return on_interrupted == SKIP


class StepLog:
    """One delivery's steps: those recorded (at the claim, then its own), those it called with
    their fingerprints, and the one running now."""

    def __init__(self, recorded: Mapping[str, Any] | None = None) -> None:
        """Start from the record's `steps` (None: none recorded)."""
        self.recorded: dict[str, Any] = dict(recorded or {})
        self.called: list[str] = []
        self.calls: dict[str, dict[str, str]] = {}
        """Each called name's fingerprint (`fingerprint`), recorded with its entry."""
        self.running: str | None = None
        """The step whose function or writes are under way (None: none)."""
        self.scrambled = _scrambled(self.recorded)
        """The record's places are an earlier version's concurrent steps: replayed by name,
        whatever their place (docs/steps.md)."""

    def begin(self, name: str, path: str) -> None:
        """Step `name` starts, until `end`; `StepMismatch` if another step of this delivery is
        running (the caller holds a lock around `begin`)."""
        if self.running is not None:
            raise StepMismatch(
                f"{path}: step {name!r} was started while step {self.running!r} of the same "
                "delivery is running; steps run one after the other: await each before the "
                "next (no asyncio.gather, no threads over one delivery)"
            )
        self.running = name

    def end(self) -> None:
        """The running step is over (returned or raised)."""
        self.running = None

    def replay(self, name: str, path: str, called: dict[str, str]) -> tuple[bool, Any]:
        """(True, value) for a step recorded done, (False, None) for one to call now with the
        fingerprint `called`. Raises `StepMismatch` against the mismatch rule,
        `StepInterrupted` for an at-most-once step started and never ended, `RecordRefused` for
        a name the record cannot hold or a step recorded done without its refused value."""
        try:
            check_name(name)
        except ConfigError as exc:
            raise RecordRefused(f"{path}: {exc}; its function is not called") from None
        index = len(self.called)
        if name in self.called:
            raise StepMismatch(f"{path}: step {name!r} is called twice by one delivery")
        self.called.append(name)
        self.calls[name] = called
        entry = self.recorded.get(name)
        if entry is None:
            other = next((n for n, e in self.recorded.items() if e.get("index") == index), None)
            if other is not None and not self.scrambled:
                raise StepMismatch(
                    f"{path}: step {index} was recorded as {other!r}, this delivery calls "
                    f"{name!r} there; call the steps in the same order on every delivery"
                )
            return False, None
        if entry.get("index") != index and not self.scrambled:
            raise StepMismatch(
                f"{path}: step {name!r} was recorded as step {entry.get('index')}, this "
                f"delivery calls it as step {index}; call the steps in the same order"
            )
        _same_call(name, path, entry, called)
        if entry.get("state") == DONE:
            if entry.get(REFUSED):
                raise RecordRefused(
                    f"{path}: step {name!r} ran on an earlier delivery and returned a value "
                    "Firestore cannot store, so its end was recorded without it: it is not "
                    "called again and has no value to give"
                )
            return True, entry.get("value")
        raise StepInterrupted(
            f"{path}: step {name!r} runs at most once and an earlier delivery started it "
            "without recording its end: it is not called again"
        )

    def landed(self, steps: Mapping[str, Any]) -> None:
        """The record now holds `steps` (a write of this delivery's committed)."""
        self.recorded = dict(steps)

    def with_entry(
        self,
        name: str,
        state: str,
        value: Any = None,
        *,
        room: int | None = None,
        refused: bool = False,
    ) -> dict[str, Any]:
        """The steps once `name` is recorded in `state` with its place and fingerprint, done
        with `value` (`refused`: without it). Raises `RecordRefused` for a value Firestore
        cannot store as it is, `StepTooLarge` past `MAX_STEP_BYTES`, `MAX_STEPS`,
        `MAX_STEPS_BYTES` or `room` (the bytes the record has for its steps)."""
        entry: dict[str, Any] = {"index": self.called.index(name), "state": state}
        entry.update(self.calls[name])
        if refused:
            entry[REFUSED] = True
        elif state == DONE:
            reason = refusal(value, at=(Field.STEPS, name, "value"))
            if reason is not None:
                raise RecordRefused(
                    f"step {name!r} returned a value Firestore cannot store as it is, "
                    f"{reason}; its value is not recorded and the event fails, since a retry "
                    "would return the same"
                )
            entry["value"] = value
            size = value_size(value)
            if size > MAX_STEP_BYTES:
                raise StepTooLarge(f"step {name!r} returned {size} bytes, over {MAX_STEP_BYTES}")
        steps = {**self.recorded, name: entry}
        if len(steps) > MAX_STEPS:
            raise StepTooLarge(f"step {name!r} is step {len(steps)}, over {MAX_STEPS} steps")
        if (total := value_size(steps)) > MAX_STEPS_BYTES:
            raise StepTooLarge(
                f"the steps with {name!r} hold {total} bytes, over {MAX_STEPS_BYTES}"
            )
        if room is not None and total > room:
            whole = MAX_DOCUMENT_BYTES - room + total
            raise StepTooLarge(
                f"the record with step {name!r} would hold {whole} bytes, over Firestore's "
                f"{MAX_DOCUMENT_BYTES} (a 1 MiB document; notes and the room kept for an error "
                "counted)"
            )
        return steps


def _same_call(name: str, path: str, entry: Mapping[str, Any], called: Mapping[str, str]) -> None:
    if FN not in entry:
        return
    same_fn = entry.get(FN) == called[FN]
    if same_fn and entry.get(ARGS) in (None, called[ARGS]):
        return
    raise StepMismatch(
        f"{path}: step {name!r} was recorded as {entry.get(FN)}(arguments "
        f"#{str(entry.get(ARGS))[:12]}), this delivery calls {called[FN]}(arguments "
        f"#{called[ARGS][:12]}); a step is replayed only for the same function and arguments: "
        "name each step after what it does (charge-<item id>, not charge<position>), and "
        "give a step another name when its call changes"
    )


def _scrambled(recorded: Mapping[str, Any]) -> bool:
    places = sorted(entry.get("index", -1) for entry in recorded.values())
    legacy = any(FN not in entry for entry in recorded.values())
    return legacy and places != list(range(len(places)))
