"""Every dedup RPC's deadline is what is left of the delivery's budget when that RPC is sent,
on the Firestore emulator (docs/configuration.md, "The time budget of a delivery").

A bound taken before one RPC and given to the next one is stale after a slow answer: the
second RPC may then run past the function's timeout. Each test slows one RPC by `SLOW` (3 s)
of a 6 s function timeout whose RPCs may take 5 s each, and checks the deadline of every RPC
the client sent: none ends past the timeout, with `MARGIN` to spare (a stale bound overshoots
by about 2 s). No timing is tight: what is checked is what the client asked for.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import grpc
import pytest

from dedup import DedupConfig, Deduplicator, Delivery, Mode, OutcomeKind
from tests.dedup.grpc_faults import Fault, FaultInterceptor, FaultyClient, Plan

pytestmark = pytest.mark.needs_emulators

TIMEOUT = 6
"""The function timeout (the delivery's budget), in seconds."""
RPC_TIMEOUT = 5
SLOW = 3.0
"""How long the slowed RPC takes."""
MARGIN = 0.5
"""Room past the timeout that no deadline may use (the last RPC's floor is 0.1 s)."""


class Deadlines(FaultInterceptor, grpc.UnaryStreamClientInterceptor):
    """A `FaultInterceptor` that also sees the document reads (streaming calls), slows the
    reads numbered in `slow_reads` by `SLOW`, and notes each call's method, send time
    (monotonic) and deadline (seconds, None: none)."""

    def __init__(self, plan: Plan, slow_reads: frozenset[int] = frozenset()) -> None:
        super().__init__(plan)
        self.slow_reads = slow_reads
        self.sent: list[tuple[str, float, float | None]] = []

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self._note(details)
        return super().intercept_unary_unary(continuation, details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        method = self._note(details)
        self.calls[method] += 1
        if self.calls[method] in self.slow_reads:
            time.sleep(SLOW)
        return continuation(details, request)

    def _note(self, details: Any) -> str:
        method = str(details.method).rsplit("/", 1)[-1]
        self.sent.append((method, time.monotonic(), details.timeout))
        return method

    def past(self, started: float) -> list[tuple[str, float, float | None]]:
        """The calls whose deadline ends after the budget that began at `started` (plus
        `MARGIN`), with their send time counted from `started`."""
        ends = started + TIMEOUT + MARGIN
        return [
            (method, round(at - started, 2), timeout)
            for method, at, timeout in self.sent
            if timeout is None or at + timeout > ends
        ]


def slow_then(method: str, number: int, fault: Fault) -> Plan:
    """A plan that makes call `number` of `method` take `SLOW`, then meet `fault`."""

    def plan(name: str, n: int) -> Fault:
        if (name, n) == (method, number):
            time.sleep(SLOW)
            return fault
        return Fault.PASS

    return plan


def deduplicator(interceptor: Deadlines) -> Deduplicator:
    """A deduplicator with the 6 s budget whose client goes through `interceptor`."""
    config = DedupConfig(
        function_timeout_seconds=TIMEOUT,
        lease_seconds=TIMEOUT + RPC_TIMEOUT + 1,
        rpc_timeout_seconds=RPC_TIMEOUT,
        cache_size=0,
    )
    return Deduplicator(config, client=FaultyClient(interceptor))


def event() -> str:
    return f"deadline-{uuid.uuid4().hex[:8]}"


def test_the_read_after_a_slow_sent_write_that_conflicts_gets_only_what_is_left() -> None:
    """The "sent" write (commit 2, after the claim) takes 3 s, lands and loses its answer; its
    retry finds the precondition failed, so the record is read back to recognise our write.
    That read is bounded by what is left then (about 2.7 s), not by the bound taken before the
    slow write (5 s), which would run to about 8 s of a 6 s timeout."""
    deadlines = Deadlines(slow_then("Commit", 2, Fault.LOSE_RESPONSE))
    dedup = deduplicator(deadlines)
    started = time.monotonic()
    outcome = dedup.run(event(), "sent", lambda _: None)
    assert outcome.kind is OutcomeKind.RAN
    assert deadlines.calls["BatchGetDocuments"] == 1, deadlines.sent  # the read back
    assert not deadlines.past(started)


def test_the_check_read_after_a_failed_transactional_step_gets_only_what_is_left() -> None:
    """A transactional step's commit takes 3 s and is refused (nothing committed): the record
    is read to learn whether the step committed. That read is bounded by what is left of the
    budget (about 2.7 s), not by the whole RPC timeout (5 s, to about 8 s of a 6 s timeout);
    the step's error reaches the handler, which raises it."""
    deadlines = Deadlines(slow_then("Commit", 2, Fault.DENY))
    dedup = deduplicator(deadlines)
    key = event()

    def step(transaction: Any, delivery: Delivery) -> str:
        transaction.set(delivery.client.collection("effects").document(key), {"n": 1})
        return "written"

    def handler(delivery: Delivery) -> None:
        delivery.step("pay", step, delivery, transactional=True)

    started = time.monotonic()
    with pytest.raises(Exception, match="denied"):
        dedup.run(key, "step", handler)
    assert deadlines.calls["BatchGetDocuments"] == 1, deadlines.sent  # the check read
    assert not deadlines.past(started)


def test_the_failed_attempt_write_after_a_slow_read_gets_only_what_is_left() -> None:
    """Write-only mode, the handler raises: the failed attempt is counted by a read (3 s slow)
    then a create. The create is bounded by what the read left (about 2.7 s), not by the bound
    taken before the read (5 s, to about 8 s of a 6 s timeout)."""
    deadlines = Deadlines(lambda *_: Fault.PASS, slow_reads=frozenset({1}))
    dedup = deduplicator(deadlines)

    def handler(_: Delivery) -> None:
        raise RuntimeError("the handler failed")

    started = time.monotonic()
    with pytest.raises(RuntimeError):
        dedup.run(event(), "attempt", handler, mode=Mode.WRITE_ONLY)
    assert deadlines.calls["Commit"] == 1, deadlines.sent  # the failed attempt's create
    assert not deadlines.past(started)


@pytest.mark.parametrize("writer", ["transaction", "batch", "step"])
def test_a_commit_after_a_long_handler_gets_what_is_left_not_what_the_handler_left(
    writer: str,
) -> None:
    """The commit of a handler's (or a transactional step's) writes is bounded by what is left
    of the budget when it is sent, at most the RPC timeout: a handler that took longer than
    the RPC timeout (2.5 s of 2 s, in a 6 s timeout) leaves its commit about 2 s, not the
    0.1 s floor of a bound taken before the handler ran."""
    deadlines = Deadlines(lambda *_: Fault.PASS)
    config = DedupConfig(
        function_timeout_seconds=TIMEOUT, lease_seconds=TIMEOUT + 3, rpc_timeout_seconds=2
    )
    dedup = Deduplicator(config, client=FaultyClient(deadlines))
    key = event()

    def write(transaction: Any, delivery: Delivery) -> None:
        time.sleep(2.5)
        doc = delivery.client.collection("effects").document(key)
        writers = (transaction, delivery.transaction, delivery.batch)  # an empty one is falsy
        next(w for w in writers if w is not None).set(doc, {"n": 1})

    def handler(delivery: Delivery) -> None:
        if writer == "step":
            delivery.step("pay", write, delivery, transactional=True)
        else:
            write(None, delivery)

    mode = {"transaction": Mode.TRANSACTION, "batch": Mode.WRITE_ONLY, "step": Mode.LEASE}
    started = time.monotonic()
    assert dedup.run(key, "long", handler, mode=mode[writer]).kind is OutcomeKind.RAN
    commits = [(round(at - started, 2), t) for m, at, t in deadlines.sent if m == "Commit"]
    _, bound = commits[1] if writer == "step" else commits[0]  # after the claim, in lease mode
    assert bound is not None, commits
    assert bound >= 1.0, commits
    assert not deadlines.past(started)
