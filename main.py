"""Entry point of the functions, for `firebase deploy`, `gcloud functions deploy` and the emulator.

Each name below is a deployed function (its entry point for gcloud). The functions are
firebase-functions handlers: they take the raw CloudEvent, so gcloud serves them with
`FUNCTION_SIGNATURE_TYPE=cloudevent` (the Makefile sets it). Requests that are not well-formed
events for the function are refused with a 4xx before any work (`functions.boundary`).
"""

import functions_framework

from dedup.logs import configure_logging
from functions.boundary import install_boundary
from functions.forward_webhook import forward_webhook
from functions.relay_outbox import relay_outbox
from functions.send_post_notification import send_post_notification
from functions.sync_published_count import sync_published_count

configure_logging()
install_boundary(functions_framework.errorhandler)

__all__ = ["forward_webhook", "relay_outbox", "send_post_notification", "sync_published_count"]
