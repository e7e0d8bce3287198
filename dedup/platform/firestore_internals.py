"""The one module of `dedup` that touches private attributes of google-cloud-firestore.

Every record read and write goes through the library's public API (`DocumentReference.get`,
`create`, `update` with `option=`, `retry=` and `timeout=`, `WriteBatch.commit`, and
transactions); see `dedup.kernel.store`. Two things the public API does not
offer are done here, sync and async side by side:

* **A timeout on a transaction's own RPCs.** `Transaction` and `AsyncTransaction` pass no
  timeout to BeginTransaction, Commit and Rollback (the library's default is 60 s, and its
  default retry of a Rollback retries `UNAVAILABLE` and `DEADLINE_EXCEEDED` for 60 s), so a
  Firestore outage would hold a transaction-mode delivery far past `rpc_timeout_seconds`.
  `BoundedTransaction` and `BoundedAsyncTransaction` override the library's `_begin`,
  `_commit` and `_rollback` with the same calls plus a timeout; commit is never retried (a
  lost response is resolved by reading the record).
* **A failed rollback never replaces the transaction's error.** The library rolls back on any
  error and lets the rollback's own error propagate in place of the one being handled. After
  a database restart a rollback is refused as INVALID_ARGUMENT ("Transaction is invalid or
  expired"), which reads as bad data, a terminal error: a commit merely cut off would have
  recorded its event `failed` (`tests/dedup/test_holes.py::
  test_a_refused_rollback_never_stands_for_a_steps_failed_commit`). Both overrides log the
  rollback's error (WARNING) and let the transaction's own error propagate; the database ends
  the transaction when it expires.
* **What a transaction or batch is about to write**, for the one-database rule of the atomic
  modes (`dedup.kernel.store.require_one_database`): the buffered writes and a reference's full
  name.
* **Which database and credentials a client has, and a transaction's client**: for the
  records of an event from another database, and for `dedup.outbox`.

The private attributes used, checked against google-cloud-firestore 2.34 (pinned in
requirements.txt; the emulator suite runs on it):

* `Transaction._id`, `_options_protobuf(retry_id)`, `_clean_up()`, `_client`, and the
  overridden `_begin`, `_commit`, `_rollback` (same for `AsyncTransaction`);
* `BaseClient._firestore_api` (`begin_transaction`, `commit`, `rollback`), `_rpc_metadata`,
  `_database_string`;
* `BaseWriteBatch._write_pbs` (the buffered `Write` messages of a batch or transaction);
* `BaseDocumentReference._document_path` (`projects/<p>/databases/<d>/documents/<path>`);
* `BaseClient._database` and `_credentials` (a second client for another database of the same
  project, with the same credentials), `BaseWriteBatch._client` (a transaction's client).

An upgrade that changes any of them fails the emulator suite, not production:
`tests/dedup/test_holes.py` (transaction calls bounded by the RPC timeout, a transaction begun
at the handler's first read), the transaction-mode tests and `tests/dedup/test_modes.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from google.api_core.exceptions import GoogleAPICallError, RetryError
from google.api_core.retry import AsyncRetry, Retry
from google.cloud.firestore import AsyncClient, AsyncTransaction, Client, Transaction

logger = logging.getLogger("dedup")

_ROLLBACK_ERRORS = (GoogleAPICallError, RetryError)
"""What a failed rollback raises; kept from replacing the transaction's own error."""


def _rollback_failed(exc: Exception) -> None:
    logger.warning(
        "a transaction's rollback failed (%s: %s); the database ends the transaction when it "
        "expires, and the transaction's own error is the one raised",
        type(exc).__name__,
        exc,
    )


type RpcTimeout = float | Callable[[], float]
"""The bound of each RPC of a bounded transaction: seconds, or a callable giving them."""


def _seconds(timeout: RpcTimeout) -> float:
    return timeout() if callable(timeout) else timeout


class _Bounded:
    """The time bounds both bounded transactions keep: each RPC's (`timeout`, a callable asked
    before each RPC), the rollback's, and the begin's retry of transient errors."""

    _bound: RpcTimeout
    _rollback_bound: RpcTimeout
    _begin_retry: Any

    def _bind(self, timeout: RpcTimeout, rollback_timeout: RpcTimeout | None, retry: Any) -> None:
        self._bound = timeout
        self._rollback_bound = timeout if rollback_timeout is None else rollback_timeout
        self._begin_retry = retry

    @property
    def _rpc_timeout(self) -> float:
        return _seconds(self._bound)


