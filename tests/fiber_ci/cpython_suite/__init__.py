"""CPython's own ``multiprocessing`` test suite, run against fiber.

Every interpreter ships its ``multiprocessing`` tests as ``test._test_multiprocessing``.
This runner runs the public-behaviour part of its ``spawn`` variant with ``fiber`` in place
of ``multiprocessing`` (as ``import fiber as multiprocessing`` does: `_mapped`), and the
same selection on the standard library for the reference count.

What it selects and how it counts: docs/contributing/testing.md."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .. import subprocess_env

if TYPE_CHECKING:
    import types

    from _typeshed import OptExcInfo

# standalone classes (not run in variants) that test public behaviour through
# ``multiprocessing.X``
_STANDALONE = (
    "TestWait", "TestStartMethod", "TestSimpleQueue", "TestSyncManagerTypes",
    "TestIgnoreEINTR", "TestInitializers", "TestTimeouts", "TestStdinBadfiledescriptor",
    "TestInvalidFamily",
)
# excluded classes, each with its reason
_EXCLUDED: Mapping[str, str] = MappingProxyType({
    "WithProcessesTestHeap": "multiprocessing.heap's private arena allocator",
    "WithProcessesTestFinalize": "multiprocessing.util.Finalize, a private helper",
    "WithProcessesTestSharedMemory":
        "multiprocessing.shared_memory: not provided (one host's POSIX shared memory)",
    "TestResourceTracker": "the private resource_tracker process",
    "TestForkAwareThreadLock": "multiprocessing.util's private after-fork registry",
    "TestCloseFds": "fd inheritance of fork/forkserver children (popen internals)",
    "SemLockTests": "_multiprocessing.SemLock, the C implementation of locks",
    "TestInvalidHandle": "multiprocessing.connection.Connection built on a raw fd",
    "OtherTest": "the connection handshake's private deliver/answer_challenge",
    "TestPoolNotLeakOnFailure": "Pool's private context argument, mocked",
    "TestInternalDecorators": "the suite's own helpers, not multiprocessing",
    "_TestImportStar": "the standard library's submodule layout",
    "MiscTestCase": "multiprocessing.__all__ vs the standard library's module, and a "
                    "script importing the standard library",
    "TestFlags": "a fresh interpreter importing the standard library's test module",
    "TestNoForkBomb": "a script importing the standard library's multiprocessing",
    "TestNamedResource": "a script importing the standard library's multiprocessing",
})
_PASSING = ("pass", "xfail")


def _module(target: str) -> types.ModuleType:
    return importlib.import_module(f"{__name__}.on_{target}")


def selected_classes(target: str = "fiber") -> List[str]:
    """The names of the selected test classes, sorted."""
    names = []
    for name, obj in vars(_module(target)).items():
        if not (isinstance(obj, type) and issubclass(obj, unittest.TestCase)):
            continue
        variant = name.startswith(("WithProcesses", "WithManager"))
        if (variant or name in _STANDALONE) and name not in _EXCLUDED:
            names.append(name)
    return sorted(names)


def _test_ids(module: types.ModuleType, name: str) -> List[str]:
    tests = unittest.TestLoader().loadTestsFromTestCase(getattr(module, name))
    return [_short_id(test) for test in tests]


def _short_id(test: Any) -> str:
    """"Class.test_method", the id relative to the suite's module."""
    return ".".join(test.id().rsplit(".", 2)[-2:])


def _one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "").strip()[:200]


class _Events(unittest.TestResult):
    """Writes one JSON line per test event to ``out``: the runner's only channel (the
    tests' own output goes to the log)."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__()
        self._out = out

    def _emit(self, test: unittest.TestCase, outcome: str, reason: str = "") -> None:
        self._out.write(json.dumps({"id": _short_id(test), "outcome": outcome,
                                    "reason": reason}) + "\n")
        self._out.flush()

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().startTest(test)
        self._emit(test, "start")

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._emit(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: OptExcInfo) -> None:  # noqa: N802
        self._emit(test, "fail", _one_line("".join(traceback.format_exception(*err))))

    def addError(self, test: object, err: OptExcInfo) -> None:  # noqa: N802
        reason = _one_line("".join(traceback.format_exception(*err)))
        if isinstance(test, unittest.TestCase):
            self._emit(test, "error", reason)
        else:  # a class's or the module's fixture: its tests do not run
            self._out.write(json.dumps({"id": str(test), "outcome": "fixture",
                                        "reason": f"{test}: {reason}"}) + "\n")
            self._out.flush()

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase,
                   err: Optional[OptExcInfo]) -> None:  # noqa: N802
        if err is not None:
            self.addFailure(test, err)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        self._emit(test, "skip", f"skipped: {reason}"[:200])

    def addExpectedFailure(self, test: unittest.TestCase, err: OptExcInfo) -> None:  # noqa: N802
        self._emit(test, "xfail")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self._emit(test, "fail", "unexpected success")


def _work(target: str, ids: Sequence[str], fd: int) -> int:
    """In a class's interpreter: run the tests ``ids``, writing events to ``fd``."""
    module = _module(target)
    suite = unittest.TestLoader().loadTestsFromNames(ids, module)
    with os.fdopen(fd, "w") as out:
        suite.run(_Events(out))
    return 0


Result = Tuple[str, str]  # (outcome, one-line reason)


