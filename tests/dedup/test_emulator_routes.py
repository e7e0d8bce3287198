"""Realtime Database, Remote Config, Test Lab and Eventarc custom-event functions give one effect
per event on the real Functions emulator.

These events are hand-built CloudEvents delivered through the Functions emulator's own trigger
routes (`POST /functions/projects/<project>/triggers/<trigger key>`), because no emulator of
their sources runs here: the Realtime Database emulator is a jar the Firebase CLI downloads on
first use (offline, nothing to download; the Google Cloud CLI's emulator components, which serve
Firestore and Pub/Sub offline, have none), and Remote Config and Test Lab have no emulator at
all. Each request is what the platform's source delivers to the function: a binary-mode
CloudEvent, the `ce-*` headers of `tests/dedup/test_kinds.py`'s builders around Google's
captured data (`tests/dedup/captured/`). The route passes it to a Python worker the emulator
starts for the function (functions-framework, the `cloudevent` signature) and passes the
worker's answer back.

Eventarc custom events also go the way a publisher's go: to the Eventarc emulator that starts beside
this Functions emulator, `POST
/projects/<project>/locations/<location>/channels/firebase:publishEvents` with the events in the
protocol's JSON form (`specVersion`, `attributes`, `textData`), as the Admin SDK's
`getEventarc().channel().publish()` sends them. The Eventarc emulator routes each event by type and
channel to the function's trigger route. It neither reports the function's answer nor retries a
refused copy, so copies published at once give one effect because the copy that took the lease
finishes; the ones that found it live are answered 500 and dropped. The custom event is hand-built
too: it has no captured payload, being the publisher's own.

The functions are `tests/dedup/kinds_app.py`'s `on_value` (`db_fn.on_value_written`),
`on_config` (`remote_config_fn.on_config_updated`), `on_matrix`
(`test_lab_fn.on_test_matrix_completed`) and `on_custom`
(`eventarc_fn.on_custom_event_published`): the code `test_kinds.py` serves with
functions-framework, each effect an increment of `effects/<delivery.key>.n`. The emulator
registers the Realtime Database trigger without a Database emulator (it logs it "ignored" and
still serves its route), but drops Remote Config and Test Lab functions at load, so those two
name an Eventarc channel in their manifest entries and are registered as custom event triggers
(with the Eventarc emulator that starts beside every Functions emulator), each with its route
(`tests/dedup/routes_main.py` says why and how; the last test here checks it is still needed).

They are not in main.py (the template users copy), so this module starts a second Functions
emulator of its own (`firebase emulators:start --only functions`, the repo's pinned CLI; Node
and the venv only, no Java) on free ports (its hub, logging, Eventarc and Cloud Tasks emulators'
too), for a project in a temporary folder: its firebase.json points `functions.source` at a
folder holding `routes_main.py` as main.py, a copy of kinds_app.py, the repo's requirements.txt
(by which the CLI detects a Python source) and `venv`, a symlink to the repo's venv (the
emulator runs each worker in `<source>/venv`). The emulator builds each worker's environment
from its own process's environment plus the hosts of the emulators in its own hub
(`getEmulatorEnvs` in firebase-tools' `lib/emulator/functionsEmulator.js`); no Firestore
emulator runs in that hub, so the `FIRESTORE_EMULATOR_HOST` of `make test`'s session reaches the
workers unchanged, and effects and records land in the session's Firestore emulator, where the
tests read them. The CLI's process group and every process it started are killed when the module
ends.

The emulator hands a worker one request at a time and starts another worker for a request that
finds none idle, so six copies POSTed at once run in up to six processes, as on up to six
instances; a copy that finds the first one's lease live is answered 500 and delivered again, as
Eventarc redelivers it, until acknowledged.

A malformed request gets the function's own answer: the trigger route proxies the worker's
status, headers and body unchanged (measured: 400, `Server: gunicorn` from the worker, dedup's
JSON refusal as the body; the emulator only adds `X-Powered-By: Express`), not an answer of its
own. Eventarc redelivers a 4xx too, so each malformed body is sent twice. Nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from dedup import testing
from demo.emulator_triggers import EmulatorTrigger
from demo.events import HttpEvent
from demo.platform import DeliveryLog, deliver_at_least_once
from demo.serve import ROOT, free_ports
from tests.dedup.test_kinds import custom, database, matrix_event, remote_config
from tests.waiting import eventually
from tools.emulators import FIREBASE_BIN, PROJECT, REGION, descendants
from tools.runtime import runtime_of_venv

pytestmark = [pytest.mark.needs_emulators, pytest.mark.subprocesses]

COPIES = 6
"""Copies of one event POSTed at once, as the platform's duplicates."""
START_SECONDS = 180.0
"""How long the second Functions emulator may take to list the four triggers."""
HERE = Path(__file__).parent
STRAGGLER_SECONDS = 2.0
"""How long a test waits, after its effects, for a copy that would double one."""
REFUSAL = "the request is not an event this function can read"
"""What `dedup.entrances.answers.refuse_unparsed` answers (400) for a request the decorator cannot
read."""


