"""An instance imports the function it serves and what that function needs, nothing more.

Each check runs in a fresh interpreter that loads main.py as functions-framework does (a file
spec, `FUNCTION_TARGET` set, as on the platform and in the Functions emulator), so nothing this
test process imported counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "main.py"

LOADED_ON_USE = (
    "dedup.aio",
    "dedup.cli",
    "dedup.http",
    "dedup.outbox",
    "dedup.tasks",
    "dedup.testing",
    "opentelemetry.sdk",
)
"""What `import dedup` and an event function leave unloaded until it is used: the async
client's runner, the HTTP and task wrappers, the outbox, the test helpers, the telemetry SDK
and the CLI (click
and rich come with firebase-functions, which every function imports)."""

SETTINGS = {
    "WEBHOOK_ROUTES": '{"default": "http://127.0.0.1:9/webhooks"}',
    "NOTIFY_URL": "http://127.0.0.1:9/notify",
    "SEARCH_INDEX_URL": "http://127.0.0.1:9/search",
    "DIGEST_URL": "http://127.0.0.1:9/digest",
    "CHAT_WEBHOOK_URL": "http://127.0.0.1:9/chat",
    "PAYMENTS_URL": "http://127.0.0.1:9/payments",
    "RECEIPTS_URL": "http://127.0.0.1:9/receipts",
}
"""Valid settings for every function's start-up check (which runs: the target is served)."""

EVENT_FUNCTIONS = ("forward_webhook", "send_post_notification", "sync_published_count")
"""Functions that use none of `LOADED_ON_USE`."""

_LOAD_MAIN = (
    "import importlib.util, json, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "spec = importlib.util.spec_from_file_location('main', sys.argv[2])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules['main'] = module\n"
    "spec.loader.exec_module(module)\n"
    "print(json.dumps({'modules': sorted(sys.modules), 'functions': module.FUNCTIONS}))\n"
)


def _declared_functions() -> dict[str, str]:
    """main.py's `FUNCTIONS` (function name -> module), read without a target."""
    return dict(_load_main(None)["functions"])


def _load_main(target: str | None) -> dict[str, Any]:
    """Load main.py in a fresh interpreter serving `target`: its modules and `FUNCTIONS`."""
    env = {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"} | SETTINGS
    if target is not None:
        env["FUNCTION_TARGET"] = target
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_MAIN, str(ROOT), str(MAIN)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


FUNCTIONS = _declared_functions()


@pytest.mark.parametrize("target", sorted(FUNCTIONS))
def test_an_instance_imports_its_function_and_no_sibling(target: str) -> None:
    """With FUNCTION_TARGET set, main.py loads that function's module (its start-up check is
    declared there) and no other function's module."""
    modules = list(_load_main(target)["modules"])
    own = FUNCTIONS[target]
    assert own in modules
    siblings = tuple(sorted(set(FUNCTIONS.values()) - {own}))
    assert _loaded(modules, siblings) == []


@pytest.mark.parametrize("target", EVENT_FUNCTIONS)
def test_an_event_function_loads_no_async_http_task_telemetry_sdk_or_cli_module(
    target: str,
) -> None:
    """The instance of an event function never loads what only other functions use."""
    modules = list(_load_main(target)["modules"])
    assert _loaded(modules, LOADED_ON_USE) == []


def test_import_dedup_loads_what_is_used_and_every_public_name_still_resolves() -> None:
    """`import dedup` leaves `LOADED_ON_USE` unloaded; each name of `dedup.__all__` is there
    on access (the async ones import dedup.aio then)."""
    code = (
        "import json, sys\n"
        "import dedup\n"
        "before = sorted(sys.modules)\n"
        "names = {n: type(getattr(dedup, n)).__name__ for n in dedup.__all__}\n"
        "from dedup import AsyncDeduplicator\n"
        "import dedup.aio\n"
        "print(json.dumps({'before': before, 'after': sorted(sys.modules), 'names': names,\n"
        "                  'same': AsyncDeduplicator is dedup.aio.AsyncDeduplicator,\n"
        "                  'dir': sorted(set(dedup.__all__) - set(dir(dedup)))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert _loaded(found["before"], LOADED_ON_USE) == []
    assert "dedup.aio" in found["after"]
    assert found["same"] is True
    assert found["dir"] == []


def test_every_function_is_listed_and_found_by_both_lookups() -> None:
    """`__all__` is every function; firebase-functions' discovery (every function attribute
    of the module) and functions-framework's `--target` (an attribute lookup) find each one."""
    code = (
        "import inspect, json, sys\n"
        "sys.path.insert(0, '.')\n"
        "from firebase_functions.private.serving import get_functions\n"
        "found = sorted(get_functions())\n"
        "import main\n"
        "endpoints = {n: getattr(main, n).__firebase_endpoint__.entryPoint for n in main.__all__}\n"
        "print(json.dumps({'found': found, 'all': main.__all__, 'endpoints': endpoints,\n"
        "                  'alias': main.index_post is main.indexPost}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert sorted(found["all"]) == sorted(FUNCTIONS)
    assert found["found"] == sorted(FUNCTIONS)
    assert found["endpoints"] == {name: name for name in FUNCTIONS}
    assert found["alias"] is True


def test_the_served_functions_start_up_check_still_runs() -> None:
    """The check is declared in the function's module, which main.py loads for its target: a
    bad setting of the served function stops the instance at start-up."""
    env = {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"} | SETTINGS
    env |= {"FUNCTION_TARGET": "indexPost", "SEARCH_INDEX_URL": "not a url"}
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_MAIN, str(ROOT), str(MAIN)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "ConfigError: SEARCH_INDEX_URL" in done.stderr
