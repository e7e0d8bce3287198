"""`dedup.platform.strict_json`: RFC 8259 JSON within stated limits, every refusal a sentence for
the client that names no exception type and repeats nothing of the input (no server needed)."""

from __future__ import annotations

import contextlib
import json
import time

import pytest

from dedup.platform.strict_json import (
    MAX_DEPTH,
    MAX_INTEGER_DIGITS,
    InvalidJSON,
    check_value,
    loads,
    nesting_depth,
)

REFUSED = {
    "not UTF-8": b'{"a": "\xff"}',
    "encoded surrogate": b'"\xed\xa0\x80"',
    "empty": b"",
    "cut": b'{"a": [1, 2',
    "open brace": b"{",
    "trailing bytes": b'{"a": 1} x',
    "two values": b"{} {}",
    "leading BOM": b'\xef\xbb\xbf{"a": 1}',
    "single quotes": b"{'a': 1}",
    "lone high surrogate": b'"\\ud800"',
    "lone low surrogate key": b'{"\\udc00": 1}',
    "reversed pair": b'["\\ude00\\ud83d"]',
    "NaN": b'{"amount": NaN}',
    "Infinity": b'{"amount": Infinity}',
    "-Infinity": b"[-Infinity]",
    "1e999": b'{"amount": 1e999}',
    "-1e999": b'{"amount": -1e999}',
    "huge integer": b"1" + b"0" * 5000,
    "integer over the limit": b"-" + b"9" * (MAX_INTEGER_DIGITS + 1),
    "nesting over the limit": b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
    "100,000 levels": b"[" * 100_000 + b"]" * 100_000,
    "100,000 object levels": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "100,000 levels, unclosed": b"[" * 100_000,
}

ACCEPTED = {
    b'{"a": 1}': {"a": 1},
    b'"\\ud83d\\ude00"': "\U0001f600",
    '"é"'.encode(): "é",
    b"-" + b"9" * MAX_INTEGER_DIGITS: -int("9" * MAX_INTEGER_DIGITS),
    b"1e308": 1e308,
    b"1e-999": 0.0,
    b"[" * MAX_DEPTH + b"]" * MAX_DEPTH: json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH),
    b'"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["': "[" * 70,
    b" [1, 2.5, true, false, null] ": [1, 2.5, True, False, None],
}


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_refused_with_a_detail_that_names_nothing_internal(body: bytes) -> None:
    with pytest.raises(InvalidJSON) as refused:
        loads(body)
    detail = refused.value.detail
    assert detail.startswith("the body ")
    for internal in ("Error", "Exception", "Traceback", "json.", "Recursion"):
        assert internal not in detail
    assert len(detail) < 300
    assert body[:20].decode("utf-8", "replace") not in detail or len(body) < 3


@pytest.mark.parametrize("body", ACCEPTED.keys())
def test_accepted_values_survive_a_strict_round_trip(body: bytes) -> None:
    value = loads(body)
    assert value == ACCEPTED[body]
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


def test_a_str_holding_a_raw_surrogate_is_refused() -> None:
    with pytest.raises(InvalidJSON):
        loads('"\ud800"')


def test_the_detail_says_what_to_fix_for_each_limit() -> None:
    cases = {
        b"[NaN]": "finite number",
        b"1" * 200: f"longer than {MAX_INTEGER_DIGITS} digits",
        b"[" * 99 + b"]" * 99: f"more than {MAX_DEPTH} levels deep",
        b'"\\udfff"': "lone UTF-16 surrogate",
        b"\xc3": "not UTF-8",
        b"{} x": "nothing after it",
    }
    for body, phrase in cases.items():
        with pytest.raises(InvalidJSON, match=phrase):
            loads(body, what="the body")
    with pytest.raises(InvalidJSON, match=r"^the data "):
        loads(b"[NaN]", what="the data")


def test_limits_can_be_stated_per_call() -> None:
    assert loads(b"[[1]]", max_depth=2) == [[1]]
    with pytest.raises(InvalidJSON):
        loads(b"[[[1]]]", max_depth=2)
    with pytest.raises(InvalidJSON):
        loads(b"12345", max_integer_digits=4)


def test_a_megabyte_of_adversarial_text_is_answered_quickly() -> None:
    """Bounded work: a 1 MiB body of brackets, of escapes or of digits takes well under a
    second to refuse or parse."""
    bodies = [
        b"[" * (1 << 20),
        b'"' + b'\\"' * (1 << 19) + b'"',
        b"[" + b"1," * (1 << 19) + b"1]",
        b'["' + b"\\ud800" * (1 << 17) + b'"]',
    ]
    for body in bodies:
        started = time.monotonic()
        with contextlib.suppress(InvalidJSON):
            loads(body)
        assert time.monotonic() - started < 2.0


def test_nesting_depth_counts_lists_and_dicts_without_recursion() -> None:
    assert nesting_depth(1) == 0
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    deep: list[object] = []
    for _ in range(50_000):
        deep = [deep]
    assert nesting_depth(deep) == 50_001


def test_check_value_applies_the_same_rules_to_parsed_values() -> None:
    check_value({"item": "coffee", "quantity": 2, "tags": ["\U0001f600"]})
    for bad in (
        {"a": float("nan")},
        [float("inf")],
        {"a": 10**200},
        {"\ud800": 1},
        ["\udfff"],
        {"a": object()},
        json.loads("[" * 100 + "]" * 100),
    ):
        with pytest.raises(InvalidJSON, match=r"^the data "):
            check_value(bad)
