"""Document ids of dedup records: `<event id>-<suffix>`, with unsafe event ids mapped.

Suffixes hold no "-", so a key splits into its event id and suffix at its last "-": distinct
(event id, suffix) pairs give distinct keys (`("post-launch", "email")` and
`("post", "launch-email")` cannot meet, because the second suffix is refused).

Firestore rejects a document id that contains "/", is "." or "..", matches `__.*__`, or is
longer than 1,500 bytes of UTF-8. An event id is used as it is unless it or the key built from
it would break one of these rules (an id matching `__.*__` is mapped even though the suffix
would make the key legal: it is reserved-looking, and mapping costs nothing), the id starts
with "~", or it holds a character outside printable ASCII (unicode, spaces, control
characters: the key travels downstream as an `Idempotency-Key` HTTP header, which must be
ASCII, and into log lines). Then the *safe id* is

    "~" + readable prefix + "~" + sha256(event id as UTF-8).hexdigest()

where the readable prefix is the id's first 40 characters with every character outside
`[A-Za-z0-9_.-]` replaced by "_". The mapping is deterministic and distinct ids get distinct
safe ids (the hash covers the whole id). Unmapped ids never start with "~", so a mapped id can
never collide with an unmapped one.

Key layouts (`DedupConfig.key_layout`, DEDUP_KEY_LAYOUT). `"plain"` (the default) is the key
above. `"spread"` puts a short hash of the event id in front of it:

    sha256(event id as UTF-8).hexdigest()[:4] + "." + plain key

Pub/Sub message ids grow with time, so plain keys of a busy topic are sequential and all new
records land in one key range, which Firestore throttles past about 500 writes per second
(docs/capacity.md). The prefix spreads them over 65,536 ranges; the rest of the key stays
readable and the key still ends with "-<suffix>". The prefix depends on the event id only, so
the records of one event for several functions sit together. The layout is part of the
collection's identity: switching it on a live collection makes every record already written
invisible to deliveries (use a new collection, see docs/capacity.md).
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from dedup.errors import InvalidSuffix, MissingEventId

MAX_KEY_BYTES = 1500
"""Firestore's limit on a document id, in bytes of UTF-8."""

MAPPED_PREFIX = "~"
"""First character of every mapped event id; reserved, so unmapped ids may not start with it."""

READABLE_PREFIX_CHARS = 40
"""How many leading characters of a mapped id are kept readable in its safe id."""

KeyLayout = Literal["plain", "spread"]
"""How a record key is laid out: `plain` (`<event id>-<suffix>`) or `spread` (hash prefix)."""

KEY_LAYOUTS: tuple[KeyLayout, ...] = ("plain", "spread")
"""Every key layout, the default first."""

SPREAD_PREFIX_CHARS = 4
"""Hex characters of the spread layout's prefix: 16**4 = 65,536 key ranges."""

SPREAD_SEPARATOR = "."
"""Between the spread layout's prefix and the plain key."""

SUFFIX_PATTERN = re.compile(r"[A-Za-z0-9_]{1,100}")
"""What a suffix may be: it names one function, and ends every one of its keys after the
last "-" (so a suffix holds none)."""

_RESERVED_ID = re.compile(r"__.*__", re.DOTALL)
_UNREADABLE = re.compile(r"[^A-Za-z0-9_.-]")
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")


def validate_suffix(suffix: str) -> str:
    """Return `suffix` unchanged if it is 1-100 characters of `[A-Za-z0-9_]`.

    Raises `InvalidSuffix` (with the rule and a fix) otherwise.
    """
    if not isinstance(suffix, str) or not SUFFIX_PATTERN.fullmatch(suffix):
        raise InvalidSuffix(
            f"suffix {suffix!r} is invalid: use 1 to 100 characters of letters, digits and "
            "'_' (no '-': keys are <event id>-<suffix>), unique per function, e.g. "
            "trigger_once('send_welcome_email')"
        )
    return suffix


def dedup_key(event_id: str | None, suffix: str, layout: KeyLayout = "plain") -> str:
    """The record's document id for this event and function; deterministic and Firestore-safe.

    Distinct `(event_id, suffix)` pairs give distinct keys in each `layout` (see the module
    docstring). Raises `MissingEventId` for a missing or empty id, `InvalidSuffix` for a bad
    suffix and `ValueError` for an unknown layout.
    """
    if layout not in KEY_LAYOUTS:
        raise ValueError(f"key layout must be one of {KEY_LAYOUTS}; got {layout!r}")
    validate_suffix(suffix)
    if event_id is None or event_id == "":
        raise MissingEventId(
            "the event has no id, so it cannot be deduplicated and the handler was not run: "
            "pass the CloudEvent id (or the Pub/Sub messageId) as event_id"
        )
    if not isinstance(event_id, str):
        raise TypeError(f"event_id must be a str; got {type(event_id).__name__}")
    if layout == "plain":
        return f"{safe_event_id(event_id, suffix)}-{suffix}"
    prefix = spread_prefix(event_id)
    # The prefix takes room from the 1,500 bytes: an id that only just fits plain is mapped.
    safe = _mapped(event_id) if _needs_mapping(event_id, suffix, len(prefix)) else event_id
    return f"{prefix}{safe}-{suffix}"


def spread_prefix(event_id: str) -> str:
    """The spread layout's prefix of `event_id`'s keys: 4 hex characters of its sha256, "."."""
    digest = hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:SPREAD_PREFIX_CHARS] + SPREAD_SEPARATOR


def safe_event_id(event_id: str, suffix: str) -> str:
    """`event_id` itself when the key built from it is a valid document id, else its mapping."""
    return _mapped(event_id) if _needs_mapping(event_id, suffix) else event_id


def storable_event_id(event_id: str) -> str:
    """`event_id` as written into the record and the log line: itself, unless it holds lone
    surrogates (a JSON `\\ud800` escape), which no UTF-8 field can carry; those are escaped
    as `\\ud800` text. The key is unaffected (`dedup_key` hashes the id itself)."""
    try:
        event_id.encode("utf-8")
    except UnicodeEncodeError:
        return event_id.encode("utf-8", "backslashreplace").decode("utf-8")
    return event_id


def payload_hash(payload: bytes) -> str:
    """Fingerprint of a canonical payload rendering: sha256, hex."""
    return hashlib.sha256(payload).hexdigest()


def _needs_mapping(event_id: str, suffix: str, reserved_bytes: int = 0) -> bool:
    key = f"{event_id}-{suffix}"
    key_bytes = len(key.encode("utf-8", "surrogatepass")) + reserved_bytes
    return (
        not _PRINTABLE_ASCII.fullmatch(event_id)
        or "/" in event_id
        or event_id in (".", "..")
        or event_id.startswith(MAPPED_PREFIX)
        or _RESERVED_ID.fullmatch(event_id) is not None
        or _RESERVED_ID.fullmatch(key) is not None
        or key_bytes > MAX_KEY_BYTES
    )


def _mapped(event_id: str) -> str:
    readable = _UNREADABLE.sub("_", event_id[:READABLE_PREFIX_CHARS])
    digest = hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{MAPPED_PREFIX}{readable}{MAPPED_PREFIX}{digest}"
