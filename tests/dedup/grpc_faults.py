"""A Firestore client whose RPCs a test can break: lose responses, fail calls, hang them.

`faulty_client(plan)` returns a `firestore.Client` on the emulator whose channel passes every
unary call through `plan(method, call_number) -> Fault`. Faults:

* `Fault.PASS`: the call goes through untouched;
* `Fault.LOSE_RESPONSE`: the call is applied on the emulator, then the client sees
  UNAVAILABLE, as when a connection drops after the server committed;
* `Fault.ABORT` / `Fault.DEADLINE` / `Fault.INVALID`: the call is not sent; the client sees
  ABORTED (the emulator's "Transaction lock timeout"), DEADLINE_EXCEEDED, or INVALID_ARGUMENT
  (what a commit of an expired transaction gets);
* `Fault.DENY`: the call is not sent; the client sees PERMISSION_DENIED (an error no retry
  cures, reported at once as `StoreUnavailable`);
* `Fault.HANG`: the call is not sent; the client waits for its own deadline (60 s when the
  caller set none, the library's default) and sees DEADLINE_EXCEEDED.

Methods are the gRPC names' last part: `Commit`, `BeginTransaction`, `Rollback`. Document
reads are streaming calls (`BatchGetDocuments`) and always pass.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from enum import Enum
from typing import Any

import grpc
from google.cloud import firestore

PROJECT = "demo-exactly-once"
DEFAULT_DEADLINE_SECONDS = 60.0


class Fault(Enum):
    """What happens to one call."""

    PASS = "pass"
    LOSE_RESPONSE = "lose_response"
    ABORT = "abort"
    DEADLINE = "deadline"
    INVALID = "invalid"
    DENY = "deny"
    HANG = "hang"


Plan = Callable[[str, int], Fault]
"""`plan(method, n)`: the fault for the `n`-th call (1-based) of `method`."""


class _InjectedError(grpc.RpcError, grpc.Call, grpc.Future):
    """A failed call as the channel returns it: a finished future whose result raises."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> tuple[()]:
        return ()

    def trailing_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        raise self

    def exception(self, timeout: float | None = None) -> BaseException:
        return self

    def traceback(self, timeout: float | None = None) -> Any:
        return None

    def add_done_callback(self, fn: Any) -> None:
        fn(self)


class FaultInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Applies a `Plan` to every unary call and counts calls per method."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.calls: Counter[str] = Counter()
        self.injected: Counter[Fault] = Counter()
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = str(details.method).rsplit("/", 1)[-1]
        with self._lock:
            self.calls[method] += 1
            fault = self.plan(method, self.calls[method])
            self.injected[fault] += fault is not Fault.PASS
        if fault is Fault.PASS:
            return continuation(details, request)
        if fault is Fault.LOSE_RESPONSE:
            continuation(details, request).result()  # applied on the server
            return _InjectedError(grpc.StatusCode.UNAVAILABLE, "injected: response lost")
        if fault is Fault.INVALID:
            return _InjectedError(
                grpc.StatusCode.INVALID_ARGUMENT, "injected: Transaction is invalid or expired."
            )
        if fault is Fault.ABORT:
            return _InjectedError(grpc.StatusCode.ABORTED, "injected: Transaction lock timeout")
        if fault is Fault.DENY:
            return _InjectedError(grpc.StatusCode.PERMISSION_DENIED, "injected: denied")
        if fault is Fault.HANG:
            time.sleep(details.timeout if details.timeout is not None else DEFAULT_DEADLINE_SECONDS)
        return _InjectedError(grpc.StatusCode.DEADLINE_EXCEEDED, "injected: deadline exceeded")


class FaultyClient(firestore.Client):
    """A Firestore client on the emulator whose channel goes through a `FaultInterceptor`."""

    def __init__(self, interceptor: FaultInterceptor) -> None:
        super().__init__(project=PROJECT)
        self.interceptor = interceptor

    def _emulator_channel(self, transport: Any) -> Any:
        return grpc.intercept_channel(super()._emulator_channel(transport), self.interceptor)


def faulty_client(plan: Plan) -> FaultyClient:
    """A client on the emulator that applies `plan` to its unary calls."""
    return FaultyClient(FaultInterceptor(plan))


def nth(method: str, numbers: set[int], fault: Fault) -> Plan:
    """A plan that applies `fault` to the listed calls of `method` and passes the rest."""
    return lambda name, n: fault if name == method and n in numbers else Fault.PASS


def commits_cut_rollbacks_refused(commits: set[int]) -> Plan:
    """A plan of a database restart met mid-transaction: the listed `Commit` calls cut off
    unsent (DEADLINE_EXCEEDED), every `Rollback` refused as invalid (INVALID_ARGUMENT, the
    restarted database knowing no such transaction), the rest passed."""

    def plan(method: str, n: int) -> Fault:
        if method == "Commit" and n in commits:
            return Fault.DEADLINE
        return Fault.INVALID if method == "Rollback" else Fault.PASS

    return plan
