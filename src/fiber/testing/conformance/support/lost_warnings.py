"""The warnings of lost pool workers that a test's own pool gave, read from
pytest's captures: test_observe_failures.py and the backends' kill tests."""

from __future__ import annotations

import functools
import logging
import re
import time
from typing import TYPE_CHECKING, List

from . import observe_helpers

if TYPE_CHECKING:
    import pytest

    import fiber


class LostWarnings:
    """fiber's warnings of lost workers, as the test process shows them: on stderr (its
    own handler), or in pytest's log capture (pytest gives the root logger a handler,
    and fiber's records then go to the program's handlers, not to stderr too)."""

    def __init__(self, capfd: pytest.CaptureFixture[str],
                 caplog: pytest.LogCaptureFixture) -> None:
        self._capfd, self._caplog = capfd, caplog
        self._err = ""

    def lost(self) -> List[str]:
        self._err += self._capfd.readouterr().err
        lines = [line for line in self._err.splitlines() if " WARNING: " in line]
        lines += [r.getMessage() for r in self._caplog.records
                  if r.name == "fiber" and r.levelno == logging.WARNING]
        return [line for line in lines if " was lost" in line]

    def wait(self, count: int, timeout: float = 60.0) -> List[str]:
        """The lost-worker warnings, once ``count`` are said or after ``timeout`` s (a
        warning waits up to REPORT_WAIT_S, 30 s, for its exit code)."""
        deadline = time.monotonic() + timeout
        while len(self.lost()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.lost()


def check_an_oom_killed_worker_is_one_warning(ctx: fiber.FiberContext,
                                              warnings: LostWarnings) -> None:
    """A pool worker limited to 96 MB whose task takes far more: the map completes, and
    one warning says the kernel's OOM killer ended it (the backends that are told so:
    Docker, Kubernetes)."""
    flag = ctx.Event()
    with ctx.Pool(1, memory=96) as pool:
        assert pool.map(functools.partial(observe_helpers.hog_once, flag), range(3),
                        chunksize=1) == list(range(3))
        lines = warnings.wait(1)
    assert len(lines) == 1, lines
    # task 1, and task 2 too if its link was measured slow (a busy node: it is handed a
    # task ahead then, see fiber.pool._credit)
    assert re.search(r"was lost: killed by SIGKILL: killed by the kernel's OOM killer: out "
                     r"of memory \(memory limit 96 MB\); resubmitted map\(hog_once\) "
                     r"(task 1|tasks 1, 2)$", lines[0]), lines
