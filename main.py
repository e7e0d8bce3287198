"""Entry point of the functions, for `firebase deploy`, `gcloud functions deploy` and the emulator.

Each name below is a deployed function (its entry point for gcloud). The event functions are
firebase-functions handlers that take the raw CloudEvent, so gcloud serves them with
`FUNCTION_SIGNATURE_TYPE=cloudevent` (the Makefile sets it); requests that are not well-formed
events for the function are refused with a 4xx before any work (`functions.boundary`). The
HTTP functions (`create_order`, `create_order_callable`, `receive_line_webhook`) take the Flask
request (`FUNCTION_SIGNATURE_TYPE=http`) and refuse malformed requests themselves, with
problem+json (`dedup.http`, docs/http.md).
"""

import functions_framework

from dedup.http import ensure_firebase_app
from dedup.logs import configure_logging
from functions.boundary import install_error_handlers
from functions.create_order import create_order, create_order_callable
from functions.forward_webhook import forward_webhook
from functions.receive_line_webhook import receive_line_webhook
from functions.relay_outbox import relay_outbox
from functions.send_post_notification import send_post_notification
from functions.sync_published_count import sync_published_count

configure_logging()
install_error_handlers(functions_framework.errorhandler)
ensure_firebase_app()  # callables' ID tokens are verified through it before their handler runs

__all__ = [
    "create_order",
    "create_order_callable",
    "forward_webhook",
    "receive_line_webhook",
    "relay_outbox",
    "send_post_notification",
    "sync_published_count",
]
