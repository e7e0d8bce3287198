"""`make test`'s failure summary (`tools/test_runner.py`): a failing test of any of the four
runs is named again at the very end of the output, with the run it was in."""

from __future__ import annotations

import pytest

from tools.test_runner import failures, print_failures

REPORT = """\
tests/a.py ..F.                                      [100%]
=========================== short test summary info ============================
FAILED tests/a.py::test_three - AssertionError: assert 10 == 9
ERROR tests/b.py - ImportError: no module named x
========================= 1 failed, 3 passed in 1.00s ==========================
"""


def test_the_summary_names_each_failing_test_with_its_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = failures("the tests of Firestore alone", REPORT)
    found += failures("the shared emulators", "tests/c.py ....  [100%]\n4 passed\n")
    assert found == [
        "the tests of Firestore alone: FAILED tests/a.py::test_three - AssertionError: "
        "assert 10 == 9",
        "the tests of Firestore alone: ERROR tests/b.py - ImportError: no module named x",
    ]
    print_failures(found)
    out = capsys.readouterr().out
    assert out.rstrip().endswith(found[-1])
    assert "2 failing in all four runs" in out


def test_nothing_is_printed_when_every_run_passed(capsys: pytest.CaptureFixture[str]) -> None:
    print_failures([])
    assert capsys.readouterr().out == ""
