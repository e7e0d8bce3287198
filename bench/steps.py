"""What a durable step costs (`delivery.step`, docs/steps.md), in Firestore RPCs counted on the
wire (`bench.rpc_count`): each kind of step beyond the delivery it runs in, and a delivery that
replays five recorded steps beyond one that has none to replay.

* `plain`: one step whose call sends nothing: its record, one write.
* `transactional`: one step that reads a document and writes it in its transaction: the
  transaction's own begin, read and commit, its record inside that commit.
* `at_most_once`: its start and its end, two writes.
* `replay_5`: a take-over of an event whose earlier delivery recorded five steps and died before
  "sent": the claim already read the record, so replaying the five costs nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.rpc_count import RpcCounter, counting_client
from dedup import DedupConfig, Deduplicator, Delivery
from dedup.kernel.delivery import Step

LEASE_SECONDS = 3
"""A short lease, so that the replay's take-over waits little."""


class _Died(BaseException):
    """A process death: nothing of the library handles it, the lease is left to expire."""


def measure() -> dict[str, int]:
    """RPCs of each kind of step, and of a five-step replay (`steps_rpcs` in results.json)."""
    counter = RpcCounter()
    client = counting_client(counter)
    config = DedupConfig(
        function_timeout_seconds=2, lease_seconds=LEASE_SECONDS, rpc_timeout_seconds=1
    )
    dedup = Deduplicator(config, client=client)
    run = uuid.uuid4().hex[:8]

    def rpcs(event: str, handler: Callable[[Delivery], object]) -> int:
        with counter.scope() as tally:
            dedup.run(f"{run}-{event}", "benchSteps", lambda delivery: _none(handler(delivery)))
        return tally.rpcs

    def bump(transaction: Any) -> int:
        ref = client.collection("benchStock").document(run)
        n = int((ref.get(transaction=transaction).to_dict() or {}).get("n", 0)) + 1
        transaction.set(ref, {"n": n})
        return n

    rpcs("warm-up", lambda d: None)
    none = rpcs("none", lambda d: None)
    plain = rpcs("plain", lambda d: d.step("a", lambda: 1) and None)
    transactional = rpcs("tx", lambda d: d.step("a", bump, transactional=True) and None)
    once = rpcs("once", lambda d: d.step("a", lambda: 1, on_interrupted="skip") and None)
    return {
        "plain": plain - none,
        "transactional": transactional - none,
        "at_most_once": once - none,
        "replay_5": _replay(dedup, counter, run, steps=5) - _replay(dedup, counter, run, steps=0),
    }


def _none(_: object) -> None:
    """A handler's result dropped (the steps' values are not the delivery's)."""


def _replay(dedup: Deduplicator, counter: RpcCounter, run: str, *, steps: int) -> int:
    """RPCs of the take-over of an event whose first delivery recorded `steps` steps and died
    after its handler returned."""
    event = f"{run}-replay-{steps}"

    def handler(delivery: Delivery) -> None:
        for i in range(steps):
            delivery.step(f"s{i}", lambda i=i: i)

    def die(step: Step, key: str) -> None:
        if step is Step.AFTER_EFFECT:
            raise _Died

    stop = dedup.on_step(die)
    try:
        dedup.run(event, "benchSteps", handler)
    except _Died:
        pass
    finally:
        stop()
    time.sleep(LEASE_SECONDS + 0.5)
    with counter.scope() as tally:
        dedup.run(event, "benchSteps", handler)
    return tally.rpcs
