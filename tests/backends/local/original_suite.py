"""Run the original fiber's own tests (``uber/fiber`` 0.2.1, from its sdist on PyPI) on this
fiber's local backend, and print how many pass.

    python tests/backends/local/original_suite.py [--keep DIR] [-- PYTEST ARGS]

Why a runner and not a copy: everything in this repository is written here, so the
original's tests are downloaded when they run (``pip download fiber==0.2.1``, checked
against the sdist's sha256: the PyPI distribution named ``fiber`` is the original), never
committed. What is changed, and why, is listed below, and nothing else is:

- ``REWRITES``: import lines of the original's private modules, made public names. Its
  ``fiber.docker_backend``/``local_backend``/``kubernetes_backend`` modules, which the
  tests also name in code (``fiber.docker_backend.Backend``), are provided by the
  ``conftest.py`` written next to the tests (``ALIASES``: each module's ``Backend`` is
  this fiber's backend class), so that no line but an import is touched.
- ``LEFT_ASIDE``: tests of the original's private modules (``popen_fiber_spawn``,
  ``fiber.util``, ``fiber.backend._backends``) and of Docker (a Docker engine, images),
  each with its reason; ``test_docker_backend.py`` entirely.
- Two data files the sdist lacks (``tests/demo_config``, ``tests/invalid_config``, which
  the original's repository has): written here with the values its ``test_config.py``
  asserts (``image``, ``log_level``, ``ipc_active``, ``mem_per_job``; one unknown key).
- ``docker.from_env()``, which every module's leak fixture calls and only uses on the
  docker backend, makes its client on first use: there is no Docker engine here.
- After a test that failed, what it left running is ended (its tests end their managers
  and processes only when they pass): one failure, a timing assertion on a loaded
  machine say, no longer fails the leak check of every later test. After a test that
  passed, nothing is touched: a process fiber leaks still fails the next setup.

The last line printed is ``original fiber tests: P passed of N run (L left aside)``.
Exit status: 0 when the tests ran (whatever passed), 2 when they could not be obtained.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from typing import Dict, List, Tuple

ORIGINAL = "fiber==0.2.1"
SDIST = "fiber-0.2.1.tar.gz"
SDIST_SHA256 = "dd7cfa8f21454f0315b49192be609456f71b710a5ab541587819dff8dec009b7"

#: (the original's import line, what it becomes, why)
REWRITES: List[Tuple[str, str, str]] = [
    ("from fiber.socket import Socket", "",
     "test_queue.py: its private socket layer, imported and unused"),
    ("from fiber.docker_backend import Backend",
     "from fiber.backends.docker import DockerBackend as Backend",
     "test_process.py, test_misc.py: its docker backend's class (the module is imported in "
     "the jobs too, where the conftest's aliases are not)"),
    ("import fiber.popen_fiber_spawn as fspawn", "",
     "test_popen.py: its private launcher; only its tests use it, and they are left aside"),
]

#: The original's module names the tests use in code, and this fiber's class each one's
#: ``Backend`` is. Only here, not in fiber (issue 32): they were the original's
#: implementation modules, imported by its own cli and tests alone, and their ``Backend``
#: had the original's interface (``create_job``, ``get_job_status``...), which this
#: fiber's classes do not; a program gets a backend from ``fiber.backend.get_backend()``.
ALIASES: Dict[str, str] = {
    "fiber.docker_backend": "fiber.backends.docker:DockerBackend",
    "fiber.local_backend": "fiber.backends.local:LocalBackend",
    "fiber.kubernetes_backend": "fiber.backends.kubernetes:KubernetesBackend",
}

_DOCKER = "of Docker: needs a Docker engine and images"
#: test id (relative to the tests' directory) -> why it is not run
LEFT_ASIDE: Dict[str, str] = {
    "tests/test_docker_backend.py": _DOCKER,
    "tests/test_misc.py::TestMisc::test_init_image": _DOCKER,
    "tests/test_misc.py::TestMisc::test_init_image2": _DOCKER,
    "tests/test_misc.py::TestMisc::test_image_not_found": _DOCKER,
    "tests/test_misc.py::TestMisc::test_no_python3_inside_image": _DOCKER,
    "tests/test_misc.py::TestMisc::test_log_file_path": _DOCKER + " (one log file per job)",
    "tests/test_process.py::TestBasic::test_start_timeout":
        _DOCKER + "; replaces the private fiber.backend._backends",
    "tests/test_misc.py::TestMisc::test_interactive_shell_cloudpickle":
        "of its private fiber.util.is_in_interactive_console (patched)",
    "tests/test_popen.py::TestPopen::test_get_python_exe": "of its private popen_fiber_spawn",
    "tests/test_popen.py::TestPopen::test_command_line": "of its private popen_fiber_spawn",
    "tests/test_popen.py::TestPopen::test_get_job": "of its private popen_fiber_spawn",
    "tests/test_popen.py::TestPopen::test_popen_method":
        "of its private popen_fiber_spawn (Process._Popen's class)",
    "tests/test_popen.py::TestPopen::test_launch_fiber_background_thread":
        "of its private popen_fiber_spawn (a module global and a log line)",
}

DEMO_CONFIG = """[default]
image=demo-image:latest
log_level=INFO
ipc_active=False
mem_per_job=12345
"""
INVALID_CONFIG = """[default]
no_such_key_in_fiber=yes
"""

CONFTEST = '''"""Written by original_suite.py: the original's backend modules, by this fiber's
classes, and a Docker client made on first use (no engine here)."""
import importlib
import sys
import types

import docker
import pytest

import fiber

ALIASES = {aliases!r}
for name, target in ALIASES.items():
    module_name, cls = target.split(":")
    alias = types.ModuleType(name)
    alias.Backend = getattr(importlib.import_module(module_name), cls)
    sys.modules[name] = alias
    setattr(fiber, name.split(".")[1], alias)

_from_env = docker.from_env


class _ClientOnFirstUse:
    def __init__(self, args, kwargs):
        self._make = lambda: _from_env(*args, **kwargs)
        self._client = None

    def __getattr__(self, name):
        if self._client is None:
            self._client = self._make()
        return getattr(self._client, name)


docker.from_env = lambda *args, **kwargs: _ClientOnFirstUse(args, kwargs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed leaves what it started running (the original's tests end their
    managers and processes on success only): ended here, so that the failure counts
    once, not once more in the leak check of every later test's setup."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for child in fiber.active_children():
            child.terminate()
            child.join(10)
'''


def obtain(cache: str) -> str:
    """The original's sdist in ``cache`` (downloaded once, its sha256 checked).

    Raises:
        RuntimeError: pip could not download it, or its hash is not the expected one.
    """
    path = os.path.join(cache, SDIST)
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        req = os.path.join(cache, "requirements.txt")
        with open(req, "w") as f:
            f.write(f"{ORIGINAL} --hash=sha256:{SDIST_SHA256}\n")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--require-hashes", "-r", req, "-d", cache],
            capture_output=True, text=True)
        if done.returncode != 0 or not os.path.exists(path):
            raise RuntimeError(f"pip download {ORIGINAL} failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != SDIST_SHA256:
        raise RuntimeError(f"{path}: sha256 {digest}, expected {SDIST_SHA256}")
    return path


def rewrite(source: str) -> str:
    """``source`` with the import lines of ``REWRITES`` replaced, and only those."""
    lines = source.splitlines(keepends=True)
    for i, line in enumerate(lines):
        for old, new, _why in REWRITES:
            if line.strip() == old:
                lines[i] = line.replace(old, new) if new else "\n"
    return "".join(lines)


def prepare(sdist: str, workdir: str) -> str:
    """The original's ``tests/`` under ``workdir``, rewritten, with its data files and the
    conftest; returns ``workdir``."""
    tests = os.path.join(workdir, "tests")
    os.makedirs(tests, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 3 and parts[1] == "tests" and member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                with open(os.path.join(tests, parts[2]), "w") as f:
                    f.write(rewrite(data.read().decode()))
    if not os.path.exists(os.path.join(tests, "test_pool.py")):
        raise RuntimeError(f"{sdist} has no tests/test_pool.py")
    for name, text in (("demo_config", DEMO_CONFIG), ("invalid_config", INVALID_CONFIG)):
        with open(os.path.join(tests, name), "w") as f:
            f.write(text)
    with open(os.path.join(workdir, "conftest.py"), "w") as f:
        f.write(CONFTEST.format(aliases=ALIASES))
    return workdir


def run(workdir: str, extra: List[str]) -> Tuple[int, int, List[str]]:
    """Runs the tests not left aside; returns (passed, run, one line per other outcome)."""
    junit = os.path.join(workdir, "junit.xml")
    args = [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider", "-q",
            "-o", "timeout=60", f"--junitxml={junit}", "--rootdir", workdir]
    for test_id in LEFT_ASIDE:
        args += ["--ignore" if test_id.endswith(".py") else "--deselect", test_id]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    env["FIBER_BACKEND"] = "local"
    subprocess.run(args + extra, cwd=workdir, env=env)
    passed, ran, others = 0, 0, []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        outcome = next(iter(case), None)
        if outcome is not None and outcome.tag == "skipped":
            others.append(f"skipped {name}: {outcome.get('message')}")
            continue
        ran += 1
        if outcome is None or outcome.tag in ("system-out", "system-err"):
            passed += 1
        else:
            message = (outcome.get("message") or "").splitlines()[:1]
            others.append(f"{outcome.tag} {name}: {' '.join(message)[:200]}")
    return passed, ran, others


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.path.join(
        os.path.expanduser("~"), ".cache", "fiber-original-suite"))
    parser.add_argument("--keep", help="prepare the tests in this directory and keep it")
    parser.add_argument("pytest_args", nargs="*")
    opts = parser.parse_args(argv)
    try:
        sdist = obtain(opts.cache)
    except RuntimeError as e:
        print(f"the original fiber's tests could not be obtained: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fiber-original-") as tmp:
        workdir = prepare(sdist, opts.keep or tmp)
        passed, ran, others = run(workdir, opts.pytest_args)
    for line in others:
        print(line)
    print(f"original fiber tests: {passed} passed of {ran} run "
          f"({len(LEFT_ASIDE)} left aside)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
