"""The functions `main.py` exports, each with the endpoint that deploys it, or an error naming it.

Both deploy paths, the emulators and the deploy tests read the functions from here, so none of
them drops an exported function silently. An exported name is deployable when it carries

* a firebase-functions endpoint (`__firebase_endpoint__`, set by the SDK's decorators): both
  deploy paths and the Functions emulator serve it with the sync server;
* or an `asgi_function` endpoint (`dedup.aio.asgi_function`): an async function, which only
  `make deploy-gcloud` deploys, served by functions-framework's ASGI server.

Anything else main.py exports (an `async def` that declares no trigger, a plain function, an
object) is a `DeclarationError` naming it; so is a function under `@trigger_once` that
cannot be deduplicated (`dedup.kinds.declaration_problem`: a blocking `identity_fn` function,
one that is not an event, a schedule in the App Engine form). The exported names are
`main.__all__` (without one, every module-level function that is `async def`), plus, as
firebase-functions finds them, every module-level function that carries an endpoint.

    venv/bin/python -m tools.exports --refuse-asgi   # exit 2, one line per refused function

(`tools/emulators.py` runs it before a Functions emulator starts: the emulator serves sync
functions only.)
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup.cli.discovery import FIREBASE_ENDPOINT, inside, sdk_functions
from dedup.cli.discovery import load_main as load_sdk_main
from dedup.errors import ConfigError
from dedup.kinds import USES_DEDUP, declaration_problem
from functions.asgi import ASGI_ENDPOINT

ROOT = Path(__file__).resolve().parent.parent


class DeclarationError(Exception):
    """main.py exports something no deploy path can deploy; the message names it."""


@dataclass(frozen=True)
class Exported:
    """One function main.py exports: its deployed name, its SDK endpoint, and whether it
    needs the ASGI server (an `asgi_function`)."""

    name: str
    endpoint: Any
    asgi: bool
    function: Any
    """The exported object itself (firebase-functions also reads its `__required_apis`)."""


def load_main(source: Path = ROOT) -> Any:
    """Import `source`/main.py as the SDK does (a fresh module named `main`, `source` first on
    sys.path), for no function in particular: an inherited FUNCTION_TARGET (a shell, a test
    that served a function) would run that function's start-up checks."""
    target = os.environ.pop("FUNCTION_TARGET", None)
    try:
        with inside(source):
            module = load_sdk_main(source)
            # main.py imports a function's module on first access: import each exported one
            # now, so an error its declaration raises is reported as main.py's, like any other.
            for name in getattr(module, "__all__", ()):
                getattr(module, name, None)
        return module
    except FileNotFoundError:
        raise DeclarationError(f"no main.py in {source}") from None
    except ConfigError as exc:  # e.g. an asgi_function given a trigger it cannot have
        raise DeclarationError(f"main.py: {exc}") from None
    finally:
        if target is not None:
            os.environ["FUNCTION_TARGET"] = target


def _exported_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in inspect.getmembers(module, inspect.isfunction)
        if hasattr(value, FIREBASE_ENDPOINT)
        or hasattr(value, ASGI_ENDPOINT)
        or inspect.iscoroutinefunction(value)
    ]


def classify(name: str, value: Any) -> Exported:
    """The deployable function main.py exports as `name`; `DeclarationError` naming it when no
    deploy path could deploy it."""
    if hasattr(value, ASGI_ENDPOINT):
        return Exported(name, getattr(value, ASGI_ENDPOINT), asgi=True, function=value)
    if hasattr(value, FIREBASE_ENDPOINT):
        if inspect.iscoroutinefunction(value):
            raise DeclarationError(
                f"main.py exports {name}, an async function under a firebase-functions "
                "decorator, which only calls sync handlers: declare its trigger with "
                "dedup.aio.asgi_function(...) instead (docs/async.md)"
            )
        endpoint = getattr(value, FIREBASE_ENDPOINT)
        if hasattr(value, USES_DEDUP) and (problem := declaration_problem(name, endpoint)):
            raise DeclarationError(f"main.py exports {problem}")
        return Exported(name, endpoint, asgi=False, function=value)
    if inspect.iscoroutinefunction(value):
        raise DeclarationError(
            f"main.py exports {name}, an async function that declares no trigger: decorate "
            "it with @asgi_function(<a firebase-functions trigger decorator>) from "
            "dedup.aio (docs/async.md)"
        )
    raise DeclarationError(
        f"main.py exports {name}, which declares no trigger (no firebase-functions decorator, "
        "no dedup.aio.asgi_function): no deploy path could deploy it"
    )


def exported_functions(source: Path = ROOT) -> list[Exported]:
    """Every function `source`/main.py exports, in its order; `DeclarationError` for the
    first one that no deploy path can deploy, or a name exported twice."""
    module = load_main(source)
    functions: dict[str, Exported] = {}
    for name in _exported_names(module):
        if not hasattr(module, name):
            raise DeclarationError(f"main.py lists {name} in __all__ but does not define it")
        exported = classify(name, getattr(module, name))
        deployed = exported.endpoint.entryPoint or name
        if deployed in functions:
            raise DeclarationError(f"main.py exports the function {deployed} twice")
        functions[deployed] = exported
    for deployed, value in sdk_functions(module).items():  # as the SDK finds them
        if deployed not in functions:
            functions[deployed] = Exported(
                deployed, getattr(value, FIREBASE_ENDPOINT), False, value
            )
    for _, value in inspect.getmembers(module, inspect.isfunction):  # and the ASGI functions
        endpoint = getattr(value, ASGI_ENDPOINT, None)
        if endpoint is not None and endpoint.entryPoint not in functions:
            functions[endpoint.entryPoint] = Exported(endpoint.entryPoint, endpoint, True, value)
    return list(functions.values())


def asgi_refusal(functions: Sequence[Exported], path: str) -> str | None:
    """One line per async function, saying that `path` cannot serve it and what to use."""
    lines = [
        f"{f.name} is an async function: {path} serves sync functions only; deploy it with "
        "`make deploy-gcloud` (functions-framework's ASGI server) and test it with "
        "`functions-framework --asgi` (docs/async.md)"
        for f in functions
        if f.asgi
    ]
    return "\n".join(lines) or None


def main(argv: Sequence[str]) -> int:
    """Entry point: `--refuse-asgi` exits 2 naming each async function (see the docstring)."""
    try:
        functions = exported_functions()
    except DeclarationError as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if "--refuse-asgi" in argv:
        refusal = asgi_refusal(functions, "the Functions emulator")
        if refusal:
            print("\n".join(f"error: {line}" for line in refusal.splitlines()), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
