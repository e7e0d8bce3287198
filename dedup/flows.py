"""The flow of each mode, chosen once: `FLOWS`, and `settle`, the one place a run enters it.

| mode                | flow                           | the effect commits                   |
|---------------------|--------------------------------|--------------------------------------|
| `Mode.LEASE`        | `dedup.lease.run_lease`        | on its own; a lease guards the run   |
| `Mode.TRANSACTION`  | `dedup.atomic.run_transaction` | in a transaction, with the marker    |
| `Mode.WRITE_ONLY`   | `dedup.atomic.run_write_only`  | in a batch, with the marker's create |

Nothing else branches on the mode: each flow knows what it reads, writes and commits, and the
delivery a handler gets follows from its mode by table (`dedup.runs.Run.delivery`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from dedup.atomic import run_transaction, run_write_only
from dedup.delivery import Handler, Outcome, OutcomeKind
from dedup.errors import StoreUnavailable
from dedup.flow_io import Invoke
from dedup.lease import run_lease
from dedup.record import Mode
from dedup.runs import Run

Flow = Callable[[Run, Invoke], Coroutine[Any, Any, Outcome]]
"""`await flow(run, invoke)`: claim, run the handler through `invoke`, record the outcome."""

FLOWS: Mapping[Mode, Flow] = {
    Mode.LEASE: run_lease,
    Mode.TRANSACTION: run_transaction,
    Mode.WRITE_ONLY: run_write_only,
}
"""The flow of every mode."""


async def settle(run: Run, invoke: Invoke) -> Outcome:
    """Run the flow of `run.mode` (the handler through `invoke`); a store failure is logged
    as `unavailable` and re-raised."""
    try:
        return await FLOWS[run.mode](run, invoke)
    except StoreUnavailable as exc:
        run.finish(OutcomeKind.UNAVAILABLE, error=str(exc))
        raise


def invoker(run: Run, client: Any, handler: Handler) -> Invoke:
    """How the flows call a sync `handler`: with `Run.delivery` on `client`."""

    async def invoke(writer: object) -> object:
        return handler(run.delivery(client, writer))

    return invoke
