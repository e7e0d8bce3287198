"""How dedup's Firestore calls are bounded in time and which errors are retried: the error
kinds, the client library's retry of reads, and transactions whose RPCs have a timeout
(`BoundedTransaction`, and the arguments the async `dedup.aio.store.BoundedAsyncTransaction`
shares). Used by the record stores (`dedup.store`, `dedup.aio.store`); no dedup logic.
"""

from __future__ import annotations

from typing import Any, cast

from google.api_core import exceptions as api_exceptions
from google.api_core.retry import AsyncRetry, Retry, if_exception_type
from google.cloud import firestore
from google.cloud.firestore_v1.transaction import Transaction

from dedup.wire import Committer

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.Aborted,  # contention: the emulator's "Transaction lock timeout" (409)
    api_exceptions.DeadlineExceeded,
    api_exceptions.ServiceUnavailable,
    api_exceptions.InternalServerError,
    api_exceptions.TooManyRequests,
    api_exceptions.ResourceExhausted,
    api_exceptions.Unknown,
    api_exceptions.Cancelled,
)
"""Errors after which the same call may succeed; for a write, it may also have been applied."""

PRECONDITION_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.AlreadyExists,
    api_exceptions.FailedPrecondition,
    api_exceptions.NotFound,
)
"""What a write raises when its precondition (exists=false, or an update time) fails."""


class BoundedTransaction(Transaction):
    """A `firestore.Transaction` whose begin, commit and rollback are bounded in time.

    google-cloud-firestore passes no timeout to these calls (the library's default is 60 s), so
    a Firestore outage would hold a transaction-mode delivery far past `rpc_timeout_seconds`.
    The overrides are the library's own methods (2.34, pinned in requirements.txt) with a
    timeout added; commit is not retried here (a lost response is resolved by reading).
    """

    def __init__(
        self,
        client: firestore.Client,
        *,
        max_attempts: int,
        timeout: float,
        committer: Committer | None = None,
    ) -> None:
        """A transaction of `client` retried `max_attempts` times on Aborted; each RPC is
        bounded by `timeout` seconds. Begin and commit go through `committer` (`dedup.wire`),
        which also takes plain `Write` messages in `_write_pbs`."""
        super().__init__(client, max_attempts=max_attempts)
        self._rpc_timeout = timeout
        self._committer = committer or Committer(client)

    def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} has already begun")
        options = self._options_protobuf(retry_id)
        timeout = self._rpc_timeout
        begin = sync_retry(timeout)(self._committer.begin)
        transaction_id: Any = begin(options, timeout=timeout)
        self._id = transaction_id

    def _rollback(self) -> None:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        try:
            self._client._firestore_api.rollback(**rollback_call(self, self._rpc_timeout))
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        response = self._committer.commit(
            self._write_pbs, timeout=self._rpc_timeout, transaction=cast(bytes, self._id)
        )
        return committed(self, response)


# The library's transaction RPCs with a timeout, shared by `BoundedTransaction` and the async
# `dedup.aio.store.BoundedAsyncTransaction` (`transaction` is either kind).


def begin_call(transaction: Any, retry_id: bytes | None, timeout: float) -> dict[str, Any]:
    """The arguments of a BeginTransaction call (add the retry of the client's kind)."""
    client = transaction._client
    return {
        "request": {
            "database": client._database_string,
            "options": transaction._options_protobuf(retry_id),
        },
        "metadata": client._rpc_metadata,
        "timeout": timeout,
    }


def rollback_call(transaction: Any, timeout: float) -> dict[str, Any]:
    """The arguments of a Rollback call."""
    client = transaction._client
    return {
        "request": {"database": client._database_string, "transaction": transaction._id},
        "metadata": client._rpc_metadata,
        "timeout": timeout,
    }


def commit_call(transaction: Any, timeout: float) -> dict[str, Any]:
    """The arguments of a Commit call: never retried (a lost response is resolved by reading)."""
    client = transaction._client
    return {
        "request": {
            "database": client._database_string,
            "writes": transaction._write_pbs,
            "transaction": transaction._id,
        },
        "metadata": client._rpc_metadata,
        "retry": None,
        "timeout": timeout,
    }


def committed(transaction: Any, response: Any) -> list[Any]:
    """Close `transaction` after a successful commit; its write results."""
    transaction._clean_up()
    transaction.write_results = list(response.write_results)
    transaction.commit_time = response.commit_time
    return list(transaction.write_results)


def transient_retry[R: (Retry, AsyncRetry)](timeout: float, kind: type[R]) -> R:
    """The client library's own retry of reads and begins (`Retry`, or `AsyncRetry` for the
    async client): transient errors, within `timeout` seconds."""
    return kind(
        predicate=if_exception_type(*TRANSIENT_ERRORS),
        initial=0.05,
        maximum=1.0,
        multiplier=2.0,
        timeout=timeout,
    )


def sync_retry(timeout: float) -> Retry:
    """`transient_retry` for the sync client."""
    return transient_retry(timeout, Retry)
