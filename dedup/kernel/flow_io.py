"""The protocols the flows see (`FlowIO`): five record operations, three helpers (`client`,
`path`, `unavailable`), an instance's pauses and per-key turns; and the lease and ambiguity
choice as lower layers name them. Protocols only: no code here runs on a delivery."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from dedup.errors import StoreUnavailable
    from dedup.kernel.budget import Budget
    from dedup.kernel.record import Conflict, Fields, Mode, Snapshot

type Invoke = Callable[[Any], Coroutine[Any, Any, object]]
"""`await invoke(writer)`: call the handler with its delivery at the run's current attempt and
return what it returned. `writer`: None in lease mode, the transaction or the batch otherwise."""

type Fill = Callable[[Any], Coroutine[Any, Any, tuple[Any, Fields]]]
"""`await fill(writer)`: run the handler into a transaction or batch; returns what it returned
and the marker's fields (the store adds the marker write, fenced, then commits)."""


class RecordIO(Protocol):
    """The five record operations (coroutines) and three helpers. Every operation is bounded
    by its `budget`; a failed precondition is returned as `Conflict`, other failures raise
    `StoreUnavailable` chaining the cause."""

    client: Any
    """The client a handler gets in its delivery (a `firestore.Client` or `AsyncClient` for
    Firestore)."""

    def path(self, key: str) -> str:
        """The record's document path, `<collection>/<key>`."""
        ...

    def unavailable(self, action: str, key: str, exc: BaseException | None) -> StoreUnavailable:
        """The error for a failed `action` on the record (chain `exc` with `from`)."""
        ...

    async def read(
        self, key: str, *, action: str = "claim", budget: Budget | None = None
    ) -> Snapshot:
        """The record (None if absent), its read time and update time. `budget`, here and
        below: bounds the call with its retries (None: the store's RPC timeout)."""
        ...

    async def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: Budget | None = None
    ) -> datetime | Conflict:
        """Create the record if absent: its update time, or `Conflict` if it exists."""
        ...

    async def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        fence: datetime,
        /,
        *,
        action: str,
        budget: Budget | None = None,
        keep_trying: bool = False,
    ) -> datetime | Conflict:
        """Update the record if last written at `fence`: the new update time, or
        `Conflict` if it changed or vanished. `keep_trying`: every Firestore error is retried
        within `budget`, not only transient ones (an owner recording an effect)."""
        ...

    async def commit_batch(
        self, key: str, fill: Fill, fence: datetime | None, /, *, budget: Budget | None = None
    ) -> Any:
        """Open a batch, `fill` it, add the marker (a create if `fence` is None, else an update
        fenced by it), commit once. Returns what `fill` returned first; raises what `fill` or
        the commit raised."""
        ...

    async def run_transaction(
        self,
        key: str,
        fill: Fill,
        fence: datetime | None,
        /,
        *,
        attempts: int,
        budget: Budget | None = None,
    ) -> Any:
        """As `commit_batch` in a transaction, which the client retries `attempts` times on
        contention (Aborted), calling `fill` again."""
        ...


class Pacing(Protocol):
    """How deliveries on one instance wait: pauses, and one turn per key at a time."""

    async def sleep(self, seconds: float) -> None:
        """Pause this delivery (a backoff)."""
        ...

    def turn(self, key: str, timeout: float | None = None) -> AbstractAsyncContextManager[None]:
        """Wait until no other delivery of `key` on this instance is inside its turn;
        `dedup.kernel.turns.TurnTimeout` after `timeout` seconds (None: no limit)."""
        ...


class FlowIO(RecordIO, Pacing, Protocol):
    """Everything a flow does outside itself: the record operations and the pacing."""


class Ambiguity(Protocol):
    """A function's choice for an ambiguous take-over, as the lease flow asks it (made by
    `dedup.kernel.ambiguity.AmbiguityChoice`)."""

    @property
    def on_ambiguous(self) -> str:
        """What an ambiguous take-over does when nothing could tell: "rerun" or "skip"."""
        ...

    @property
    def reconcile(self) -> Any:
        """The function's `reconcile`, None without one."""
        ...

    async def ask(self, run: Any, notes: Any) -> bool | None:
        """`reconcile`'s verdict on the run's delivery whose notes are `notes`."""
        ...


class FencedLease(Protocol):
    """A delivery's lease as the steps and the ambiguity settlement write through it (made by
    `dedup.kernel.lease.Lease`)."""

    run: Any
    owner: str
    fence: datetime

    @property
    def steps(self) -> Any:
        """The delivery's steps (`dedup.kernel.steps.StepLog`)."""
        ...

    async def write(
        self, fields: Fields, state: Any, action: str, *, keeps_lease: bool = False
    ) -> None:
        """A write fenced by `fence`, which it moves on (`dedup.kernel.lease.Lease.write`)."""
        ...

    def steps_room(self) -> int:
        """The bytes the record has for its `steps` (`dedup.kernel.lease.Lease.steps_room`)."""
        ...

    def steps_landed(self, steps: Any, sent: float, fence: datetime | None) -> None:
        """A write of the step log committed (`dedup.kernel.lease.Lease.steps_landed`)."""
        ...


class EventFacts(Protocol):
    """What a first write records of its delivery (a `dedup.kernel.run.Run` has it)."""

    event_id: str
    suffix: str
    mode: Mode
    payload_hash: str | None
    subject: str | None
    source: str | None

    @property
    def path(self) -> str:
        """The record's document path, `<collection>/<key>`."""
        ...

    def expire_at(self) -> datetime:
        """When the record may be deleted (its TTL field)."""
        ...