class BoundedTransaction(_Bounded, Transaction):
    """A `firestore.Transaction` whose begin, commit and rollback are bounded in time, and
    which begins only when the handler first reads through it.

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
        client: Client,
        *,
        max_attempts: int,
        timeout: RpcTimeout,
        begin_retry: Retry,
        rollback_timeout: RpcTimeout | None = None,
    ) -> None:
        """A transaction of `client` retried `max_attempts` times on Aborted; each RPC is
        bounded by `timeout` seconds (a callable, `dedup.kernel.budget.Budget.rpc`: asked
        before each RPC, so the bound shrinks with the budget), a rollback by
        `rollback_timeout` (default: `timeout`), its retries included, and a begin and a
        rollback retry transient errors by `begin_retry`.
        A rollback keeps its own bound: one cut short leaves the transaction open on the
        server, holding its locks until the database expires it (60 s), and every other writer
        of those documents waits."""
        self._armed = False
        self._retry_id: bytes | None = None
        super().__init__(client, max_attempts=max_attempts)
        self._bind(timeout, rollback_timeout, begin_retry)

    @property
    def in_progress(self) -> bool:
        """True once begun, or armed to begin on the first read."""
        return self._armed or self._id is not None

    @property
    def id(self) -> bytes | None:
        """The transaction's id, beginning it now if it is armed (a read is about to use it)."""
        if self._id is None and self._armed:
            api = self._client._firestore_api
            timeout = self._rpc_timeout
            response = api.begin_transaction(
                **_begin_call(self, self._retry_id, timeout),
                retry=self._begin_retry.with_timeout(timeout),
            )
            self._id = response.transaction
            self._armed = False
            self._retry_id = self._retry_id or response.transaction  # a retry names the first
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
                bound = _seconds(self._rollback_bound)
                self._client._firestore_api.rollback(
                    **_rollback_call(self, bound), retry=self._begin_retry.with_timeout(bound)
                )
        except _ROLLBACK_ERRORS as exc:
            _rollback_failed(exc)
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        api = self._client._firestore_api
        return _committed(self, api.commit(**_commit_call(self, self._rpc_timeout)))


class BoundedAsyncTransaction(_Bounded, AsyncTransaction):
    """An `AsyncTransaction` whose begin, commit and rollback are bounded in time (the library
    passes no timeout, and retries its commit); the async twin of `BoundedTransaction`, begun
    when entered as the library does."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        max_attempts: int,
        timeout: RpcTimeout,
        begin_retry: AsyncRetry,
        rollback_timeout: RpcTimeout | None = None,
    ) -> None:
        """A transaction of `client` retried `max_attempts` times on Aborted; each RPC is
        bounded by `timeout` seconds (a callable: asked before each RPC), a rollback by
        `rollback_timeout`, its retries included (see `BoundedTransaction`), and a begin and a
        rollback retry transient errors by `begin_retry`."""
        super().__init__(client, max_attempts=max_attempts)
        self._bind(timeout, rollback_timeout, begin_retry)

    async def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} has already begun")
        api = self._client._firestore_api
        response = await api.begin_transaction(
            **_begin_call(self, retry_id, self._rpc_timeout),
            retry=self._begin_retry.with_timeout(self._rpc_timeout),
        )
        self._id = response.transaction

    async def _rollback(self) -> None:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        try:
            bound = _seconds(self._rollback_bound)
            await self._client._firestore_api.rollback(
                **_rollback_call(self, bound), retry=self._begin_retry.with_timeout(bound)
            )
        except _ROLLBACK_ERRORS as exc:
            _rollback_failed(exc)
        finally:
            self._clean_up()

    async def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction is in progress")
        api = self._client._firestore_api
        return _committed(self, await api.commit(**_commit_call(self, self._rpc_timeout)))


def buffered_write_names(writer: Any) -> list[str]:
    """The full names of the documents a transaction or batch (of either client) will write,
    in order: what its `_write_pbs` holds."""
    names = []
    for write in getattr(writer, "_write_pbs", ()):
        if "update" in write:
            names.append(write.update.name)
        elif "delete" in write:
            names.append(write.delete)
        elif "transform" in write:
            names.append(write.transform.document)
    return names


def document_name(ref: Any) -> str:
    """A document reference's full name, `projects/<p>/databases/<d>/documents/<path>`."""
    name: str = ref._document_path
    return name


def database_of(client: Any) -> str:
    """The database id a Firestore client (sync or async) talks to (`(default)` when unset)."""
    return str(getattr(client, "_database", None) or "(default)")


def credentials_of(client: Any) -> Any:
    """The credentials a Firestore client was built with (None: the environment's)."""
    return getattr(client, "_credentials", None)


def client_of(writer: Any) -> Any:
    """The client a transaction or batch writes through."""
    return writer._client


# The library's transaction RPCs with a timeout (`transaction` is either kind).


def _begin_call(transaction: Any, retry_id: bytes | None, timeout: float) -> dict[str, Any]:
    client = transaction._client
    return {
        "request": {
            "database": client._database_string,
            "options": transaction._options_protobuf(retry_id),
        },
        "metadata": client._rpc_metadata,
        "timeout": timeout,
    }


def _rollback_call(transaction: Any, timeout: float) -> dict[str, Any]:
    client = transaction._client
    return {
        "request": {"database": client._database_string, "transaction": transaction._id},
        "metadata": client._rpc_metadata,
        "timeout": timeout,
    }


def _commit_call(transaction: Any, timeout: float) -> dict[str, Any]:
    client = transaction._client
    return {
        "request": {
            "database": client._database_string,
            "writes": transaction._write_pbs,
            "transaction": transaction._id or b"",
        },
        "metadata": client._rpc_metadata,
        "retry": None,  # never retried: a lost response is resolved by reading
        "timeout": timeout,
    }


def _committed(transaction: Any, response: Any) -> list[Any]:
    transaction._clean_up()
    transaction.write_results = list(response.write_results)
    transaction.commit_time = response.commit_time
    return list(transaction.write_results)
