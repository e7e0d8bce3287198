"""Lost RPC responses, injected by a gRPC client interceptor in the function processes.

`LostResponses` sits on the Firestore client's emulator channel (see `faulty_client`). For a
fraction of `Commit` calls it lets the call reach the database and complete, then raises
UNAVAILABLE or DEADLINE_EXCEEDED instead of returning the response: the write is applied, the
client believes it may not be (the ambiguous commit of a real network). For another fraction
it fails the commit before sending it with UNAVAILABLE, DEADLINE_EXCEEDED or ABORTED (what a
loaded database answers: nothing applied). For a fraction of reads (`BatchGetDocuments`,
`RunQuery`) it fails the call before sending it, as an unreachable server would. Every
injected fault is reported through `on_fault`.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud import firestore

WRITE_METHODS = frozenset({"Commit"})
"""Methods whose response may be lost after the write was applied."""
READ_METHODS = frozenset({"BatchGetDocuments", "RunQuery"})
"""Methods that may fail before reaching the database."""


class InjectedRpcError(grpc.RpcError):
    """A gRPC error made up by the interceptor; google-api-core maps it by `code()`.

    Like grpc's own errors it is also a finished call (`result()` raises it): the client's
    transport wraps the channel in its own interceptor, which may hand it on as a call.
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        """An error with this status code and message."""
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        """The status code the client sees."""
        return self._code

    def details(self) -> str:
        """The message the client sees."""
        return self._details

    def trailing_metadata(self) -> None:
        """No rich error details."""
        return None

    def initial_metadata(self) -> None:
        """No metadata."""
        return None

    def result(self, timeout: float | None = None) -> Any:
        """Raise this error, as a failed call does."""
        raise self

    def exception(self, timeout: float | None = None) -> BaseException:
        """This error."""
        return self

    def traceback(self, timeout: float | None = None) -> Any:
        """The traceback of this error."""
        return self.__traceback__

    def done(self) -> bool:
        """Finished."""
        return True

    def running(self) -> bool:
        """Not running."""
        return False

    def cancelled(self) -> bool:
        """Not cancelled."""
        return False

    def cancel(self) -> bool:
        """Too late to cancel."""
        return False

    def is_active(self) -> bool:
        """Finished."""
        return False

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        """Call `fn` at once: the call is done."""
        fn(self)


class LostResponses(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Loses `write_rate` of commit responses after the write, fails `refuse_rate` of commits
    before sending them and `read_rate` of reads."""

    def __init__(
        self,
        *,
        write_rate: float,
        read_rate: float,
        on_fault: Callable[[str], None],
        refuse_rate: float = 0.0,
        seed: int | None = None,
    ) -> None:
        """Inject with these probabilities per call; report each fault to `on_fault`."""
        self.write_rate = write_rate
        self.read_rate = read_rate
        self.refuse_rate = refuse_rate
        self._on_fault = on_fault
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def _draw(self, rate: float) -> float | None:
        if rate <= 0:
            return None
        with self._lock:
            return self._random.random() if self._random.random() < rate else None

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        """Commit: maybe refuse it unsent; else send, wait until applied, maybe lose the
        response."""
        name = _method(client_call_details)
        refused = self._draw(self.refuse_rate) if name in WRITE_METHODS else None
        if refused is not None:
            code = _REFUSALS[int(refused * len(_REFUSALS))]
            self._on_fault(f"refused-{name}-{code.name}")
            raise InjectedRpcError(code, f"soak: {name} not applied ({code.name})")
        draw = self._draw(self.write_rate) if name in WRITE_METHODS else None
        call = continuation(client_call_details, request)
        if draw is None:
            return call
        try:
            call.result()
        except grpc.RpcError:
            return call  # the database refused it on its own: nothing was applied, pass it on
        code = grpc.StatusCode.UNAVAILABLE if draw < 0.5 else grpc.StatusCode.DEADLINE_EXCEEDED
        self._on_fault(f"lost-{name}-{code.name}")
        raise InjectedRpcError(code, f"soak: {name} applied, response lost ({code.name})")

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        """Reads: maybe fail before sending."""
        name = _method(client_call_details)
        if name in READ_METHODS and self._draw(self.read_rate) is not None:
            self._on_fault(f"failed-{name}-UNAVAILABLE")
            raise InjectedRpcError(grpc.StatusCode.UNAVAILABLE, f"soak: {name} not sent")
        return continuation(client_call_details, request)


_REFUSALS = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
)


def _method(details: Any) -> str:
    method = details.method
    return (method.decode() if isinstance(method, bytes) else str(method)).rsplit("/", 1)[-1]


class _FaultyClient(firestore.Client):
    """A Firestore client whose emulator channel goes through a `LostResponses` interceptor."""

    _interceptor: LostResponses

    def _emulator_channel(self, transport: Any) -> Any:
        return grpc.intercept_channel(super()._emulator_channel(transport), self._interceptor)


def faulty_client(interceptor: LostResponses, project: str) -> firestore.Client:
    """A client on the emulator (FIRESTORE_EMULATOR_HOST) with `interceptor` on its channel.

    Raises RuntimeError if no emulator is configured: faults are injected only on the emulator
    path, and the soak never runs against a real database.
    """
    client = _FaultyClient(project=project)
    if client._emulator_host is None:
        raise RuntimeError(
            "FIRESTORE_EMULATOR_HOST is not set: the soak's function processes are started by "
            "`python -m soak`, which sets it to its own emulator"
        )
    client._interceptor = interceptor
    return client
