"""What a user installing fiber meets: another distribution of the import name ``fiber``
(the original fiber) beside this one is named at import, ``fiber --version`` names this
package, the install commands that errors give (fiber-cluster is not on PyPI yet: from
fiber's checkout, or its wheel) are commands pip runs, with extras fiber has, and the
README's demo (scripts/demo, scripts/bootstrap-venv) runs the Python that ``PYTHON`` asks
for and says which."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from typing import Any, Dict, List

import pytest

import fiber
from fiber._version import DISTRIBUTION, WHEEL, install_hint
from fiber.cli import version_line

import support
from fiber_ci import shipped

PACKAGE = os.path.dirname(os.path.abspath(fiber.__file__))


def _copy_of_fiber(site) -> None:
    shutil.copytree(PACKAGE, site / "fiber", ignore=shutil.ignore_patterns("__pycache__"))


def _import_from(site, *extra_env) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FIBER_PARENT"}
    env.update(dict(extra_env))
    return subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, "
                           f"{str(site)!r}); import fiber; print(fiber.__file__)"],
                          capture_output=True, text=True, timeout=60, env=env)


def test_a_second_fiber_distribution_is_named_at_import(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    _copy_of_fiber(site)
    (site / "fiber-0.2.1.dist-info").mkdir()  # what pip install fiber leaves
    out = _import_from(site)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(site / "fiber" / "__init__.py")
    assert "fiber-0.2.1.dist-info" in out.stderr and install_hint() in out.stderr


def test_no_warning_without_one_nor_in_jobs(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    _copy_of_fiber(site)
    (site / "fiber_cluster-0.1.0.dist-info").mkdir()
    assert _import_from(site).stderr == ""
    (site / "fiber-0.2.1.dist-info").mkdir()
    assert _import_from(site, ("FIBER_PARENT", "tcp://127.0.0.1:1")).stderr == ""


def test_version_names_this_distribution():
    for argv in (["-m", "fiber", "--version"],):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0
        assert out.stdout.startswith(f"{DISTRIBUTION} {fiber.__version__} (fiber at "), out.stdout


def test_version_is_one_line_however_narrow_the_terminal():
    """argparse's version action wraps its text to the terminal's width: the path in it
    broke the line at 80 columns. It is printed as it is."""
    env = {**os.environ, "COLUMNS": "20"}
    out = subprocess.run([sys.executable, "-m", "fiber", "--version"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == version_line() + "\n"


# -- the install commands of error messages ------------------------------------------------

def _pip(*args: str, cwd) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                         cwd=str(cwd), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    return out


def _dry_run(spec: str, cwd, *options: str) -> Dict[str, Any]:
    """What ``pip install spec`` in ``cwd`` would install (no dependency, nothing installed;
    ``--ignore-installed``: where this very fiber is installed from its wheel, as in CI's
    newest stages, pip would otherwise find it installed and list nothing)."""
    out = _pip("install", "--dry-run", "--no-deps", "--ignore-installed", "-q", "--report",
               "-", *options, spec, cwd=cwd)
    install: List[Dict[str, Any]] = json.loads(out.stdout)["install"]
    assert len(install) == 1, install
    return install[0]


@pytest.fixture(scope="module")
def checkout_and_wheel(tmp_path_factory):
    """A copy of fiber's checkout (what pip reads of it) and the wheel pip builds of it."""
    root = tmp_path_factory.mktemp("install")
    checkout = root / "fiber"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(support.REPO, name), checkout)
    shutil.copytree(os.path.join(support.REPO, "src"), checkout / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = root / "wheels"
    _pip("wheel", "-q", "--no-deps", "-w", str(wheels), ".", cwd=checkout)
    return checkout, wheels


@pytest.mark.parametrize("extra", ["", "docker", "kubernetes", "joblib", "optuna", "test"])
def test_the_install_hint_is_what_pip_installs_from_the_wheel(checkout_and_wheel, extra):
    """fiber-cluster is not on PyPI: a hint's second command installs the wheel built from
    the checkout, by its name (`WHEEL`), with the extra the error is about, one fiber has."""
    _, wheels = checkout_and_wheel
    assert os.listdir(wheels) == [WHEEL]
    specs = re.findall(r"pip install '([^']+)'", install_hint(extra))
    assert specs == [f".[{extra}]" if extra else ".", WHEEL + (f"[{extra}]" if extra else "")]
    found = _dry_run(specs[1], wheels, "--no-index")
    assert found["metadata"]["name"] == DISTRIBUTION
    assert found.get("requested_extras", []) == ([extra] if extra else [])
    assert not extra or extra in found["metadata"]["provides_extra"]


def test_the_wheel_ships_the_conformance_suite_and_nothing_of_fibers_ci(checkout_and_wheel):
    """Backend authors run the suite from the installed package; what serves only fiber's
    own CI (tests/fiber_ci: the netns test hosts and their link shaper, the stand-in
    workers, CPython's suite on fiber) stays out, also from ``fiber/testing``, its former
    home (`fiber_ci.shipped`)."""
    _, wheels = checkout_and_wheel
    names = zipfile.ZipFile(os.path.join(wheels, WHEEL)).namelist()
    assert "fiber/testing/conformance/conftest.py" in names
    assert "fiber/testing/conformance/plugin.py" in names
    assert shipped(names) == []
    assert not [n for n in names if "fiber_ci" in n or "cpython_suite" in n]
    assert shipped([*names, "fiber/testing/netns.py", "fiber_ci/standins.py"]) == [
        "fiber/testing/netns.py", "fiber_ci/standins.py"]


def test_the_install_hint_is_what_pip_installs_from_the_checkout(checkout_and_wheel):
    checkout, _ = checkout_and_wheel
    spec = re.findall(r"pip install '([^']+)'", install_hint("kubernetes"))[0]
    found = _dry_run(spec, checkout)
    assert found["metadata"]["name"] == DISTRIBUTION
    assert found["requested_extras"] == ["kubernetes"]
    assert found["download_info"]["url"] == checkout.as_uri()


def test_a_missing_cluster_client_is_told_how_to_install_it():
    """The docker and kubernetes backends' clients are extras: a job started without one
    fails with the hint, for that extra."""
    code = ("import sys\n"
            "sys.modules['docker'] = sys.modules['kubernetes'] = None  # not installed\n"
            "import fiber, fiber.errors\n"
            "for name in ('docker', 'kubernetes'):\n"
            "    try:\n"
            "        fiber.get_context(name).Process(target=print).start()\n"
            "    except fiber.errors.SubmitError as e:\n"
            "        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line, name in zip(lines, ("docker", "kubernetes")):
        assert line.endswith(f"which is not installed: {install_hint(name)}"), line


@pytest.mark.parametrize("library,needs", [("joblib", "joblib"),
                                           ("optuna", "optuna 4.0 or later")])
def test_an_integration_without_its_library_says_how_to_install_it(library, needs):
    code = ("import sys\n"
            f"sys.modules['{library}'] = None  # not installed\n"
            f"import fiber.{library}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert out.stderr.rstrip().endswith(
        f"ImportError: fiber.{library} needs {needs}, which is not installed: "
        f"{install_hint(library)}"), out.stderr


def test_the_conformance_suite_without_pytest_timeout_says_how_to_install_it():
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:timeout", "-q",
                          "--collect-only", "--pyargs", "fiber.testing.conformance.test_pool"],
                         capture_output=True, text=True, timeout=120,
                         cwd=support.TESTS)
    assert out.returncode != 0
    assert f"needs pytest-timeout (every test has a deadline): {install_hint('test')}" in (
        out.stdout + out.stderr)


