"""A pytest plugin: `-p tools.repeat --repeat N` runs every selected test N times in a row, each
time as a test of its own (`test_x[...-2-of-20]`), with fresh fixtures (an empty database for an
emulator test). With `-x` the run stops at the first failure, so "N passed" means N in a row.
Used to check a test under load (docs/testing.md, "Under load"; `tools/busy.py`).
"""

from __future__ import annotations

import pytest

RUN = "_repeat_run"
"""The fixture each repeated test is parametrized on (its run number)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--repeat N` (default 1: each test once, as without the plugin)."""
    parser.addoption(
        "--repeat", type=int, default=1, metavar="N", help="run each selected test N times"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test on its run number when `--repeat` is above 1."""
    times = int(metafunc.config.getoption("repeat"))
    if times < 1:
        raise pytest.UsageError(f"--repeat must be 1 or more, not {times}")
    if times > 1:
        metafunc.fixturenames.append(RUN)
        metafunc.parametrize(
            RUN, range(1, times + 1), ids=[f"{n}-of-{times}" for n in range(1, times + 1)]
        )


@pytest.fixture
def _repeat_run(request: pytest.FixtureRequest) -> int:
    """The run number of a repeated test (1 to N)."""
    return int(request.param)
