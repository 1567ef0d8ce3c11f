"""The warnings of lost pool workers that a test's own pool gave (issue 19), read from
pytest's captures: tests/api/test_observe_failures.py and the backends' kill tests."""

from __future__ import annotations

import logging
import time
from typing import Any, List


class LostWarnings:
    """fiber's warnings of lost workers, as the test process shows them: on stderr (its
    own handler), or in pytest's log capture (pytest gives the root logger a handler,
    and fiber's records then go to the program's handlers, not to stderr too)."""

    def __init__(self, capfd: Any, caplog: Any) -> None:
        self._capfd, self._caplog = capfd, caplog
        self._err = ""

    def lost(self) -> List[str]:
        self._err += self._capfd.readouterr().err
        lines = [line for line in self._err.splitlines() if " WARNING: " in line]
        lines += [r.getMessage() for r in self._caplog.records
                  if r.name == "fiber" and r.levelno == logging.WARNING]
        return [line for line in lines if " was lost" in line]

    def wait(self, count: int, timeout: float = 30.0) -> List[str]:
        deadline = time.monotonic() + timeout
        while len(self.lost()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.lost()
