"""Durations as the operator types and reads them: `30s`, `10m`, `2h`, `7d`."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"(?P<amount>\d+)(?P<unit>[smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`30s`, `10m`, `2h`, `7d` as a timedelta; raises ValueError (saying the form) otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or int(match["amount"]) == 0:
        raise ValueError(
            f"{text!r} is not a duration: use a positive whole number and a unit, "
            "s, m, h or d (e.g. 30s, 10m, 2h, 7d)"
        )
    return timedelta(seconds=int(match["amount"]) * _UNIT_SECONDS[match["unit"]])


def format_duration(span: timedelta) -> str:
    """The span in its two largest units: `42s`, `5m 2s`, `3h 0m`, `2d 4h` (negative: `0s`)."""
    seconds = max(0, int(span.total_seconds()))
    for big, small in (("d", "h"), ("h", "m"), ("m", "s")):
        amount, rest = divmod(seconds, _UNIT_SECONDS[big])
        if amount:
            return f"{amount}{big} {rest // _UNIT_SECONDS[small]}{small}"
    return f"{seconds}s"


def format_exact(span: timedelta) -> str:
    """The span in the largest unit that holds it whole, as typed: `24h`, `90m`, `7d`, `45s`."""
    seconds = int(span.total_seconds())
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds // _UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"
