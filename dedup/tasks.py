"""`task_once`: exactly-once effects for Cloud Tasks task-queue functions, the sibling of
`trigger_once` for firebase-functions `tasks_fn.on_task_dispatched` handlers.

    @tasks_fn.on_task_dispatched(retry_config=..., rate_limits=...)
    @task_once("index_post")
    def index_post(request: tasks_fn.CallableRequest[Any], delivery: Delivery) -> None:
        ...

Cloud Tasks dispatches a task at least once. The dedup event id is the **task name**, the
`X-CloudTasks-TaskName` header (the task's id within its queue): every dispatch of one task
shares it, two tasks never do. `Delivery.attempt` counts the record's attempts; the platform's
own counters (`X-CloudTasks-TaskRetryCount`, `X-CloudTasks-TaskExecutionCount`) are logged with
the task name on every dispatch. The payload fingerprint is the task's `data` as canonical
JSON.

How each outcome is answered is the `task` column of `dedup.entrances.answer_table` (rendered
in docs/guarantees.md): 200 when Cloud Tasks should stop (ran, duplicate, failed, dead, too
old), 429 `resource-exhausted` for a live lease and 503 `unavailable` when Firestore failed
(Cloud Tasks backs the queue off after either), 500 `internal` for the handler's error or a
lost lease, 400 for a dispatch without a task name. Requests that are not task dispatches at
all (a body that is not `{"data": ...}` JSON) never reach this wrapper when the function is
wrapped by `functions.task_boundary.validated_task`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from firebase_functions.https_fn import CallableRequest, FunctionsErrorCode, HttpsError

from dedup.entrances.answer_table import Case, Door, answer, case_of, refusal_status
from dedup.entrances.gate import TASKS, gate
from dedup.entrances.suffixes import DEFAULT_REGISTRY, SuffixRegistry
from dedup.errors import LeaseHeld, StoreUnavailable
from dedup.kernel.delivery import Delivery
from dedup.kernel.record import RERUN, Mode
from dedup.platform.propagation import continued, from_headers

if TYPE_CHECKING:
    from dedup.config import DedupConfig
    from dedup.kernel.delivery import Reconcile
    from dedup.kernel.front_door import Deduplicator

__all__ = [
    "DEFAULT_REGISTRY",
    "EXECUTION_COUNT_HEADER",
    "LEASE_HELD_STATUS",
    "QUEUE_NAME_HEADER",
    "RELEASED_STATUS",
    "RETRY_COUNT_HEADER",
    "STORE_UNAVAILABLE_STATUS",
    "TASK_NAME_HEADER",
    "Headers",
    "TaskDecorator",
    "TaskDispatch",
    "TaskFunction",
    "TaskHandler",
    "task_dispatch",
    "task_once",
    "task_payload",
]

TASK_NAME_HEADER = "X-CloudTasks-TaskName"
"""The task's id within its queue: the dedup event id."""
QUEUE_NAME_HEADER = "X-CloudTasks-QueueName"
RETRY_COUNT_HEADER = "X-CloudTasks-TaskRetryCount"
"""How many times Cloud Tasks retried the task (logged, never trusted for dedup)."""
EXECUTION_COUNT_HEADER = "X-CloudTasks-TaskExecutionCount"
"""How many dispatches got an answer other than 5xx (logged, never trusted for dedup)."""

LEASE_HELD_STATUS = refusal_status(Case.LEASE_HELD, Door.TASK)
"""`LeaseHeld` answer: firebase-functions `resource-exhausted` (429)."""
RELEASED_STATUS = refusal_status(Case.HANDLER_RAISED, Door.TASK)
"""The handler raised (lease released) or `LeaseLost`: firebase-functions `internal` (500)."""
STORE_UNAVAILABLE_STATUS = refusal_status(Case.STORE_UNAVAILABLE, Door.TASK)
"""`StoreUnavailable` answer: firebase-functions `unavailable` (503)."""

logger = logging.getLogger("dedup.tasks")

type TaskHandler = Callable[[CallableRequest[Any], Delivery], None]
"""A decorated task handler: `handler(request, delivery) -> None`."""
type TaskFunction = Callable[[CallableRequest[Any]], None]
"""What `task_once` returns: takes the request only, for `tasks_fn.on_task_dispatched`."""