# -- scripts/demo and scripts/bootstrap-venv: PYTHON ---------------------------------------

SUPPORTED = ("3.9", "3.10", "3.11", "3.12", "3.13")


def _two_pythons() -> List[str]:
    """Two supported Python versions that scripts/find-python finds (CI has them all)."""
    found = [v for v in SUPPORTED
             if subprocess.run([os.path.join(support.REPO, "scripts", "find-python"), v],
                               capture_output=True, timeout=60).returncode == 0]
    assert len(found) >= 2, f"scripts/find-python finds only {found} of {SUPPORTED}"
    return found[-2:]


def _checkout_with_scripts(dest) -> None:
    """What scripts/demo reads of fiber's checkout, copied: its .venv-demo is the copy's."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(support.REPO, name), dest)
    for name in ("src", "scripts", "requirements"):
        shutil.copytree(os.path.join(support.REPO, name), dest / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (dest / "examples").mkdir()
    shutil.copy(os.path.join(support.REPO, "examples", "pi_estimation.py"), dest / "examples")


def _run(cmd: List[str], python: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIBER_", "PYTHON"))}
    env.update(PYTHON=python, FIBER_EXTRAS="", FIBER_INSTALL="wheel")  # as the demo's
    return subprocess.run(cmd, cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=600)


def _version_of(python) -> str:
    return subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.one_python  # the scripts, not the interpreter that runs pytest: once is enough
def test_the_demo_runs_the_python_asked_for_and_a_venv_of_another_is_made_anew(tmp_path):
    """PYTHON=3.12 (a version, as scripts/test finds it) and PYTHON=python3.13 (not on the
    PATH here but through pyenv) are found; the demo says which Python it runs; a
    .venv-demo that another Python made is made anew, with a line that says so, not reused
    silently; a PYTHON that names nothing is an error that says what to give."""
    first, second = _two_pythons()
    _checkout_with_scripts(tmp_path)
    venv = tmp_path / ".venv-demo"

    out = _run(["scripts/demo"], first, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    made = _version_of(venv / "bin" / "python")
    assert made.startswith(first + "."), made
    assert f"examples/pi_estimation.py on Python {made} (" in out.stdout, out.stdout
    assert "pi ~= 3.1" in out.stdout and "making it anew" not in out.stdout

    bootstrap = ["scripts/bootstrap-venv", ".venv-demo"]
    out = _run(bootstrap, f"python{second}", tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    remade = _version_of(venv / "bin" / "python")
    assert remade.startswith(second + "."), remade
    assert out.stdout.startswith(f".venv-demo has Python {made} ("), out.stdout
    assert f"not python{second}'s {remade} (" in out.stdout.splitlines()[0], out.stdout

    out = _run(bootstrap, "python3.77", tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("PYTHON=python3.77: no such interpreter; give a command on the "
                                 "PATH, a path, or a version such as 3.12"), out.stderr
    assert _version_of(venv / "bin" / "python") == remade
