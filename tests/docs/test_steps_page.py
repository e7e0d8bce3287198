"""docs/steps.md's code runs as typed: every fenced `python` block of the page, on the Firestore
emulator, in a fresh Python process as a user's project runs it.

The page's first block is the user's `main.py`; the mismatch rule's loop is `checkout.py`; the
testing section's example is their test file, run by pytest; the block of a `(delivery)`
function runs as a script. The process has `DEDUP_LEASE_SECONDS=3`, as the page says to run
the tests, and neither GOOGLE_CLOUD_PROJECT nor GCLOUD_PROJECT (a new user's shell), so the
project the test writes to and the one the functions read must agree by default.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.packaging.conftest import new_user_environment

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "steps.md"

pytestmark = [pytest.mark.needs_emulators, pytest.mark.subprocesses]


def python_blocks() -> list[str]:
    """The fenced `python` blocks of docs/steps.md, in order."""
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)


def test_no_block_imports_the_kernel() -> None:
    """Every block imports public names only: nothing from `dedup.kernel`."""
    blocks = python_blocks()
    assert len(blocks) >= 4, blocks
    for block in blocks:
        assert "dedup.kernel" not in block, block


def block_with(needle: str) -> str:
    """The one block that holds `needle`."""
    [found] = [block for block in python_blocks() if needle in block]
    return found


CHECK_CHECKOUT = textwrap.dedent(
    """\
    import uuid
    from collections import Counter

    from cloudevents.http import from_http

    import checkout
    from dedup import testing

    charged = Counter()
    real = checkout.charge_item


    def counted(item, idempotency_key):
        charged[idempotency_key.rsplit("/", 1)[1]] += 1
        return real(item, idempotency_key)


    checkout.charge_item = counted
    items = [{"id": "sku-1", "price": 300}, {"id": "sku-2", "price": 200}]
    event = testing.firestore_event(
        f"carts/{uuid.uuid4().hex}", None, {"items": items}, change="created"
    )
    for _ in range(2):
        checkout.checkout(from_http(dict(event.headers), event.body))
    assert charged == Counter({"charge-sku-1": 1, "charge-sku-2": 1}), charged
    print("checkout ok")
    """
)


def test_every_python_block_runs_as_typed(tmp_path: Path) -> None:
    """The page's handler imports and deploys as written (`main.py`); the loop named by what it
    acts on charges each item once over two deliveries; the testing section's tests pass with
    the crash helpers at every boundary of every step; the `(delivery)` form runs."""
    blocks = python_blocks()
    (tmp_path / "main.py").write_text(blocks[0])
    (tmp_path / "checkout.py").write_text(block_with("def charge_each("))
    (tmp_path / "check_checkout.py").write_text(CHECK_CHECKOUT)
    (tmp_path / "test_place_order.py").write_text(block_with("from main import place_order"))
    (tmp_path / "greet.py").write_text(block_with("def greet("))
    assert len(blocks) == 4, "a new block of docs/steps.md: run it here too"
    env = new_user_environment(DEDUP_LEASE_SECONDS="3")
    for command in (
        [sys.executable, "check_checkout.py"],
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_place_order.py"],
        [sys.executable, "greet.py"],
    ):
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
        if "pytest" in command:
            assert "2 passed" in done.stdout, done.stdout
        if "greet.py" in command:
            assert "hello, once" in done.stdout, done.stdout
