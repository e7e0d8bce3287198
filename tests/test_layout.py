"""The layout of the project's own files: no module over `MAX_LINES` lines in `dedup/`, `tools/`
and `bench/`, and no import circle between files anywhere in the house.

Each rule has an allow-list of what breaks it today. A list may only shrink: a file or circle
it names that no longer breaks the rule fails the test until it is taken off the list.

Imports are read with `ast` from every file, at any depth (module level, inside functions, and
under `if TYPE_CHECKING:`: an import for types only is an import all the same). `import a.b` and
`from a import b` (a module `a.b`, or a name of `a`) point at the file of `a.b` or `a`; relative
imports are resolved from the importing file's package. Importing a submodule is not counted as
importing its package, so a package whose `__init__` re-exports its modules is no circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MAX_LINES = 400
SIZED = ("dedup", "tools", "bench")
"""The folders whose modules must each stay within `MAX_LINES` lines."""
NOT_PROJECT = ("tools/firebase",)
"""Folders of the tree that hold other projects' files (the Firebase CLI's node_modules)."""

OVER_MAX_LINES: set[str] = set()
"""The modules still over `MAX_LINES` lines; each comes off when it is split."""

IMPORTED = ("dedup", "functions", "tools", "demo", "bench", "soak", "sim", "main.py")
"""Where an import circle between files is refused."""

KNOWN_CIRCLES: set[frozenset[str]] = set()
"""The import circles of today, each as the set of files it runs through (a strongly
connected part of the import graph); each comes off when it is broken."""


def _python_files(tops: tuple[str, ...], root: Path = ROOT) -> list[Path]:
    found: list[Path] = []
    for top in tops:
        path = root / top
        found.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return [
        path
        for path in found
        if not any(path.relative_to(root).as_posix().startswith(f"{skip}/") for skip in NOT_PROJECT)
    ]


def _name(path: Path, root: Path = ROOT) -> str:
    """The module name of a project file (`dedup/testing/__init__.py`: `dedup.testing`)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(path: Path, modules: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The project modules (`modules`, by name) that `path` imports."""
    name = _name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    found.add(f"{source}.{alias.name}")
                elif source in modules:
                    found.add(source)
    found.discard(name)
    return found


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected parts of `graph` with more than one module (Tarjan's algorithm,
    iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.add(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        circles.append(part)
    return circles


def import_circles() -> set[frozenset[str]]:
    """Every import circle between the project's files, each as the set of its files."""
    files = {_name(path): path for path in _python_files(IMPORTED)}
    graph = {name: _imported(path, files) for name, path in files.items()}
    return {
        frozenset(files[name].relative_to(ROOT).as_posix() for name in part)
        for part in _circles(graph)
    }


def test_no_module_is_over_400_lines() -> None:
    """No `.py` file in dedup/, tools/ or bench/ is over 400 lines, except those still listed
    in `OVER_MAX_LINES`, and each listed file is still over (else it comes off the list)."""
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in _python_files(SIZED)
    }
    over = {path for path, lines in sizes.items() if lines > MAX_LINES}
    assert {f"{path}: {sizes[path]} lines" for path in over - OVER_MAX_LINES} == set(), (
        f"split these modules by job, each at most {MAX_LINES} lines"
    )
    assert OVER_MAX_LINES - over == set(), "no longer over the limit: take them off OVER_MAX_LINES"


def test_no_import_circle_between_files() -> None:
    """No two files of dedup/, functions/, tools/, demo/, bench/, soak/, sim/ and main.py import
    each other, directly or in a loop, except the circles still listed in `KNOWN_CIRCLES`,
    and each listed circle still exists (else it comes off the list)."""
    circles = import_circles()
    assert {tuple(sorted(c)) for c in circles - KNOWN_CIRCLES} == set(), (
        "break these circles: move what both sides need into a module both import"
    )
    assert {tuple(sorted(c)) for c in KNOWN_CIRCLES - circles} == set(), (
        "no longer a circle: take them off KNOWN_CIRCLES"
    )


def test_the_circle_finder_sees_direct_indirect_and_relative_circles(tmp_path: Path) -> None:
    """A circle of two files, one of three, and one made by a relative import are each found;
    a package re-exporting its modules is not a circle; an import for types only counts."""
    graph = {
        "a": {"b"},
        "b": {"a"},
        "c": {"d"},
        "d": {"e"},
        "e": {"c", "a"},
        "pkg": {"pkg.x"},
        "pkg.x": set(),
    }
    assert sorted(map(sorted, _circles(graph))) == [["a", "b"], ["c", "d", "e"]]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .x import thing\n")
    (package / "x.py").write_text("from . import y\n")
    (package / "y.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import pkg\n\n"
        "def f():\n    from pkg import x\n"
    )
    files = {_name(p, tmp_path): p for p in _python_files(("pkg",), tmp_path)}
    graph = {name: _imported(path, files, tmp_path) for name, path in files.items()}
    assert graph == {"pkg": {"pkg.x"}, "pkg.x": {"pkg.y"}, "pkg.y": {"pkg", "pkg.x"}}
    assert sorted(map(sorted, _circles(graph))) == [["pkg", "pkg.x", "pkg.y"]]
