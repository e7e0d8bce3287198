"""What a delivery leaves to observe: one log line (`log_delivery`), and through the
OpenTelemetry API one span, one count and one overhead measurement (`Telemetry.delivery`); and
how bad each outcome is (`SEVERITY`). Names, attributes and fields: docs/observability.md."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    NoOpTracer,
    ProxyTracer,
    ProxyTracerProvider,
    SpanKind,
    Status,
    StatusCode,
)

from dedup.errors import InvalidSuffix, MissingEventId
from dedup.kernel.record import Mode, OutcomeKind, Record

if TYPE_CHECKING:
    from opentelemetry import metrics

_METRICS_API = "opentelemetry.metrics"

INSTRUMENTATION_NAME = "dedup"
"""The instrumentation scope of the tracer and the meter."""
SPAN_PREFIX = "dedup "
"""A delivery's span is named `dedup <suffix>`."""
DELIVERIES = "dedup.deliveries"
OVERHEAD = "dedup.overhead"
INVALID_KEY = "invalid_key"
"""Outcome of a delivery refused for its key (`MissingEventId`, `InvalidSuffix`)."""
ERROR = "error"
"""Outcome of a delivery that ended in any other exception outside the flows' outcomes."""
OUTCOMES = (*(kind.value for kind in OutcomeKind), INVALID_KEY, ERROR)
"""Every value of `dedup.outcome` and of the metrics' `outcome` attribute."""
_DUPLICATES = frozenset({OutcomeKind.DUPLICATE.value, OutcomeKind.DUPLICATE_CACHED.value})
DUPLICATE_EVENT = "dedup.duplicate"
"""Span event of a delivery that found its effect done (`duplicate`, `duplicate_cached`)."""
REPLAYED_EVENT = "dedup.replayed"
"""Span event of a duplicate whose record holds an HTTP or callable answer to replay."""
ORIGINAL_TRACE_ID = "dedup.original_trace_id"
"""Attribute of both events: the trace id of the delivery that wrote the record (`traceId`)."""
_ANSWER_KINDS = frozenset({"http", "callable"})

SEVERITY = {
    OutcomeKind.RAN: logging.INFO,
    OutcomeKind.DUPLICATE: logging.INFO,
    OutcomeKind.DUPLICATE_CACHED: logging.INFO,
    OutcomeKind.SELF_TRIGGER: logging.INFO,
    OutcomeKind.LEASE_HELD: logging.WARNING,
    OutcomeKind.RELEASED: logging.WARNING,
    OutcomeKind.TOO_OLD: logging.WARNING,
    OutcomeKind.UNAVAILABLE: logging.WARNING,
    OutcomeKind.FAILED: logging.ERROR,
    OutcomeKind.DEAD: logging.ERROR,
    OutcomeKind.LEASE_LOST: logging.ERROR,
    OutcomeKind.PAYLOAD_MISMATCH: logging.ERROR,
    OutcomeKind.AMBIGUOUS: logging.WARNING,
    OutcomeKind.RECONCILED: logging.INFO,
}
"""How bad each outcome is: its log line's level, and from `logging.ERROR` up (`ERROR_OUTCOMES`)
an ERROR status on its span and a log-based metric of `make monitoring`."""

ERROR_OUTCOMES = tuple(kind for kind, level in SEVERITY.items() if level >= logging.ERROR)
"""The outcomes `SEVERITY` ranks ERROR, in its order."""

EXPLAINED = {
    OutcomeKind.AMBIGUOUS: (
        "; an earlier attempt may have produced the effect and nothing could tell: not run "
        "again (on_ambiguous='skip'), the record is unknown; `dedup revive` runs it again"
    ),
    OutcomeKind.RECONCILED: (
        "; reconcile found the earlier attempt's effect: recorded as sent, handler not run"
    ),
}
"""What an outcome's log line adds after its path."""

R = TypeVar("R")


class Observed(Protocol):
    """What telemetry reads from a delivery's bookkeeping (`dedup.kernel.run.Run`) at its end."""

    key: str
    attempt: int
    outcome: OutcomeKind | None
    found: Record | None


