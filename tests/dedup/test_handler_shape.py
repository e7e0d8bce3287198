"""What every decorator refuses at import (`dedup.kernel.handler_shape`, `SuffixRegistry`), without
emulators: a function the platform's decorator already wrapped (the decorators swapped), a
handler that cannot take the arguments of its trigger kind, and a suffix shared by two
different functions; and what it accepts: the same function declared again by a second import
of its module."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from firebase_functions import firestore_fn, https_fn, tasks_fn

from dedup import ConfigError, DedupConfig, DuplicateSuffix, SuffixRegistry, trigger_once
from dedup.http import idempotent_callable, idempotent_http
from dedup.kernel.delivery import EventOptions
from dedup.kernel.handler_shape import check_run, is_async_handler
from dedup.tasks import task_once

Factory = Callable[..., Any]
CONFIG = DedupConfig(project="demo-shape")


def test_trigger_once_above_the_platform_decorator_is_refused_naming_the_order() -> None:
    """`@trigger_once` above `@firestore_fn.on_document_created`: refused at import, naming
    the function and showing the platform's decorator first."""
    registry = SuffixRegistry()
    with pytest.raises(ConfigError) as refused:
        # The mistakes under test: mypy refuses them too (hence the ignores).
        @trigger_once("swapped", config=CONFIG, registry=registry)  # type: ignore[arg-type]
        @firestore_fn.on_document_created(document="signups/{uid}")  # type: ignore[arg-type]
        def welcome(event: Any, delivery: Any) -> None: ...

    message = str(refused.value)
    assert "welcome" in message
    assert "@firestore_fn.on_document_created(...)\n    @trigger_once(...)" in message
    assert registry.owner("swapped") is None


@pytest.mark.parametrize(
    ("factory", "platform", "expected"),
    [
        (task_once, tasks_fn.on_task_dispatched(), "@tasks_fn.on_task_dispatched"),
        (idempotent_http, https_fn.on_request(), "@https_fn.on_request"),
        (idempotent_callable, https_fn.on_call(), "@https_fn.on_call"),
    ],
    ids=["task_once", "idempotent_http", "idempotent_callable"],
)
def test_every_other_decorator_above_its_platform_decorator_is_refused(
    factory: Factory, platform: Callable[[Any], Any], expected: str
) -> None:
    """The same mistake under `task_once` and the HTTP entrances is refused the same way."""
    kwargs: dict[str, Any] = {"config": CONFIG, "registry": SuffixRegistry()}
    if factory is idempotent_http:
        kwargs["anonymous"] = True

    def handled(*args: Any) -> None: ...

    with pytest.raises(ConfigError) as refused:
        factory("swapped", **kwargs)(platform(handled))
    assert "handled" in str(refused.value)
    assert expected in str(refused.value)


def test_a_handler_without_its_delivery_is_refused_naming_the_signature() -> None:
    """`def f(event)` under `trigger_once`: refused at import, naming `f` and the signature it
    needs; `async def f(event)` names the async one."""
    with pytest.raises(ConfigError) as refused:

        @trigger_once("f", config=CONFIG, registry=SuffixRegistry())  # type: ignore[arg-type]
        def f(event: Any) -> None: ...

    assert "def f(event, delivery)" in str(refused.value)
    assert "async def" not in str(refused.value)

    with pytest.raises(ConfigError) as refused_async:

        @trigger_once("f", config=CONFIG, registry=SuffixRegistry())  # type: ignore[arg-type]
        async def f_async(event: Any) -> None: ...

    assert "async def f_async(event, delivery)" in str(refused_async.value)


@pytest.mark.parametrize(
    ("factory", "needed"),
    [
        (task_once, "def handler(request, delivery)"),
        (idempotent_callable, "def handler(request, delivery)"),
        (idempotent_http, "def handler(call)"),
    ],
    ids=["task_once", "idempotent_callable", "idempotent_http"],
)
def test_every_decorator_refuses_a_handler_of_the_wrong_shape(
    factory: Factory, needed: str
) -> None:
    """Each kind names the arguments its platform passes."""
    kwargs: dict[str, Any] = {"config": CONFIG, "registry": SuffixRegistry()}
    if factory is idempotent_http:
        kwargs["anonymous"] = True

    def handler(a: Any, b: Any, c: Any) -> None: ...

    with pytest.raises(ConfigError) as refused:
        factory("shape", **kwargs)(handler)
    assert needed in str(refused.value)


def test_handlers_that_take_the_arguments_are_accepted() -> None:
    """Defaults, `*args` and keyword-capable parameters all bind `(event, delivery)`."""
    registry = SuffixRegistry()

    @trigger_once("a", config=CONFIG, registry=registry)
    def a(event: Any, delivery: Any, extra: int = 0) -> None: ...

    @trigger_once("b", config=CONFIG, registry=registry)
    def b(*args: Any) -> None: ...

    @trigger_once("c", config=CONFIG, registry=registry)
    async def c(event: Any, delivery: Any) -> None: ...

    assert [registry.owner(s) is not None for s in "abc"] == [True, True, True]


