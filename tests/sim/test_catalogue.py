"""The catalogue of user values (`sim.catalogue`) as Hypothesis property tests: the simulated
store gives back what Firestore's client gives back, and the library's view of a kept value
(`dedup.platform.firestore_values.as_stored`, what a step's first run hands the handler) is that
same value of the same types; every text a user may raise is stored by the library as it can.
A failing example shrinks to a seed: `sim.catalogue.value(random.Random(seed))` gives it back."""

from __future__ import annotations

from typing import Any

from google.cloud.firestore_v1 import _helpers
from hypothesis import given, settings

from dedup.kernel.record import storable_text
from dedup.platform import firestore_values as fv
from sim.catalogue import TEXT_KINDS, VALUE_KINDS, texts, values
from sim.handlers import shape
from sim.values import as_read, encode


def firestore_gives_back(value: Any) -> Any:
    """What a read of `value` gives: the client library's own encoding, then its decoding."""
    return _helpers.decode_value(_helpers.encode_value(value), None)


@settings(max_examples=300, deadline=None)
@given(values())
def test_a_kept_value_is_read_back_as_the_first_run_sees_it(drawn: tuple[str, Any]) -> None:
    kind, value = drawn
    if fv.refusal(value) is not None:
        return  # refused: RecordRefused after one call (the simulator's value-kept invariant)
    first_run = fv.as_stored(value, lambda path: path)
    assert shape(firestore_gives_back(first_run)) == shape(first_run), kind
    assert shape(as_read(encode(value))) == shape(first_run), kind


@settings(max_examples=100, deadline=None)
@given(texts())
def test_any_text_is_stored_by_the_library(drawn: tuple[str, str]) -> None:
    kind, text = drawn
    stored = storable_text(text)
    assert fv.refusal({"lastError": stored}) is None, kind


def test_the_catalogue_holds_every_kind_the_simulator_names() -> None:
    """The kinds docs/simulation.md lists are drawn (a GeoPoint of integers, timestamps with
    and without a zone, what Firestore refuses, sizes at and one byte past the step limit)."""
    for kind in (
        "geopoint of ints",
        "zoned timestamp",
        "naive timestamp",
        "vector",
        "int past 53 bits",
        "whole float",
        "decimal",
        "set",
        "tuple",
        "nested arrays",
        "reserved name",
        "key not a string",
        "lone surrogate",
        "text at the step limit",
        "text one byte past the step limit",
    ):
        assert kind in VALUE_KINDS
    assert "lone surrogate" in TEXT_KINDS