@dataclass
class DeliveryTrace:
    """One delivery being observed: which run it is, and how long its handler took."""

    run: Observed | None = None
    """Set by the flow once the delivery's key is known (`watch`)."""
    handler_seconds: float = 0.0
    """Time spent inside the handler (every call, when a transaction retries it)."""
    clock: Callable[[], float] = time.perf_counter
    """Seconds, monotonic: what the overhead is measured with (injectable for tests)."""
    _started: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._started = self.clock()

    def watch(self, run: Observed) -> None:
        """Read the key, attempt and outcome from `run` when the delivery ends."""
        self.run = run

    @contextmanager
    def in_handler(self) -> Iterator[None]:
        """Count the time spent in this block as the handler's (sync or around an `await`)."""
        started = self.clock()
        try:
            yield
        finally:
            self.handler_seconds += self.clock() - started

    def timed(self, handler: Callable[..., R]) -> Callable[..., R]:
        """`handler`, with its time counted as the handler's (see `in_handler`)."""
        clock = self.clock

        def call(*args: object, **kwargs: object) -> R:
            started = clock()
            try:
                return handler(*args, **kwargs)
            finally:
                self.handler_seconds += clock() - started

        return call

    def overhead_ms(self) -> float:
        """Milliseconds since the delivery started, minus the handler's time."""
        elapsed = self.clock() - self._started
        return max(0.0, (elapsed - self.handler_seconds) * 1000)

    def outcome(self, error: BaseException | None) -> str:
        """The delivery's outcome: the run's last `OutcomeKind`, else one for `error`."""
        if self.run is not None and self.run.outcome is not None:
            return self.run.outcome._value_  # `.value`, without its descriptor's two calls
        if isinstance(error, MissingEventId | InvalidSuffix):
            return INVALID_KEY
        return ERROR


class Telemetry:
    """The tracer and the two instruments of a `Deduplicator` (OpenTelemetry API only), by
    default of the global providers: no-ops until an SDK is installed, bound to it once it is.
    Made without network."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """Use these providers (default: the global ones); `clock` measures the overhead."""
        self._clock = clock
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        self._meter_provider = meter_provider
        self._instruments: tuple[metrics.Counter, metrics.Histogram] | None = None
        self._instruments_lock = threading.Lock()

    def _measured(self) -> tuple[metrics.Counter, metrics.Histogram] | None:
        if self._instruments is not None:
            return self._instruments
        if self._meter_provider is None and _METRICS_API not in sys.modules:
            return None
        with self._instruments_lock:  # concurrent deliveries create them once
            if self._instruments is not None:
                return self._instruments
            from opentelemetry import metrics

            meter = metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=self._meter_provider)
            self._instruments = (
                meter.create_counter(
                    DELIVERIES, unit="{delivery}", description="Deliveries by suffix and outcome"
                ),
                meter.create_histogram(
                    OVERHEAD,
                    unit="ms",
                    description=(
                        "Time a delivery spent in dedup (Firestore calls, waits), handler excluded"
                    ),
                ),
            )
        return self._instruments

    def delivery(self, suffix: str, mode: Mode) -> AbstractContextManager[DeliveryTrace]:
        """Observe one delivery: its span is current inside the block; on the way out it gets
        its outcome and attempt, the instruments one measurement each; exceptions pass."""
        return _Observing(self, suffix, mode)

    def _starts_span(self) -> bool:
        """Whether a delivery now starts a span (docs/architecture.md, "Spans without an SDK")."""
        kind = type(self._tracer)  # ProxyTracer: the global provider's, no-op until one is set
        unset = kind is ProxyTracer and type(trace.get_tracer_provider()) is ProxyTracerProvider
        if kind is not NoOpTracer and not unset:
            return True
        return not isinstance(trace.get_current_span(), NonRecordingSpan)

    def _end(
        self, span: trace.Span | None, suffix: str, observed: DeliveryTrace, outcome: str
    ) -> None:
        if span is not None:
            run = observed.run
            if run is not None:
                span.set_attribute("dedup.key", run.key)
            span.set_attribute("dedup.attempt", run.attempt if run is not None else 0)
            span.set_attribute("dedup.outcome", outcome)
            if outcome in _DUPLICATES:
                _duplicate_event(span, run.found if run is not None else None)
            if outcome in ERROR_OUTCOMES:
                span.set_status(Status(StatusCode.ERROR, f"dedup outcome {outcome}"))
        instruments = self._instruments
        if instruments is None:
            instruments = self._measured()
        if instruments is not None:
            deliveries, overhead = instruments
            labels = {"suffix": suffix, "outcome": outcome}
            deliveries.add(1, labels)
            overhead.record(observed.overhead_ms(), labels)


class _Observing:
    """`Telemetry.delivery`'s block."""

    __slots__ = ("_mode", "_observed", "_span", "_started", "_suffix", "_telemetry")

    def __init__(self, telemetry: Telemetry, suffix: str, mode: Mode) -> None:
        self._telemetry = telemetry
        self._suffix = suffix
        self._mode = mode
        self._started: AbstractContextManager[trace.Span] | None = None
        self._span: trace.Span | None = None

    def __enter__(self) -> DeliveryTrace:
        telemetry, suffix = self._telemetry, self._suffix
        observed = self._observed = DeliveryTrace(clock=telemetry._clock)
        mode = self._mode if type(self._mode) is Mode else Mode(self._mode)
        if not telemetry._starts_span():
            return observed
        attributes = {"dedup.suffix": suffix, "dedup.mode": mode.value}
        started = telemetry._tracer.start_as_current_span(
            SPAN_PREFIX + suffix, kind=SpanKind.INTERNAL, attributes=attributes
        )
        self._span = started.__enter__()
        self._started = started
        return observed

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        observed = self._observed
        self._telemetry._end(self._span, self._suffix, observed, observed.outcome(error))
        if self._started is None:
            return None
        return self._started.__exit__(kind, error, traceback)


