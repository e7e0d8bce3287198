"""The handlers a run delivers, and the ledger of their effects.

One body per program, written once as an `async def` over a `Facade` that serves both the
sync `Delivery` (a `Deduplicator`'s handler, its steps plain functions) and the async
`AsyncDelivery` (awaited steps). Every effect outside Firestore goes to the receiver (an RPC of
the world, which can be slow, or see its process die or freeze) and lands in the ledger with
its key; effects inside Firestore are documents the transaction or batch commits, counted
from the store after the run.

* `plain` (lease): one effect under `delivery.key`, returns a small map;
* `noted` (lease): `delivery.note(ref=...)`, then the effect;
* `big` (lease, transaction): the effect (or the counter), returns `{"zeros": [0] * n}`;
* `steps` (lease): durable steps (`sim.scenario.STEP_KINDS`): `charges` (a plain step per
  item, named by its place in the list, each a keyed effect), `reserve` (transactional: a
  stock counter), `receipt` (at most once), `branch` (a plain step whose recorded value picks
  the next step);
* `counter` (transaction): reads and increments `counters/<key>` in the transaction;
* `batch` (write_only): writes `effects/<key>-<n>` in the batch.

A handler fails (before its effect, never after) with the scenario's chance while faults are
on: a retryable error, or `TerminalError`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dedup import TerminalError
from dedup.kernel.delivery import drive
from sim.scenario import Scenario


@dataclass(frozen=True)
class Effect:
    """One effect a receiver applied."""

    event: str
    kind: str  # effect, charge, receipt, branch
    key: str
    identity: str
    task: str
    at: float
    lease_live: bool = True
    """For a plain step's effect: whether its delivery's lease was live when it was called."""

    def __str__(self) -> str:
        return f"{self.kind} {self.identity!r} under {self.key}"


class HandlerError(Exception):
    """A handler's retryable failure (the receiver refused), before its effect."""


class Facade:
    """The one surface the bodies use, over a sync or an async delivery."""

    def __init__(self, delivery: Any, awaited: bool, env: Any) -> None:
        self.d = delivery
        self.awaited = awaited
        self.env = env
        env.handler_starts()

    async def step(
        self, name: str, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **how: Any
    ) -> Any:
        if self.awaited:
            return await self.d.step(name, fn, *args, **how)
        return self.d.step(name, lambda *a: drive(fn(*a)), *args, **how)

    async def note(self, **fields: Any) -> None:
        if self.awaited:
            await self.d.note(**fields)
        else:
            self.d.note(**fields)

    async def read(self, transaction: Any, ref: Any) -> Any:
        return await transaction.get(ref) if self.awaited else transaction.get(ref)

    async def effect(self, kind: str, key: str, identity: str, *, step: bool = False) -> None:
        self.env.effect(kind, key, identity, step=step)

    def ref(self, path: str) -> Any:
        collection, document = path.rsplit("/", 1)
        return self.d.client.collection(collection).document(document)


def body_of(scenario: Scenario, env: Any) -> Callable[[Facade], Coroutine[Any, Any, Any]]:
    """The handler body of the scenario's program."""
    program = scenario.program

    async def maybe_fail(f: Facade) -> None:
        if env.handler_fails():
            if env.draw() < scenario.terminal / max(scenario.handler_failure, 1e-9):
                raise TerminalError(env.user("terminal", "the receiver refused the event for good"))
            raise HandlerError(env.user("failure", "the receiver answered 503"))

    async def plain(f: Facade) -> Any:
        await maybe_fail(f)
        if program == "noted":
            if env.catalogue:
                await noted(f, env, ref=f"msg-{f.d.key}", value=env.user("note", None))
            else:
                await f.note(ref=f"msg-{f.d.key}")
        await f.effect("effect", f.d.key, "effect")
        env.user_time("the handler")
        if program == "big":
            return {"zeros": [0] * scenario.zeros}
        if env.catalogue:
            return {"ok": True, "attempt": f.d.attempt, "value": env.user("result", None)}
        return {"ok": True, "attempt": f.d.attempt}

    async def counter(f: Facade) -> Any:
        ref = f.ref(f"counters/{f.d.key}")
        found = await f.read(f.d.transaction, ref)
        await maybe_fail(f)
        f.d.transaction.set(ref, {"n": (found.get("n") or 0) + 1})
        if program == "big":
            return {"zeros": [0] * scenario.zeros}
        return {"n": (found.get("n") or 0) + 1}

    async def batch(f: Facade) -> Any:
        await maybe_fail(f)
        f.d.batch.set(f.ref(f"effects/{f.d.key}-{env.next_write()}"), {"event": f.d.event_id})
        return {"written": True}

    if scenario.mode == "transaction":
        return counter
    if scenario.mode == "write_only":
        return batch
    if program == "steps":
        return steps_program(scenario, env, maybe_fail)
    return plain


