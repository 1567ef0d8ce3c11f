"""The pytest side of the conformance suite: its markers, the backend under test (with its
test engine started, if it has one), its context, and the leak check.

The suite's ``conftest.py`` takes these for the suite's own tests, and fiber's repository
for its other tests (``tests/conftest.py``); nothing here is registered for any other test
session (fiber's ``pytest11`` plugin, `fiber.testing.conformance.plugin`, adds the option
``--fiber-backend`` and nothing else).

How the backend under test and its engine are found: docs/contributing/testing.md."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from types import MappingProxyType
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Set

import psutil
import pytest

import fiber

from ..._version import install_hint
from ...config import _registry
from .support.waiting import unusable

__all__ = ["MARKERS", "register_markers", "mark_items", "check_backend", "backend_engine",
           "backend_name", "ctx", "no_leaks"]

#: The suite's markers, and why a run may deselect them (``-m "not local_pids"``).
MARKERS: Mapping[str, str] = MappingProxyType({
    "api": "a multiprocessing-API test run on every backend (set on every test that takes "
           "the ctx fixture)",
    "torch": "needs torch (the examples extra) in the master and in the jobs: fiber's CI "
             "installs it for Python 3.11 only and not in its container images; the other "
             "runs deselect these (-m 'not torch')",
    "local_pids": "the test kills or identifies workers by OS pid, which only backends whose "
                  "jobs are processes of this machine give (local, netns); cluster backends "
                  "have their own crash tests (node crash, container kill)",
    "scale": "a pool of hundreds of workers (minutes on a small machine): fiber's CI runs "
             "these once, with Python 3.11; the suites on the other supported Pythons "
             "deselect them",
    "one_python": "fiber's own machinery, not the interpreter's (network partitions, the "
                  "hub's security, the command line, polling, chaos): run with Python 3.11 "
                  "only, to keep the other Pythons' suites within the CI budget",
})

#: The seconds a test may take when the session sets no timeout of its own (pytest-timeout:
#: ``--timeout``, ``PYTEST_TIMEOUT``, ``timeout`` in an ini file; fiber's ``pyproject.toml``
#: sets the same); on timeout pytest-timeout dumps every thread's stack.
DEFAULT_TIMEOUT_S = 300


def register_markers(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def _module(item: pytest.Item) -> str:
    return str(item.nodeid).split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")


def mark_items(items: Iterable[pytest.Item], one_python: Set[str],
               one_python_whole: Set[str]) -> List[str]:
    """Mark ``api`` the tests that take ``ctx``, and ``one_python`` those of the modules
    ``one_python`` (the ``ctx`` ones aside) and ``one_python_whole`` (all); the node ids of
    the tests that do not take ``ctx``."""
    outside = []
    for item in items:
        api = "ctx" in getattr(item, "fixturenames", ())
        if api:
            item.add_marker(pytest.mark.api)
        else:
            outside.append(item.nodeid)
        module = _module(item)
        if (module in one_python and not api) or module in one_python_whole:
            item.add_marker(pytest.mark.one_python)
    return outside


def default_timeouts(config: pytest.Config, items: Iterable[pytest.Item]) -> None:
    """Give `DEFAULT_TIMEOUT_S` to the tests without a deadline of their own when the
    session sets none (outside fiber's checkout, whose ``pyproject.toml`` sets one).

    Raises:
        pytest.UsageError: pytest-timeout is not installed.
    """
    try:
        option = config.getoption("timeout")
    except ValueError:
        raise pytest.UsageError("the conformance suite needs pytest-timeout (every test has "
                                f"a deadline): {install_hint('test')}") from None
    if option is not None or os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))


def _backend_class(name: str) -> Any:
    cls = _registry.load(name)
    if cls is None:
        raise pytest.UsageError(
            f"--fiber-backend {name}: fiber knows no backend of that name (it knows "
            f"{', '.join(_registry.known())}). A backend is known by its entry point in the "
            "fiber.backends group (is its package installed here?), or, if a module of it "
            "registers it (register_backend) as fiber's own netns test hosts do, once that "
            "module is loaded: add -p MODULE")
    return cls


def check_backend(config: pytest.Config) -> None:
    """Refuse a ``--fiber-backend`` that fiber does not know.

    Raises:
        pytest.UsageError: no backend of that name is registered.
    """
    _backend_class(config.getoption("fiber_backend"))


@contextlib.contextmanager
def backend_engine(name: str) -> Iterator[Dict[str, Any]]:
    """Backend ``name``'s test engine, started (its class's ``test_engine()``), for the
    block; yields the settings with which fiber reaches it (``{}`` for a backend without
    one: its engine is the environment's)."""
    start = getattr(_backend_class(name), "test_engine", None)
    if start is None:
        yield {}
        return
    with start() as settings:
        yield dict(settings or {})


_STARTED = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def backend_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """The name of the backend under test, its engine started and fiber initialised to it
    for the session."""
    config = request.config
    started = config.stash.get(_STARTED, None)
    if started is not None:  # a conftest of the same session took the fixture: one engine
        yield started
        return
    name: str = config.getoption("fiber_backend")
    with contextlib.ExitStack() as stack:
        try:
            settings: Mapping[str, Any] = stack.enter_context(backend_engine(name))
        except pytest.UsageError:
            raise
        except Exception as e:
            unusable(f"the test engine of the {name} backend", f"it cannot start here: {e}")
        fiber.init(backend=name, **settings)
        config.stash[_STARTED] = name
        yield name


@pytest.fixture
def ctx(backend_name: str) -> fiber.FiberContext:
    """The context of the backend under test."""
    return fiber.get_context(backend_name)


def _children() -> Set[int]:
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


def _foreign_threads() -> Set[threading.Thread]:
    return {t for t in threading.enumerate()
            if t.is_alive() and not t.name.startswith("fiber-") and t is not
            threading.main_thread()}


def _dead_connections() -> int:
    from ...transport.channels import prune_closed

    prune_closed()
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.status == psutil.CONN_CLOSE_WAIT)


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves child processes or non-fiber threads behind, or connections
    to servers that are gone (after 15 s of grace: what it started may still be ending)."""
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
