"""Logs: one Cloud Logging JSON line per delivery, with the documented fields, no payload."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dedup import Deduplicator
from dedup.logs import CloudLoggingFormatter, logger


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Capture the dedup logger's output through the JSON formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_one_json_line_per_delivery(
    make_dedup: Callable[..., Deduplicator], log_lines: io.StringIO
) -> None:
    """Each delivery logs exactly one line carrying severity, message, ids, outcome, timing."""
    dedup = make_dedup()
    dedup.run("e1", "s", lambda d: None, payload=b"secret-payload")
    dedup.run("e1", "s", lambda d: None, payload=b"secret-payload")
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    assert [line["outcome"] for line in lines] == ["ran", "duplicate_cached"]
    first = lines[0]
    assert first["severity"] == "INFO"
    assert (first["eventId"], first["suffix"], first["key"], first["attempt"]) == (
        "e1",
        "s",
        "e1-s",
        1,
    )
    assert isinstance(first["ms"], int)
    assert "secret-payload" not in log_lines.getvalue()


def test_configure_logging_attaches_one_handler_where_none_is_configured(
    log_lines: io.StringIO,
) -> None:
    """`configure_logging()` attaches one stdout JSON handler to "dedup" with propagation off,
    once, only where the application configured none (on "dedup" or the root logger)."""
    from dedup.logs import configure_logging

    logger.removeHandler(logger.handlers[0])  # the fixture's: as an unconfigured application
    root_handlers = logging.getLogger().handlers[:]
    for handler in root_handlers:
        logging.getLogger().removeHandler(handler)
    try:
        configure_logging()
        configure_logging()
        attached = [h for h in logger.handlers if isinstance(h.formatter, CloudLoggingFormatter)]
        assert len(attached) == 1
        assert logger.propagate is False
        assert logging.getLogger().handlers == []  # the root logger is left alone
        logger.removeHandler(attached[0])
        logger.propagate = True
        logging.getLogger().addHandler(logging.NullHandler())
        configure_logging()
        assert logger.handlers == []  # the application's root handler wins
    finally:
        logger.propagate = True
        for handler in logging.getLogger().handlers[:]:
            logging.getLogger().removeHandler(handler)
        for handler in root_handlers:
            logging.getLogger().addHandler(handler)


USER_FUNCTION = """
from typing import Any

from firebase_functions import pubsub_fn

from dedup import DedupConfig, Deduplicator, Delivery, trigger_once
from tests.memory_store import MemoryStore

DEDUP = Deduplicator(DedupConfig(), records=MemoryStore())


@pubsub_fn.on_message_published(topic="jobs")
@trigger_once("logsJob", deduplicator=DEDUP)
def on_job(event: Any, delivery: Delivery) -> None:
    pass
"""

RUN_EVENTS = """
import json, logging, sys

import functions_framework

from dedup import testing
from dedup.logs import configure_logging

client = functions_framework.create_app("on_job", sys.argv[1], "cloudevent").test_client()
post = testing.via_test_client(client)
print("status", post(testing.pubsub_event("jobs", b"one", message_id="m1")), flush=True)
# The application configures the root logger after the first event: no line twice.
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="ROOT %(message)s")
configure_logging()
print("status", post(testing.pubsub_event("jobs", b"two", message_id="m2")), flush=True)
dedup_logger = logging.getLogger("dedup")
print("handlers", len(dedup_logger.handlers), dedup_logger.propagate, flush=True)
"""


def test_outcome_lines_appear_without_a_set_up_call(tmp_path: Path) -> None:
    """A user's function (the platform's decorator over `trigger_once`, no `configure_logging`
    call, no logging set-up) prints one JSON line per delivery on stdout: "outcome": "ran" for
    its first event. A root handler the application adds later does not print them again; a
    late `configure_logging()` adds no second handler; the root logger was not configured by
    dedup (its handler is the application's)."""
    source = tmp_path / "user_main.py"
    source.write_text(USER_FUNCTION)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", RUN_EVENTS, str(source)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    assert [(e["outcome"], e["eventId"]) for e in entries] == [("ran", "m1"), ("ran", "m2")]
    assert all(e["severity"] == "INFO" and e["suffix"] == "logsJob" for e in entries)
    assert [line for line in lines if line.startswith("status")] == ["status 200"] * 2
    assert not [line for line in lines if line.startswith("ROOT")], done.stdout
    assert "handlers 1 False" in lines
