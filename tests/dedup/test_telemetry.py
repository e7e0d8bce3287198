"""OpenTelemetry: every delivery, whatever its outcome, gives exactly one span `dedup <suffix>`,
one count in `dedup.deliveries` and one measurement in `dedup.overhead`, and they agree.

Each test gets its own SDK providers with the in-memory exporters (`InMemorySpanExporter`,
`InMemoryMetricReader`), handed to the deduplicator's `Telemetry`; nothing global is set, so
the rest of the suite runs with the API's no-ops, as an application without an SDK does.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from dedup import (
    DedupConfig,
    Deduplicator,
    Delivery,
    LeaseHeld,
    LeaseLost,
    MissingEventId,
    Mode,
    PayloadMismatch,
    StoreUnavailable,
    TerminalError,
    TransactionDelivery,
)
from dedup.errors import DatabaseMismatch
from dedup.kernel.record import OutcomeKind, Record
from dedup.telemetry import ERROR_OUTCOMES, OUTCOMES, SEVERITY, Telemetry
from tests.dedup.grpc_faults import Fault, faulty_client
from tests.dedup.support import write_foreign_lease

PROJECT = "demo-exactly-once"
ROOT = Path(__file__).resolve().parents[2]
SUFFIX = "s"
SPAN = f"dedup {SUFFIX}"
OTHER_DATABASE = "telemetry-other"


@dataclass
class Observed:
    """The in-memory exporters of one test, and a deduplicator factory wired to them."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    telemetry: Telemetry
    client: firestore.Client
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def dedup(self, client: firestore.Client | None = None, **settings: Any) -> Deduplicator:
        """A deduplicator on the emulator (or `client`), observed by this test's providers."""
        config = DedupConfig(**settings)
        return Deduplicator(config, client=client or self.client, telemetry=self.telemetry)

    def delivery_spans(self) -> list[ReadableSpan]:
        """The finished `dedup <suffix>` spans, in the order they ended."""
        return [s for s in self.spans.get_finished_spans() if s.name == SPAN]

    def points(self, name: str) -> dict[tuple[str, str], Any]:
        """(suffix, outcome) -> data point of the metric `name`."""
        data = self.metrics.get_metrics_data()
        found = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            labels = dict(point.attributes or {})
                            found[(str(labels["suffix"]), str(labels["outcome"]))] = point
        return found