@dataclass(frozen=True)
class Kind:
    """One kind of event: its function in kinds_app.py, the suffix of its records, the builder
    of its CloudEvent attributes and data."""

    function: str
    suffix: str
    build: Callable[[str], tuple[dict[str, str], Any]]


KINDS = {
    "database": Kind("on_value", "kDatabase", database),
    "remote_config": Kind("on_config", "kConfig", remote_config),
    "test_lab": Kind("on_matrix", "kTestLab", matrix_event),
    "custom": Kind("on_custom", "kCustom", custom),
}
CUSTOM_CHANNEL = f"projects/{PROJECT}/locations/{REGION}/channels/firebase"
"""The channel `eventarc_fn.on_custom_event_published` subscribes to when given none, as the
Firebase CLI resolves it."""


@dataclass
class FunctionsEmulator:
    """The module's own Functions emulator: its address and the trigger route of each function."""

    host: str
    eventarc: str
    process: subprocess.Popen[bytes]
    log: Path

    def route_keys(self) -> list[str]:
        """The trigger keys the emulator lists (in the 404 of an unknown one), [] before it
        answers."""
        url = f"http://{self.host}/functions/projects/{PROJECT}/triggers/{REGION}-none-0"
        try:
            answer = requests.post(url, data=b"{}", timeout=10)
        except requests.ConnectionError:
            return []
        listed = answer.text.partition("valid functions are:")[2]
        return [key.strip() for key in listed.split(",") if key.strip()]

    def routes(self, function: str) -> dict[int, str]:
        """Generation -> trigger key of `function`: `<region>-<name>-<generation>`, and
        `-<channel>` after it for a trigger with an Eventarc channel."""
        prefix = f"{REGION}-{function}-"
        found = {}
        for key in self.route_keys():
            generation = key.removeprefix(prefix).partition("-")[0]
            if key.startswith(prefix) and generation.isdigit():
                found[int(generation)] = key
        return found

    def route(self, function: str) -> EmulatorTrigger:
        """The trigger route of `function` (the highest generation, the enabled one)."""
        keys = self.routes(function)
        assert keys, f"no trigger of {function} in {self.route_keys()}"
        base = f"http://{self.host}/functions/projects/{PROJECT}/triggers"
        return EmulatorTrigger(function, f"{base}/{keys[max(keys)]}")


def write_project(folder: Path, ports: dict[str, int]) -> None:
    """A Firebase project whose one codebase is kinds_app.py's three functions, served from
    `folder/source` with the repo's venv."""
    source = folder / "source"
    source.mkdir(parents=True)
    (source / "kinds_app.py").write_text((HERE / "kinds_app.py").read_text())
    (source / "main.py").write_text((HERE / "routes_main.py").read_text())
    (source / "requirements.txt").write_text((ROOT / "requirements.txt").read_text())
    (source / "venv").symlink_to(ROOT / "venv", target_is_directory=True)
    emulators: dict[str, Any] = {
        name: {"host": "127.0.0.1", "port": port} for name, port in ports.items()
    }
    config = {
        "functions": [
            {"source": "source", "codebase": "routes", "runtime": runtime_of_venv(),
             "ignore": ["venv", "__pycache__"]}
        ],
        "emulators": {"singleProjectMode": True, **emulators, "ui": {"enabled": False}},
    }  # fmt: skip
    (folder / "firebase.json").write_text(json.dumps(config, indent=2))


