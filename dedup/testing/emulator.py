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
    "CLIENT_EMULATOR_PROJECT",
    "DEFAULT_REGION",
    "EmulatorTrigger",
    "FirestoreEmulator",
    "emulator_trigger",
    "firestore_emulator",
]

CLIENT_EMULATOR_PROJECT = "google-cloud-firestore-emulator"
"""The project a Firestore client opens on the emulator when none is given or set
(google-cloud-firestore's own default): the one `Deduplicator`, `delivery.client` and a
plain `firestore.Client()` use when GOOGLE_CLOUD_PROJECT and GCLOUD_PROJECT are unset."""

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
    """The Firestore emulator `FIRESTORE_EMULATOR_HOST` points at, for the project a handler's
    `delivery.client` uses (`client_project`), so what a test writes there the handler reads;
    `RuntimeError` when the variable is unset, so a test never reaches a real database by
    mistake. `project`: another project, refused (`ValueError`) when it is not the clients' one,
    which would have the test and the handler in two databases."""
    host = os.environ.get("FIRESTORE_EMULATOR_HOST")
    if not host:
        raise RuntimeError(
            "FIRESTORE_EMULATOR_HOST is not set: start the Firestore emulator "
            "(`gcloud emulators firestore start` or `firebase emulators:exec`) and export it"
        )
    used = client_project()
    if project is not None and project != used:
        raise ValueError(
            f"firestore_emulator({project!r}): the handlers' Firestore client (Deduplicator, "
            f"delivery.client) uses project {used!r} here ({_project_source()}), so the test "
            f"and the handler would use two databases; set GOOGLE_CLOUD_PROJECT={project} "
            "before the first delivery, or call firestore_emulator() without a project"
        )
    return FirestoreEmulator(host=host, project=used)


def client_project() -> str:
    """The project a Firestore client made without one uses, as `Deduplicator` makes its
    client: GOOGLE_CLOUD_PROJECT, else GCLOUD_PROJECT, else `CLIENT_EMULATOR_PROJECT` on the
    emulator (google-cloud-firestore's order). `ValueError` when the two variables name
    different projects: the Firestore client reads one, the Firebase tools the other."""
    google = os.environ.get("GOOGLE_CLOUD_PROJECT")
    gcloud = os.environ.get("GCLOUD_PROJECT")
    if google and gcloud and google != gcloud:
        raise ValueError(
            f"GOOGLE_CLOUD_PROJECT is {google!r} and GCLOUD_PROJECT is {gcloud!r}: the Firestore "
            "client (and so Deduplicator and delivery.client) uses the first, the Firebase "
            "emulators the second; set both to one project, or unset one"
        )
    return google or gcloud or CLIENT_EMULATOR_PROJECT


def _project_source() -> str:
    """Where `client_project` took its project from, in words."""
    for name in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
        if os.environ.get(name):
            return f"from {name}"
    return "GOOGLE_CLOUD_PROJECT and GCLOUD_PROJECT unset: google-cloud-firestore's default"