class Headers(Protocol):
    """Request headers looked up by name, case-insensitively (Flask's `request.headers`)."""

    def get(self, key: str, /) -> str | None:
        """The header's value, or None."""
        ...


class TaskDecorator(Protocol):
    """What `task_once(...)` returns: turns `handler(request, delivery)` into `fn(request)`."""

    def __call__(self, handler: TaskHandler, /) -> TaskFunction:
        """Wrap `handler`; the result takes the request only."""
        ...


@dataclass(frozen=True)
class TaskDispatch:
    """What one dispatch says about its task, from the Cloud Tasks request headers."""

    task_name: str | None
    """`X-CloudTasks-TaskName`; None when absent or empty (then nothing may run)."""
    queue_name: str | None
    """`X-CloudTasks-QueueName`, if sent."""
    retry_count: str | None
    """`X-CloudTasks-TaskRetryCount` as sent (logged only)."""
    execution_count: str | None
    """`X-CloudTasks-TaskExecutionCount` as sent (logged only)."""


def task_dispatch(headers: Headers | Mapping[str, str]) -> TaskDispatch:
    """The Cloud Tasks headers of a dispatch (look-ups are exact for a plain mapping)."""
    name = (headers.get(TASK_NAME_HEADER) or "").strip()
    return TaskDispatch(
        task_name=name or None,
        queue_name=headers.get(QUEUE_NAME_HEADER),
        retry_count=headers.get(RETRY_COUNT_HEADER),
        execution_count=headers.get(EXECUTION_COUNT_HEADER),
    )


def task_payload(data: Any) -> bytes:
    """The canonical rendering of a task's `data` (sorted-key JSON) that is fingerprinted."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")  # any text, lone surrogates included


def task_once(
    suffix: str,
    *,
    mode: Mode = Mode.LEASE,
    config: DedupConfig | None = None,
    deduplicator: Deduplicator | None = None,
    registry: SuffixRegistry | None = None,
    reconcile: Reconcile | None = None,
    on_ambiguous: str = RERUN,
) -> TaskDecorator:
    """Make a task handler's effect happen once per task, however often the task is dispatched.

    `suffix` names the function as in `trigger_once` (1-100 of `[A-Za-z0-9_]`, unique in the
    process, shared registry), checked here at import time, and so is the handler (`async def`
    is refused with `ConfigError`). The wrapper reads the task name from the dispatch
    (`TASK_NAME_HEADER`), logs the platform's counters, and calls `Deduplicator.run`. It
    returns None (200) when Cloud Tasks should stop, and raises when it should retry, with the
    status of the module's table. A dispatch without a task name is refused with 400 before
    any record is read or written. `reconcile` and `on_ambiguous`: as for `trigger_once` (a
    skipped ambiguous task is answered 200, so Cloud Tasks stops).
    """
    entry = gate(TASKS, suffix, mode, config, deduplicator, registry, reconcile, on_ambiguous)

    def decorate(handler: TaskHandler) -> TaskFunction:
        admitted = entry.admit(handler)

        def once(request: CallableRequest[Any]) -> None:
            dispatch = task_dispatch(request.raw_request.headers)
            if dispatch.task_name is None:
                raise _refusal(
                    Case.REFUSED_INPUT,
                    f"no {TASK_NAME_HEADER} header: only Cloud Tasks may call this function",
                )
            logger.info(
                "task %s dispatched (queue %s, retry count %s, execution count %s)",
                dispatch.task_name,
                dispatch.queue_name,
                dispatch.retry_count,
                dispatch.execution_count,
                extra={"eventId": dispatch.task_name, "suffix": suffix},
            )

            def run_handler(delivery: Delivery) -> None:
                handler(request, delivery)

            try:
                with continued(from_headers(request.raw_request.headers)):
                    options = admitted.options._replace(payload=task_payload(request.data))
                    admitted.deduplicator().run_event(
                        dispatch.task_name, suffix, run_handler, options
                    )
            except (LeaseHeld, StoreUnavailable) as exc:  # BudgetSpent is one
                raise _refusal(case_of(exc), str(exc)) from exc

        return admitted.identify(once)

    return decorate


def _refusal(case: Case | None, message: str) -> HttpsError:
    """The `HttpsError` of `case` at a task entrance (`dedup.entrances.answer_table`)."""
    error = answer(case, Door.TASK).error if case is not None else None
    return HttpsError(FunctionsErrorCode(error or FunctionsErrorCode.INTERNAL.value), message)
