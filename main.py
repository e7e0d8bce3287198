"""Entry point of the functions, for `firebase deploy`, `gcloud functions deploy` and the emulator.

Each name below is a deployed function (its entry point for gcloud). The event functions are
firebase-functions handlers that take the raw CloudEvent, so gcloud serves them with
`FUNCTION_SIGNATURE_TYPE=cloudevent` (the Makefile sets it); requests that are not well-formed
events for the function are refused with a 4xx before any work (`functions.boundary`). The
HTTP functions (`create_order`, `create_order_callable`, `receive_line_webhook`) take the Flask
request (`FUNCTION_SIGNATURE_TYPE=http`) and refuse malformed requests themselves, with
problem+json (`dedup.http`, docs/http.md).

`set_global_options` below is the one declaration of the functions' runtime shape: both deploy
paths read it from the manifest the SDK builds from this file (`tools/deploy.py`, docs/deploy.md).
It must come before the functions are declared: their decorators copy it.

`index_post` is a task-queue function (an HTTP function Cloud Tasks calls, signature `http`),
deployed as `indexPost`: its name is its queue's id, which may not hold "_". Both names refer
to one function, so the manifest lists it once (docs/tasks.md).
"""

import functions_framework
from firebase_functions import options

options.set_global_options(
    memory=options.MemoryOption.MB_512,
    cpu=1,
    concurrency=80,
    min_instances=0,
    max_instances=10,
    timeout_sec=50,  # DEDUP_LEASE_SECONDS (60) must be >= this + DEDUP_RPC_TIMEOUT_SECONDS (10)
)

from dedup.http import ensure_firebase_app  # noqa: E402
from dedup.logs import configure_logging  # noqa: E402
from functions.boundary import install_boundary  # noqa: E402
from functions.create_order import create_order, create_order_callable  # noqa: E402
from functions.forward_webhook import forward_webhook  # noqa: E402
from functions.index_post import indexPost  # noqa: E402
from functions.observability import configure_telemetry  # noqa: E402
from functions.receive_line_webhook import receive_line_webhook  # noqa: E402
from functions.relay_outbox import relay_outbox  # noqa: E402
from functions.runtime import check_function_settings, refuse_unsafe_settings  # noqa: E402
from functions.send_post_notification import send_post_notification  # noqa: E402
from functions.sync_published_count import sync_published_count  # noqa: E402

configure_logging()
configure_telemetry()  # DEDUP_OTEL=1: spans to Cloud Trace, metrics to Cloud Monitoring
install_boundary(functions_framework.errorhandler)
ensure_firebase_app()  # callables' ID tokens are verified through it before their handler runs
index_post = indexPost  # its Python name; deployed as indexPost (not in __all__: one function)
refuse_unsafe_settings(globals())  # on the platform only: lease vs timeout, DEDUP_* names
check_function_settings()  # the served function's own settings (WEBHOOK_ROUTES, NOTIFY_URL...)

__all__ = [
    "create_order",
    "create_order_callable",
    "forward_webhook",
    "indexPost",
    "receive_line_webhook",
    "relay_outbox",
    "send_post_notification",
    "sync_published_count",
]
