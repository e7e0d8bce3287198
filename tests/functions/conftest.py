"""In-process function servers: functions-framework's test client over main.py.

Each function is served exactly as `functions-framework --target NAME --signature-type
cloudevent` would, and receives CloudEvents built from real emulator state (`demo.events`).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import functions_framework
import pytest
from flask.testing import FlaskClient

from demo.events import HttpEvent

MAIN = str(Path(__file__).resolve().parents[2] / "main.py")


@dataclass
class InProcessFunction:
    """One function of main.py behind functions-framework's Flask test client."""

    name: str
    client: FlaskClient

    def deliver(self, event: HttpEvent) -> int:
        """POST the CloudEvent once; the HTTP status the platform would see."""
        response = self.client.post("/", data=event.body, headers=dict(event.headers))
        return response.status_code

    def deliver_concurrently(self, event: HttpEvent, copies: int) -> list[int]:
        """`copies` deliveries of the same event at once, from as many threads."""
        with ThreadPoolExecutor(max_workers=copies) as pool:
            return list(pool.map(lambda _: self.deliver(event), range(copies)))


@pytest.fixture
def unique() -> str:
    """A fresh id part for this test's posts and messages.

    Served functions live as long as the test process, like a warm instance, and remember the
    keys they finished (the dedup LRU): each test uses ids no earlier test used.
    """
    return uuid.uuid4().hex[:8]


@pytest.fixture
def serve(firestore_host: str) -> Callable[[str], InProcessFunction]:
    """serve(name) -> that function of main.py, served in this process (on the emulators)."""

    def make(name: str) -> InProcessFunction:
        app = functions_framework.create_app(target=name, source=MAIN, signature_type="cloudevent")
        return InProcessFunction(name, app.test_client())

    return make


def start_instance(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Load main.py for `target` in a fresh process, as an instance starting up does."""
    code = (
        "import functions_framework; functions_framework.create_app("
        f"target={target!r}, source={MAIN!r}, signature_type='cloudevent')"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "FUNCTION_TARGET": target},
        capture_output=True,
        text=True,
        timeout=60,
    )
