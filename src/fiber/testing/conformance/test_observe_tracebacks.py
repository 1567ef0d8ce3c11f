"""Remote tracebacks point at the user's code: the file, line and source line of
the function that raised, with fiber's own frames left out, also for functions of the
main script sent by value to a host that lacks the file (the master, which has the
source, fills the lines in). API tests (``ctx``): local and netns here; slurm, docker
and kubernetes in CI."""

from __future__ import annotations

import builtins
import linecache
from typing import Any, Callable

import pytest

from fiber.errors import RemoteTraceback

from .support import observe_helpers as oh
from .test_observe_output import PREFIX, _Captured

pytestmark = pytest.mark.timeout(240)

_CELL = '''
def boom(x):
    y = x + 1
    raise ValueError(f"boom {y}")


def process_boom():
    values = {"a": 1}
    return values["missing"]
'''


def _main_functions(name: str) -> Any:
    """The functions of ``_CELL`` as a notebook cell or the main script defines them: in
    ``__main__``'s namespace (so they travel by value), from a file no host has; only
    this process's linecache holds their source (as IPython registers a cell's)."""
    filename = f"/nonexistent/notebooks/{name}.py"
    linecache.cache[filename] = (len(_CELL), None, _CELL.splitlines(True), filename)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(_CELL, filename, "exec"), namespace)
    return namespace, filename


def _remote(call: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as info:
        call()
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback), info.value
    return cause.tb


def test_a_task_of_the_main_script_shows_its_source_line(ctx):
    namespace, filename = _main_functions("notebook_cell_1")
    with ctx.Pool(1) as pool:
        tb = _remote(lambda: pool.map(namespace["boom"], [1]))
    assert f'File "{filename}", line 4, in boom' in tb, tb
    assert 'raise ValueError(f"boom {y}")' in tb, tb  # filled in by the master
    assert "ValueError: boom 2" in tb
    assert "_worker.py" not in tb and "/fiber/" not in tb, tb


def test_a_task_of_a_module_shows_its_source_line_and_no_fiber_frame(ctx):
    with ctx.Pool(1) as pool:
        tb = _remote(lambda: pool.apply(oh.raise_in_helper, ("deep",)))
    lines = tb.splitlines()
    assert lines[0] == "Traceback (most recent call last):", tb
    assert "observe_helpers.py" in lines[1] and "in raise_in_helper" in lines[1], tb
    assert "helper_that_raises(text)" in tb and 'raise KeyError(f"missing {text}")' in tb
    assert "_worker.py" not in tb


def test_a_process_target_of_the_main_script_shows_its_source_line(ctx, capfd):
    namespace, filename = _main_functions("notebook_cell_2")
    p = ctx.Process(target=namespace["process_boom"])
    p.start()
    p.join(60)
    assert p.exitcode == 1
    err = _Captured(capfd).read().err
    text = "\n".join(m.group("text") for m in (PREFIX.match(x) for x in err.splitlines()) if m)
    assert f'File "{filename}", line 9, in process_boom' in text, err
    assert 'return values["missing"]' in text, err
    assert "KeyError: 'missing'" in text
    assert "_process.py" not in text, err
