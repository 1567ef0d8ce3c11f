"""The complete programs of the documentation run as a user runs them.

Every ```python block of README.md and docs/ whose first line is ``# run: BACKEND...``
(see support/doc_programs.py) is saved to a file and run with ``python file.py`` on each
backend it names, when that is the backend under test: the ``# run: local`` blocks in the
local stage, ``# run: slurm`` in the Slurm stage, and so on (``FIBER_BACKEND`` is set; the
stage's own settings, its image or its listen address, are in the environment already).
A program must exit with code 0 within its deadline; on a timeout its Python dumps its
threads (see `support.programs`) and the whole process group is killed. The documentation
is in fiber's source checkout, not in the package: without a checkout, the test is skipped.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, List, Optional

import pytest

import fiber

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
    done = run_program([sys.executable, str(program)], TIMEOUT, cwd=str(tmp_path), env=env)
    assert done.returncode == 0, (f"{block.name} exited with {done.returncode}\n"
                                  f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