@pytest.fixture
def observed(firestore_client: firestore.Client) -> Iterator[Observed]:
    """Fresh SDK providers with in-memory exporters, for this test only."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Observed(spans, reader, telemetry, firestore_client, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def ok(delivery: Delivery) -> None:
    """A handler that succeeds."""


def fail(delivery: Delivery) -> None:
    """A handler that fails, retryably."""
    raise RuntimeError("downstream said 503")


def terminal(delivery: Delivery) -> None:
    """A handler that fails for good."""
    raise TerminalError("downstream said 400")


def _ran(o: Observed) -> None:
    o.dedup().run("e1", SUFFIX, ok)


def _duplicate(o: Observed) -> None:
    o.dedup().run("e1", SUFFIX, ok)
    o.dedup().run("e1", SUFFIX, ok)  # another instance: no cache, reads the record


def _duplicate_cached(o: Observed) -> None:
    dedup = o.dedup()
    dedup.run("e1", SUFFIX, ok)
    dedup.run("e1", SUFFIX, ok)


def _lease_held(o: Observed) -> None:
    dedup = o.dedup()

    def redelivered_meanwhile(delivery: Delivery) -> None:
        with pytest.raises(LeaseHeld):
            dedup.run("e1", SUFFIX, ok)

    dedup.run("e1", SUFFIX, redelivered_meanwhile)


def _released(o: Observed) -> None:
    with pytest.raises(RuntimeError):
        o.dedup().run("e1", SUFFIX, fail)


def _failed(o: Observed) -> None:
    o.dedup().run("e1", SUFFIX, terminal)


def _dead(o: Observed) -> None:
    o.dedup(max_attempts=1, min_retry_seconds=0).run("e1", SUFFIX, fail)


def _too_old(o: Observed) -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=2)
    o.dedup(max_event_age_seconds=60).run("e1", SUFFIX, ok, event_time=long_ago)


def _self_trigger(o: Observed) -> None:
    o.dedup().run("e1", SUFFIX, ok, document_path="triggerEvents/x-s")


def _lease_lost(o: Observed) -> None:
    def record_deleted_meanwhile(delivery: Delivery) -> None:
        o.client.document(delivery.path).delete()  # an operator purged it: not ours any more

    with pytest.raises(LeaseLost):
        o.dedup().run("e1", SUFFIX, record_deleted_meanwhile)


def _unavailable(o: Observed) -> None:
    broken = faulty_client(lambda method, n: Fault.DEADLINE if method == "Commit" else Fault.PASS)
    with pytest.raises(StoreUnavailable):
        o.dedup(broken, rpc_timeout_seconds=1).run("e1", SUFFIX, ok)


def _payload_mismatch(o: Observed) -> None:
    o.dedup().run("e1", SUFFIX, ok, payload=b"first")
    with pytest.raises(PayloadMismatch):
        o.dedup(on_payload_mismatch="raise").run("e1", SUFFIX, ok, payload=b"second")


def _invalid_key(o: Observed) -> None:
    with pytest.raises(MissingEventId):
        o.dedup().run(None, SUFFIX, ok)


def _error(o: Observed) -> None:
    other = firestore.Client(project=PROJECT, database=OTHER_DATABASE)

    def writes_elsewhere(delivery: TransactionDelivery) -> None:
        delivery.transaction.set(other.document("orders/o1"), {"n": 1})

    with pytest.raises(DatabaseMismatch):
        o.dedup().run("e1", SUFFIX, writes_elsewhere, mode=Mode.TRANSACTION)  # type: ignore[arg-type]


def _expired_lease(o: Observed) -> None:
    """The record of an attempt whose lease expired: it may have produced its effect."""
    write_foreign_lease(o.client, "e1-s", started=datetime.now(UTC) - timedelta(minutes=5))


def _ambiguous(o: Observed) -> None:
    _expired_lease(o)
    o.dedup().run("e1", SUFFIX, ok, on_ambiguous="skip")


def _reconciled(o: Observed) -> None:
    _expired_lease(o)
    o.dedup().run("e1", SUFFIX, ok, reconcile=lambda delivery: True)


SCENARIOS: dict[str, Callable[[Observed], None]] = {
    "ran": _ran,
    "duplicate": _duplicate,
    "duplicate_cached": _duplicate_cached,
    "lease_held": _lease_held,
    "released": _released,
    "failed": _failed,
    "dead": _dead,
    "too_old": _too_old,
    "self_trigger": _self_trigger,
    "lease_lost": _lease_lost,
    "unavailable": _unavailable,
    "payload_mismatch": _payload_mismatch,
    "invalid_key": _invalid_key,
    "error": _error,
    "ambiguous": _ambiguous,
    "reconciled": _reconciled,
}
RAISED = {"released", "lease_held", "lease_lost", "unavailable", "payload_mismatch",
          "invalid_key", "error"}  # fmt: skip
"""Outcomes whose delivery ends in an exception."""
ERROR_STATUS = RAISED | {kind.value for kind in ERROR_OUTCOMES}
"""Outcomes whose span has status ERROR: an exception left the delivery, or `SEVERITY` ranks
the outcome ERROR."""
NO_KEY = {"invalid_key"}


def test_every_outcome_has_a_scenario() -> None:
    """The outcomes the telemetry can report are exactly the ones tested below."""
    assert set(SCENARIOS) == set(OUTCOMES)


@pytest.mark.parametrize("outcome", list(SCENARIOS))
def test_each_delivery_gives_one_span_one_count_and_one_overhead(
    observed: Observed, outcome: str
) -> None:
    """Whatever a delivery's outcome, returned or raised: one span named `dedup <suffix>` with
    its key, suffix, mode, outcome and attempt, one count in `dedup.deliveries` and one
    measurement in `dedup.overhead`, under the same suffix and outcome."""
    SCENARIOS[outcome](observed)
    spans = observed.delivery_spans()
    assert spans, "no delivery span"
    assert outcome in [s.attributes["dedup.outcome"] for s in spans if s.attributes]
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes["dedup.suffix"] == SUFFIX
        assert attributes["dedup.mode"] in {m.value for m in Mode}
        assert attributes["dedup.outcome"] in OUTCOMES
        assert isinstance(attributes["dedup.attempt"], int)
        if attributes["dedup.outcome"] in NO_KEY:
            assert "dedup.key" not in attributes
        else:
            assert attributes["dedup.key"] == "e1-s"
        expect_error = attributes["dedup.outcome"] in ERROR_STATUS
        assert (span.status.status_code is StatusCode.ERROR) is expect_error, attributes
    per_outcome = Counter(str((s.attributes or {})["dedup.outcome"]) for s in spans)
    counts = observed.points("dedup.deliveries")
    overheads = observed.points("dedup.overhead")
    assert {k: p.value for k, p in counts.items()} == {
        (SUFFIX, o): n for o, n in per_outcome.items()
    }
    assert {k: p.count for k, p in overheads.items()} == {
        (SUFFIX, o): n for o, n in per_outcome.items()
    }
    assert all(p.sum >= 0 for p in overheads.values())


@dataclass
class _Ended:
    """A delivery's bookkeeping as telemetry reads it at the end (`dedup.telemetry.Observed`)."""

    outcome: OutcomeKind | None
    key: str = "e1-s"
    attempt: int = 1
    found: Record | None = None


