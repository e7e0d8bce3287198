"""What a user's Python can hand the library, one catalogue: step values and arguments, handler
results, notes, exception and `TerminalError` texts, HTTP bodies and headers, callable results
and `HttpsError` details (docs/simulation.md, "Values from the catalogue").

Every kind is a function of a `random.Random`, so the simulator draws by seed (`value`, `text`:
replayable, from a randomness of its own, `World.values_rng`) and property tests draw the same
kinds through Hypothesis (`values`, `texts`: a Hypothesis integer seeds the same draw, so a
failing example shrinks to the smallest seed and `value(random.Random(seed))` gives it back).

`VALUE_KINDS` holds every Firestore type (a `GeoPoint`, also with integer coordinates,
timestamps with and without a zone, bytes, vectors, integers past 53 bits, whole floats), what
Firestore refuses or would give back as another type (a `Decimal`, a set, a tuple, nested
arrays, a reserved name `__x__`, a key that is not a string, an integer past 64 bits, a
subclass of `int`), lone surrogates in text, and sizes at and one byte past the step limit.
Document references are not drawn: the simulated store has no client to decode them.
"""

from __future__ import annotations

import enum
import random
import string
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.vector import Vector

from dedup.kernel.steps import MAX_STEP_BYTES

if TYPE_CHECKING:  # the simulator's runs never need Hypothesis: the strategies import it
    from hypothesis import strategies as st

Draw = Callable[[random.Random], Any]


class Level(enum.IntEnum):
    """A user's `IntEnum`: Firestore gives it back as a plain `int`."""

    HIGH = 3


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + "é€😀 \n\t\"'{}%") for _ in range(12))


def _moment(rng: random.Random) -> datetime:
    return datetime(2030, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**12))


def _scalar(rng: random.Random) -> Any:
    return rng.choice(
        (None, True, rng.randint(-1000, 1000), rng.uniform(-1e6, 1e6), _text(rng), b"\x00\xff")
    )


VALUE_KINDS: dict[str, Draw] = {
    "none": lambda r: None,
    "bool": lambda r: r.random() < 0.5,
    "int": lambda r: r.randint(-(2**31), 2**31),
    "int past 53 bits": lambda r: 2**53 + r.randint(1, 2**62),
    "int at 64 bits": lambda r: r.choice((2**63 - 1, -(2**63))),
    "int past 64 bits": lambda r: 2**63 + r.randint(0, 9),
    "whole float": lambda r: float(r.randint(-(10**6), 10**6)),
    "float": lambda r: r.uniform(-1e9, 1e9),
    "infinity": lambda r: r.choice((float("inf"), float("-inf"))),
    "text": _text,
    "empty text": lambda r: "",
    "lone surrogate": lambda r: "before \udc80 after",
    "bytes": lambda r: r.randbytes(r.randint(0, 40)),
    "geopoint": lambda r: GeoPoint(r.uniform(-90, 90), r.uniform(-180, 180)),
    "geopoint of ints": lambda r: GeoPoint(r.randint(-90, 90), r.randint(-180, 180)),
    "utc timestamp": _moment,
    "zoned timestamp": lambda r: _moment(r).astimezone(timezone(timedelta(hours=r.randint(1, 9)))),
    "naive timestamp": lambda r: _moment(r).replace(tzinfo=None),
    "vector": lambda r: Vector([r.uniform(-1, 1) for _ in range(r.randint(1, 4))]),
    "vector of ints": lambda r: Vector([r.randint(-5, 5) for _ in range(r.randint(1, 4))]),
    "decimal": lambda r: Decimal(f"{r.randint(0, 999)}.{r.randint(0, 99):02d}"),
    "set": lambda r: {_text(r), _text(r)},
    "tuple": lambda r: (r.randint(0, 9), _text(r)),
    "nested arrays": lambda r: [[r.randint(0, 9)], [r.randint(0, 9)]],
    "reserved name": lambda r: {"__x__": r.randint(0, 9)},
    "key not a string": lambda r: {r.randint(0, 9): "a"},
    "int subclass": lambda r: Level.HIGH,
    "list": lambda r: [_scalar(r) for _ in range(r.randint(0, 5))],
    "map": lambda r: {f"k{i}": _scalar(r) for i in range(r.randint(0, 5))},
    "map of firestore types": lambda r: {
        "where": GeoPoint(r.randint(-90, 90), r.randint(-180, 180)),
        "when": _moment(r),
        "blob": r.randbytes(8),
        "big": 2**60 + r.randint(0, 9),
    },
    "text at the step limit": lambda r: "x" * (MAX_STEP_BYTES - 2),
    "text one byte past the step limit": lambda r: "x" * (MAX_STEP_BYTES - 1),
}
"""Every kind of value, by name."""

