"""The complete programs of the documentation run as a user runs them.

Every ```python block of README.md and docs/ whose first line is ``# run: BACKEND...``
(see support/doc_programs.py) is saved to a file and run with ``python file.py`` on each
backend it names, when that is the backend under test: the ``# run: local`` blocks in the
local stage, ``# run: slurm`` in the Slurm stage, and so on (``FIBER_BACKEND`` is set; the
stage's own settings, its image or its listen address, are in the environment already; a
backend that a module of a checkout registers has that module's directory on
``PYTHONPATH``, as its page says to run it).
A program must exit with code 0 within its deadline; on a timeout its Python dumps its
threads (see `support.programs`) and the whole process group is killed. The documentation
is in fiber's source checkout, not in the package: without a checkout, the test is skipped.
"""

from __future__ import annotations

import os
import site
import sys
from typing import TYPE_CHECKING, Any, List, Optional

import pytest

import fiber

from ...config import _registry
from .support import REPO
from .support.doc_programs import Block, programs_for
from .support.programs import run_program
from .support.waiting import unusable

if TYPE_CHECKING:
    import pathlib

TIMEOUT = 240  # seconds a program may take here, on a loaded 2-core machine

pytestmark = pytest.mark.timeout(TIMEOUT + 60)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "block" in metafunc.fixturenames:
        backend = metafunc.config.getoption("fiber_backend")
        params: List[Any] = [pytest.param(None, id="no-checkout")]  # (see the test)
        if REPO is not None:
            params = [
                pytest.param(b, id=b.name, marks=[pytest.mark.torch] if b.needs_torch else [])
                for b in programs_for(backend)]
        metafunc.parametrize("block", params)


def _home_of_backend(name: str) -> Optional[str]:
    """The directory that the package of backend ``name``'s class was imported from, if it
    is neither fiber nor installed (a module that ``-p`` loaded from a checkout, as fiber's
    own netns test hosts are): a program that imports it finds it there too."""
    cls = _registry.load(name)
    top = sys.modules.get(cls.__module__.split(".")[0]) if cls is not None else None
    where = getattr(top, "__file__", None)
    if top is None or top.__name__ == "fiber" or not where:
        return None
    home = os.path.dirname(where)
    if os.path.basename(where) == "__init__.py":
        home = os.path.dirname(home)
    installed = {*site.getsitepackages(), site.getusersitepackages()}
    return None if home in installed else home


def test_a_documented_program_runs(block: Optional[Block], ctx: fiber.FiberContext,
                                   tmp_path: pathlib.Path) -> None:
    if block is None:  # skipped by hand, a failure under CI=true (which runs a checkout)
        unusable("fiber's source checkout", "the documentation's programs are in fiber's "
                 "source checkout, not in the installed package: run the suite from a "
                 "checkout to include them")
    program = tmp_path / "program.py"
    program.write_text(block.code, encoding="utf-8")
    backend = ctx.backend or "local"
    env = {**os.environ, "FIBER_BACKEND": backend}
    home = _home_of_backend(backend)
    if home is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (home, os.environ.get("PYTHONPATH", "")) if p)
    done = run_program([sys.executable, str(program)], TIMEOUT, cwd=str(tmp_path), env=env)
    assert done.returncode == 0, (f"{block.name} exited with {done.returncode}\n"
                                  f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
