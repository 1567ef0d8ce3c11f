"""What a user installing fiber meets: another distribution of the import name ``fiber``
(the original fiber) beside this one is named at import, ``fiber --version`` names this
package, and the install commands that errors give (fiber-cluster is not on PyPI yet:
from fiber's checkout, or its wheel) are commands pip runs, with extras fiber has."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List

import pytest

import fiber
from fiber._version import DISTRIBUTION, WHEEL, install_hint
from fiber.cli import version_line

import support

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
    """What ``pip install spec`` in ``cwd`` would install (no dependency, nothing installed)."""
    out = _pip("install", "--dry-run", "--no-deps", "-q", "--report", "-", *options, spec,
               cwd=cwd)
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


@pytest.mark.parametrize("extra", ["", "docker", "kubernetes", "test"])
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


def test_the_conformance_suite_without_pytest_timeout_says_how_to_install_it():
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:timeout", "-q",
                          "--collect-only", "--pyargs", "fiber.testing.conformance.test_pool"],
                         capture_output=True, text=True, timeout=120,
                         cwd=support.TESTS)
    assert out.returncode != 0
    assert f"needs pytest-timeout (every test has a deadline): {install_hint('test')}" in (
        out.stdout + out.stderr)
