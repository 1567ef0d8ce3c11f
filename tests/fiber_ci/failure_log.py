"""A pytest plugin of scripts/test: each failed test's message, written down when it fails.

``pytest -p fiber_ci.failure_log --failure-log PATH`` appends one JSON line to PATH for each
test that fails or errors (and each module that fails to collect) as soon as pytest reports
it: ``{"name": ..., "tag": "failure" | "error", "text": ...}``, the test's id and the
message the JUnit report would hold. The JUnit report and pytest's summary of failures are
written only when the session ends: a run stopped at scripts/test's time limit (a hang,
SIGABRT) writes neither, and the failures before the hang are known from this file alone
(scripts/failure-digest prints them with the run's lost report).
"""

from __future__ import annotations

import json
from typing import Union

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--failure-log", dest="failure_log", metavar="PATH", default=None,
                     help="append each failed test's id and message to PATH (JSON lines) "
                          "as soon as it fails")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("failure_log")
    if path:
        config.pluginmanager.register(FailureLog(path), "fiber_ci.failure_log.writer")


class FailureLog:
    """Appends each failed report to its file, which is closed after each one: what a
    process killed the next moment has written is in the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:  # a failed setup or teardown is an error, as in a JUnit report
            self._write(report, "failure" if report.when == "call" else "error")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._write(report, "error")

    def _write(self, report: Union[pytest.TestReport, pytest.CollectReport], tag: str) -> None:
        name = report.nodeid
        if name.startswith("::") and isinstance(report, pytest.TestReport):
            name = report.location[0] + name  # a test file outside the rootdir
        record = {"name": name, "tag": tag, "text": report.longreprtext}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