def _duplicate_event(span: trace.Span, found: Record | None) -> None:
    result = found.result if found is not None else None
    replayed = isinstance(result, dict) and result.get("kind") in _ANSWER_KINDS
    attributes = {}
    if found is not None and found.trace_id:
        attributes[ORIGINAL_TRACE_ID] = found.trace_id
    span.add_event(REPLAYED_EVENT if replayed else DUPLICATE_EVENT, attributes)


LOGGER_NAME = "dedup"
logger = logging.getLogger(LOGGER_NAME)

_FIELDS = (
    "eventId",
    "suffix",
    "key",
    "outcome",
    "attempt",
    "ms",
    "error",
    "path",
    "subject",
    "budget_source",
)
_setup_lock = threading.Lock()
_first_use_done = False


class CloudLoggingFormatter(logging.Formatter):
    """Formats a record as one JSON object Cloud Logging parses: severity, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as a single JSON line; dedup fields come from `extra=`."""
        entry: dict[str, Any] = {
            "severity": _severity(record.levelno),
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging() -> None:
    """Attach the stdout JSON handler to the "dedup" logger (level INFO if unset, `propagate`
    off), once, and only if neither it nor the root logger has a handler: never a second
    handler. Without the call the first delivery line does it."""
    with _setup_lock:
        if logger.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(CloudLoggingFormatter())
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)


def _configure_on_first_use() -> None:
    global _first_use_done
    if _first_use_done:
        return
    configure_logging()
    _first_use_done = True


def logs_at(level: int) -> bool:
    """Whether a delivery line at `level` would reach the "dedup" logger's handlers, after the
    first-use set-up (`configure_logging`) as `log_delivery` would do it."""
    if not _first_use_done:
        _configure_on_first_use()
    return logger.isEnabledFor(level)


def log_delivery(
    level: int,
    message: str,
    *,
    event_id: str | None = None,
    suffix: str | None = None,
    key: str | None = None,
    outcome: str,
    attempt: int | None = None,
    ms: int | None = None,
    error: str | None = None,
    path: str | None = None,
    subject: str | None = None,
    budget_source: str | None = None,
) -> None:
    """Emit the one line of a delivery's outcome (no traceback, no payload; fields left None
    omitted). `budget_source`: which bound the delivery's time was (`BudgetSource`). The first
    line configures the "dedup" logger if the application has not (`configure_logging`)."""
    _configure_on_first_use()
    logger.log(
        level,
        message,
        extra={
            "eventId": event_id,
            "suffix": suffix,
            "key": key,
            "outcome": outcome,
            "attempt": attempt,
            "ms": ms,
            "error": error,
            "path": path,
            "subject": subject,
            "budget_source": budget_source,
        },
    )


def _severity(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "CRITICAL"
    if levelno >= logging.ERROR:
        return "ERROR"
    if levelno >= logging.WARNING:
        return "WARNING"
    if levelno >= logging.INFO:
        return "INFO"
    return "DEBUG"
