"""A delivery's time budget is its function's own timeout, served as the platform serves it.

A firebase-functions function declared with `timeout_sec=20` (beside a global 300 s), under
`DEDUP_LEASE_SECONDS=600`, runs its handler, then loses Firestore: every connection of its
instance is cut and new ones hang (`soak.proxy.Proxy`). Its "sent" write is retried only until
its own timeout ends, so it answers (500, the platform retries) within 21 s of the request,
not after the lease's bound of 590 s, and its log line names the bound it ran under
(`budget_source`: "declared_timeout").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup import testing
from demo.serve import ServedFunction, served_function
from soak.proxy import Proxy
from tests.conftest import PROJECT
from tests.waiting import eventually

pytestmark = pytest.mark.needs_emulators

APP = Path(__file__).with_name("budget_app.py")
TIMEOUT = 20
"""The function's own `timeout_sec` (budget_app.py)."""
ANSWERED_WITHIN = TIMEOUT + 1
"""The contract: the answer comes within the function's timeout, plus a second for the answer."""


@pytest.fixture
def proxy(firestore_host: str) -> Iterator[Proxy]:
    """A proxy in front of the session's Firestore emulator, that the test can cut."""
    host, port = firestore_host.rsplit(":", 1)
    cut_off = Proxy((host, int(port)))
    try:
        yield cut_off
    finally:
        cut_off.close()


@pytest.fixture
def served(proxy: Proxy, tmp_path: Path) -> Iterator[tuple[ServedFunction, Path]]:
    """budget_app.py's function served by functions-framework, its Firestore behind `proxy`,
    under a lease of 600 s; and its log file."""
    log = tmp_path / "function.log"
    env = {
        "FIRESTORE_EMULATOR_HOST": proxy.address,
        "GCLOUD_PROJECT": PROJECT,
        "DEDUP_LEASE_SECONDS": "600",
        "BUDGET_RAN": str(tmp_path / "ran"),
        "BUDGET_CUT": str(tmp_path / "cut"),
    }
    with served_function("budget_job", env, log=log, source=APP) as function:
        yield function, tmp_path


def delivery_lines(log: Path) -> list[dict[str, object]]:
    """The JSON lines of dedup's delivery log in `log`."""
    lines = []
    for text in log.read_text().splitlines():
        if text.startswith("{"):
            entry = json.loads(text)
            if "outcome" in entry:
                lines.append(entry)
    return lines


def test_a_function_with_its_own_timeout_answers_within_it_when_firestore_goes_away(
    proxy: Proxy, served: tuple[ServedFunction, Path]
) -> None:
    """It is impossible for a delivery of a function declared with `timeout_sec=20` to run
    past its timeout (plus a second to answer) because the lease is longer: its claim lands,
    its handler runs, Firestore becomes unreachable, and it answers 500 within 21 s of the
    request with "could not mark sent" logged under `budget_source` "declared_timeout"."""
    function, folder = served
    event = testing.pubsub_event("budget", b"job", project=PROJECT)
    answers: list[tuple[int | str, float]] = []

    def deliver() -> None:
        started = time.monotonic()
        try:
            status: int | str = testing.deliver(function.url, event, timeout=60)
        except OSError as error:  # no answer within 60 s
            status = repr(error)
        answers.append((status, time.monotonic() - started))

    platform = threading.Thread(target=deliver)
    platform.start()
    eventually(lambda: (folder / "ran").exists(), "the handler ran", seconds=30, poll=0.05)
    proxy.cut()  # the claim landed and the handler ran: Firestore is gone from here on
    (folder / "cut").write_text("cut")
    platform.join(timeout=70)

    [(status, elapsed)] = answers
    assert status == 500, status
    assert elapsed <= ANSWERED_WITHIN, f"answered after {elapsed:.1f} s"
    [line] = delivery_lines(folder / "function.log")
    assert line["outcome"] == "unavailable", line
    assert line["budget_source"] == "declared_timeout", line
    assert "mark sent" in str(line.get("error")), line