def _run_class(target: str, ids: List[str], timeout: float, log: IO[bytes]) -> Dict[str, Result]:
    """Run one class's ``ids`` in fresh interpreters, resuming after a test that hangs or
    kills its interpreter."""
    results: Dict[str, Result] = {}
    while len(results) < len(ids):
        todo = [i for i in ids if i not in results]
        started, fixture, end = None, "", ""
        for event in _events(target, todo, timeout, log):
            outcome, test_id = event["outcome"], event["id"]
            if outcome == "start":
                started = test_id
            elif outcome == "fixture":
                fixture = fixture or event["reason"]
            elif outcome == "end":
                end = event["reason"]
            elif results.get(test_id, ("pass",))[0] == "pass":  # a subtest's first failure
                results[test_id] = (outcome, event["reason"])
        if started is not None and started not in results:
            results[started] = ("timeout" if end == "timeout" else "error",
                                f"no result after {timeout:.0f} s" if end == "timeout"
                                else f"its interpreter ended ({end})")
        elif started is None or fixture:
            for test_id in todo:  # the class never ran (import, setUpClass)
                results.setdefault(test_id, ("error", fixture or f"not run ({end})"))
    return results


def _events(target: str, ids: List[str], timeout: float, log: IO[bytes]
            ) -> Iterator[Dict[str, str]]:
    """The events of one interpreter running ``ids``, then an "end" event: "timeout" after
    ``timeout`` s without one (the interpreter's process group is killed), or its exit."""
    read, write = os.pipe()
    cmd = [sys.executable, "-m", __name__, "--worker", str(write), "--target", target, *ids]
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=log, pass_fds=(write,), start_new_session=True)
    os.close(write)
    buffer, end = b"", "timeout"
    try:
        while select.select([read], [], [], timeout)[0]:
            chunk = os.read(read, 65536)
            if not chunk:
                end = ""
                break
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                yield json.loads(line)
    finally:
        os.close(read)
        if end == "":
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                end = "timeout at exit"
        try:  # the class's jobs and managers with it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = proc.wait()
    yield {"id": "", "outcome": "end", "reason": end or f"exit code {code}"}


def run(target: str = "fiber", jobs: int = 2, timeout: float = 90.0,
        classes: Optional[Sequence[str]] = None, log_dir: Optional[str] = None,
        progress: bool = False) -> Dict[str, Result]:
    """Run the selection (or ``classes``) on ``target`` ("fiber" or "stdlib"), ``jobs``
    classes at a time; map each test id to its (outcome, reason)."""
    module = _module(target)
    names = list(classes or selected_classes(target))
    log_dir = log_dir or tempfile.mkdtemp(prefix="cpython-suite-")
    os.makedirs(log_dir, exist_ok=True)

    def one(name: str) -> Dict[str, Result]:
        started = time.monotonic()
        with open(os.path.join(log_dir, f"{name}.log"), "wb") as log:
            results = _run_class(target, _test_ids(module, name), timeout, log)
        if progress:
            passed = sum(o in _PASSING for o, _ in results.values())
            print(f"  {name}: {passed}/{len(results)} "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        return results

    results: Dict[str, Result] = {}
    with ThreadPoolExecutor(jobs) as pool:
        for part in pool.map(one, names):
            results.update(part)
    return dict(sorted(results.items()))


def report(results: Dict[str, Result]) -> str:
    """Counts, then each test that did not pass with its reason."""
    counts: Dict[str, int] = {}
    for outcome, _ in results.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    passed = sum(counts.get(o, 0) for o in _PASSING)
    lines = [f"passed {passed} of {len(results)}  "
             + "  ".join(f"{k}={v}" for k, v in sorted(counts.items()))]
    lines += [f"{outcome.upper():8} {test_id}: {reason}"
              for test_id, (outcome, reason) in results.items() if outcome not in _PASSING]
    return "\n".join(lines)


def passed(results: Dict[str, Result]) -> int:
    """How many tests passed."""
    return sum(outcome in _PASSING for outcome, _ in results.values())


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fiber_ci.cpython_suite",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--stdlib", action="store_true",
                        help="run on the standard library (the reference count)")
    parser.add_argument("--jobs", type=int, default=2, help="classes run at a time")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="seconds a test may run without a result")
    parser.add_argument("--class", dest="classes", action="append",
                        help="run this class only (repeatable)")
    parser.add_argument("--logs", help="directory for each class's output")
    parser.add_argument("--json", help="write {test id: [outcome, reason]} here")
    parser.add_argument("--floor", type=int, help="exit 1 if fewer tests pass")
    parser.add_argument("--list", action="store_true", help="list the selection and exit")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # its events' fd
    parser.add_argument("--target", default="fiber", help=argparse.SUPPRESS)
    parser.add_argument("ids", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return _work(args.target, args.ids, args.worker)
    target = "stdlib" if args.stdlib else "fiber"
    if args.list:
        module = _module(target)
        for name in selected_classes(target):
            print(name, len(_test_ids(module, name)))
        for name, reason in _EXCLUDED.items():
            print(f"excluded {name}: {reason}")
        return 0
    started = time.monotonic()
    results = run(target, args.jobs, args.timeout, args.classes, args.logs, progress=True)
    print(report(results))
    print(f"{target}: {time.monotonic() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if args.floor is not None and passed(results) < args.floor else 0