@pytest.mark.parametrize("outcome", list(OutcomeKind))
def test_the_span_status_follows_the_one_severity_table(outcome: OutcomeKind) -> None:
    """A delivery that ends without an exception has an ERROR span exactly when its outcome's
    log line is an ERROR (`SEVERITY`); no other table decides (no emulator)."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider())
    with telemetry.delivery(SUFFIX, Mode.LEASE) as observed:
        observed.watch(_Ended(outcome))
    [span] = spans.get_finished_spans()
    is_error = span.status.status_code is StatusCode.ERROR
    assert is_error is (SEVERITY[outcome] >= logging.ERROR), (outcome, span.status)
    assert is_error is (outcome in ERROR_OUTCOMES)


def test_attributes_match_the_outcome_returned(observed: Observed) -> None:
    """The span says what `run` returned: key, attempt, mode; a retried event's attempt counts."""
    dedup = observed.dedup(cache_size=0)
    with pytest.raises(RuntimeError):
        dedup.run("e2", SUFFIX, fail, mode=Mode.TRANSACTION)
    outcome = dedup.run("e2", SUFFIX, ok, mode=Mode.TRANSACTION)
    last = observed.delivery_spans()[-1]
    assert dict(last.attributes or {}) == {
        "dedup.suffix": SUFFIX,
        "dedup.mode": "transaction",
        "dedup.key": outcome.key,
        "dedup.attempt": outcome.attempt,
        "dedup.outcome": "ran",
    }
    assert outcome.attempt == 2


def test_overhead_leaves_the_handler_out(observed: Observed) -> None:
    """`dedup.overhead` is the delivery's time minus its handler's: on a clock that only the
    handler moves (by 1000 s), the overhead is 0 ms, and the span still covers the handler."""
    now = [0.0]
    observed.telemetry = Telemetry(
        tracer_provider=observed.tracer_provider,
        meter_provider=observed.meter_provider,
        clock=lambda: now[0],
    )

    def slow(delivery: Delivery) -> None:
        now[0] += 1000.0

    observed.dedup().run("e3", SUFFIX, slow)
    [point] = observed.points("dedup.overhead").values()
    assert (point.count, point.sum) == (1, 0.0)
    [span] = observed.delivery_spans()
    assert dict(span.attributes or {})["dedup.outcome"] == "ran"


def test_firestore_calls_are_child_spans_once_the_functions_switch_telemetry_on(
    firestore_host: str,
) -> None:
    """google-cloud-firestore emits no spans itself; with the SDK and the gRPC client
    instrumentation that `functions.observability` installs (DEDUP_OTEL=1), each Firestore
    call of a delivery is a child span of its `dedup <suffix>` span, and the metrics reach
    the installed reader."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.dedup.otel_worker", "e4"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The last line: dedup's own outcome lines (JSON on stdout, no set-up call) come first.
    recorded = json.loads(done.stdout.strip().splitlines()[-1])
    spans = recorded["spans"]
    deliveries = [s for s in spans if s["name"] == SPAN]
    assert [d["attributes"]["dedup.outcome"] for d in deliveries] == ["ran", "duplicate"]
    calls = [
        sorted(s["name"].rsplit("/", 1)[-1] for s in spans if s["parent_id"] == d["span_id"])
        for d in deliveries
    ]
    assert all("google.firestore.v1.Firestore/" in s["name"] for s in spans if s["name"] != SPAN), (
        spans
    )
    assert calls[0] == ["Commit", "Commit"]  # create the record with its lease, mark it sent
    assert calls[1] == ["BatchGetDocuments", "Commit"]  # the duplicate: create refused, read
    assert {(p["name"], p["attributes"]["outcome"]) for p in recorded["points"]} == {
        ("dedup.deliveries", "ran"),
        ("dedup.deliveries", "duplicate"),
        ("dedup.overhead", "ran"),
        ("dedup.overhead", "duplicate"),
    }


_LATE_METER_PROVIDER = """
import json, sys
from dedup.kernel.record import Mode
from dedup.telemetry import Telemetry

