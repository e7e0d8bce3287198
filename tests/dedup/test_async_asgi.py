"""End to end: an async function served by `functions-framework --asgi` (a real process),
receiving duplicate CloudEvents over HTTP, runs its effect once."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from google.cloud import firestore

from dedup import Record, State
from tests.http.support import http_server

COPIES = 20
APP = """\
import asyncio

import functions_framework.aio

from dedup import AsyncDelivery, trigger_once


@functions_framework.aio.cloud_event
@trigger_once("asgiOnce")
async def handle(event, delivery: AsyncDelivery) -> None:
    effect = {"key": delivery.key, "client": type(delivery.client).__name__}
    await delivery.client.collection("effects").document().create(effect)
    await asyncio.sleep(0.5)  # copies arrive while the lease is held
"""


@pytest.mark.needs_emulators  # the served function reaches Firestore from its own process
def test_an_asgi_served_async_function_runs_once_for_duplicate_cloud_events(
    tmp_path: Path, firestore_client: firestore.Client
) -> None:
    """20 copies of one CloudEvent POSTed at once to `functions-framework --asgi`: each copy
    is answered 200 (ran, duplicate) or 500 (lease held: the platform retries it); retried
    until every copy got 200, the handler ran once, with an AsyncClient, and the record is
    sent."""
    source = tmp_path / "main.py"
    source.write_text(APP)
    event_id = uuid.uuid4().hex
    headers = {
        "ce-id": event_id,
        "ce-source": "//test",
        "ce-type": "com.example.thing",
        "ce-specversion": "1.0",
        "Content-Type": "application/json",
    }
    body = json.dumps({"x": 1})
    statuses: list[int] = []
    with http_server(
        "handle", source, {}, tmp_path / "ff.log", signature_type="cloudevent", asgi=True
    ) as server:

        def deliver_until_accepted() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                status = requests.post(server.url, headers=headers, data=body, timeout=30)
                statuses.append(status.status_code)
                if status.status_code == 200:
                    return
                time.sleep(0.2)  # the platform's retry of a refused copy
            raise AssertionError("a copy was never accepted")

        with ThreadPoolExecutor(COPIES) as pool:
            for done in [pool.submit(deliver_until_accepted) for _ in range(COPIES)]:
                done.result()
    assert set(statuses) <= {200, 500}, statuses
    assert statuses.count(200) == COPIES
    effects = [d.to_dict() for d in firestore_client.collection("effects").stream()]
    assert effects == [{"key": f"{event_id}-asgiOnce", "client": "AsyncClient"}]
    record = Record.from_snapshot(
        firestore_client.collection("triggerEvents").document(f"{event_id}-asgiOnce").get()
    )
    assert record is not None
    assert (record.state, record.attempts) == (State.SENT, 1)
