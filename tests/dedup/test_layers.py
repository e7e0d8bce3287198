"""The shape of the `dedup` package: how deep its imports go, and where it may touch private
parts of google-cloud-firestore.

Floors are counted over the imports of `dedup`'s own modules that run (module-level and
function-level, outside `if TYPE_CHECKING:`): a module importing nothing of `dedup` is floor 1,
any other sits one floor above the highest module it imports. Importing a submodule is not
counted as importing its package.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dedup"
MAX_FLOORS = 10
INTERNALS = "firestore_internals.py"
"""The one module allowed to read private attributes of google-cloud-firestore."""

FORBIDDEN = (
    "grpc_channel",
    "unary_unary",
    ".pb()",
    "firestore_v1._helpers",
    "google.cloud._helpers",
)
"""Hand-built protobuf messages and raw channel calls: none anywhere in `dedup`."""

PRIVATE_FIRESTORE = re.compile(
    r"\._(write_pbs|document_path|firestore_api|rpc_metadata|database_string|database|"
    r"credentials|client|options_protobuf|clean_up|pb)\b"
)
"""Private attributes of google-cloud-firestore's clients, references, batches and
transactions (read on an object other than `self`)."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def _absolute(name: str, module: str, level: int, is_package: bool) -> str:
    if not level:
        return name
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


@cache
def imports_of(module: str) -> frozenset[str]:
    """The `dedup` modules that `module` imports when it runs."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", module, node.level, path.name == "__init__.py")
            names = [f"{base}.{alias.name}" for alias in node.names]
            found.update(name for name in names if name in MODULES)
            if base in MODULES and any(name not in MODULES for name in names):
                found.add(base)
    found.discard(module)
    return frozenset(found)


def circle_from(module: str, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """An import circle reachable from `module`, or None."""
    if module in path:
        return (*path[path.index(module) :], module)
    for imported in sorted(imports_of(module)):
        circle = circle_from(imported, (*path, module))
        if circle is not None:
            return circle
    return None


@cache
def floor(module: str) -> tuple[int, tuple[str, ...]]:
    """The floor of `module`, with the longest chain of imports under it."""
    below = [floor(imported) for imported in imports_of(module)]
    if not below:
        return 1, (module,)
    height, chain = max(below)
    return height + 1, (module, *chain)


def test_dedup_has_no_import_circle() -> None:
    """No module imports, directly or not, a module that imports it back."""
    circles = [circle for module in MODULES if (circle := circle_from(module)) is not None]
    assert circles == []


def test_dedup_stands_on_at_most_ten_floors() -> None:
    """The longest chain of imports is at most `MAX_FLOORS` modules long."""
    height, chain = max(floor(module) for module in MODULES)
    assert height <= MAX_FLOORS, " -> ".join(chain)


def test_the_floor_count_can_fail() -> None:
    """The counter sees a chain: the HTTP package stands on the core, which stands on more."""
    assert floor("dedup.http")[0] > floor("dedup.core")[0] > floor("dedup.errors")[0] == 1
    assert "dedup.core" in floor("dedup.http")[1]


def test_no_hand_built_messages_or_channel_calls() -> None:
    """Record writes go through the library's public API: nothing builds protobuf messages or
    calls the gRPC channel itself."""
    found = [
        f"{path.name}: {word}"
        for path in MODULES.values()
        for word in FORBIDDEN
        if word in path.read_text()
    ]
    assert found == []


def test_private_firestore_attributes_only_in_their_module() -> None:
    """Only `dedup.firestore_internals` reads google-cloud-firestore's private attributes."""
    found = sorted(
        f"{path.relative_to(PACKAGE)}: {match.group(0)}"
        for path in MODULES.values()
        if path.name != INTERNALS
        for line in path.read_text().splitlines()
        if not line.lstrip().startswith("#")
        for match in PRIVATE_FIRESTORE.finditer(line.replace("self._", "self."))
    )
    assert found == []
    assert PRIVATE_FIRESTORE.search((PACKAGE / INTERNALS).read_text())


def test_no_private_module_of_google_cloud_is_imported() -> None:
    """No module of `dedup` imports a private module of google-cloud (`_helpers` and the like),
    however the import is spelled."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [
                f"{module}: {name}"
                for name in names
                if name.startswith("google.") and any(p.startswith("_") for p in name.split("."))
            ]
    assert found == []
