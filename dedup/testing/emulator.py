"""The emulators a test reaches: a function's trigger route in the Functions emulator
(`emulator_trigger`), and the Firestore emulator (`firestore_emulator`) to clear and to open a
client on."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from dedup.testing.delivering import DIRECT, deliver
from dedup.testing.event import HttpEvent, project_or_default

if TYPE_CHECKING:
    from google.cloud import firestore

__all__ = [
    "DEFAULT_REGION",
    "EmulatorTrigger",
    "FirestoreEmulator",
    "emulator_trigger",
    "firestore_emulator",
]

DEFAULT_REGION = "us-central1"
"""The region firebase-functions deploys to, and the emulator keys triggers by, by default."""


@dataclass(frozen=True)
class EmulatorTrigger:
    """A function's trigger route in the Functions emulator, a `Target`: calling it with an
    event POSTs the event once (a CloudEvent in structured content mode, a scheduled run's
    request as it is) and returns the HTTP status the function answered (the route passes it
    on)."""

    function: str
    """The function's name (its export in main.py)."""
    url: str
    """`http://<host>/functions/projects/<project>/triggers/<region>-<name>-<generation>`."""

    def __call__(self, event: HttpEvent) -> int:
        """POST `event` once; the HTTP status."""
        sent = event.structured() if any(k.lower() == "ce-id" for k in event.headers) else event
        return deliver(self.url, sent)


def emulator_trigger(
    function: str,
    *,
    host: str | None = None,
    project: str | None = None,
    region: str = DEFAULT_REGION,
) -> EmulatorTrigger:
    """The trigger route of `function` in the Functions emulator at `host` (default: the one
    the emulator hub lists, FIREBASE_EMULATOR_HUB, which `firebase emulators:exec` sets; else
    `127.0.0.1:5001`, the Firebase CLI's default port), for `project` (default:
    GCLOUD_PROJECT / GOOGLE_CLOUD_PROJECT, else `DEFAULT_PROJECT`).

    The emulator names its trigger keys only in the 404 answer to an unknown one: this asks
    once and takes the highest generation of `<region>-<function>-<generation>` (the
    enabled trigger; a trigger with an Eventarc channel has `-<channel>` after it). Ask
    again after the emulator reloads the functions. `LookupError` when it lists none."""
    where = host or _hub_functions_host() or "127.0.0.1:5001"
    base = f"http://{where.removeprefix('http://')}/functions/projects/{project_or_default(project)}/triggers"
    probe = HttpEvent("probe", {"Content-Type": "application/json"}, b"{}")
    request = urllib.request.Request(f"{base}/{region}-{function}-none", data=probe.body)
    try:
        with DIRECT.open(request, timeout=30) as answer:
            listed = answer.read().decode(errors="replace")
    except urllib.error.HTTPError as refused:
        listed = refused.read().decode(errors="replace")
    prefix = f"{region}-{function}-"
    keys: dict[int, str] = {}
    for key in (part.strip() for part in listed.partition("valid functions are:")[2].split(",")):
        generation = key.removeprefix(prefix).partition("-")[0]
        if key.startswith(prefix) and generation.isdigit():
            keys[int(generation)] = key
    if not keys:
        raise LookupError(f"the Functions emulator at {where} has no trigger {prefix}<n>: {listed}")
    return EmulatorTrigger(function, f"{base}/{keys[max(keys)]}")


def _hub_functions_host() -> str | None:
    """host:port of the Functions emulator the emulator hub lists, or None (no hub, or no
    Functions emulator in it)."""
    hub = os.environ.get("FIREBASE_EMULATOR_HUB")
    if not hub:
        return None
    try:
        with DIRECT.open(f"http://{hub}/emulators", timeout=10) as answer:
            listed = json.loads(answer.read())
    except (OSError, ValueError):
        return None
    functions = listed.get("functions") if isinstance(listed, dict) else None
    if not isinstance(functions, dict) or "port" not in functions:
        return None
    return f"{functions.get('host', '127.0.0.1')}:{functions['port']}"


@dataclass(frozen=True)
class FirestoreEmulator:
    """A running Firestore emulator: where it listens and the project the tests use."""

    host: str
    """`host:port`, as `FIRESTORE_EMULATOR_HOST` gives it."""
    project: str
    """The project whose documents `clear` deletes and `client` reads."""

    @property
    def documents_url(self) -> str:
        """The emulator's REST endpoint of the `(default)` database's documents."""
        return (
            f"http://{self.host}/emulator/v1/projects/{quote(self.project)}"
            "/databases/(default)/documents"
        )

    def clear(self, *, timeout: float = 30.0) -> None:
        """Delete every document of the project's `(default)` database on the emulator (the
        dedup records and the effects alike); `RuntimeError` if the emulator refuses."""
        request = urllib.request.Request(self.documents_url, method="DELETE")
        try:
            with DIRECT.open(request, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as refused:
            raise RuntimeError(
                f"the Firestore emulator at {self.host} refused to clear: {refused.code}"
            ) from None

    def client(self) -> firestore.Client:
        """A Firestore client of the project on the emulator (the client library finds it
        through `FIRESTORE_EMULATOR_HOST`, set to `host` here if it is not)."""
        from google.cloud import firestore

        os.environ.setdefault("FIRESTORE_EMULATOR_HOST", self.host)
        return firestore.Client(project=self.project)


def firestore_emulator(project: str | None = None) -> FirestoreEmulator:
    """The Firestore emulator `FIRESTORE_EMULATOR_HOST` points at, for `project` (default:
    `GCLOUD_PROJECT`, `GOOGLE_CLOUD_PROJECT`, else `DEFAULT_PROJECT`); `RuntimeError` when the
    variable is unset, so a test never reaches a real database by mistake."""
    host = os.environ.get("FIRESTORE_EMULATOR_HOST")
    if not host:
        raise RuntimeError(
            "FIRESTORE_EMULATOR_HOST is not set: start the Firestore emulator "
            "(`gcloud emulators firestore start` or `firebase emulators:exec`) and export it"
        )
    return FirestoreEmulator(host=host, project=project_or_default(project))
