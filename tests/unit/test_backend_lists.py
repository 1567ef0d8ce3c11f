"""Every hand-kept list of backends names exactly the registered ones.

The registry is the entry points of the ``fiber.backends`` group (``pyproject.toml``); the
README, the docs, the configuration's own text (and so its generated page) and the
conformance suite's list of documentation runs each name the backends again, and had
drifted (Grid Engine and ssh were missing from several). A backend registered without a
line here fails `test_every_backend_has_a_display_name` first: add it, then to every list.
``netns`` is fiber's own test engine (`fiber_ci.netns`, registered when that module is
loaded), listed where the docs name the test hosts, never as an entry point.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sys
from typing import Dict, FrozenSet, Set

import fiber.backends
from fiber.testing.conformance.support import doc_programs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: How prose names each backend (the README's first paragraph says "Slurm jobs").
DISPLAY: Dict[str, str] = {"local": "local", "slurm": "Slurm", "sge": "Grid Engine",
                           "ssh": "ssh", "docker": "Docker", "kubernetes": "Kubernetes"}
TEST_ENGINE = "netns"


@functools.cache
def registered() -> FrozenSet[str]:
    """The backends the ``fiber.backends`` entry points name (read once)."""
    if sys.version_info >= (3, 10):
        points = importlib.metadata.entry_points(group="fiber.backends")
    else:  # Python 3.9: a dict of groups
        points = importlib.metadata.entry_points().get("fiber.backends", [])
    return frozenset(p.name for p in points if p.value.startswith("fiber.backends."))


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _ticked(text: str) -> Set[str]:
    """The names in backticks (one or two) that are backends or the test engine."""
    return {m for m in re.findall(r"`{1,2}([a-z]+)`{1,2}", text)
            if m in DISPLAY or m == TEST_ENGINE or m in registered()}


def _linked(text: str) -> Set[str]:
    return set(re.findall(r"\(backends/([a-z]+)\.md\)", text)) - {"index"}


def test_the_registry_is_pyprojects_and_fibers():
    section = _read("pyproject.toml").split('[project.entry-points."fiber.backends"]')[1]
    names = set(re.findall(r"^(\w+) = \"fiber\.backends\.", section.split("\n\n")[0], re.M))
    assert names == registered()
    assert registered() <= set(fiber.backends.known_backends())


def test_every_backend_has_a_display_name():
    assert registered() == set(DISPLAY), "a backend without a DISPLAY name: add it here"


def test_the_readme_names_them_all():
    first = _read("README.md").split("\n\n")[1]
    missing = {b for b, shown in DISPLAY.items() if shown not in first}
    assert not missing, f"the README's first paragraph does not name {missing}"


def test_the_backends_package_names_them_all():
    own = re.search(r"fiber's own \(([^)]*)\)", fiber.backends.__doc__ or "")
    assert own and set(own.group(1).replace(",", " ").split()) == registered()


def test_the_configuration_key_names_them_all():
    text = _read("src", "fiber", "config", "__init__.py")
    key = text.split("#: Backend that runs jobs:")[1].split("backend: str")[0]
    assert _ticked(key) == registered()


def test_the_configuration_page_names_them_all():
    row = [ln for ln in _read("docs", "configuration.md").splitlines()
           if ln.startswith("| `backend` ")]
    assert len(row) == 1 and _ticked(row[0]) == registered()


def test_the_docs_list_and_link_them_all():
    pages = {name[:-3] for name in os.listdir(os.path.join(ROOT, "docs", "backends"))} - {"index"}
    assert pages == registered() | {TEST_ENGINE}
    concepts = _read("docs", "concepts.md").split("**backend.**")[1].split("\n\n")[0]
    assert _ticked(concepts) == registered() | {TEST_ENGINE}
    start = _read("docs", "getting-started.md").split("Each backend's page")[1].split(
        "\n\n")[0]
    assert _linked(start) == registered()
    index = [ln for ln in _read("docs", "index.md").splitlines() if "run on a cluster" in ln]
    assert len(index) == 1 and _linked(index[0]) == registered() | {TEST_ENGINE}
    nav = set(re.findall(r"^\s+- [^:\n]+: backends/([a-z]+)\.md$", _read("mkdocs.yml"), re.M))
    assert nav == registered() | {TEST_ENGINE}


def test_the_suites_documentation_runs_name_them_all():
    assert set(doc_programs.BACKENDS) == registered() | {TEST_ENGINE}


def test_every_backend_has_a_ci_stage():
    """scripts/test runs the API suite on each (``--fiber-backend NAME``)."""
    script = _read("scripts", "test")
    ran = set(re.findall(r"--fiber-backend (\w+)", script))
    assert registered() | {TEST_ENGINE} <= ran, registered() - ran
