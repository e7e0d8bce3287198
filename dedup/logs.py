"""One structured log line per delivery, in Cloud Logging's JSON shape.

Lines go to `logging.getLogger("dedup")`. Each carries `severity`, `message`, `eventId`,
`suffix`, `key`, `outcome`, `attempt` and `ms` (plus `error` and `subject` when known), never
payloads.

The library configures its own logger, and only it, on first use: the first delivery line
attaches a stdout handler with `CloudLoggingFormatter` to "dedup" (level INFO unless set, and
`propagate` off, so a root handler added later does not print each line twice) unless the
application has by then configured a handler there or on the root logger, whose routing then
wins (set the "dedup" logger's level yourself in that case). The root logger is never touched.
So a function needs no set-up call for its outcome lines to reach Cloud Logging as structured
entries. `configure_logging()` does the same at once (start-up, `main.py`); it is idempotent.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

LOGGER_NAME = "dedup"
logger = logging.getLogger(LOGGER_NAME)

_FIELDS = ("eventId", "suffix", "key", "outcome", "attempt", "ms", "error", "path", "subject")
_setup_lock = threading.Lock()
_first_use_done = False
"""Set once the first delivery line has decided whether to attach the handler."""


class CloudLoggingFormatter(logging.Formatter):
    """Formats a record as one JSON object Cloud Logging parses: severity, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as a single JSON line; dedup fields come from `extra=`."""
        entry: dict[str, Any] = {
            "severity": _severity(record.levelno),
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging() -> None:
    """Attach the stdout JSON handler to the "dedup" logger (level INFO if unset, `propagate`
    off), once, and only if neither it nor the root logger has a handler. Safe to call at
    start-up and again: never a second handler, never a doubled line. Without the call the
    first delivery line does the same (see the module docstring)."""
    with _setup_lock:
        if logger.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(CloudLoggingFormatter())
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)


def _configure_on_first_use() -> None:
    """`configure_logging()` once per process, at the first delivery line."""
    global _first_use_done
    if _first_use_done:
        return
    configure_logging()
    _first_use_done = True


def log_delivery(
    level: int,
    message: str,
    *,
    event_id: str | None = None,
    suffix: str | None = None,
    key: str | None = None,
    outcome: str,
    attempt: int | None = None,
    ms: int | None = None,
    error: str | None = None,
    path: str | None = None,
    subject: str | None = None,
) -> None:
    """Emit the one line describing a delivery's outcome (no traceback, no payload); fields
    left None are omitted from the line. The first one configures the "dedup" logger if the
    application has not (`configure_logging`)."""
    _configure_on_first_use()
    logger.log(
        level,
        message,
        extra={
            "eventId": event_id,
            "suffix": suffix,
            "key": key,
            "outcome": outcome,
            "attempt": attempt,
            "ms": ms,
            "error": error,
            "path": path,
            "subject": subject,
        },
    )


def _severity(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "CRITICAL"
    if levelno >= logging.ERROR:
        return "ERROR"
    if levelno >= logging.WARNING:
        return "WARNING"
    if levelno >= logging.INFO:
        return "INFO"
    return "DEBUG"
