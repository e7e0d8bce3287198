"""docs/architecture.md's reading order of the kernel states how much there is to read: the
figures it gives are the modules' real line counts, within a tenth, and the path of one
delivery stays about 2,000 lines of code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
FIRST_PART_MOST = 2_200
"""The most lines of code the path of one delivery may hold: "about 2,000"."""


def code_lines(path: Path) -> tuple[int, int]:
    """(lines of code, all lines) of a module: code leaves out blank lines, comments and string
    statements (docstrings, attribute docstrings)."""
    source = path.read_text()
    prose: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            prose.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = source.splitlines()
    code = sum(
        1
        for number, line in enumerate(lines, 1)
        if line.strip() and not line.strip().startswith("#") and number not in prose
    )
    return code, len(lines)


def parts() -> list[tuple[str, list[Path]]]:
    """Each bold paragraph of the reading order with the modules listed under it."""
    section = PAGE.read_text().split("## Reading order of the kernel", 1)[1].split("\n## ", 1)[0]
    found = []
    for chunk in section.split("\n**")[1:]:
        modules = [ROOT / m for m in re.findall(r"`(dedup/[\w/]+\.py)`", chunk)]
        found.append((chunk, modules))
    return found


def stated(text: str) -> tuple[int, int]:
    """The "about N lines of code ... (M with docstrings)" of a part."""
    match = re.search(r"about ([\d,]+) lines of code[^(]*\(([\d,]+) with docstrings\)", text)
    assert match, f"no 'about N lines of code (M with docstrings)' in: {text[:120]}"
    return int(match.group(1).replace(",", "")), int(match.group(2).replace(",", ""))


def test_the_reading_order_states_true_line_counts() -> None:
    found = parts()
    assert len(found) == 2, "the reading order has two parts: the path of one delivery, then more"
    for text, modules in found:
        assert modules, f"no module listed in: {text[:80]}"
        code = sum(code_lines(m)[0] for m in modules)
        total = sum(code_lines(m)[1] for m in modules)
        says_code, says_total = stated(text)
        assert abs(says_code - code) <= code / 10, (text[:60], "code", says_code, code)
        assert abs(says_total - total) <= total / 10, (
            text[:60],
            "with docstrings",
            says_total,
            total,
        )


def test_the_path_of_one_delivery_is_about_two_thousand_lines() -> None:
    _, modules = parts()[0]
    code = sum(code_lines(m)[0] for m in modules)
    assert code <= FIRST_PART_MOST, f"{code} lines of code on the path of one delivery"
    kernel_modules = {p.name for p in modules}
    assert {"lease.py", "store.py", "claims.py", "front_door.py"} <= kernel_modules


def test_every_kernel_module_is_in_the_reading_order() -> None:
    listed = {m for _, modules in parts() for m in modules}
    kernel = {p for p in (ROOT / "dedup" / "kernel").glob("*.py") if p.name != "__init__.py"}
    assert sorted(p.name for p in kernel - listed) == []