def steps_program(
    scenario: Scenario, env: Any, maybe_fail: Any
) -> Callable[[Facade], Coroutine[Any, Any, Any]]:
    """A handler of durable steps: the scenario's `steps`, in order."""

    async def body(f: Facade) -> Any:
        done: dict[str, Any] = {}
        for place, kind in enumerate(scenario.steps):
            await maybe_fail(f)
            if kind == "charges":
                for i, item in enumerate(env.items(f.d, scenario)):
                    name = f"s{place}charge{i}"
                    value = await f.step(name, charge, f.d.step_key(name), f"{item}@s{place}")
                    if value.get("item") != f"{item}@s{place}":
                        env.mismatch(f"step {name} called for item {item!r} returned {value!r}")
                    done[name] = value
            elif kind == "reserve":
                name = f"s{place}reserve"
                done[name] = await f.step(name, reserve, f.d.key, transactional=True)
            elif kind == "odd":
                name = "__s0__" if scenario.odd == "reserved" else f"s{place}odd"
                sent = odd_value(scenario.odd)
                value = await f.step(name, charge_odd, f.d.step_key(name), sent)
                if value != sent or type(value) is not type(sent):
                    env.mismatch(f"step {name} returned {sent!r}; its replay gave {value!r}")
                done[name] = value
            elif kind == "receipt":
                name = f"s{place}receipt"
                done[name] = await f.step(name, receipt, f.d.step_key(name), on_interrupted="skip")
            else:
                name = f"s{place}check"
                verdict = await f.step(name, check)
                branch = f"s{place}{'yes' if verdict['ok'] else 'no'}"
                done[branch] = await f.step(branch, charge, f.d.step_key(branch), branch)
        if env.catalogue:  # a value of the catalogue, then a step that takes it as argument
            given = await kept(f, env, "s9value", give, f.d.step_key("s9value"))
            await kept(f, env, "s9echo", echo, given)
        return {"steps": len(done)}

    async def give(key: str) -> Any:
        env.effect("charge", key, f"value@{key}", step=True)
        return env.user("step", None)

    async def echo(value: Any) -> dict[str, Any]:
        return {"echoed": True}

    async def charge(key: str, item: str) -> dict[str, Any]:
        env.effect("charge", key, item, step=True)
        env.user_time("a step's function")
        return {"item": item}

    async def charge_odd(key: str, value: Any) -> Any:
        env.effect("charge", key, f"odd@{key}", step=True)
        return value

    async def receipt(key: str) -> dict[str, Any]:
        env.effect("receipt", key, "receipt", step=True)
        env.user_time("an at-most-once step's function")
        return {"sent": True}

    async def check() -> dict[str, Any]:
        verdict = env.draw() < 0.5
        env.user_time("a step's function")
        return {"ok": verdict}

    async def reserve(transaction: Any, key: str) -> dict[str, Any]:
        ref = env.facade_ref(f"stock/{key}")
        found = env.read_in(transaction, ref)
        found = await found if hasattr(found, "__await__") else found
        n = (found.get("n") or 0) + 1
        transaction.set(ref, {"n": n})
        return {"n": n}

    return body


async def kept(f: Facade, env: Any, name: str, fn: Any, *args: Any) -> Any:
    """Step `name`, noting the value the handler is handed (or that it was refused, or that a
    replay's fingerprint did not match) for the `value-kept` invariant."""
    key = f"{f.d.key}/{name}"
    try:
        value = await f.step(name, fn, *args)
    except Exception as exc:
        kind = type(exc).__name__
        if kind == "RecordRefused":
            env.refused.setdefault(key, env.world.now)
        elif kind == "StepMismatch":
            env.mismatch(f"step {name}: the replay's fingerprint differs: {str(exc)[:200]}")
        raise
    env.seen.setdefault(key, []).append(shape(value))
    return value


async def noted(f: Facade, env: Any, **fields: Any) -> None:
    """`delivery.note(**fields)`, noting a refusal (`RecordRefused`)."""
    try:
        await f.note(**fields)
    except Exception as exc:
        if type(exc).__name__ == "RecordRefused":
            env.refused.setdefault(f"{f.d.key}/note", env.world.now)
        raise


def shape(value: Any) -> Any:
    """`value` with every type in it, comparable: two values of one shape are the same value
    of the same types all the way down (a map's key order aside)."""
    if isinstance(value, dict):
        return ("dict", type(value).__name__, sorted((repr(k), shape(v)) for k, v in value.items()))
    if isinstance(value, list | tuple | set | frozenset):
        return (type(value).__name__, [shape(v) for v in value])
    return (type(value).__module__, type(value).__name__, repr(value))


def odd_value(kind: str) -> Any:
    """A step value Firestore would not keep as given."""
    if kind == "decimal":
        return Decimal("9.99")
    if kind == "nested":
        return [[1, 2], [3]]
    if kind == "set":
        return {"a", "b"}
    return {"ok": True}


def handler_for(scenario: Scenario, env: Any) -> Any:
    """The handler the entrance is given: a `def` for the sync front door, an `async def`
    for the async one."""
    body = body_of(scenario, env)
    if scenario.front == "async":

        async def async_handler(delivery: Any) -> Any:
            return await body(Facade(delivery, True, env))

        return async_handler

    def sync_handler(delivery: Any) -> Any:
        return drive(body(Facade(delivery, False, env)))

    return sync_handler


def reconcile_for(scenario: Scenario, env: Any) -> Any:
    """The scenario's `reconcile`, None without one: `truthful` asks the ledger whether the
    effect under the delivery's key landed, `unsure` never knows, `flaky` sometimes raises."""
    kind = scenario.reconcile
    if kind is None:
        return None

    def answer(delivery: Any) -> bool | None:
        env.user_time("reconcile")
        if kind == "unsure":
            return None
        if kind == "flaky" and env.draw() < 0.3:
            raise RuntimeError("the receiver's search failed")
        return env.landed(delivery.key)

    if scenario.front == "async":

        async def async_reconcile(delivery: Any) -> bool | None:
            return answer(delivery)

        return async_reconcile
    return answer
