"""Where an application configures dedup's log lines: `configure_logging()` at start-up
(optional; the first delivery line does it otherwise) and `CloudLoggingFormatter`. The lines
themselves are written by `dedup.telemetry` (docs/observability.md)."""

from dedup.telemetry import (
    LOGGER_NAME,
    CloudLoggingFormatter,
    configure_logging,
    log_delivery,
    logger,
)

__all__ = ["LOGGER_NAME", "CloudLoggingFormatter", "configure_logging", "log_delivery", "logger"]