TEXT_KINDS: dict[str, Draw] = {
    "plain": lambda r: f"the receiver answered {r.randint(400, 599)}",
    "unicode": lambda r: "refusé: " + _text(r) + " 😀",
    "lone surrogate": lambda r: "bad \ud800 text",
    "nul and newlines": lambda r: "a\x00b\nc\r\n",
    "format characters": lambda r: "%s {0} {name} %(x)s",
    "empty": lambda r: "",
    "long": lambda r: "y" * r.randint(1_001, 1_500),
    "long unicode": lambda r: "é" * r.randint(1_001, 1_500),
}
"""Every kind of text a user hands the library: exception messages, `TerminalError` texts.
Long texts are just past `lastError`'s 1,000 characters (1,001 to 1,500): the kernel's
`error_text` takes time quadratic in a message without spaces
(`dedup.kernel.record.scrub_urls`: 0.06 s for 10,000 letters, 4.7 s for 100,000), CPU time
the simulator's virtual clock does not see."""


def value(rng: random.Random) -> tuple[str, Any]:
    """A value of the catalogue: (its kind, the value)."""
    kind = rng.choice(sorted(VALUE_KINDS))
    return kind, VALUE_KINDS[kind](rng)


def text(rng: random.Random) -> tuple[str, str]:
    """A text of the catalogue: (its kind, the text)."""
    kind = rng.choice(sorted(TEXT_KINDS))
    return kind, TEXT_KINDS[kind](rng)


def values() -> st.SearchStrategy[tuple[str, Any]]:
    """`value` as a Hypothesis strategy: a drawn integer seeds the draw (it shrinks to the
    smallest seed; `value(random.Random(seed))` replays an example)."""
    from hypothesis import strategies as st

    return st.integers(min_value=0, max_value=2**32).map(lambda seed: value(random.Random(seed)))


def texts() -> st.SearchStrategy[tuple[str, str]]:
    """`text` as a Hypothesis strategy (see `values`)."""
    from hypothesis import strategies as st

    return st.integers(min_value=0, max_value=2**32).map(lambda seed: text(random.Random(seed)))


HTTP_STATUSES = (200, 201, 202, 203, 404, 409, 410, 418, 422, 451)
"""Statuses a handler answers that the adapter stores (below 500, and none it releases the
key for: 408, 425, 429)."""


def header_value(rng: random.Random) -> str:
    """A response header's value: visible ASCII and spaces, as HTTP carries it."""
    alphabet = string.ascii_letters + string.digits + " ;=,/'"
    return "".join(rng.choice(alphabet) for _ in range(20))


def json_value(rng: random.Random) -> Any:
    """A callable's result or an `HttpsError`'s details: mostly what JSON carries, at times
    what Flask's JSON provider encodes its own way or refuses (a `Decimal`, a set, bytes,
    `NaN`)."""
    if rng.random() < 0.6:
        return {"n": rng.randint(0, 99), "text": _text(rng), "list": [_scalar(rng) for _ in "ab"]}
    return rng.choice(
        (
            Decimal("9.99"),
            {"amount": Decimal("1.50")},
            {"tags": {"a", "b"}},
            {"blob": b"\x00\xff"},
            {"ratio": float("nan")},
            {"when": _moment(rng)},
            {"lone": "x\udc80"},
        )
    )
