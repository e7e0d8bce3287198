"""Strict JSON for request bodies: RFC 8259 JSON only, within stated limits, or a refusal that
says what to fix.

Python's `json.loads` accepts more than JSON and fails in ways a server must not answer with a
5xx: it takes `NaN`, `Infinity` and `1e999` (which becomes `inf`), keeps lone UTF-16 surrogates
(`"\\ud800"`, which cannot be encoded again), raises `RecursionError` on deep nesting and a bare
`ValueError` on integers longer than 4,300 digits. `loads` refuses all of these with
`InvalidJSON`, whose `detail` is a sentence for the client: it names no exception type and
never repeats the input.

| input                                                     | refused because                  |
|-----------------------------------------------------------|----------------------------------|
| bytes that are not UTF-8                                  | JSON text is UTF-8 (RFC 8259 8.1) |
| not JSON: empty, cut, trailing bytes, a leading BOM        | not JSON                         |
| arrays and objects nested deeper than `MAX_DEPTH`         | stated limit                     |
| an integer with more than `MAX_INTEGER_DIGITS` digits     | stated limit                     |
| `NaN`, `Infinity`, `-Infinity`, a number beyond a double  | RFC 8259 has no such numbers      |
| a string (value or key) holding a lone surrogate          | not Unicode text                 |

`check_value` applies the same rules to a value another parser produced. A value `loads`
returns can be rendered again with `json.dumps(..., allow_nan=False)` and
encoded as UTF-8 without error, at any depth Python's own `json` handles.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (the outermost counts 1)."""

MAX_INTEGER_DIGITS = 100
"""Longest integer accepted, in digits (a sign not counted): send larger numbers as strings."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidJSON(ValueError):
    """The text is not strict JSON within the limits; `detail` says what to fix."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def loads(
    data: bytes | str,
    *,
    what: str = "the body",
    max_depth: int = MAX_DEPTH,
    max_integer_digits: int = MAX_INTEGER_DIGITS,
    lone_surrogates: bool = False,
) -> Any:
    """The JSON value of `data`, or `InvalidJSON` (see the module's table).

    `what` names the text in the detail ("the body", "the data"). Bytes must be UTF-8.
    `lone_surrogates=True` keeps strings with unpaired `\\ud800`-`\\udfff` escapes (a relay
    that must pass signed text on as it is); the caller then encodes them itself.
    """
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidJSON(f"{what} is not UTF-8 text: send JSON encoded as UTF-8") from None
    else:
        text = data

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > max_integer_digits:
            raise InvalidJSON(
                f"{what} holds an integer longer than {max_integer_digits} digits: send such "
                "numbers as strings"
            )
        return int(digits)

    def parse_float(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise _non_finite(what)
        return value

    def parse_constant(name: str) -> Any:
        raise _non_finite(what)

    try:
        value = json.loads(
            text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant
        )
    except InvalidJSON:
        raise
    except json.JSONDecodeError as exc:
        raise InvalidJSON(
            f"{what} is not JSON ({exc.msg.lower()} at line {exc.lineno}, column {exc.colno}): "
            "send one JSON value (RFC 8259) and nothing after it"
        ) from None
    except RecursionError:  # deeper than Python's json can go: far beyond max_depth
        raise _too_deep(what, max_depth) from None
    except ValueError:  # defensive: parse_int and parse_float refuse what int()/float() would
        raise InvalidJSON(f"{what} is not JSON that can be read: send RFC 8259 JSON") from None
    if text.count("[") + text.count("{") > max_depth and nesting_depth(value) > max_depth:
        raise _too_deep(what, max_depth)
    if not lone_surrogates and _has_lone_surrogate(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidJSON(
                f"{what} holds a string with a lone UTF-16 surrogate (an unpaired \\ud800-"
                "\\udfff escape): send valid Unicode text"
            ) from None
    return value


def check_value(
    value: Any,
    *,
    what: str = "the data",
    max_depth: int = MAX_DEPTH,
    max_integer_digits: int = MAX_INTEGER_DIGITS,
) -> None:
    """`InvalidJSON` unless `value` (already parsed, e.g. by a framework) is what `loads`
    would accept: JSON types only, within the same limits."""
    if nesting_depth(value) > max_depth:
        raise _too_deep(what, max_depth)
    try:
        text = json.dumps(value)  # ASCII: surrogates escaped, NaN and Infinity written out
    except (TypeError, ValueError, RecursionError):
        raise InvalidJSON(f"{what} holds values JSON cannot carry: send RFC 8259 JSON") from None
    loads(text, what=what, max_depth=max_depth, max_integer_digits=max_integer_digits)


def nesting_depth(value: Any) -> int:
    """How deep lists and dicts nest in a parsed JSON value (the outermost counts 1, a scalar
    0); iterative, so any depth Python's json produced is measured without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _has_lone_surrogate(text: str) -> bool:
    # A surrogate comes from a \u escape, or from a str handed in holding one: strict UTF-8
    # decoding never yields one.
    return "\\u" in text or _SURROGATE.search(text) is not None


def _too_deep(what: str, max_depth: int) -> InvalidJSON:
    return InvalidJSON(
        f"{what} nests arrays and objects more than {max_depth} levels deep: flatten it"
    )


def _non_finite(what: str) -> InvalidJSON:
    return InvalidJSON(
        f"{what} holds NaN, Infinity or a number too large for a double (such as 1e999): JSON "
        "(RFC 8259) has no such numbers; send a finite number, or a string"
    )
