"""What each entrance answers is one table, `dedup.entrances.answer_table.ANSWERS`, and the docs
say what it says: docs/guarantees.md carries it (generated, `make docs`), and the "the platform
sees" column of its first table agrees with the table's event-function column. The entrances'
errors carry the statuses the table gives. Nothing is run against Firestore: a unit test."""

from __future__ import annotations

import pytest
from firebase_functions.https_fn import FunctionsErrorCode, HttpsError

from dedup import tasks
from dedup.entrances import answers
from dedup.entrances.answer_table import (
    ANSWERS,
    Case,
    Door,
    answer,
    case_of,
    given_up,
    markdown,
    refusal_status,
)
from dedup.errors import (
    BudgetSpent,
    GivenUp,
    LeaseHeld,
    LeaseLost,
    MissingEventId,
    StoreUnavailable,
)
from dedup.http.callable import CALLABLE_CODES
from tests.docs.test_guarantees import PAGE, tables

ROWS: dict[str, frozenset[Case]] = {
    "nothing yet": frozenset({Case.RAN}),
    "`sent`": frozenset({Case.DUPLICATE}),
    "`in_progress`, lease live": frozenset({Case.LEASE_HELD}),
    "`in_progress`, lease released": frozenset({Case.RAN, Case.HANDLER_RAISED}),
    "`in_progress`, lease expired": frozenset({Case.RAN, Case.HANDLER_RAISED, Case.GIVEN_UP_ACK}),
    "`failed` / `dead` / `unknown`": frozenset({Case.GIVEN_UP_ACK}),
    "handler raised |": frozenset({Case.HANDLER_RAISED}),
    "handler raised `TerminalError`": frozenset({Case.GIVEN_UP_ACK}),
    "handler raised, `attempts` reached `max_attempts` and": frozenset({Case.GIVEN_UP_ACK}),
    "handler raised, `attempts` reached `max_attempts` within": frozenset({Case.HANDLER_RAISED}),
    "the delivery's time budget": frozenset({Case.BUDGET_SPENT}),
    "owner's lease was taken over": frozenset({Case.LEASE_LOST}),
    "another copy of the key": frozenset({Case.LEASE_HELD}),
    "the handler returned a result the record cannot hold": frozenset({Case.RAN}),
    "a record write Firestore refuses": frozenset({Case.GIVEN_UP_ACK}),
    'Firestore errs on "sent"': frozenset({Case.RAN, Case.STORE_UNAVAILABLE}),
    # "as if the response had arrived" (any row above), or given back once the budget is spent
    "a claim (create or take-over) failed": frozenset({Case.BUDGET_SPENT}),
}
"""Each row of the page's first table (by how its first cell starts) and the cases it may end
in, given-up ones under `ack` (their `nack` answer is checked apart)."""

OTHER_ROWS = {
    "a write's response was lost": "answered as if the response had arrived: no case of its own",
    "the record was written for another event": "`KeyCollision`, an error like any other",
}
"""The rows that are no case of the table, and why."""

NACK = " under `nack`"


def _delivery_rows() -> list[str]:
    """The rows of docs/guarantees.md's first table ("What happens to a delivery")."""
    first = tables(PAGE.read_text())[0]
    assert "the platform sees" in first[0], first[0]
    return first[2:]


def _cases_of(row: str) -> frozenset[Case] | None:
    matches = [cases for start, cases in ROWS.items() if row.startswith(f"| {start}")]
    if not matches:
        assert any(row.startswith(f"| {start}") for start in OTHER_ROWS), (
            f"a row the test does not know: add it to ROWS: {row[:100]}"
        )
        return None
    assert len(matches) == 1, row[:100]
    return matches[0]


def test_the_table_has_an_answer_for_every_case_at_every_entrance() -> None:
    """No (case, entrance) pair is left to an entrance to decide on its own."""
    assert set(ANSWERS) == {(case, door) for case in Case for door in Door}
    assert given_up("nack") is Case.GIVEN_UP_NACK
    assert given_up("ack") is Case.GIVEN_UP_ACK


