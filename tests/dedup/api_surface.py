"""The public API of dedup's public modules as JSON-able data (`surface`), and whether one
such description still serves code written against another (`incompatibilities`).

`tests/dedup/public_api.json` holds the surface as released; regenerate it only for an
intended, documented change: `python -m tests.dedup.api_surface > tests/dedup/public_api.json`.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
from typing import Any

MODULES = (
    "dedup",
    "dedup.http",
    "dedup.tasks",
    "dedup.outbox",
    "dedup.aio",
    "dedup.testing",
    "dedup.send",
)


_FOREIGN = ("typing", "collections", "dataclasses", "enum", "abc", "builtins")


def public_names(module: Any) -> list[str]:
    """`__all__`, else the names the module defines (classes, functions, aliases) or holds as
    plain values (constants, registries), without imports of other packages' tools."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or name in ("annotations", "logger") or inspect.ismodule(value):
            continue
        home = getattr(value, "__module__", None)
        if isinstance(value, type) or inspect.isfunction(value):
            if home is not None and home.startswith(module.__name__):
                found.append(name)
        elif home is None or (
            home.split(".")[0] not in _FOREIGN and (home.startswith("dedup") or not callable(value))
        ):
            found.append(name)
    return sorted(found)


def parameters(obj: Any) -> list[list[Any]] | None:
    """Each parameter's [name, kind, repr of its default or None]."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [
        [p.name, p.kind.name, None if p.default is inspect.Parameter.empty else _shown(p.default)]
        for p in sig.parameters.values()
    ]


def _shown(default: Any) -> str:
    """A default as text that does not change between processes (no addresses)."""
    if callable(default) and hasattr(default, "__qualname__"):
        return f"<{default.__module__}.{default.__qualname__}>"
    return repr(default)


def describe(obj: Any) -> dict[str, Any]:
    """What code may rely on: an enum's members, a class's constructor and public members,
    a function's parameters; a value's existence."""
    if isinstance(obj, type):
        if issubclass(obj, enum.Enum):
            return {"kind": "enum", "members": sorted(m.name for m in obj)}
        members: dict[str, Any] = {}
        # A member a base class of the library defines serves callers as well as the class's
        # own (the most derived definition wins).
        own = [c for c in reversed(obj.__mro__) if c.__module__.startswith("dedup")]
        for name, value in {k: v for c in own for k, v in vars(c).items()}.items():
            if name.startswith("_"):
                continue
            if isinstance(value, property | functools.cached_property):
                members[name] = "property"  # a cached one reads the same to its callers
            elif inspect.isfunction(value) or isinstance(
                value, classmethod | staticmethod | functools.partial
            ):
                members[name] = parameters(getattr(obj, name))
        return {"kind": "class", "init": parameters(obj), "members": members}
    if inspect.isfunction(obj):
        return {"kind": "function", "parameters": parameters(obj)}
    return {"kind": "value"}


def surface() -> dict[str, dict[str, Any]]:
    """Every public name of every public module, described."""
    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        out[name] = {n: describe(getattr(module, n)) for n in public_names(module)}
    return out


Params = list[list[Any]] | None


def _params_break(old: Params, new: Params) -> str | None:
    """Why a call written for `old` parameters may fail with `new` ones (None: it cannot)."""
    if old is None or new is None:
        return None if old == new else "signature changed"
    by_name = {p[0]: p for p in new}
    positional = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    for index, (name, kind, default) in enumerate(old):
        if kind in positional and (index >= len(new) or new[index][:2] != [name, kind]):
            return f"positional parameter {name} moved or renamed"
        found = by_name.get(name)
        if found is None:
            return f"parameter {name} removed"
        if found[1] != kind and not (kind == "KEYWORD_ONLY" and found[1] in positional):
            return f"parameter {name} changed kind {kind} -> {found[1]}"
        if default is not None and found[2] != default:
            return f"parameter {name} default {default} -> {found[2]}"
    known = {p[0] for p in old}
    for name, kind, default in new:
        if name not in known and default is None and kind not in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            return f"new required parameter {name}"
    return None


def incompatibilities(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What code written against the `old` surface would find missing or changed in `new`."""
    problems = []
    for module, names in old.items():
        for name, was in names.items():
            where = f"{module}.{name}"
            now = new.get(module, {}).get(name)
            if now is None:
                problems.append(f"{where} is gone")
                continue
            if was["kind"] != now["kind"]:
                problems.append(f"{where} was a {was['kind']}, is a {now['kind']}")
            elif was["kind"] == "enum":
                missing = set(was["members"]) - set(now["members"])
                if missing:
                    problems.append(f"{where} lost members {sorted(missing)}")
            elif was["kind"] == "function":
                why = _params_break(was["parameters"], now["parameters"])
                if why:
                    problems.append(f"{where}: {why}")
            elif was["kind"] == "class":
                why = _params_break(was["init"], now["init"])
                if why:
                    problems.append(f"{where}(): {why}")
                for member, shape in was["members"].items():
                    if member not in now["members"]:
                        problems.append(f"{where}.{member} is gone")
                    elif shape == "property" or now["members"][member] == "property":
                        if shape != now["members"][member]:
                            problems.append(f"{where}.{member} changed between method and property")
                    else:
                        why = _params_break(shape, now["members"][member])
                        if why:
                            problems.append(f"{where}.{member}: {why}")
    return problems


if __name__ == "__main__":
    import json

    print(json.dumps(surface(), indent=1, sort_keys=True))
