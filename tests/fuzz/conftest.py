"""The fuzz suite serves main.py's functions in-process, as tests/functions does."""

from tests.functions.conftest import serve

__all__ = ["serve"]
