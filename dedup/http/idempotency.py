"""The parts of an idempotent HTTP request that need no web framework: the `Idempotency-Key`
header's value, the caller-scoped event id, the request fingerprint, and the stored response.

Pure functions and frozen values, unit-tested without emulators; `dedup.http` glues them to
Flask, firebase-functions and `Deduplicator.run`.

Key syntax (draft-ietf-httpapi-idempotency-key-header-07, section 2.1: an RFC 8941 sf-string;
Stripe and most clients send a bare token such as a UUID). Accepted, after trimming spaces:

| header value            | key           |
|-------------------------|---------------|
| `"abc"` (sf-string)     | `abc`: `\\"` and `\\\\` unescaped, any other `\\` refused |
| `abc` (bare)            | `abc`: characters 0x21-0x7E, no `"` or `\\` |

The key itself must then be 1-255 printable ASCII characters (0x20-0x7E); anything else is
refused with a reason (`InvalidKey`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dedup.kernel.transitions import MAX_RESULT_BYTES
from dedup.platform.firestore_values import value_size

MAX_KEY_LENGTH = 255
"""Longest accepted key, in characters (Stripe's limit; the draft sets none)."""

HEADER = "Idempotency-Key"
"""The request header (draft-ietf-httpapi-idempotency-key-header-07)."""

REPLAYED_HEADER = "Idempotent-Replayed"
"""Response header set to `true` on a replayed response (Stripe's name; the draft has none)."""

CALLABLE_FIELD = "idempotencyKey"
"""The callable request data field that carries the key (the client SDKs set no headers)."""

RETRY_LATER_STATUSES = frozenset({408, 425, 429})
"""Statuses below 500 that ask the client to send the same request again later (Request
Timeout, Too Early, Too Many Requests): like a 5xx, such an answer is not stored and the key is
released, so the retry runs (a stored 429 would be replayed to that retry forever)."""


def retryable_status(status: int) -> bool:
    """An answer with `status` is not stored and releases the key: 5xx or
    `RETRY_LATER_STATUSES`."""
    return status >= 500 or status in RETRY_LATER_STATUSES


class InvalidKey(ValueError):
    """The header value is not an acceptable idempotency key; the message says why, for the
    client (it never echoes the value)."""


def parse_key(raw: str) -> str:
    """The key of an `Idempotency-Key` header value (see the module docstring).

    Raises `InvalidKey` with a reason a client can act on.
    """
    value = raw.strip(" \t")
    if value.startswith('"'):
        key = _sf_string(value)
    else:
        if not value or any(not 0x21 <= ord(c) <= 0x7E or c in '"\\' for c in value):
            raise InvalidKey(
                "a bare Idempotency-Key must be visible ASCII characters without quotes, "
                'spaces or backslashes; quote it as an sf-string ("...") otherwise'
            )
        key = value
    return validate_key(key)


def validate_key(key: object) -> str:
    """`key` unchanged when it is 1-255 printable ASCII characters; else `InvalidKey`."""
    if not isinstance(key, str) or not key:
        raise InvalidKey("the idempotency key is empty: send 1 to 255 printable ASCII characters")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(
            f"the idempotency key has {len(key)} characters; at most {MAX_KEY_LENGTH} are "
            "accepted (a UUID is 36)"
        )
    if any(not 0x20 <= ord(c) <= 0x7E for c in key):
        raise InvalidKey(
            "the idempotency key holds a character outside printable ASCII (0x20-0x7E); "
            "use a UUID or another ASCII token"
        )
    return key


def _sf_string(value: str) -> str:
    """Decode an RFC 8941 sf-string (`value` starts with a quote)."""
    out: list[str] = []
    chars = iter(value[1:])
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            if escaped not in ('"', "\\"):
                raise InvalidKey('in a quoted Idempotency-Key only \\" and \\\\ may be escaped')
            out.append(escaped)
        elif char == '"':
            if next(chars, None) is not None:
                raise InvalidKey("a quoted Idempotency-Key must end at its closing quote")
            return "".join(out)
        else:
            out.append(char)
    raise InvalidKey("a quoted Idempotency-Key has no closing quote")


def scoped_event_id(uid: str | None, key: str) -> str:
    """The dedup event id of `key` sent by `uid` (None: an anonymous endpoint, the key alone).

    `<uid>:<key>` with every `%` and `:` of the uid percent-encoded, so distinct (uid, key)
    pairs give distinct ids ("a:b" + "c" and "a" + "b:c" cannot meet). `dedup.kernel.transitions`
    maps ids that are not valid document ids.
    """
    if uid is None:
        return key
    return f"{uid.replace('%', '%25').replace(':', '%3A')}:{key}"


def fingerprint(method: str, path: str, body: bytes, *, json_body: bool) -> bytes:
    """What identifies a request beside its key: method, path and the canonical body.

    A JSON body is canonical when parsed and dumped with sorted keys and no spaces (so key
    order and whitespace do not count); any other body counts byte for byte.
    """
    if json_body:
        body = canonical_json(json.loads(body))
    return b"\n".join([method.upper().encode(), path.encode("utf-8", "surrogatepass"), body])


def canonical_json(value: Any) -> bytes:
    """`value` as compact JSON with sorted keys (its canonical rendering)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class StoredResponse:
    """A response as kept in the record's `result` (not for a `retryable_status`)."""

    status: int
    body: bytes
    content_type: str | None
    location: str | None

    def to_result(self, room: int | None = None) -> dict[str, Any]:
        """The map stored with "sent": the whole response when it fits both
        `dedup.kernel.transitions.MAX_RESULT_BYTES` and `room` (the bytes the record has left
        for its result, `dedup.http.endpoint` measures it; None: no other limit), else a stub
        with its status, size and sha256 (and its `Content-Type` and `Location` when they fit
        too), which a replay answers as a response too large to keep (`NotStored`)."""
        limit = MAX_RESULT_BYTES if room is None else min(MAX_RESULT_BYTES, room)
        full: dict[str, Any] = {
            "kind": "http",
            "status": self.status,
            "body": self.body,
            "contentType": self.content_type,
            "location": self.location,
        }
        if _stored_size(full) <= limit:
            return full
        stub: dict[str, Any] = {
            "kind": "http",
            "status": self.status,
            "tooLarge": True,
            "bytes": len(self.body),
            "sha256": hashlib.sha256(self.body).hexdigest(),
        }
        described = {**stub, "contentType": self.content_type, "location": self.location}
        return described if _stored_size(described) <= limit else stub

    @classmethod
    def from_result(cls, result: Mapping[str, Any] | None) -> StoredResponse | NotStored:
        """The stored response, or `NotStored` saying why there is none to replay."""
        if not result or result.get("kind") != "http":
            return NotStored(status=None, size=None, sha256=None)
        if result.get("tooLarge"):
            return NotStored(
                status=int(result["status"]),
                size=int(result["bytes"]),
                sha256=result["sha256"],
                location=result.get("location"),
            )
        return cls(
            status=int(result["status"]),
            body=bytes(result["body"]),
            content_type=result.get("contentType"),
            location=result.get("location"),
        )


@dataclass(frozen=True)
class NotStored:
    """The request with this key ended, but its response is not in the record: it completed
    and was too large to keep (`status`, `size`, `sha256` say what it was), it completed and
    the record could not keep even that (`completed`, the rest None), or the record ended
    without one (all None: it died after `max_attempts` failures, or was written by an older
    version)."""

    status: int | None
    size: int | None
    sha256: str | None
    completed: bool = False
    """The record says the request completed (sent), though it keeps nothing of its response."""
    location: str | None = None
    """The `Location` of a response too large to keep, when it had one: where to fetch it."""
    maybe_effected: bool = False
    """It ended without one (dead) after an attempt that may have had its effect (a lease that
    expired: the record's `ambiguous`): the caller must check before sending it again."""


def _stored_size(result: Mapping[str, Any]) -> int:
    """The size `dedup.kernel.room.storable_result` measures a result by: Firestore's."""
    return value_size(result)
