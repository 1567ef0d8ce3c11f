"""What a user installing fiber meets: another distribution of the import name ``fiber``
(the original fiber) beside this one is named at import, and ``fiber --version`` names
this package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import fiber
from fiber._version import DISTRIBUTION
from fiber.cli import version_line

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
    assert "fiber-0.2.1.dist-info" in out.stderr and f"pip install {DISTRIBUTION}" in out.stderr


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
