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
def imports_of(module: str, *, type_only_too: bool = False) -> frozenset[str]:
    """The `dedup` modules that `module` imports when it runs (and under `if TYPE_CHECKING:`
    too, with `type_only_too`)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    skipped = set() if type_only_too else _type_checking_nodes(tree)
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
    """An import circle reachable from `module`, type-only imports included, or None."""
    if module in path:
        return (*path[path.index(module) :], module)
    for imported in sorted(imports_of(module, type_only_too=True)):
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
    """No module imports, directly or not, a module that imports it back, not even for type
    annotations only."""
    circles = [circle for module in MODULES if (circle := circle_from(module)) is not None]
    assert circles == []


def test_dedup_stands_on_at_most_ten_floors() -> None:
    """The longest chain of imports is at most `MAX_FLOORS` modules long."""
    height, chain = max(floor(module) for module in MODULES)
    assert height <= MAX_FLOORS, " -> ".join(chain)


def test_the_floor_count_can_fail() -> None:
    """The counter sees a chain: the HTTP package stands on the core, which stands on more."""
    assert (
        floor("dedup.http")[0] > floor("dedup.kernel.front_door")[0] > floor("dedup.errors")[0] == 1
    )
    assert "dedup.kernel.front_door" in floor("dedup.http")[1]


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
    """Only `dedup.platform.firestore_internals` reads google-cloud-firestore's private
    attributes."""
    found = sorted(
        f"{path.relative_to(PACKAGE)}: {match.group(0)}"
        for path in MODULES.values()
        if path.name != INTERNALS
        for line in path.read_text().splitlines()
        if not line.lstrip().startswith("#")
        for match in PRIVATE_FIRESTORE.finditer(line.replace("self._", "self."))
    )
    assert found == []
    assert PRIVATE_FIRESTORE.search((PACKAGE / "platform" / INTERNALS).read_text())


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


LAYERS: dict[str, int] = {
    # 0, the ground: errors, the record's schema, the shims over other libraries, pure helpers
    "dedup.errors": 0,
    "dedup.environment": 0,
    "dedup.kernel.record": 0,
    "dedup.platform.strict_json": 0,
    "dedup.platform.document_ids": 0,
    "dedup.platform.firestore_sizes": 0,
    "dedup.platform.firestore_refusals": 0,
    "dedup.platform.firestore_values": 0,
    "dedup.kinds.base": 0,
    "dedup.platform.firestore_internals": 0,
    "dedup.platform.firebase_internals": 0,
    "dedup.platform.firebase_app": 0,
    "dedup.platform.propagation": 0,
    "dedup.kernel.handler_shape": 0,
    "dedup.kernel.flow_io": 0,
    "dedup.kernel": 0,
    "dedup.entrances": 0,
    "dedup.platform": 0,
    # 1, types and decisions: claims, record writes, the kinds of events
    "dedup.kernel.claims": 1,
    "dedup.kernel.store_errors": 1,
    "dedup.kernel.budget": 1,
    "dedup.kernel.transitions": 1,
    "dedup.kernel.room": 1,
    "dedup.kernel.delivery": 1,
    "dedup.aio.delivery": 1,
    "dedup.kinds": 1,
    "dedup.asgi": 1,
    "dedup.kernel.steps": 1,
    # 2, what a run stands on: the store, an instance's per-key turns, the settings, telemetry
    "dedup.kernel.store": 2,
    "dedup.kernel.turns": 2,
    "dedup.config": 2,
    "dedup.telemetry": 2,
    "dedup.logs": 2,
    # 3, the run of one delivery
    "dedup.kernel.run": 3,
    # 4, the flows
    "dedup.kernel.lease": 4,
    "dedup.kernel.give_back": 4,
    "dedup.kernel.atomic": 4,
    "dedup.kernel.ambiguity": 4,
    "dedup.kernel.step_writes": 4,
    # 5, the front doors
    "dedup.kernel.front_door": 5,
    "dedup.aio.front_door": 5,
    "dedup.aio": 5,
    # 6, the entrances
    "dedup.entrances.triggers": 6,
    "dedup.entrances.gate": 6,
    "dedup.entrances.answers": 6,
    "dedup.entrances.answer_table": 6,
    "dedup.entrances.suffixes": 6,
    "dedup.tasks": 6,
    "dedup.outbox": 6,
    "dedup.send": 6,
    "dedup.http": 6,
    # 7, the tools and the package's face
    "dedup.cli": 7,
    "dedup.testing": 7,
    "dedup": 7,
    "dedup.__main__": 7,
}
"""The layer of each module (the longest matching name wins: `dedup.kinds.pubsub` is in
`dedup.kinds`'s layer). docs/architecture.md explains them."""

UPWARD_IMPORTS: frozenset[tuple[str, str]] = frozenset()
"""Imports from a lower layer to a higher one still in the code: must shrink to empty."""


def layer_of(module: str) -> int:
    """The layer of `module`: its own entry, else its closest listed package's."""
    name = module
    while name not in LAYERS:
        if "." not in name:
            raise AssertionError(f"{module} has no layer: add it to LAYERS")
        name = name.rsplit(".", 1)[0]
    return LAYERS[name]


def test_imports_point_down() -> None:
    """No module imports a module of a higher layer (run-time imports; type-only ones aside),
    except the listed ones, which may only go away."""
    upward = {
        (module, imported)
        for module in MODULES
        for imported in imports_of(module)
        if layer_of(imported) > layer_of(module)
    }
    assert upward <= UPWARD_IMPORTS, sorted(upward - UPWARD_IMPORTS)
    gone = UPWARD_IMPORTS - upward
    assert not gone, f"no longer imported, remove from UPWARD_IMPORTS: {sorted(gone)}"


KERNEL_OUTSIDE_ITS_FOLDER = ("dedup.config", "dedup.telemetry")
"""Modules of the kernel's layers that import the kernel yet live at the package's top, where
their public paths are (docs/architecture.md, "The layers")."""


def test_the_kernels_modules_outside_its_folder_stand_strictly_between() -> None:
    """`dedup.config` and `dedup.telemetry` live outside `dedup/kernel/`, import it and are
    imported by it: each imports only modules of lower layers than its own, and every kernel
    module importing it sits on a higher layer, so the two folders make no circle of layers
    (not even an import sideways)."""
    sideways = sorted(
        (module, imported)
        for module in KERNEL_OUTSIDE_ITS_FOLDER
        for imported in imports_of(module)
        if layer_of(imported) >= layer_of(module)
    )
    assert sideways == []
    from_kernel = sorted(
        (module, imported)
        for module in MODULES
        if module.startswith("dedup.kernel")
        for imported in imports_of(module)
        if imported in KERNEL_OUTSIDE_ITS_FOLDER and layer_of(imported) >= layer_of(module)
    )
    assert from_kernel == []


def test_the_layer_check_can_fail() -> None:
    """The layers say what they should: the store sits under the run, the run under the flows,
    and a module of no layer is refused."""
    assert (
        layer_of("dedup.kernel.store")
        < layer_of("dedup.kernel.run")
        < layer_of("dedup.kernel.lease")
    )
    assert layer_of("dedup.kinds.pubsub") == layer_of("dedup.kinds")
    try:
        layer_of("elsewhere.module")
    except AssertionError:
        pass
    else:
        raise AssertionError("a module of no layer was given one")
