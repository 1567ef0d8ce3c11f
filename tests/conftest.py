"""Fixtures shared by the test suite.

- ``ctx``: the fiber context of the backend under test. API tests take it, so they run on
  every backend: ``pytest --backend local`` (default) or ``--backend netns`` (processes in
  network-namespace "hosts", see fiber.testing.netns). A backend that cannot be set up
  fails the run under ``CI=true``; it is never skipped there.
- ``no_leaks`` (autouse): fails a test that leaves child processes or non-fiber threads
  behind, or connections to servers that are gone.
- every test has a deadline (pytest-timeout); on timeout faulthandler dumps all threads.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator

import psutil
import pytest

import fiber

from support.hosts import start_hosts


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backend", default=os.environ.get("FIBER_TEST_BACKEND", "local"),
                     help="fiber backend the API tests run on (local, netns, ...)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "api: a multiprocessing-API test run on every backend")
    config.addinivalue_line(
        "markers", "torch: needs torch (the examples extra), installed for Python 3.11 only: "
        "the suites on the other supported Pythons deselect these (-m 'not torch')")
    config.addinivalue_line(
        "markers", "local_pids: the test kills or identifies workers by OS pid, which only "
        "the local and netns backends give (their jobs are processes of this machine); "
        "cluster backends have their own crash tests (node crash, container kill)")
    config.addinivalue_line(
        "markers", "scale: a pool of hundreds of workers (minutes on this machine): run once, "
        "with Python 3.11; the suites on the other supported Pythons deselect these")
    config.addinivalue_line(
        "markers", "one_python: fiber's own machinery, not the interpreter's (network "
        "partitions, the hub's security, the command line, polling, chaos): run with Python "
        "3.11 only, to keep the other Pythons' suites within the CI budget (ONE_PYTHON)")


#: Test modules whose tests (the ``ctx`` ones aside) depend on
#: fiber's machinery, not on the interpreter's version: the suites on the other supported
#: Pythons deselect them (marker one_python). Everything that touches pickling, exits,
#: threads, signals, warnings or the standard library's multiprocessing runs everywhere.
ONE_PYTHON = {"test_multihost", "test_multihost_sync", "test_transport", "test_cli",
              "test_pool_chaos", "test_docs", "test_pool_local", "test_pipe_local"}
#: Modules all of whose tests, ``ctx`` ones too, are of fiber's machinery only (fiber top,
#: ps/logs/stop, GPUs handed out on local, the lost-worker warnings) or are whole programs
#: whose parts the suite tests on every Python already (the documentation's programs):
#: one_python as well.
ONE_PYTHON_WHOLE = {"test_observe_status", "test_observe_status_local", "test_observe_local",
                    "test_observe_gpus", "test_observe_failures",
                    "test_observe_failures_local", "test_ps_local", "test_doc_programs"}


API_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "api")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    outside = []
    for item in items:
        api = "ctx" in getattr(item, "fixturenames", ())
        if api:
            item.add_marker(pytest.mark.api)
        elif str(item.path).startswith(API_DIR + os.sep):
            outside.append(item.nodeid)
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        if (module in ONE_PYTHON and not api) or module in ONE_PYTHON_WHOLE:
            item.add_marker(pytest.mark.one_python)
    if outside:  # every backend runs tests/api: a test there must take the backend's ctx
        raise pytest.UsageError("tests/api holds the suite every backend runs; these tests "
                                "do not take the ctx fixture: " + ", ".join(outside))


_hosts = None


@pytest.fixture(scope="session")
def backend_name(request: pytest.FixtureRequest) -> Iterator[str]:
    global _hosts
    name = request.config.getoption("--backend")
    if name == "netns":
        from fiber.testing.netns import use_hosts

        _hosts = start_hosts(3)
        use_hosts(_hosts)
        fiber.init(backend="netns", listen_host=_hosts.root_ip)
    else:
        fiber.init(backend=name)
    yield name
    if _hosts is not None:
        _hosts.stop()


@pytest.fixture
def ctx(backend_name: str) -> fiber.FiberContext:
    """The context of the backend under test."""
    return fiber.get_context(backend_name)


def _children() -> set:
    """Live descendants, less the standard library's own helper (its resource tracker,
    started by the reference runs with multiprocessing) and the local backend's fork
    server (one per process, kept for its lifetime; the jobs it forks still count)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if any("resource_tracker" in word or word == "fiber.backends.local._forkserver_template"
                   for word in p.cmdline()):
                continue
        except psutil.Error:
            continue
        out.add(p.pid)
    return out


def _foreign_threads() -> set:
    return {t for t in threading.enumerate()
            if t.is_alive() and not t.name.startswith("fiber-") and t is not
            threading.main_thread()}


def _dead_connections() -> int:
    from fiber.transport.client import prune_closed

    prune_closed()
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.status == psutil.CONN_CLOSE_WAIT)


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    before_children = _children()
    before_threads = _foreign_threads()
    yield
    for p in fiber.active_children():
        p.join(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        leaked = _children() - before_children
        threads = _foreign_threads() - before_threads
        dead = _dead_connections()
        if not leaked and not threads and not dead:
            return
        time.sleep(0.05)
    for pid in leaked:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    pytest.fail(f"test leaked: child processes {sorted(leaked)}, threads "
                f"{sorted(t.name for t in threads)}, {dead} connections to gone servers")
