"""The one entrance of every trigger kind (`dedup.entrances.gate`), without emulators: what each
decorator checks at import and decoration, the deduplicator it resolves, the configuration
read once per process, and the record key in the configured layout."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dedup import (
    AsyncDeduplicator,
    ConfigError,
    DedupConfig,
    Deduplicator,
    DuplicateSuffix,
    InvalidSuffix,
    SuffixRegistry,
    dedup_key,
    trigger_once,
)
from dedup.entrances.gate import (
    EVENTS,
    process_config,
    record_key,
)
from dedup.http import idempotent_callable, idempotent_http
from dedup.tasks import task_once

Factory = Callable[..., Any]

SYNC_ONLY: list[tuple[str, Factory]] = [
    ("idempotent_http", idempotent_http),
    ("idempotent_callable", idempotent_callable),
    ("task_once", task_once),
]
EVERY_KIND: list[tuple[str, Factory]] = [("trigger_once", trigger_once), *SYNC_ONLY]


@pytest.mark.parametrize(("name", "factory"), SYNC_ONLY, ids=[n for n, _ in SYNC_ONLY])
def test_an_async_handler_is_refused_at_decoration_where_it_cannot_be_served(
    name: str, factory: Factory
) -> None:
    """An `async def` handler under a decorator whose platform calls it synchronously (its
    coroutine would never be awaited: every request a 500) is refused at decoration with a
    `ConfigError` naming the function and saying to write it with `def`; nothing is
    registered, so the fixed handler can take the suffix."""
    registry = SuffixRegistry()

    async def handler(*args: Any) -> None:  # pragma: no cover - refused
        raise AssertionError

    with pytest.raises(ConfigError) as refused:
        factory("asyncRefused", registry=registry)(handler)
    message = str(refused.value)
    assert f"{__name__}.{handler.__qualname__}" in message
    assert name in message
    assert "write it with `def`" in message
    assert registry.owner("asyncRefused") is None


def test_trigger_once_serves_both_kinds_of_handler() -> None:
    """`trigger_once` turns an `async def` handler into an `async def` function, a `def` one
    into a `def` one; a deduplicator of the other kind is refused at decoration."""
    registry = SuffixRegistry()

    async def later(event: Any, delivery: Any) -> None:  # pragma: no cover - not run
        raise AssertionError

    def now(event: Any, delivery: Any) -> None:  # pragma: no cover - not run
        raise AssertionError

    assert inspect.iscoroutinefunction(trigger_once("a1", registry=registry)(later))
    assert not inspect.iscoroutinefunction(trigger_once("s1", registry=registry)(now))
    with pytest.raises(ConfigError, match="AsyncDeduplicator"):
        trigger_once("a2", deduplicator=Deduplicator(), registry=registry)(later)
    with pytest.raises(ConfigError, match="needs a Deduplicator"):
        trigger_once("s2", deduplicator=AsyncDeduplicator(), registry=registry)(now)


@pytest.mark.parametrize(("name", "factory"), EVERY_KIND, ids=[n for n, _ in EVERY_KIND])
def test_every_kind_checks_its_arguments_the_same_way(name: str, factory: Factory) -> None:
    """At the factory call: a bad suffix (`InvalidSuffix`), both `config` and `deduplicator`
    (`ConfigError` naming the decorator), an unknown mode (`ConfigError`)."""
    with pytest.raises(InvalidSuffix):
        factory("has-dash")
    config = DedupConfig(on_payload_mismatch="raise", cache_size=0)
    with pytest.raises(ConfigError, match=f"pass either config or deduplicator to {name}"):
        factory("both", config=config, deduplicator=Deduplicator(config))
    with pytest.raises(ConfigError, match="mode 'sometimes'"):
        factory("badMode", mode="sometimes")


@pytest.mark.parametrize(("name", "factory"), EVERY_KIND, ids=[n for n, _ in EVERY_KIND])
def test_every_kind_registers_the_suffix_and_copies_the_name(name: str, factory: Factory) -> None:
    """Decorating registers the suffix in the one registry every kind shares (a second
    handler for it, of any kind, is `DuplicateSuffix`) and gives the wrapper the handler's
    name, qualname, module and doc, but not its signature."""
    registry = SuffixRegistry()

    def handler(first: Any, second: Any = None) -> None:
        """The handler's doc."""

    wrapped = factory("shared", registry=registry)(handler)
    assert (wrapped.__name__, wrapped.__qualname__, wrapped.__module__, wrapped.__doc__) == (
        handler.__name__,
        handler.__qualname__,
        handler.__module__,
        "The handler's doc.",
    )
    assert len(inspect.signature(wrapped).parameters) == 1
    assert registry.owner("shared") == f"{__name__}.{handler.__qualname__}"
    for _, other in EVERY_KIND:
        with pytest.raises(DuplicateSuffix):
            other("shared", registry=registry)(handler)


@pytest.mark.parametrize(
    ("name", "factory"),
    [("idempotent_http", idempotent_http), ("idempotent_callable", idempotent_callable)],
)
def test_an_http_deduplicator_must_refuse_reused_keys(name: str, factory: Factory) -> None:
    """A deduplicator that would log a reused key (and run it as a duplicate) is refused for
    the HTTP kinds, which answer a reused key with 422."""
    with pytest.raises(ConfigError, match="must refuse reused keys"):
        factory("logging", deduplicator=Deduplicator(DedupConfig()))


