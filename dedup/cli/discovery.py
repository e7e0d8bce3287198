"""The one discovery of a project's functions: main.py imported as firebase-functions imports
it, and the functions its decorators mark, found as its own discovery finds them.

`dedup manifest` runs this file as a script in a child process of the same Python (SOURCE_DIR
its working directory): nothing main.py declares stays in the caller's process, and main.py's
own `dedup` (a vendored copy first on `sys.path`) is the one it imports, since the script
imports nothing of the package. The template's deploy tools (`tools/exports`) import
`load_main` and `sdk_functions` in process.

Private attributes of firebase-functions (checked with 0.5.0 and 0.6.0), used only here and in
the template's `tools/deploy`: the `__firebase_endpoint__` each decorated function carries
(`sdk_functions` finds functions by it, as `firebase_functions.private.serving.get_functions`
does), and `firebase_functions.private.serving.functions_as_yaml` (the SDK's manifest, in
`main`).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

FIREBASE_ENDPOINT = "__firebase_endpoint__"
"""The attribute firebase-functions' decorators set on a function: its endpoint."""


@contextmanager
def inside(source: Path) -> Iterator[None]:
    """`source` the working directory and first on `sys.path`, as while the Firebase CLI's
    discovery imports main.py and reads its functions (a function imported on first access
    imports then)."""
    cwd = Path.cwd()
    sys.path.insert(0, str(source))
    os.chdir(source)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path.remove(str(source))


def load_main(source: Path) -> ModuleType:
    """`source`/main.py imported as a fresh module named `main` (call it `inside(source)`);
    `FileNotFoundError` without one."""
    spec = importlib.util.spec_from_file_location("main", source / "main.py")
    if spec is None or spec.loader is None or not (source / "main.py").is_file():
        raise FileNotFoundError(f"no main.py in {source}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sdk_functions(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """The module-level functions of `module` a firebase-functions decorator marks, by their
    endpoint's entry point (the deployed name)."""
    return {
        getattr(function, FIREBASE_ENDPOINT).entryPoint: function
        for _, function in inspect.getmembers(module, inspect.isfunction)
        if hasattr(function, FIREBASE_ENDPOINT)
    }


def main(argv: Sequence[str]) -> int:
    """`python discovery.py OUT MARKER`, run in SOURCE_DIR: write to OUT, as JSON, the SDK's
    manifest of main.py (`manifest`), the deployed functions carrying the attribute MARKER
    (`dedup`), and the functions carrying MARKER that no firebase-functions decorator wraps
    (`undeployed`: they would not deploy)."""
    from firebase_functions.private.serving import functions_as_yaml

    out, marker = argv
    with inside(Path.cwd()):
        module = load_main(Path.cwd())
        functions = sdk_functions(module)
        members = inspect.getmembers(module, inspect.isfunction)
        manifest = functions_as_yaml(functions)
    found = {
        "manifest": manifest,
        "dedup": sorted(name for name, f in functions.items() if getattr(f, marker, None)),
        "undeployed": sorted(
            name
            for name, f in members
            if getattr(f, marker, None) and not hasattr(f, FIREBASE_ENDPOINT)
        ),
    }
    Path(out).write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    # Run as a script: its own folder (dedup/cli, whose `dotenv` would shadow python-dotenv)
    # is not the project's, and leaves sys.path before main.py imports anything.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.exit(main(sys.argv[1:]))
