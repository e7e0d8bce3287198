"""An `AsyncClient` whose RPCs a test can break: the async twin of `tests.dedup.grpc_faults`.

`faulty_async_dedup(plan, **settings)` returns an `AsyncDeduplicator` whose client (one per
event loop) sends every unary call through `plan(method, call_number) -> Fault`, counted
across the deduplicator's clients. Faults and plans are `grpc_faults`' (`Fault`, `nth`);
`Fault.HANG` is not offered here (no test needs it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import grpc
from google.cloud.firestore import AsyncClient
from google.cloud.firestore_v1.base_client import _GRPC_MSG_SIZE_OPTIONS

from dedup import DedupConfig
from dedup.aio import AsyncDeduplicator
from tests.dedup.grpc_faults import PROJECT, Fault, Plan

_CODES = {
    Fault.LOSE_RESPONSE: (grpc.StatusCode.UNAVAILABLE, "injected: response lost"),
    Fault.INVALID: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "injected: Transaction is invalid or expired.",
    ),
    Fault.ABORT: (grpc.StatusCode.ABORTED, "injected: Transaction lock timeout"),
    Fault.DEADLINE: (grpc.StatusCode.DEADLINE_EXCEEDED, "injected: deadline exceeded"),
    Fault.DENY: (grpc.StatusCode.PERMISSION_DENIED, "injected: denied"),
}


class AsyncFaultInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Applies a `Plan` to every unary call of an asyncio channel and counts calls per method."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.calls: Counter[str] = Counter()

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        name = details.method  # bytes on grpc.aio (str() of it would be "b'/...'")
        method = (name.decode() if isinstance(name, bytes) else str(name)).rsplit("/", 1)[-1]
        self.calls[method] += 1  # one event loop: no lock needed
        fault = self.plan(method, self.calls[method])
        if fault is Fault.PASS:
            return await continuation(details, request)
        if fault is Fault.LOSE_RESPONSE:
            await (await continuation(details, request))  # applied on the server
        code, text = _CODES[fault]
        raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), text)


class FaultyAsyncClient(AsyncClient):
    """An AsyncClient on the emulator whose channel goes through an `AsyncFaultInterceptor`."""

    def __init__(self, interceptor: AsyncFaultInterceptor) -> None:
        super().__init__(project=PROJECT)
        self.interceptor = interceptor

    def _emulator_channel(self, transport: Any) -> Any:
        options = [("Authorization", "Bearer owner"), *_GRPC_MSG_SIZE_OPTIONS]
        return grpc.aio.insecure_channel(
            self._emulator_host, options=options, interceptors=[self.interceptor]
        )


def faulty_async_dedup(plan: Plan, **settings: Any) -> AsyncDeduplicator:
    """An AsyncDeduplicator on the emulator applying `plan`; settings go to DedupConfig."""
    interceptor = AsyncFaultInterceptor(plan)
    return AsyncDeduplicator(
        DedupConfig(**settings), client_factory=lambda: FaultyAsyncClient(interceptor)
    )
