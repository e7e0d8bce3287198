"""Keys: every event id becomes a valid, deterministic, distinct Firestore document id."""

from __future__ import annotations

import re

import pytest
from google.cloud import firestore
from hypothesis import given
from hypothesis import strategies as st

from dedup import InvalidSuffix, MissingEventId, dedup_key
from dedup.kernel.transitions import MAX_KEY_BYTES

UNSAFE_IDS = [
    "a/b",
    "/",
    ".",
    "..",
    "__x__",
    "~x",
    "x" * 2048,
    "é" * 1000,  # 2,000 bytes of UTF-8
    "日本語/イベント",
    "\udcff",  # a lone surrogate: not UTF-8 at all
    "ünïcode ok",  # not ASCII: the key could not be an Idempotency-Key header
    "with space",
    "tab\there",
]


def test_plain_id_is_used_as_it_is() -> None:
    """A safe event id (printable ASCII, none of the unsafe forms) appears verbatim in the key,
    followed by the suffix."""
    assert dedup_key("1234567890", "sendMail") == "1234567890-sendMail"
    assert dedup_key("a.b_c:d@e!f~", "s") == "a.b_c:d@e!f~-s"


@pytest.mark.parametrize("event_id", UNSAFE_IDS)
def test_unsafe_id_is_mapped_deterministically(event_id: str) -> None:
    """An unsafe id maps to '~<readable>~<sha256>' the same way every time."""
    key = dedup_key(event_id, "s")
    assert key == dedup_key(event_id, "s")
    assert key.startswith("~")
    assert "/" not in key
    assert len(key.encode("utf-8")) <= MAX_KEY_BYTES


def test_reserved_pattern_is_judged_on_the_whole_key() -> None:
    """An id that only matches __.*__ together with its suffix is mapped too."""
    assert dedup_key("__x", "y__").startswith("~")
    assert dedup_key("__x", "y") == "__x-y"


def test_unsafe_ids_are_distinct_and_never_collide_with_plain_ids() -> None:
    """Distinct ids give distinct keys, mapped ('~...') and unmapped alike."""
    ids = [*UNSAFE_IDS, "x" * 2049, "a_b", "a-b", "~a/b"]
    keys = [dedup_key(event_id, "s") for event_id in ids]
    mapped_a_b = dedup_key("a/b", "s")
    assert len(set(keys)) == len(keys)
    assert dedup_key(mapped_a_b.removesuffix("-s"), "s") != mapped_a_b


def test_firestore_accepts_every_key(firestore_client: firestore.Client) -> None:
    """Each key, safe or mapped, can actually be written and read back as a document id."""
    collection = firestore_client.collection("triggerEvents")
    for event_id in [*UNSAFE_IDS, "plain", "a.b_c:d@e!f~"]:
        key = dedup_key(event_id, "s")
        collection.document(key).create({"eventId": event_id.encode("utf-8", "replace").hex()})
        assert collection.document(key).get().exists


@pytest.mark.parametrize("event_id", [None, ""])
def test_missing_event_id_raises(event_id: str | None) -> None:
    """No id, no protection: MissingEventId, never a silent unprotected run."""
    with pytest.raises(MissingEventId, match="no id"):
        dedup_key(event_id, "s")


@pytest.mark.parametrize("suffix", ["", "a b", "a/b", "x" * 101, "é"])
def test_invalid_suffix_raises(suffix: str) -> None:
    """A suffix outside [A-Za-z0-9_-]{1,100} is rejected with the rule in the message."""
    with pytest.raises(InvalidSuffix, match=r"1 to 100 characters"):
        dedup_key("e", suffix)


def _unmapped_by_the_rule(event_id: str, suffix: str) -> bool:
    """The module docstring's rule, in regular expressions: the id is kept as it is."""
    key = f"{event_id}-{suffix}"
    return (
        re.fullmatch(r"[\x21-\x7e]+", event_id) is not None
        and "/" not in event_id
        and event_id not in (".", "..")
        and not event_id.startswith("~")
        and re.fullmatch(r"(?s)__.*__", event_id) is None
        and re.fullmatch(r"(?s)__.*__", key) is None
        and len(key.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES
    )


@given(
    st.text(alphabet="_~./ \t\n\x7fa\u00e9", min_size=1, max_size=8)
    | st.text(min_size=1, max_size=6),
    st.sampled_from(["s", "_", "__", "x__"]),
)
def test_an_id_is_kept_exactly_when_the_rule_keeps_it(event_id: str, suffix: str) -> None:
    """An id is used as it is exactly when the rule of `dedup.kernel.transitions` (printable
    ASCII without space, none of "/", ".", "..", a leading "~", Firestore's reserved `__.*__`
    for the id or the key, at most 1,500 bytes) keeps it; else it is mapped."""
    key = dedup_key(event_id, suffix)
    assert (key == f"{event_id}-{suffix}") is _unmapped_by_the_rule(event_id, suffix)
    assert key.startswith("~") is not _unmapped_by_the_rule(event_id, suffix)


def test_a_suffix_is_judged_the_same_every_time() -> None:
    """A valid suffix passes again (its check remembered), an invalid one is refused every time,
    a `str` subclass too."""

    class Text(str):
        pass

    for _ in range(2):
        assert dedup_key("e", "ok_1") == "e-ok_1"
        assert dedup_key("e", Text("ok_1")) == "e-ok_1"
        for suffix in ["a-b", "", Text("a b")]:
            with pytest.raises(InvalidSuffix):
                dedup_key("e", suffix)
    with pytest.raises(InvalidSuffix):
        dedup_key("e", ["s"])  # type: ignore[arg-type]