telemetry = Telemetry()
with telemetry.delivery("late", Mode.LEASE):
    pass
imported_before = "opentelemetry.metrics" in sys.modules

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
with telemetry.delivery("late", Mode.LEASE):
    pass
counted = [
    point.value
    for resource in reader.get_metrics_data().resource_metrics
    for scope in resource.scope_metrics
    for metric in scope.metrics
    if metric.name == "dedup.deliveries"
    for point in metric.data.data_points
]
print(json.dumps({"imported_before": imported_before, "counted": counted}))
"""


def _last_json_line_of(source: str) -> Any:
    """Run `source` in a fresh Python (from the repo's root) and read the JSON line it printed
    last; fails with its stderr if it failed."""
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_metrics_api_import_until_a_meter_provider_can_exist() -> None:
    """A process that never imported the metrics API records its deliveries nowhere and does
    not import it (its first event stays lighter); once a global meter provider is set, even
    after the Telemetry was created, the next delivery is counted by it."""
    found = _last_json_line_of(_LATE_METER_PROVIDER)
    assert found == {"imported_before": False, "counted": [1]}


_NO_SDK_SPANS = """
import json
from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, NoOpTracerProvider, SpanContext, TraceFlags
from dedup.kernel.record import Mode
from dedup.telemetry import Telemetry

def seen(telemetry, fail=False):
    try:
        with telemetry.delivery("late", Mode.LEASE):
            inside = trace.get_current_span()
            if fail:
                raise KeyError("handler")
    except KeyError:
        pass
    return inside

found = {}
remote = NonRecordingSpan(SpanContext(0xAB, 0xCD, is_remote=True, trace_flags=TraceFlags(1)))
private = TracerProvider().get_tracer("app")
for name, telemetry in (
    ("global", Telemetry()), ("given", Telemetry(tracer_provider=NoOpTracerProvider()))
):
    found[name + " none"] = seen(telemetry) is trace.INVALID_SPAN
    token = context.attach(trace.set_span_in_context(remote))
    found[name + " remote"] = seen(telemetry) is remote and seen(telemetry, fail=True) is remote
    context.detach(token)
    with private.start_as_current_span("app") as recording:
        inner = seen(telemetry)
        found[name + " recording"] = [
            type(inner).__name__, inner.get_span_context() == recording.get_span_context()
        ]
        found[name + " after"] = trace.get_current_span() is recording

late = Telemetry()
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
token = context.attach(trace.set_span_in_context(remote))
inside = seen(late, fail=True)
context.detach(token)
[span] = exporter.get_finished_spans()
found["late"] = [
    span.name, span.parent.span_id == 0xCD, inside.get_span_context() == span.get_span_context(),
    dict(span.attributes), span.status.status_code.name,
]
print(json.dumps(found))
"""


def test_without_an_sdk_a_delivery_leaves_the_current_span_as_the_no_op_tracer_did() -> None:
    """With the API's no-op tracer (no provider set, or `NoOpTracerProvider` given) a delivery
    starts no span of its own, and its block sees what the no-op tracer's span showed: no span,
    or the caller's non-recording span itself (a handler's exception passing through), or, under
    a recording span of another provider, a non-recording span of that span's context. A global
    provider set after the `Telemetry` was made gets the next delivery's span, the caller's
    child, with its attributes and the exception's ERROR status."""
    found = _last_json_line_of(_NO_SDK_SPANS)
    for name in ("global", "given"):
        assert found[f"{name} none"] is True
        assert found[f"{name} remote"] is True
        assert found[f"{name} recording"] == ["NonRecordingSpan", True]
        assert found[f"{name} after"] is True
    assert found["late"] == [
        "dedup late",
        True,
        True,
        {
            "dedup.suffix": "late",
            "dedup.mode": "lease",
            "dedup.attempt": 0,
            "dedup.outcome": "error",
        },
        "ERROR",
    ]
