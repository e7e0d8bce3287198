"""The main.py of the second Functions emulator of `tests/dedup/test_emulator_routes.py`: copied
there as `main.py` beside a copy of `kinds_app.py`, never deployed.

It exports kinds_app.py's `on_value` (Realtime Database), `on_custom` (an Eventarc custom event),
`on_config` (Remote Config) and `on_matrix` (Test Lab), unchanged but for one field of the last
two's manifest entries: the Functions emulator (firebase-tools 15) registers a 2nd-gen event
function only when its event type is one it emulates (Pub/Sub, Storage, Realtime Database,
Firestore, Auth, Alerts) or its trigger names an Eventarc channel (`emulatedFunctionsFromEndpoints`
in `lib/emulator/functionsEmulatorShared.js`); it drops the others at load, and serves no trigger
route for them. So `on_config` and `on_matrix` name the channel firebase-functions gives an Eventarc
custom event by default (`eventarc_fn`), and the emulator registers them, as custom event triggers,
with a trigger route each. Their decorators, handlers and the worker that serves them
(functions-framework, the `cloudevent` signature) are the same either way.

`on_order` is a Firestore trigger, the kind whose event's protobuf body the trigger route hangs
on in binary content mode: the test reaches it as a library user would, through
`dedup.testing.emulator_trigger`, which sends the structured form.

`on_config_as_is` and `on_matrix_as_is` are the same kinds without the channel: the test
checks the emulator still drops them, so the channel is dropped here once it does not.
"""

from typing import Any

from firebase_functions import firestore_fn, remote_config_fn, test_lab_fn
from kinds_app import REGISTRY, _effect, on_config, on_custom, on_matrix, on_value

from dedup import Delivery, trigger_once

CHANNEL = "locations/us-central1/channels/firebase"
"""The channel `eventarc_fn.on_custom_event_published` declares when given none."""

for _routed in (on_config, on_matrix):
    _routed.__firebase_endpoint__.eventTrigger["channel"] = CHANNEL


@remote_config_fn.on_config_updated()
@trigger_once("kConfigAsIs", registry=REGISTRY)
def on_config_as_is(event: Any, delivery: Delivery) -> None:
    """Never reached: the emulator drops this function."""
    raise AssertionError("the Functions emulator now serves Remote Config functions as they are")


@test_lab_fn.on_test_matrix_completed()
@trigger_once("kTestLabAsIs", registry=REGISTRY)
def on_matrix_as_is(event: Any, delivery: Delivery) -> None:
    """Never reached: the emulator drops this function."""
    raise AssertionError("the Functions emulator now serves Test Lab functions as they are")


@firestore_fn.on_document_created(document="routeOrders/{orderId}")
@trigger_once("kOrderRoute", registry=REGISTRY)
def on_order(event: Any, delivery: Delivery) -> None:
    """One effect per created order document."""
    _effect(delivery)


__all__ = [
    "on_config",
    "on_config_as_is",
    "on_custom",
    "on_matrix",
    "on_matrix_as_is",
    "on_order",
    "on_value",
]
