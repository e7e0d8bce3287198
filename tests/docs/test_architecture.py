"""docs/architecture.md's reading order of the kernel states how much there is to read: the
figures it gives are the modules' real line counts, within a tenth, and the path of one
delivery stays about 2,000 lines of code. Its table of owners gives each module only names that
module defines, and the kernel package's docstring names every kernel module and no other."""

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


def top_level(path: Path) -> dict[str, ast.AST]:
    """The names a module defines at its top level (classes, functions, assignments)."""
    names: dict[str, ast.AST] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def has_member(names: dict[str, ast.AST], owner: str, member: str) -> bool:
    """`owner` is a class of `names` that defines `member`, itself or through a base class
    of the same module."""
    node = names.get(owner)
    if not isinstance(node, ast.ClassDef):
        return False
    defined = {
        n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    } | {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
         if isinstance(t, ast.Name)}  # fmt: skip
    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
    return member in defined or any(has_member(names, base, member) for base in bases)


def module_path(name: str) -> Path | None:
    """The file of `dedup.<name>` (a module or a package), None if there is none."""
    base = ROOT / "dedup" / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def test_who_owns_what_names_what_its_modules_define() -> None:
    """Each name the "owns" column of "Who owns what" gives (`KeyTurns`, `RecordStore.turn`,
    `mark_dead`, `SEVERITY`...) is defined by a module of its row: a row that says a module
    owns what lives elsewhere fails, so the table moves when the code does."""
    section = PAGE.read_text().split("## Who owns what", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10, "the table of owners was not found"
    wrong = []
    for row in rows:
        modules_cell, owns = row.split("|")[1:3]
        paths = [module_path(m) for m in re.findall(r"`([\w.]+)`", modules_cell)]
        assert all(paths), f"a module of this row does not exist: {modules_cell}"
        defined = [top_level(p) for p in paths if p is not None]
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", owns):
            if module_path(name) is not None:
                continue  # a module named in passing
            owner, _, member = name.partition(".")
            found = any(
                (has_member(names, owner, member) if member else owner in names)
                for names in defined
            )
            if not found:
                wrong.append(f"{modules_cell.strip()}: {name}")
    assert wrong == [], "names the owners table gives to modules that do not define them"


def test_the_kernel_docstring_names_every_kernel_module_and_no_other() -> None:
    kernel = ROOT / "dedup" / "kernel"
    docstring = ast.get_docstring(ast.parse((kernel / "__init__.py").read_text())) or ""
    named = set(re.findall(r"`(\w+)`", docstring))
    modules = {p.stem for p in kernel.glob("*.py") if p.name != "__init__.py"}
    assert sorted(named - modules) == [], "names of modules the kernel does not have"
    assert sorted(modules - named) == [], "kernel modules its docstring does not name"
