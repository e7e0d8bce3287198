"""Send the dedup spans to Cloud Trace and its metrics to Cloud Monitoring: DEDUP_OTEL=1.

The dedup library calls the OpenTelemetry API only (`dedup.telemetry`): without an SDK its
spans and metrics cost nothing and go nowhere. `main.py` calls `configure_telemetry()` once, at
start-up, before any delivery; with DEDUP_OTEL=1 (`dedup.config.telemetry_enabled`) it installs:

* a `TracerProvider` whose spans go to Cloud Trace (`CloudTraceSpanExporter`, batched), with
  the instance's resource (Cloud Run / Cloud Functions attributes, from the metadata server);
* a `MeterProvider` whose metrics go to Cloud Monitoring every `EXPORT_INTERVAL_MS`
  (`CloudMonitoringMetricsExporter`, as `workload.googleapis.com/dedup.deliveries` and
  `workload.googleapis.com/dedup.overhead`);
* the gRPC client instrumentation, so each Firestore call (google-cloud-firestore emits no
  spans of its own) is a child span of the delivery's `dedup <suffix>` span.

Without DEDUP_OTEL (or with 0) nothing is installed and nothing is imported beyond this
module. The runtime service account needs `roles/cloudtrace.agent` and
`roles/monitoring.metricWriter` (`make bootstrap` grants them). docs/observability.md.
"""

from __future__ import annotations

import atexit
from collections.abc import Mapping
from typing import Any

from dedup.config import telemetry_enabled
from dedup.errors import ConfigError

EXPORT_INTERVAL_MS = 60_000
"""How often metrics are sent: Cloud Monitoring takes one point per series every 5 s at most,
and a minute keeps the cost of the exports negligible."""


def configure_telemetry(environ: Mapping[str, str] | None = None) -> bool:
    """With DEDUP_OTEL=1, install the SDK with the Google Cloud exporters (see the module
    docstring) and return True; otherwise do nothing and return False.

    Raises `ConfigError` for a DEDUP_OTEL other than 1/0/true/false, and when the exporters
    cannot be created (no credentials or project: outside Google Cloud, run
    `gcloud auth application-default login` or leave DEDUP_OTEL unset).
    """
    if not telemetry_enabled(environ):
        return False
    from opentelemetry.exporter.cloud_monitoring import CloudMonitoringMetricsExporter
    from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    try:
        span_processor = BatchSpanProcessor(CloudTraceSpanExporter())
        reader = PeriodicExportingMetricReader(
            CloudMonitoringMetricsExporter(), export_interval_millis=EXPORT_INTERVAL_MS
        )
    except Exception as exc:  # google.auth's DefaultCredentialsError, a missing project
        raise ConfigError(
            f"DEDUP_OTEL=1 but the Cloud Trace / Cloud Monitoring exporters could not be "
            f"created ({type(exc).__name__}: {exc}). On Google Cloud this needs nothing; "
            "elsewhere run `gcloud auth application-default login` and set "
            "GOOGLE_CLOUD_PROJECT, or unset DEDUP_OTEL"
        ) from exc
    install(span_processor, reader, resource=_cloud_resource())
    return True


def install(span_processor: Any, metric_reader: Any, *, resource: Any = None) -> None:
    """Install global OpenTelemetry providers with `span_processor` and `metric_reader`, and
    the gRPC client instrumentation; flush and shut them down at exit. Call it once per
    process, before the first Firestore client is created (tests pass in-memory exporters)."""
    from opentelemetry import metrics, trace
    from opentelemetry.instrumentation.grpc import GrpcInstrumentorClient
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = resource if resource is not None else Resource.create()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(span_processor)
    meter_provider = MeterProvider(resource=resource, metric_readers=[metric_reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    GrpcInstrumentorClient().instrument(tracer_provider=tracer_provider)
    atexit.register(meter_provider.shutdown)
    atexit.register(tracer_provider.shutdown)


def _cloud_resource() -> Any:
    """The instance's resource (service, revision, region...) when on Google Cloud."""
    from opentelemetry.resourcedetector.gcp_resource_detector import GoogleCloudResourceDetector
    from opentelemetry.sdk.resources import Resource, get_aggregated_resources

    detectors = [GoogleCloudResourceDetector()]
    return get_aggregated_resources(detectors, initial_resource=Resource.create())