ONE_READ = """
import os
from dedup.kernel.front_door import default_deduplicator
from dedup.entrances.gate import EVENTS, HTTP, process_config, shared_deduplicator
from dedup.http import http_deduplicator

first = process_config()
os.environ["DEDUP_KEY_LAYOUT"] = "plain"
assert process_config() is first and first.key_layout == "spread"
assert shared_deduplicator(EVENTS) is default_deduplicator()
assert default_deduplicator().config is first
http = http_deduplicator()
assert http is shared_deduplicator(HTTP)
assert http.config.key_layout == "spread"
assert (http.config.cache_size, http.config.on_payload_mismatch) == (0, "raise")
print("one read")
"""


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (a process of its own: the configuration is per process)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_configuration_is_read_once_per_process() -> None:
    """In a fresh process, `process_config()` reads the environment once: a variable changed
    later is not seen, and the default deduplicator, the shared deduplicators of every kind
    and the HTTP one are all built from that one object."""
    done = run_python(ONE_READ, DEDUP_KEY_LAYOUT="spread")
    assert done.stdout.strip() == "one read", done.stderr


def test_a_bad_variable_is_refused_by_the_one_read() -> None:
    """A misspelled DEDUP_* variable fails the process's one read with a `ConfigError`."""
    done = run_python(
        "from dedup.entrances.gate import process_config; process_config()",
        DEDUP_LEASE_SECONDZ="60",
    )
    assert done.returncode != 0
    assert "ConfigError" in done.stderr
    assert "DEDUP_LEASE_SECONDZ" in done.stderr


def test_the_record_key_follows_the_configured_layout() -> None:
    """`record_key` is the key the flows write, in either layout, for sync and async front
    doors alike."""
    for layout in ("plain", "spread"):
        config = DedupConfig(key_layout=layout)
        for front in (Deduplicator(config), AsyncDeduplicator(config)):
            assert record_key(front, "ev/1", "fn") == dedup_key("ev/1", "fn", layout)
    assert record_key(Deduplicator(DedupConfig(key_layout="spread")), "e", "f") != "e-f"


def test_an_async_trigger_uses_the_process_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """An `async def` handler without a deduplicator is run by the shared AsyncDeduplicator of
    the process's configuration (resolved on the first delivery, not at import)."""
    from dedup.entrances.gate import Entrance, gate

    entrance: Entrance = gate(
        EVENTS,
        "asyncShared",
        mode="lease",
        config=None,
        deduplicator=None,
        registry=SuffixRegistry(),
    ).admit(_async_handler)
    found = entrance.async_deduplicator()
    assert found.config is process_config()
    assert entrance.async_deduplicator() is found


async def _async_handler(event: Any, delivery: Any) -> None:  # pragma: no cover - not run
    raise AssertionError


DECLARES_A_FUNCTION = """
from dedup import trigger_once

@trigger_once("declared")
def handler(event, delivery):
    pass

print("imported")
"""


def test_a_misspelled_setting_stops_the_import_that_declares_a_function() -> None:
    """`DEDUP_LEASE_SECOND=30` (for DEDUP_LEASE_SECONDS) fails the declaration, at import,
    with the message naming the variable meant: not every event later."""
    done = run_python(DECLARES_A_FUNCTION, DEDUP_LEASE_SECOND="30")
    assert done.returncode != 0
    assert "imported" not in done.stdout
    assert "ConfigError" in done.stderr
    assert "DEDUP_LEASE_SECONDS" in done.stderr
    assert run_python(DECLARES_A_FUNCTION).stdout.strip() == "imported"


def test_a_malformed_setting_stops_the_template_import() -> None:
    """The template's main.py, imported as functions-framework loads it for the function it
    serves (`FUNCTION_TARGET`), stops on a bad value; with good values it imports."""
    main = Path(__file__).resolve().parents[2] / "main.py"
    code = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(main.parent)!r})\n"
        f"spec = importlib.util.spec_from_file_location('main', {str(main)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
    )
    done = run_python(code, FUNCTION_TARGET="sync_published_count", DEDUP_LEASE_SECONDS="soon")
    assert done.returncode != 0
    assert "DEDUP_LEASE_SECONDS" in done.stderr
    good = run_python(code, FUNCTION_TARGET="sync_published_count", DEDUP_LEASE_SECONDS="900")
    assert good.returncode == 0, good.stderr


UNDER_A_GLOBAL_TIMEOUT = """
from firebase_functions.options import set_global_options
from dedup import trigger_once

set_global_options(timeout_sec=300)

@trigger_once("timed")
def handler(event, delivery):
    pass

print("imported")
"""


def test_on_the_platform_a_lease_shorter_than_the_global_timeout_stops_the_import() -> None:
    """With `set_global_options(timeout_sec=300)` and the default 60 s lease, a deployed instance
    (K_SERVICE set) stops at the declaration, saying what to set; a lease of 310 s imports, and
    so does any lease locally and in the Functions emulator."""
    refused = run_python(UNDER_A_GLOBAL_TIMEOUT, K_SERVICE="svc")
    assert refused.returncode != 0
    assert "Set DEDUP_LEASE_SECONDS to at least 310" in refused.stderr
    for env in (
        {"K_SERVICE": "svc", "DEDUP_LEASE_SECONDS": "310"},
        {},
        {"K_SERVICE": "svc", "FUNCTIONS_EMULATOR": "true"},
    ):
        done = run_python(UNDER_A_GLOBAL_TIMEOUT, **env)
        assert done.stdout.strip() == "imported", (env, done.stderr)
