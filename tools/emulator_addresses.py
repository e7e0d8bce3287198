"""Where the emulators listen and what points a client at them: firebase.json's ports
(`configured_ports`, refused when taken), the exports of `tools/emulators.py env`, the URL of a
served function, and an Auth-emulator user's ID token."""

from __future__ import annotations

import json
import socket
import urllib.request

from tools.emulator_setup import ROOT, SetupError, emulator_environment

PROJECT = "demo-exactly-once"
HOST_VARIABLES = {
    "firestore": "FIRESTORE_EMULATOR_HOST",
    "pubsub": "PUBSUB_EMULATOR_HOST",
    "hub": "FIREBASE_EMULATOR_HUB",
    "auth": "FIREBASE_AUTH_EMULATOR_HOST",
    "tasks": "CLOUD_TASKS_EMULATOR_HOST",
}
"""The variable that points a client library at each emulator of firebase.json."""


def configured_ports() -> dict[str, tuple[str, int]]:
    """Emulator name -> (host, port), as firebase.json declares them."""
    config = json.loads((ROOT / "firebase.json").read_text())
    ports: dict[str, tuple[str, int]] = {}
    for name, settings in config.get("emulators", {}).items():
        if isinstance(settings, dict) and "port" in settings:
            ports[name] = (settings.get("host", "127.0.0.1"), int(settings["port"]))
    return ports


def check_ports_free() -> None:
    """Fail with one line naming the emulator whose port another process holds."""
    for name, (host, port) in configured_ports().items():
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                raise SetupError(
                    f"Port {port} ({name} emulator, see firebase.json) is already in use by "
                    f"another process: stop it (`lsof -i :{port}`) or change the port in "
                    "firebase.json."
                ) from None


def emulator_exports() -> dict[str, str]:
    """What `eval "$(tools/emulators.py env)"` sets: the running emulators' addresses (from
    firebase.json), their project, and the environment the CLI runs with."""
    exports = emulator_environment()
    for name, (host, port) in configured_ports().items():
        if name in HOST_VARIABLES:
            exports[HOST_VARIABLES[name]] = f"{host}:{port}"
    exports["GCLOUD_PROJECT"] = PROJECT
    exports["GOOGLE_CLOUD_PROJECT"] = PROJECT
    return exports


REGION = "us-central1"


def function_url(name: str) -> str:
    """The URL at which the running Functions emulator serves HTTP or callable function `name`
    (its host and port from firebase.json)."""
    host, port = configured_ports()["functions"]
    return f"http://{host}:{port}/{PROJECT}/{REGION}/{name}"


def new_id_token() -> str:
    """The ID token of a new anonymous user of the running Auth emulator (firebase.json's
    port), signed up through its REST API as a client SDK does; valid for an hour."""
    host, port = configured_ports()["auth"]
    url = f"http://{host}:{port}/identitytoolkit.googleapis.com/v1/accounts:signUp?key=fake-key"
    request = urllib.request.Request(
        url, data=b'{"returnSecureToken": true}', headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(json.load(answer)["idToken"])
    except OSError as error:
        raise SetupError(
            f"the Auth emulator does not answer at {host}:{port} ({error}): start the emulators "
            "with `make emulators` in another shell"
        ) from None