def gone(pid: int) -> bool:
    """`pid` has ended: no such process, or a zombie (an orphan its adopter has not reaped yet,
    `make test`'s tools/emulators.py reaps it at the end)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # Linux: the state after the command name; elsewhere an orphan is reaped at once
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return Path("/proc").is_dir()  # it ended between the two looks
    return bool(fields) and fields[0] in ("Z", "X")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the CLI's process group (as Ctrl-C), then SIGKILL to that group (its workers
    are in it: the emulator starts them undetached) and to every process the CLI had started;
    returns once all of them have ended, so none outlives the module."""
    started = descendants(process.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)
    eventually(lambda: all(gone(pid) for pid in started), "the emulator's processes ended", 30)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FunctionsEmulator]:
    """A second Functions emulator serving on_value, on_config, on_matrix and on_custom, its workers
    pointed at the session's Firestore emulator; stopped, workers included, at the end."""
    assert os.environ.get("FIRESTORE_EMULATOR_HOST"), "run through `make test`"
    folder = tmp_path_factory.mktemp("routes-project")
    # The Eventarc and Cloud Tasks emulators start beside every Functions emulator: on their
    # default ports (the session's, in the repo's firebase.json) unless given others.
    names = ("functions", "hub", "logging", "eventarc", "tasks")
    ports = dict(zip(names, free_ports(len(names)), strict=True))  # never one port twice
    write_project(folder, ports)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("DEDUP_") and name != "FUNCTION_TARGET"
    }
    log = folder / "emulator.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(FIREBASE_BIN), "emulators:start", "--only", "functions", "--project", PROJECT],
            cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    served = FunctionsEmulator(
        f"127.0.0.1:{ports['functions']}", f"127.0.0.1:{ports['eventarc']}", process, log
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not all(served.routes(kind.function) for kind in KINDS.values()):
            text = log.read_text(errors="replace")
            assert process.poll() is None, text[-3000:]
            assert "Failed to load function definition" not in text, text[-3000:]
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(0.2)
        yield served
    finally:
        stop(process)


def cloud_event(kind: Kind, event_id: str) -> HttpEvent:
    """The binary-mode CloudEvent the kind's source delivers, under `event_id`."""
    attributes, data = kind.build(event_id)
    headers = {
        **attributes,
        "ce-id": event_id,
        "ce-specversion": "1.0",
        "ce-time": "2026-12-02T08:00:00.123Z",
        "Content-Type": "application/json",
    }
    return HttpEvent(event_id, headers, json.dumps(data).encode(), f"{kind.function} {event_id}")


def effects(client: firestore.Client) -> dict[str, dict[str, Any]]:
    return {d.id: d.to_dict() or {} for d in client.collection("effects").stream()}


def records(client: firestore.Client) -> dict[str, dict[str, Any]]:
    return {d.id: d.to_dict() or {} for d in client.collection("triggerEvents").stream()}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_concurrent_duplicates_through_the_trigger_route_give_one_effect(
    name: str, emulator: FunctionsEmulator, firestore_client: firestore.Client
) -> None:
    """Six copies of one event POSTed at once to the function's trigger route, each refused
    copy (a live lease: 500) retried until acknowledged, give one effect and one `sent`
    record keyed by the CloudEvent id; another event gives another effect under another key."""
    kind = KINDS[name]
    route = emulator.route(kind.function)
    ids = [f"route-{name}-{uuid.uuid4().hex}", f"route-{name}-{uuid.uuid4().hex}"]
    log = DeliveryLog()
    for event_id in ids:
        deliver_at_least_once(route, cloud_event(kind, event_id), log, copies=COPIES)
    assert log.undelivered == [], (log.statuses, emulator.log.read_text(errors="replace")[-3000:])
    assert log.deliveries >= 2 * COPIES
    keys = sorted(f"{event_id}-{kind.suffix}" for event_id in ids)
    found = effects(firestore_client)
    assert sorted(found) == keys, found
    assert all(effect["n"] == 1 for effect in found.values()), found
    stored = records(firestore_client)
    assert sorted(stored) == keys, stored
    attributes, _ = kind.build(ids[0])
    for record in stored.values():
        assert record.get("state") == "sent", record
        assert record.get("source") == attributes["ce-source"], record
    if name == "database":
        assert all(record.get("subject") == "refs/users/u1" for record in stored.values())


def test_dedup_testing_reaches_a_firestore_function_through_its_trigger_route(
    emulator: FunctionsEmulator, firestore_client: firestore.Client
) -> None:
    """As docs/library.md shows a library user: `testing.emulator_trigger` finds the trigger
    key, and five copies of a Firestore event (protobuf data, sent structured) delivered at once
    and retried until acknowledged give one effect and one `sent` record."""
    route = testing.emulator_trigger("on_order", host=emulator.host, project=PROJECT)
    assert route.url.rsplit("/", 1)[1].startswith(f"{REGION}-on_order-")
    event = testing.firestore_event(
        f"routeOrders/{uuid.uuid4().hex}", None, {"item": "book"}, project=PROJECT,
        change="created",
    )  # fmt: skip
    statuses = testing.deliver_until_done(route, event, copies=5)
    assert any(200 <= s < 300 for s in statuses), statuses
    time.sleep(STRAGGLER_SECONDS)
    key = f"{event.id}-kOrderRoute"
    found = effects(firestore_client)
    assert found[key]["n"] == 1, found
    assert records(firestore_client)[key]["state"] == "sent"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_malformed_request_through_the_trigger_route_gets_400_and_writes_nothing(
    name: str, emulator: FunctionsEmulator, firestore_client: firestore.Client
) -> None:
    """A body that does not parse, and data the platform's decorator cannot read as the kind,
    each delivered twice as Eventarc redelivers a refusal: the emulator passes on the
    function's own 400 (functions-framework's server, dedup's refusal as the body), and no
    record and no effect are written."""
    kind = KINDS[name]
    route = emulator.route(kind.function)
    event = cloud_event(kind, f"malformed-{name}-{uuid.uuid4().hex}")
    answers = [
        requests.post(route.url, data=body, headers=dict(event.headers), timeout=60)
        for body in (b"{not json", b"[1, 2]")
        for _ in range(2)
    ]
    seen = [(a.status_code, a.headers.get("server"), a.text) for a in answers]
    assert all(answer.status_code == 400 for answer in answers), seen
    assert all(answer.headers.get("server") == "gunicorn" for answer in answers), seen
    assert all(answer.json() == {"error": REFUSAL} for answer in answers), seen
    assert records(firestore_client) == {}
    assert effects(firestore_client) == {}


def test_the_emulator_drops_remote_config_and_test_lab_functions_as_they_are(
    emulator: FunctionsEmulator,
) -> None:
    """Without an Eventarc channel a Remote Config or Test Lab function gets no trigger, and
    no route: why `routes_main.py` gives them one (drop it once this fails)."""
    for routed in ("on_config", "on_matrix"):  # with the channel: a custom event trigger's key
        keys = list(emulator.routes(routed).values())
        assert keys, emulator.route_keys()
        assert all(key.endswith("/locations/us-central1/channels/firebase") for key in keys), keys
    assert not any("_as_is" in key for key in emulator.route_keys()), emulator.route_keys()


def published(event_id: str) -> dict[str, Any]:
    """`custom`'s event in the protocol's JSON form, as a publisher sends it to a channel."""
    attributes, data = custom(event_id)
    return {
        "specVersion": "1.0",
        "id": event_id,
        "type": attributes["ce-type"],
        "source": attributes["ce-source"],
        "attributes": {
            "subject": {"ceString": attributes["ce-subject"]},
            "time": {"ceTimestamp": "2026-12-02T08:00:00.123000Z"},
            "datacontenttype": {"ceString": "application/json"},
        },
        "textData": json.dumps(data),
    }


def publish(emulator: FunctionsEmulator, *events: dict[str, Any]) -> requests.Response:
    """POST `events` to the Eventarc emulator's channel of the custom event."""
    url = f"http://{emulator.eventarc}/{CUSTOM_CHANNEL}:publishEvents"
    return requests.post(url, json={"events": list(events)}, timeout=30)


def test_custom_events_published_to_the_eventarc_emulator_give_one_effect_each(
    emulator: FunctionsEmulator, firestore_client: firestore.Client
) -> None:
    """Six copies of one custom event published at once to the Eventarc emulator give one
    effect and one `sent` record keyed by the event's id, with its source and subject; another
    event gives another effect."""
    ids = [f"published-{uuid.uuid4().hex}", f"published-{uuid.uuid4().hex}"]
    for event_id in ids:
        event = published(event_id)
        with ThreadPoolExecutor(COPIES) as pool:
            answers = list(pool.map(lambda e: publish(emulator, e), [event] * COPIES))
        assert [a.status_code for a in answers] == [200] * COPIES, [a.text for a in answers]
    keys = sorted(f"{event_id}-kCustom" for event_id in ids)

    def all_sent() -> bool:
        stored = records(firestore_client)
        return sorted(stored) == keys and all(r.get("state") == "sent" for r in stored.values())

    eventually(all_sent, f"sent records {keys}", 120)
    time.sleep(STRAGGLER_SECONDS)  # a copy that doubled the effect would have written it by now
    found = effects(firestore_client)
    assert sorted(found) == keys, found
    assert all(effect["n"] == 1 for effect in found.values()), found
    for record in records(firestore_client).values():
        assert record.get("source") == "//example.com/orders", record
        assert record.get("subject") == "orders/o1", record


def test_a_custom_event_without_a_type_is_refused_by_the_eventarc_emulator(
    emulator: FunctionsEmulator, firestore_client: firestore.Client
) -> None:
    """An event the Eventarc emulator cannot route (no `type`) gets its 400 and reaches no
    function: nothing is written."""
    event = published(f"untyped-{uuid.uuid4().hex}")
    del event["type"]
    assert publish(emulator, event).status_code == 400
    time.sleep(STRAGGLER_SECONDS)
    assert records(firestore_client) == {}
    assert effects(firestore_client) == {}
