"""How dedup's Firestore calls are bounded in time and which errors are retried: the error
kinds, the client library's retry of reads, and transactions whose RPCs have a timeout
(`BoundedTransaction`, and the arguments the async `dedup.aio.store.BoundedAsyncTransaction`
shares). Used by the record stores (`dedup.store`, `dedup.aio.store`); no dedup logic.
"""

from __future__ import annotations

from typing import Any

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
    """A `firestore.Transaction` whose begin, commit and rollback are bounded in time, and
    which begins only when the handler first reads through it.

    google-cloud-firestore passes no timeout to these calls (the library's default is 60 s), so
    a Firestore outage would hold a transaction-mode delivery far past `rpc_timeout_seconds`.
    The overrides are the library's own methods (2.34, pinned in requirements.txt) with a
    timeout added; commit is not retried here (a lost response is resolved by reading).

    **Begun on the first read.** A transaction is only needed for reads: its writes (the
    handler's and the marker, with its precondition) commit atomically in one Commit whether
    or not a transaction id comes with them. So `_begin` only arms the transaction, and the
    BeginTransaction call is made when a read first asks for the id (every read of the
    library does, through `get_transaction_id`). A handler that only writes (an Increment, a
    set) commits its writes and the marker as one atomic Commit, one round trip fewer; a
    handler that reads gets the same transaction as before, from its first read on. A begin
    that fails is the failure of the read that asked for it: the handler raises it, and the
    delivery records a failed attempt like any other error of the handler's reads.
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
        self._armed = False
        self._retry_id: bytes | None = None
        super().__init__(client, max_attempts=max_attempts)
        self._rpc_timeout = timeout
        self._committer = committer or Committer(client)

    @property
    def in_progress(self) -> bool:
        """True once begun, or armed to begin on the first read."""
        return self._armed or self._id is not None

    @property
    def id(self) -> bytes | None:
        """The transaction's id, beginning it now if it is armed (a read is about to use it)."""
        if self._id is None and self._armed:
            options = self._options_protobuf(self._retry_id)
            timeout = self._rpc_timeout
            begin = sync_retry(timeout)(self._committer.begin)
            transaction_id: Any = begin(options, timeout=timeout)
            self._id = transaction_id
            self._armed = False
            self._retry_id = self._retry_id or transaction_id  # a retry names the first one
        return self._id

    def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} has already begun")
        self._armed = True
        self._retry_id = retry_id or self._retry_id

    def _clean_up(self) -> None:
        super()._clean_up()
        self._armed = False

    def _rollback(self) -> None:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        try:
            if self._id is not None:  # armed, never begun: nothing to roll back
                self._client._firestore_api.rollback(**rollback_call(self, self._rpc_timeout))
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        response = self._committer.commit(
            self._write_pbs, timeout=self._rpc_timeout, transaction=self._id or b""
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