def test_the_platform_sees_column_agrees_with_the_table() -> None:
    """Each row of "What happens to a delivery" says `success` exactly when one of its cases is
    answered 2xx by an event function, `error` exactly when one is answered with a retry, and
    names the `nack` answer (500) exactly when the event may be given up on."""
    rows = _delivery_rows()
    assert len(rows) >= len(ROWS) + len(OTHER_ROWS), "rows of the table were not found"
    for row in rows:
        cases = _cases_of(row)
        if cases is None:
            continue
        sees = row.split(" | ")[2].replace("**", "")
        event = [answer(case, Door.EVENT) for case in cases]
        nack = answer(Case.GIVEN_UP_NACK, Door.EVENT)
        gives_up = Case.GIVEN_UP_ACK in cases
        assert (f"{nack.status}{NACK}" in sees) is gives_up, (sees, row[:80])
        ack_part = sees.replace(f"{nack.status}{NACK}", "")
        said = ("success" in ack_part, "error" in ack_part)
        expected = (
            any(a.status is not None and a.status < 300 for a in event),
            any(a.retried for a in event),
        )
        assert said == expected, f"{row[:80]}: says {sees!r}, the table: {event}"


def test_the_page_carries_the_generated_table() -> None:
    """docs/guarantees.md holds the table as `make docs` renders it."""
    text = PAGE.read_text()
    assert "<!-- generated by tools/docs.py: answer-table -->" in text
    head = markdown(dict.fromkeys(Case, "")).splitlines()[0]
    assert head.removesuffix(" |").rstrip() in text


@pytest.mark.parametrize("door", [Door.TASK, Door.CALLABLE])
def test_the_entrances_errors_carry_the_tables_statuses(door: Door) -> None:
    """Every `HttpsError` code the table names has, in firebase-functions, the table's status;
    the event entrance's answers are served with the table's statuses; the tasks module's
    constants and the callable's codes are the table's."""
    for case in Case:
        found = answer(case, door)
        if found.error is None:
            continue
        error = HttpsError(FunctionsErrorCode(found.error), "m")
        assert error._http_error_code.status == found.status, (case, door, found)
    assert answers.LeaseHeldAnswer("m").code == refusal_status(Case.LEASE_HELD, Door.EVENT)
    assert answers.GivenUpAnswer("m").code == refusal_status(Case.GIVEN_UP_NACK, Door.EVENT)
    assert answers.MissingEventIdAnswer("m").code == refusal_status(Case.REFUSED_INPUT, Door.EVENT)
    assert refusal_status(Case.LEASE_HELD, Door.TASK) == tasks.LEASE_HELD_STATUS
    assert refusal_status(Case.STORE_UNAVAILABLE, Door.TASK) == tasks.STORE_UNAVAILABLE_STATUS
    assert refusal_status(Case.LEASE_LOST, Door.TASK) == tasks.RELEASED_STATUS
    assert (
        CALLABLE_CODES["request-in-progress"].value == answer(Case.LEASE_HELD, Door.CALLABLE).error
    )
    assert (
        CALLABLE_CODES["store-unavailable"].value == answer(Case.BUDGET_SPENT, Door.CALLABLE).error
    )


@pytest.mark.parametrize("door", [Door.HTTP, Door.CALLABLE])
def test_a_lost_lease_is_answered_as_a_held_one_where_the_key_is_waited_for(door: Door) -> None:
    """`dedup.http.replay.settle` waits on a held lease and a lost one alike (another request
    with the key decides it), and both are answered "in progress": the table says the same."""
    assert answer(Case.LEASE_LOST, door) == answer(Case.LEASE_HELD, door)
    assert answer(Case.BUDGET_SPENT, door).status == answer(Case.STORE_UNAVAILABLE, door).status


def test_each_dedup_error_raised_out_of_a_delivery_has_its_case() -> None:
    """The errors a delivery raises name their case; the handler's own errors and `GivenUp`
    (raised by the entrance itself) name none."""
    assert case_of(LeaseHeld("m")) is Case.LEASE_HELD
    assert case_of(LeaseLost("m")) is Case.LEASE_LOST
    assert case_of(BudgetSpent("m")) is Case.BUDGET_SPENT
    assert case_of(StoreUnavailable("m")) is Case.STORE_UNAVAILABLE
    assert case_of(MissingEventId("m")) is Case.REFUSED_INPUT
    assert case_of(GivenUp("m")) is None
    assert case_of(ValueError("m")) is None
