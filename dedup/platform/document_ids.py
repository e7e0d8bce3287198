"""Firestore's rules for a document or collection id, checked before an id is used.

Firestore refuses ids that are empty, longer than 1,500 bytes, contain `/`, are `.` or `..`,
or match `__.*__` (reserved): a write under such an id fails with `InvalidArgument`, and an id
with `/` silently addresses another document (`users/a/b` is a collection). The functions check
every id that comes from an event or from business data with `id_problem` first, so bad data
is refused or recorded as a terminal failure instead of failing on every retry.
"""

from __future__ import annotations

MAX_ID_BYTES = 1500
"""Firestore's limit on a document id, in UTF-8 bytes."""


def id_problem(value: object) -> str | None:
    """Why `value` cannot be a Firestore document or collection id, or None when it can.

    The reason is in the project's words and never repeats the value (it may be hostile).
    """
    if not isinstance(value, str) or not value:
        return "is not a non-empty string"
    if "/" in value:
        return "contains '/'"
    if value in (".", ".."):
        return "is '.' or '..'"
    if len(value) >= 4 and value.startswith("__") and value.endswith("__"):
        return "is reserved (__...__)"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    if size > MAX_ID_BYTES:
        return f"is longer than {MAX_ID_BYTES} bytes"
    return None


def is_document_id(value: object) -> bool:
    """True when Firestore accepts `value` as a document id (see `id_problem`)."""
    return id_problem(value) is None
