"""Logs: one Cloud Logging JSON line per delivery, with the documented fields, no payload."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

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


def test_logging_is_configured_only_when_asked(log_lines: io.StringIO) -> None:
    """Importing dedup and delivering attach no handler; `configure_logging()` attaches one
    stdout JSON handler, once, only where the application configured none."""
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
        logger.removeHandler(attached[0])
        logging.getLogger().addHandler(logging.NullHandler())
        configure_logging()
        assert logger.handlers == []  # the application's root handler wins
    finally:
        for handler in logging.getLogger().handlers[:]:
            logging.getLogger().removeHandler(handler)
        for handler in root_handlers:
            logging.getLogger().addHandler(handler)
