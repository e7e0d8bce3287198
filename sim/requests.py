"""The HTTP and callable surfaces: `idempotent_http` and `idempotent_callable` driven through
their public decorators, with real Flask requests (`flask.Flask.test_request_context`) and
firebase-functions' `CallableRequest`, over the simulated store on virtual time.

A run draws (from its seed) one or two idempotency keys, the requests that carry them
(concurrent copies, now and then one with another body under the same key), the function's
settings (lease or transaction mode, `wait_seconds`, `on_ambiguous`, `reconcile`, its timeout),
the handler's behaviour (it fails retryably, terminally, answers 5xx, answers a stored 4xx, or
a body too large to keep) and the faults of `sim.world`. The client is the caller: it retries
what the answer table says is retried (a 5xx, a 409 `request-in-progress`, a timeout when the
process died) and a request whose answer it lost (fault `lost_answer`), with the same key and
body. Each process (instance) decorates the handler anew: nothing of a dead one's memory lives.

The invariants (`check_requests`, besides the kernel's of `sim.invariants`) name the row of
docs/guarantees.md ("What happens to a delivery", the HTTP and callable columns) they stand for.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from typing import Any

import flask
from firebase_functions import https_fn

from dedup import TerminalError
from dedup.entrances.gate import Entrance
from dedup.entrances.suffixes import SuffixRegistry
from dedup.http import REPLAYED_HEADER, IdempotentRequest, idempotent_callable, idempotent_http
from dedup.http.callable import sent_json
from dedup.http.idempotency import fingerprint
from dedup.kernel.transitions import MAX_RESULT_BYTES, payload_hash
from sim.handlers import HandlerError
from sim.runner import COLLECTION, SUFFIX, Answer, Env, Platform, Result, play
from sim.server import MODES
from sim.world import Faults, Instance, Task

APP = flask.Flask("sim")
"""The app whose request contexts the simulated HTTP requests run in."""
PATH = "/orders"
PROBLEM = "urn:exactly-once:problem:"
RETRIED_HTTP = (408, 409, 425, 429, 500, 502, 503, 504)
"""Statuses a caller retries with the same key (the answer table's `retried` rows)."""


@dataclass
class RequestScenario:
    """One run of the HTTP or the callable surface."""

    seed: int
    surface: str  # "http" or "callable"
    concurrency: str
    mode: str  # "lease" or "transaction"
    on_ambiguous: str
    reconcile: str | None
    lease_seconds: int
    rpc_timeout: int
    function_timeout: int | None
    max_attempts: int
    min_retry: int
    wait_seconds: float
    events: list[str]
    """The idempotency keys (anonymous: each key is its event id)."""
    deliveries: list[tuple[float, str, int]]
    variants: dict[int, int]
    """Per delivery (by its place in `deliveries`): 1 for a request with another body."""
    instances: int
    skews: list[float]
    frozen_walls: list[tuple[float, float] | None]
    faults: Faults
    handler_failure: float = 0.0
    terminal: float = 0.0
    server_error: float = 0.0
    """The share of the handler's failures answered as a 5xx response (an HttpsError
    `internal` for a callable) rather than raised."""
    stored_error: float = 0.0
    """The chance the handler answers a 4xx (an HttpsError `not-found`): stored, replayed."""
    too_large: float = 0.0
    """The chance the handler's body is too large to keep (an HTTP stub, 410 on replay)."""
    lost_answer: float = 0.0
    front: str = "sync"
    program: str = "request"
    steps: list[str] = field(default_factory=list)
    reorder: bool = False
    cache_size: int = 0
    cap: int = 12

    @property
    def budget(self) -> float:
        if self.function_timeout is not None:
            return float(self.function_timeout)
        return float(max(1, self.lease_seconds - self.rpc_timeout))

    def describe(self) -> str:
        f = self.faults
        return "\n  ".join(
            [
                f"seed {self.seed}: {self.surface} surface, {self.concurrency} store, "
                f"{self.mode} mode, wait_seconds={self.wait_seconds:g}",
                f"on_ambiguous={self.on_ambiguous} reconcile={self.reconcile}",
                f"lease {self.lease_seconds} s, rpc timeout {self.rpc_timeout} s, budget "
                f"{self.budget:g} s, max_attempts {self.max_attempts}",
                f"handler: fails {self.handler_failure:.2f} (terminal {self.terminal:.2f}, "
                f"5xx {self.server_error:.2f}), 4xx {self.stored_error:.2f}, "
                f"too large {self.too_large:.2f}; answers lost {self.lost_answer:.2f}",
                f"{len(self.deliveries)} requests with keys {self.events} "
                f"({sum(self.variants.values())} with another body) on {self.instances} "
                "instances",
                f"faults until {f.until:.1f} s: error {f.error_before:.2f}, "
                f"lost {f.lost_response:.2f}, slow {f.slow:.2f}, kill {f.kill:.2f}, "
                f"pause {f.pause:.2f}",
            ]
        )


def make(seed: int, surface: str) -> RequestScenario:
    """The HTTP (`surface="http"`) or callable run of `seed`."""
    rng = random.Random(seed * 49979687 + 7)
    lease = rng.choice((5, 8, 12, 20, 60))
    rpc = rng.randint(1, min(10, max(1, lease // 2)))
    timeout = rng.choice((None, max(1, lease - rpc - rng.randint(0, 2))))
    mode = rng.choice(("lease", "lease", "transaction"))
    keys = ["k1"] if rng.random() < 0.8 else ["k1", "k2"]
    instances = rng.randint(1, 3)
    spread = rng.choice((0.0, 0.05, 1.0, float(lease)))
    deliveries = sorted(
        (rng.uniform(0, spread), rng.choice(keys), rng.randrange(instances))
        for _ in range(rng.randint(2, 5))
    )
    for key in keys:
        if all(d[1] != key for d in deliveries):
            deliveries.append((rng.uniform(0, spread), key, rng.randrange(instances)))
    other = rng.random() < 0.3
    variants = {i: int(other and rng.random() < 0.4) for i in range(len(deliveries))}
    busy = rng.random()
    faults = Faults(
        until=rng.uniform(lease, 4 * lease + 10),
        error_before=rng.choice((0.0, 0.02, 0.1, 0.3)) * busy,
        lost_response=rng.choice((0.0, 0.02, 0.1, 0.3)) * busy,
        slow=rng.choice((0.0, 0.02, 0.1, 0.25)) * busy,
        slow_seconds=rng.uniform(0.5, 1.5 * lease),
        kill=rng.choice((0.0, 0.01, 0.05, 0.15)) * busy,
        pause=rng.choice((0.0, 0.01, 0.05, 0.15)) * busy,
        pause_seconds=rng.uniform(0.5, 2.0 * lease),
    )
    return RequestScenario(
        seed=seed,
        surface=surface,
        concurrency=MODES[seed % 2],
        mode=mode,
        on_ambiguous=rng.choice(("rerun", "skip")),
        reconcile=rng.choice((None, None, "truthful", "unsure")) if mode == "lease" else None,
        lease_seconds=lease,
        rpc_timeout=rpc,
        function_timeout=timeout,
        max_attempts=rng.choice((1, 2, 3, 5, 10)),
        min_retry=rng.choice((0, 0, 5)),
        wait_seconds=rng.choice((0.0, 0.0, 1.0, float(lease))),
        events=keys,
        deliveries=deliveries,
        variants=variants,
        instances=instances,
        skews=[rng.choice((0.0, 0.0, -300.0, 300.0)) for _ in range(instances)],
        frozen_walls=[None] * instances,
        faults=faults,
        handler_failure=rng.choice((0.0, 0.1, 0.3)),
        terminal=rng.choice((0.0, 0.0, 0.05)),
        server_error=rng.choice((0.0, 0.5)),
        stored_error=rng.choice((0.0, 0.0, 0.2)),
        too_large=rng.choice((0.0, 0.0, 0.0, 0.3)),
        lost_answer=rng.choice((0.0, 0.1, 0.3)) * busy,
    )


def body_of(key: str, variant: int) -> bytes:
    """The JSON body of a request with `key` (variant 1: another order under the same key)."""
    return json.dumps({"order": key, "amount": 10 + variant}).encode()


@dataclass
class Fresh:
    """What one handler call answered, before the adapter stored it."""

    task: str
    status: int
    body: bytes
    kind: str = "value"  # value, error (a stored 4xx / HttpsError)


class RequestEnv(Env):
    """`Env` with what the request invariants need: every handler's own answer, the tasks
    whose handler raised a retryable error, the time spent in the handler per task."""

    fresh: list[Fresh]
    raised: set[str]
    handler_time: dict[str, float]

    def __init__(self, world: Any, scenario: Any) -> None:
        super().__init__(world, scenario)
        self.fresh = []
        self.raised = set()
        self.handler_time = {}


class RequestPlatform(Platform):
    """The callers: each request a task through the decorated function of its instance, each
    retried as a client retries (`RETRIED_HTTP`, a lost answer, a process that died)."""

    scenario: RequestScenario  # type: ignore[assignment]
    env: RequestEnv

    def __init__(self, world: Any, scenario: RequestScenario, env: RequestEnv) -> None:
        self.world = world
        self.scenario = scenario
        self.env = env
        self.instances = [
            Instance(f"i{n}", skew=scenario.skews[n]) for n in range(scenario.instances)
        ]
        self.count: dict[str, int] = {}
        self.answers: list[Answer] = []
        self.variant_of: dict[int, int] = {}
        world.on_answer = self.answered
        world.on_death = self.died
        world.effect_applied = env.applied

    def plan(self) -> None:
        for place, (start, key, instance) in enumerate(self.scenario.deliveries):
            self.world.at(start, self.request, key, instance, self.scenario.variants[place])

    def request(self, key: str, index: int, variant: int) -> None:
        number = self.count.get(key, 0) + 1
        if number > self.scenario.cap:
            return
        self.count[key] = number
        instance = self.instances[index]
        if not instance.alive or instance.entrance is None:
            self.start_process(instance)
        n = len(self.world.tasks) + 1
        task = Task(n, f"{instance.name}/r{n}", instance, key, lambda: None)
        self.variant_of[task.id] = variant
        task.body = self.call(instance, key, variant)
        self.world.spawn(task)

    def start_process(self, instance: Instance) -> None:
        scenario = self.scenario
        assert isinstance(scenario, RequestScenario)
        self.start_front(instance, self.config_of(instance, on_payload_mismatch="raise"))
        options: dict[str, Any] = {
            "mode": scenario.mode,
            "anonymous": True,
            "wait_seconds": scenario.wait_seconds,
            "deduplicator": instance.front,
            "registry": SuffixRegistry(),
            "reconcile": self.reconciler(),
            "on_ambiguous": scenario.on_ambiguous,
        }
        if scenario.surface == "http":
            instance.entrance = idempotent_http(SUFFIX, **options)(self.http_handler())
        else:
            instance.entrance = idempotent_callable(SUFFIX, **options)(self.callable_handler())
        _declares_no_timeout(instance.entrance)

    def reconciler(self) -> Any:
        kind = self.scenario.reconcile
        if kind is None:
            return None
        env = self.env

        def reconcile(delivery: Any) -> bool | None:
            env.user_time("reconcile")
            return None if kind == "unsure" else env.landed(delivery.key)

        return self.timed(reconcile)

    def call(self, instance: Instance, key: str, variant: int) -> Any:
        body = body_of(key, variant)
        entrance = instance.entrance
        if self.scenario.surface == "http":

            def http() -> Any:
                headers = {"Idempotency-Key": key}
                with APP.test_request_context(
                    PATH, method="POST", data=body, headers=headers, content_type="application/json"
                ):
                    return entrance(flask.request)

            return http

        def callable_() -> Any:
            data = {"idempotencyKey": key, **json.loads(body)}
            with APP.test_request_context(PATH, method="POST", json={"data": data}):
                return entrance(https_fn.CallableRequest(data=data, raw_request=flask.request))

        return callable_

    # --- the handlers ------------------------------------------------------------------

    def _prelude(self) -> tuple[Task, bool]:
        """The handler starts: the task, and whether it fails (raised here when it raises)."""
        env, scenario = self.env, self.scenario
        env.handler_starts()
        task = self.world.current
        assert task is not None
        if env.handler_fails():
            if env.draw() < scenario.terminal / max(scenario.handler_failure, 1e-9):
                raise TerminalError("the receiver refused the order for good")
            if env.draw() >= scenario.server_error:
                raise HandlerError("the receiver answered 503")
            return task, True
        return task, False

    def _effect(self, delivery: Any) -> None:
        if self.scenario.mode == "transaction":
            ref = delivery.client.collection("counters").document(delivery.key)
            found = delivery.transaction.get(ref)
            delivery.transaction.set(ref, {"n": (found.get("n") or 0) + 1})
        else:
            self.env.effect("effect", delivery.key, "effect")

    def timed(self, handler: Any) -> Any:
        env, world = self.env, self.world

        def handler_(*args: Any) -> Any:
            started = world.now
            task = world.current
            try:
                return handler_inner(*args)
            except Exception:
                if task is not None:
                    env.raised.add(task.name)
                raise
            finally:
                if task is not None:
                    spent = env.handler_time
                    spent[task.name] = spent.get(task.name, 0.0) + world.now - started

        handler_inner = handler
        return handler_

    def http_handler(self) -> Any:
        env, scenario = self.env, self.scenario

        def create_order(call: IdempotentRequest) -> flask.Response:
            task, server_error = self._prelude()
            if server_error:
                return flask.Response("busy", 503, headers={"X-Handler": task.name})
            self._effect(call.delivery)
            env.user_time("the handler")
            status = 404 if env.draw() < scenario.stored_error else env.user("status", 201)
            pad = "x" * (MAX_RESULT_BYTES + 10) if env.draw() < scenario.too_large else ""
            body = json.dumps({"by": task.name, "attempt": call.delivery.attempt, "pad": pad})
            data = env.user("body", b"") + body.encode()
            env.fresh.append(Fresh(task.name, status, data))
            headers = {
                "Location": f"{PATH}/{call.key}",
                "X-Handler": task.name,
                "Set-Cookie": "session=1",
                "X-Note": env.user("header", "none"),
            }
            return flask.Response(data, status, content_type="application/json", headers=headers)

        return self.timed(create_order)

    def callable_handler(self) -> Any:
        env, scenario = self.env, self.scenario

        def create_order(request: https_fn.CallableRequest[Any], delivery: Any) -> Any:
            task, server_error = self._prelude()
            if server_error:
                raise https_fn.HttpsError(https_fn.FunctionsErrorCode.INTERNAL, "busy")
            self._effect(delivery)
            env.user_time("the handler")
            value = {"by": task.name, "attempt": delivery.attempt}
            if env.draw() < scenario.stored_error:
                details = env.user("details", value)
                message = f"no stock for {task.name}"
                wire = {"code": "not-found", "message": message, "details": details}
                env.fresh.append(Fresh(task.name, 404, _sent(wire, allow_nan=True), "error"))
                code = https_fn.FunctionsErrorCode.NOT_FOUND
                raise https_fn.HttpsError(code, message, details)
            value = env.user("json", value)
            env.fresh.append(Fresh(task.name, 200, _sent(value)))
            return value

        return self.timed(create_order)

    # --- the callers ---------------------------------------------------------------------

    def answered(self, task: Task) -> None:
        self.answers.append(Answer(task, task.answer, self.world.now, self.record(task.event)))
        if self.retried(task.answer) or self.world.fault("lost_answer", self.scenario.lost_answer):
            pause = self.world.rng.uniform(0.2, 1.5 * self.scenario.lease_seconds)
            variant = self.variant_of[task.id]
            self.world.at(
                self.world.now + pause,
                self.request,
                task.event,
                self.world.rng.randrange(len(self.instances)),
                variant,
            )

    def retried(self, answer: Any) -> bool:
        if isinstance(answer, flask.Response):
            return answer.status_code in RETRIED_HTTP and _slug(answer) not in (
                "outcome-unknown",
                "request-failed",
            )
        if isinstance(answer, https_fn.HttpsError):
            return answer._http_error_code.status >= 500 or (
                answer.code is https_fn.FunctionsErrorCode.ABORTED
            )
        return False

    def died(self, task: Task) -> None:
        when = max(self.world.now, task.started_at + self.scenario.budget)
        when += self.world.rng.uniform(0.1, 3)
        self.world.at(
            when,
            self.request,
            task.event,
            self.world.rng.randrange(len(self.instances)),
            self.variant_of[task.id],
        )


def _sent(value: Any, *, allow_nan: bool = False) -> bytes:
    """`value` as a callable stores it (`dedup.http.callable.sent_json`: a result without
    `NaN`, an `HttpsError` as firebase-functions sends it, `allow_nan`), b"" when it cannot
    be sent."""
    try:
        return sent_json(value, allow_nan=allow_nan).encode()
    except (TypeError, ValueError, RecursionError):
        return b""


def _declares_no_timeout(wrapper: Any) -> None:
    """Tell the entrance behind `wrapper` up front what its first delivery would find: no
    firebase-functions decorator declares a timeout (`dedup.entrances.gate.DeclaredTimeout`;
    the budget is the config's). Finding it looks through every object of the process
    (`gc.get_referrers`), about 10 ms here, at each fresh process of every run."""
    for cell in wrapper.__closure__ or ():
        admitted = cell.cell_contents
        if isinstance(admitted, Entrance):
            admitted.timeout._found.append(None)
            return
    raise AssertionError("the entrance's wrapper no longer holds its Entrance")


def _slug(response: flask.Response) -> str | None:
    if response.mimetype != "application/problem+json":
        return None
    found = json.loads(response.get_data())
    kind = str(found.get("type", ""))
    return kind.removeprefix(PROBLEM) if kind.startswith(PROBLEM) else kind


ROWS = {
    "first-answer": "guarantees.md What happens to a delivery: ran (HTTP, callable)",
    "replayed": "guarantees.md What happens to a delivery: duplicate (HTTP, callable)",
    "refusal": "guarantees.md What happens to a delivery: held lease, handler raised, "
    "given up (HTTP, callable); http.md reused key 422",
    "in-time": "guarantees.md time budget row: a request answers within its function's timeout",
}


def check_requests(
    scenario: RequestScenario, world: Any, env: RequestEnv, platform: RequestPlatform
) -> list[tuple[str, str, str]]:
    """The invariants of the HTTP and callable columns of the answer table."""
    found: list[tuple[str, str, str]] = []

    def fail(name: str, detail: str) -> None:
        found.append((name, ROWS[name], detail))

    fresh_bodies = {f.body for f in env.fresh}
    for a in platform.answers:
        task = a.task
        record = platform.record(task.event) or {}
        variant = platform.variant_of[task.id]
        body = body_of(task.event, variant)
        if scenario.surface == "http":
            payload = fingerprint("POST", PATH, body, json_body=True)
        else:
            from dedup.http.idempotency import canonical_json

            payload = canonical_json(json.loads(body))
        same = record.get("payloadHash") in (None, payload_hash(payload))
        if any(
            who == task.instance.name and start < a.at and end > task.started_at
            for who, start, end in world.freezes
        ):
            continue  # a frozen process answers nothing meanwhile: the platform times it out
        spent = a.at - task.started_at
        # the last RPC may keep its 0.1 s floor, a rollback its own 0.5 s
        # (`ROLLBACK_FLOOR_SECONDS`, as the kernel's `budget` invariant allows)
        floor = 0.5 if any(what.startswith("rollback") for _, what, _ in task.sends) else 0.0
        allowed = scenario.budget + env.handler_time.get(task.name, 0.0) + 0.2 + floor
        if spent > allowed + 1e-6:
            fail("in-time", f"{task.name} answered after {spent:.3f} s, past {allowed:.3f} s")
        if scenario.surface == "http":
            _check_http(a.answer, task, record, a.record, same, env, fresh_bodies, fail)
        else:
            _check_callable(a.answer, task, record, a.record, same, env, fail)
    return found


def _held_by(task: Task, record: dict[str, Any] | None) -> bool:
    """The record (as it was when `task` answered) holds a lease of `task`'s: its key is not
    free, so "retry now" would not be true."""
    return bool(
        record and record.get("leaseStartedAt") is not None and record.get("owner") in task.tokens
    )


def _check_http(
    answer: Any,
    task: Task,
    record: dict[str, Any],
    held: dict[str, Any] | None,
    same: bool,
    env: RequestEnv,
    fresh_bodies: set[bytes],
    fail: Any,
) -> None:
    if not isinstance(answer, flask.Response):
        fail("refusal", f"{task.name}: the adapter raised {type(answer).__name__}: {answer}")
        return
    status, slug = answer.status_code, _slug(answer)
    replayed = answer.headers.get(REPLAYED_HEADER) == "true"
    own = [f for f in env.fresh if f.task == task.name]
    result = record.get("result") or {}
    if slug is None and not replayed:
        if answer.headers.get("X-Handler") != task.name:
            fail("first-answer", f"{task.name} answered {status} that is not its handler's own")
        elif status < 500 and not (own and answer.get_data() == own[-1].body):
            fail("first-answer", f"{task.name}: {status} is not the body its handler returned")
        if status < 500 and not same:
            fail("refusal", f"{task.name} ran under a key used for another body (want 422)")
        return
    if slug is None:  # a replay of the stored answer
        if "X-Handler" in answer.headers or "Set-Cookie" in answer.headers:
            fail("replayed", f"{task.name}: a replay carries the handler's other headers")
        stored = bytes(result.get("body") or b"")
        if answer.get_data() != stored or status != result.get("status"):
            fail("replayed", f"{task.name}: replayed {status} is not the stored answer")
        if stored not in fresh_bodies:
            fail("replayed", f"{task.name}: the stored body is no handler's answer")
        if answer.headers.get("Location") != result.get("location"):
            fail("replayed", f"{task.name}: replayed Location is not the stored one")
        if not same:
            fail("refusal", f"{task.name}: another body's answer replayed (want 422)")
        return
    if slug == "idempotency-key-reused" and (same or status != 422):
        fail("refusal", f"{task.name}: {status} {slug} for the body the key was used with")
    if slug == "request-in-progress" and (status != 409 or "Retry-After" not in answer.headers):
        fail("refusal", f"{task.name}: request-in-progress {status} without Retry-After")
    if slug == "store-unavailable" and "Retry-After" not in answer.headers:
        fail("refusal", f"{task.name}: 503 store-unavailable without Retry-After")
    if slug == "handler-failed" and _held_by(task, held):
        fail("refusal", f"{task.name}: 500 handler-failed (retry now) with its lease still held")
    if slug == "request-failed" and record.get("state") != "failed":
        fail("refusal", f"{task.name}: request-failed with the record {record.get('state')}")
    if slug == "outcome-unknown" and record.get("state") != "unknown":
        fail("refusal", f"{task.name}: outcome-unknown with the record {record.get('state')}")
    if slug == "response-not-stored":
        problem = json.loads(answer.get_data())
        if "originalStatus" in problem:
            digests = {hashlib.sha256(b).hexdigest() for b in fresh_bodies}
            if problem.get("sha256") not in digests or not result.get("tooLarge"):
                fail("replayed", f"{task.name}: 410 names a response no handler answered")


def _check_callable(
    answer: Any,
    task: Task,
    record: dict[str, Any],
    held: dict[str, Any] | None,
    same: bool,
    env: RequestEnv,
    fail: Any,
) -> None:
    result = record.get("result") or {}
    if isinstance(answer, https_fn.HttpsError):
        reason = (answer.details or {}).get("reason") if isinstance(answer.details, dict) else None
        if answer.code is https_fn.FunctionsErrorCode.NOT_FOUND:
            wire = {"code": answer.code.value, "message": answer.message}
            if answer.details is not None:
                wire["details"] = answer.details
            if _sent(wire, allow_nan=True).decode() != result.get("errorJson"):
                fail("replayed", f"{task.name}: the HttpsError is not the stored one")
            if not same:
                fail("refusal", f"{task.name}: another call's error replayed (want reused)")
        elif reason == "idempotency-key-reused" and same:
            fail("refusal", f"{task.name}: idempotency-key-reused for the key's own data")
        elif reason == "handler-failed" and _held_by(task, held):
            fail("refusal", f"{task.name}: handler-failed (retry now) with its lease still held")
        elif reason == "outcome-unknown" and record.get("state") != "unknown":
            fail("refusal", f"{task.name}: outcome-unknown with the record {record.get('state')}")
        return
    if isinstance(answer, BaseException):
        fail("refusal", f"{task.name}: the adapter raised {type(answer).__name__}: {answer}")
        return
    sent = _sent(answer)
    if sent.decode() != result.get("json"):
        fail("replayed", f"{task.name} answered {sent[:150]!r}, the record keeps another")
    if sent not in [f.body for f in env.fresh if f.kind == "value"]:
        fail("first-answer", f"{task.name} answered {sent[:150]!r}, no handler's value")
    if not same:
        fail("refusal", f"{task.name}: another call's value answered (want reused)")


def run_request(
    seed: int, surface: str, *, detail: bool = False, disabled: frozenset[int]
) -> Result:
    """Run the HTTP or callable surface's seed to its end and check the invariants."""

    from sim.invariants import check
    from sim.world import World

    scenario = make(seed, surface)
    if disabled:
        scenario.faults = replace(scenario.faults, disabled=disabled)
    world = World(seed, scenario.concurrency, scenario.faults, detail=detail)
    env = RequestEnv(world, scenario)
    platform = RequestPlatform(world, scenario, env)
    play(world, platform)
    violations = [
        v for v in check(scenario, world, env, platform) if v[0] not in ("final-or-leased",)
    ]
    violations += check_requests(scenario, world, env, platform)
    violations += _final_or_leased(scenario, world, platform)
    return Result(
        seed, scenario, world, env, platform.answers, violations, len(world.tasks),
        world.schedule_hash, surface=surface,
    )  # fmt: skip


def _final_or_leased(
    scenario: RequestScenario, world: Any, platform: RequestPlatform
) -> list[tuple[str, str, str]]:
    """Every key's record ends final, holds a lease, or its caller still retries."""
    from sim.invariants import FINAL
    from sim.invariants import ROWS as KERNEL_ROWS

    found = []
    for key in scenario.events:
        record = platform.record(key)
        if record is None or record.get("state") in FINAL or record.get("leaseStartedAt"):
            continue
        last = [a for a in platform.answers if a.task.event == key]
        if platform.count.get(key, 0) >= scenario.cap or not last:
            continue
        if not platform.retried(last[-1].answer):
            found.append(
                (
                    "final-or-leased",
                    KERNEL_ROWS["final-or-leased"],
                    f"{key}-{SUFFIX} ends {record.get('state')} with no lease, its caller stopped",
                )
            )
    return found


__all__ = ["COLLECTION", "RequestScenario", "check_requests", "make", "run_request"]
