"""docs/guarantees.md says what dedup promises, and each promise names the test that proves it:
every row of every table on the page names at least one test as `tests/<path>.py::<test>`
(`::<test>` alone names another test of the file named before it in the row), and each named
test exists. The tests are found by reading the files with `ast`, as pytest would collect them
(`test*` functions, `Test*` classes' `test*` methods); nothing is run, so this is a unit test."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guarantees.md"

NAMED = re.compile(r"`(tests/[\w/]+\.py)?::([\w:]+)(?:\[[^\]`]*\])?`")
"""A named test in a cell: `tests/<path>.py::<name>`, or `::<name>` under the last file named."""
FILE = re.compile(r"`(tests/[\w/]+\.py)")
"""Any test file named on the page, with or without a test."""


def tables(text: str) -> list[list[str]]:
    """The page's tables, each as its lines (header, separator, rows), in order."""
    found: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    return found


def named_tests(row: str) -> list[str]:
    """The node ids a row names, `::name` completed with the file named before it."""
    ids: list[str] = []
    file: str | None = None
    for match in NAMED.finditer(row):
        file = match.group(1) or file
        assert file is not None, f"`::{match.group(2)}` names no file before it in: {row[:120]}"
        ids.append(f"{file}::{match.group(2)}")
    return ids


@cache
def collected(path: str) -> frozenset[str]:
    """The node ids pytest would collect from the test file at `path` (parameters left out)."""
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    ids: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            ids.add(f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            ids.update(
                f"{path}::{node.name}::{method.name}"
                for method in node.body
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
                and method.name.startswith("test")
            )
    return frozenset(ids)


def test_every_table_has_its_header() -> None:
    """A table split by a blank line renders its second half without a header: each block of
    table lines starts with a header and its separator."""
    headless = [
        lines[0][:100]
        for lines in tables(PAGE.read_text())
        if len(lines) < 2 or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[1])
    ]
    assert headless == [], "tables without a header row (a blank line splits a table?)"


def test_every_row_names_the_test_that_proves_it() -> None:
    rows = [row for lines in tables(PAGE.read_text()) for row in lines[2:]]
    assert len(rows) > 40, "the page's tables were not found"
    unproven = [row[:100] for row in rows if not named_tests(row)]
    assert unproven == [], "rows that name no test as `tests/<path>.py::<test>`"


def test_each_named_test_exists() -> None:
    text = PAGE.read_text()
    missing_files = sorted({f for f in FILE.findall(text) if not (ROOT / f).is_file()})
    assert missing_files == [], "test files named on the page that do not exist"
    named = [node for lines in tables(text) for row in lines[2:] for node in named_tests(row)]
    missing = [node for node in named if node not in collected(node.split("::", 1)[0])]
    assert missing == [], "tests named on the page that do not exist"


def test_the_check_reads_names_as_pytest_does(tmp_path: Path) -> None:
    """The parsing itself: shorthand names follow the file before them; classes count; a name
    that is not a test does not."""
    row = "| x | `tests/a.py::test_one`, `::test_two[p]`, `tests/b.py::TestC::test_three` |"
    assert named_tests(row) == [
        "tests/a.py::test_one",
        "tests/a.py::test_two",
        "tests/b.py::TestC::test_three",
    ]
    ids = collected("tests/docs/test_guarantees.py")
    assert "tests/docs/test_guarantees.py::test_each_named_test_exists" in ids
    assert "tests/docs/test_guarantees.py::named_tests" not in ids