MODULE = """
from dedup import DedupConfig, trigger_once

def declare(registry):
    @trigger_once("welcome", config=DedupConfig(project="demo-shape"), registry=registry)
    def welcome(event, delivery):
        pass
    return welcome
"""


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_module_imported_twice_declares_its_function_again(tmp_path: Path) -> None:
    """The same file loaded twice under one module name (as `functions_framework.create_app`
    loads main.py) declares the same function twice: accepted, the suffix still its own."""
    path = tmp_path / "twice.py"
    path.write_text(MODULE)
    registry = SuffixRegistry()
    _load(path, "twice").declare(registry)
    _load(path, "twice").declare(registry)
    assert registry.owner("welcome") == "twice.declare.<locals>.welcome"


def test_two_functions_of_one_name_sharing_a_suffix_are_named_apart(tmp_path: Path) -> None:
    """Two different functions of the same module and name (two definitions in one file)
    sharing a suffix are refused, the message telling them apart by line."""
    path = tmp_path / "clash.py"
    path.write_text(
        textwrap.dedent(
            """
            from dedup import DedupConfig, trigger_once

            def declare(registry):
                @trigger_once("dup", config=DedupConfig(project="demo-shape"), registry=registry)
                def handler(event, delivery):
                    pass

                @trigger_once("dup", config=DedupConfig(project="demo-shape"), registry=registry)
                def handler(event, delivery):
                    pass
            """
        )
    )
    with pytest.raises(DuplicateSuffix) as refused:
        _load(path, "clash").declare(SuffixRegistry())
    message = str(refused.value)
    assert "line 5" in message
    assert "line 9" in message
    first, second = message.split(" and ", 1)
    assert first.split("used by both ")[1] != second.split(":")[0]


def test_two_different_functions_sharing_a_suffix_are_both_named() -> None:
    """Functions of different names: refused naming both, each once."""
    registry = SuffixRegistry()

    @trigger_once("shared", config=CONFIG, registry=registry)
    def first(event: Any, delivery: Any) -> None: ...

    with pytest.raises(DuplicateSuffix) as refused:

        @trigger_once("shared", config=CONFIG, registry=registry)
        def second(event: Any, delivery: Any) -> None: ...

    message = str(refused.value)
    assert message.count("<locals>.first") == 1
    assert message.count("<locals>.second") == 1


def test_one_definition_decorated_twice_is_refused_naming_it_once() -> None:
    """One handler under two decorations with one suffix (two functions): refused, the message
    naming the handler once."""
    registry = SuffixRegistry()

    def handler(event: Any, delivery: Any) -> None: ...

    trigger_once("twice", config=CONFIG, registry=registry)(handler)
    with pytest.raises(DuplicateSuffix) as refused:
        trigger_once("twice", config=CONFIG, registry=registry)(handler)
    assert str(refused.value).count("<locals>.handler") == 1


def test_a_handler_is_async_exactly_when_inspect_says_its_call_is() -> None:
    """`is_async_handler` agrees with `inspect.iscoroutinefunction` (of the object, else of its
    type's `__call__`) for every shape of handler: plain functions with and without attributes
    (`inspect.markcoroutinefunction`'s mark among them), lambdas, partials, bound methods and
    callable objects; and an explicit `run` (`check_run`) refuses exactly the other side's."""

    def plain(delivery: Any) -> None: ...

    async def awaited(delivery: Any) -> None: ...

    def marked(delivery: Any) -> Any: ...

    def tagged(delivery: Any) -> None: ...

    class Call:
        def __call__(self, delivery: Any) -> None: ...

        async def method(self, delivery: Any) -> None: ...

    class AsyncCall:
        async def __call__(self, delivery: Any) -> None: ...

    inspect.markcoroutinefunction(marked)
    tagged.note = "an attribute"  # type: ignore[attr-defined]
    handlers: list[Any] = [
        plain,
        awaited,
        marked,
        tagged,
        lambda delivery: None,
        functools.partial(awaited),
        functools.partial(plain),
        Call(),
        Call().method,
        AsyncCall(),
    ]
    expected = [_inspected(h) for h in handlers]
    assert [is_async_handler(h) for h in handlers] == expected
    assert expected == [False, True, True, False, False, True, False, False, True, True]
    for handler, is_async in zip(handlers, expected, strict=True):
        for side_awaits in (False, True):
            if is_async == side_awaits:
                check_run(EventOptions(), handler, "run", awaited=side_awaits)
                continue
            with pytest.raises(ConfigError, match="async function"):
                check_run(EventOptions(), handler, "run", awaited=side_awaits)


def _inspected(handler: Any) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    return callable(handler) and inspect.iscoroutinefunction(type(handler).__call__)
