"""Count the Firestore RPCs a delivery really sends, with a gRPC client interceptor.

`counting_client` builds a `firestore.Client` whose transport runs on
`grpc.intercept_channel(<the client's own emulator channel>, RpcCounter)`: the client builds
its transport in `BaseClient._firestore_api_helper` from `_emulator_channel(transport)` when
FIRESTORE_EMULATOR_HOST is set, so overriding that one method keeps every option the client
sets (insecure channel, the emulator's bearer token, message sizes) and sees every call,
including retries and transaction begin/commit/rollback.

Interceptors run in the calling thread, so `RpcCounter.scope()` attributes calls to the
delivery running in the current thread even while other threads use the same client.

Besides calls, it counts the billing units a call carries: documents asked for by
`BatchGetDocuments` (document reads) and writes in a `Commit` (document writes, the handler's
own included). `bench.cost` prices them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud import firestore


@dataclass
class Tally:
    """What one scope sent: calls by method, and the document reads and writes they carried."""

    calls: Counter[str] = field(default_factory=Counter)
    reads: int = 0
    writes: int = 0

    @property
    def rpcs(self) -> int:
        """Every call, whatever its method."""
        return sum(self.calls.values())


def _units(name: str, request: Any) -> tuple[int, int]:
    """(document reads, document writes) carried by one request of method `name`."""
    if name == "BatchGetDocuments":
        return len(getattr(request, "documents", ())), 0
    if name == "Commit":
        return 0, len(getattr(request, "writes", ()))
    return 0, 0


class RpcCounter(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Counts calls by method name (`Commit`, `BatchGetDocuments`, ...), globally and per scope."""

    def __init__(self) -> None:
        """No calls counted yet."""
        self._lock = threading.Lock()
        self._total: Counter[str] = Counter()
        self._local = threading.local()

    @contextmanager
    def scope(self) -> Iterator[Tally]:
        """Count what the current thread sends inside the block into a new `Tally`."""
        bucket = Tally()
        previous = getattr(self._local, "bucket", None)
        self._local.bucket = bucket
        try:
            yield bucket
        finally:
            self._local.bucket = previous

    def total(self) -> Counter[str]:
        """A copy of every call counted so far, from every thread, by method."""
        with self._lock:
            return Counter(self._total)

    def _count(self, details: grpc.ClientCallDetails, request: Any = None) -> None:
        method = details.method
        name = (method.decode() if isinstance(method, bytes) else str(method)).rsplit("/", 1)[-1]
        with self._lock:
            self._total[name] += 1
        bucket: Tally | None = getattr(self._local, "bucket", None)
        if bucket is not None:
            bucket.calls[name] += 1
            reads, writes = _units(name, request)
            bucket.reads += reads
            bucket.writes += writes

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        """Count, then send."""
        self._count(client_call_details, request)
        return continuation(client_call_details, request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        """Count, then send."""
        self._count(client_call_details, request)
        return continuation(client_call_details, request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Count, then send."""
        self._count(client_call_details)
        return continuation(client_call_details, request_iterator)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Count, then send."""
        self._count(client_call_details)
        return continuation(client_call_details, request_iterator)


class _CountingClient(firestore.Client):
    """A Firestore client whose emulator channel goes through an `RpcCounter`."""

    _rpc_counter: RpcCounter

    def _emulator_channel(self, transport: Any) -> Any:
        return grpc.intercept_channel(super()._emulator_channel(transport), self._rpc_counter)


def counting_client(
    counter: RpcCounter, project: str | None = None, host: str | None = None
) -> firestore.Client:
    """A Firestore client on the emulator (FIRESTORE_EMULATOR_HOST, or `host`, an emulator of
    its own) counting into `counter`.

    Raises RuntimeError if the emulator is not configured: the channel is only intercepted on
    the emulator path, and this benchmark never runs against a real database.
    """
    client = _CountingClient(project=project)
    if host is not None and client._emulator_host is not None:
        client._emulator_host = host  # before the first call builds the channel
    if client._emulator_host is None:
        raise RuntimeError(
            "FIRESTORE_EMULATOR_HOST is not set: run `make bench`, or start the Firestore "
            "emulator and export FIRESTORE_EMULATOR_HOST=host:port"
        )
    client._rpc_counter = counter
    return client
