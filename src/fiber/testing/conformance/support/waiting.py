"""Waiting in tests, and what a test does when a component it needs is missing."""

from __future__ import annotations

import importlib
import os
import time
from typing import TYPE_CHECKING, Callable, NoReturn

import pytest

if TYPE_CHECKING:
    import types

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unusable(component: str, why: str) -> NoReturn:
    """A component the tests need is missing: skipped by hand, a failure under CI=true
    (CI starts every engine: a test that cannot run there must not pass silently)."""
    if IN_CI:
        raise pytest.fail.Exception(f"{component} is unusable under CI=true: {why}")
    raise pytest.skip.Exception(why)  # pytest.skip(why), in words mypy sees end the function


def require(module: str, extra: str = "test") -> types.ModuleType:
    """``module`` imported; if it cannot be (it is in the ``extra`` of pyproject.toml), the
    test is :func:`unusable`: skipped by hand, a failure under CI=true."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        unusable(module, f"{module} (the {extra} extra) is not installed: {e}")


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0,
               interval: float = 0.02, message: str = "condition") -> None:
    """Poll ``predicate`` until true; fail the test (with thread dumps) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            import faulthandler

            faulthandler.dump_traceback(all_threads=True)
            pytest.fail(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)
