"""The documentation agrees with the code, and its checks check.

- The configuration reference (docs/configuration.md) is the one generated from
  ``fiber.config.Config`` (docs/config_reference.py).
- README.md is a door: at most 250 lines, with the two commands, the install and links
  that reach the guide.
- No page, docstring, script or error tells users to ``pip install fiber-cluster`` from an
  index, which does not have it yet (but as what works "once published"); the commands
  that install fiber name extras it has and the wheel it builds.
- docs/check_site.py, which ``mkdocs build --strict`` runs on the site it has just built
  (a hook in mkdocs.yml: one build checks it all), finds each kind of problem it is for,
  on small pages made to have it.
- Every list of fiber's backends in the docs (the README's opening, the home page, getting
  started, the configuration's ``backend``, the backends' table, the glossary...) names
  each built-in one (``pyproject.toml``'s ``fiber.backends`` entry points), and every
  ``pytest`` command of the docs uses options and paths that exist.
- Every ```python block that is a program carries a ``# run:`` marker naming known
  backends (fiber/testing/conformance/test_doc_programs.py runs them), and parses.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import os
import re
import runpy
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest

from fiber._version import DISTRIBUTION, WHEEL
from fiber.testing.conformance.support.doc_programs import BACKENDS, all_blocks

import support

ROOT = support.REPO
DOCS = os.path.join(ROOT, "docs")
README = os.path.join(ROOT, "README.md")


@pytest.fixture(scope="module")
def checker() -> Dict[str, Any]:
    return runpy.run_path(os.path.join(DOCS, "check_site.py"))


# -- the configuration reference -----------------------------------------------------------

def test_the_configuration_reference_is_generated_from_the_config_definition():
    out = subprocess.run([sys.executable, os.path.join(DOCS, "config_reference.py"),
                          "--check", "docs/configuration.md"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout


def test_the_generator_sees_every_key_and_its_meaning():
    import fiber.config

    gen = runpy.run_path(os.path.join(DOCS, "config_reference.py"))
    docs = gen["field_docs"]()
    keys = [f.name for f in dataclasses.fields(fiber.config.Config)]
    assert sorted(docs) == sorted(keys)
    assert all(docs[k] for k in keys), [k for k in keys if not docs[k]]


# -- the README ----------------------------------------------------------------------------

def test_the_readme_is_a_door():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) <= 250, "the README grows: move the new part into docs/"
    for needed in ("./scripts/demo", ".venv-demo", "./scripts/test", "PYTHON=python3.12",
                   "pip install .", 'pip install ".[kubernetes]"', "python -m build",
                   f'pip install "dist/{WHEEL}[kubernetes]"', "docs/getting-started.md",
                   "docs/backends/index.md", "docs/pools.md"):
        assert needed in text, needed


# -- the install commands -------------------------------------------------------------------

def _pip_installs() -> List[Tuple[str, str]]:
    """(file:line, the words after ``pip install``) of every pip install in the README, the
    docs, fiber's sources, the examples and the scripts."""
    files = [README] + glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)
    for pattern in ("src/fiber/**/*.py", "examples/*.py", "scripts/*"):
        files += glob.glob(os.path.join(ROOT, pattern), recursive=True)
    found = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in re.finditer(r"pip install([^`\n]*)", line):
                    words = [w.strip("'\"") for w in m.group(1).split()]
                    found.append((f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}", words))
    return found


def test_nothing_tells_users_to_install_fiber_from_an_index():
    """fiber-cluster is not on PyPI yet: a command that would take it from an index is
    wrong, but as what works "once published"."""
    installs = _pip_installs()
    assert len(installs) >= 20, installs  # the walk sees them
    by_name = re.compile(rf"{DISTRIBUTION}(\[[\w,]+\])?([<>=!~].*)?")
    wrong = [where for where, words in installs
             if any(by_name.fullmatch(w) for w in words) and "once published" not in where]
    assert not wrong, "\n".join(wrong)


def test_the_install_commands_name_extras_fiber_has_and_its_wheel():
    extras = set(importlib.metadata.metadata(DISTRIBUTION).get_all("Provides-Extra") or [])
    wheel_placeholder = WHEEL.replace(importlib.metadata.version(DISTRIBUTION), "VERSION")
    named = 0
    for where, words in _pip_installs():
        for word in words:
            m = re.fullmatch(r"(.*)\[([\w,]+)\]", word)
            path, asked = (m.group(1), m.group(2).split(",")) if m else (word, [])
            assert set(asked) - {"EXTRA"} <= extras, f"{where}: fiber has no extra {asked}"
            if "fiber_cluster" in path:
                assert os.path.basename(path) in (WHEEL, wheel_placeholder), where
                named += 1
    assert named >= 4  # the README's, the getting started's, the hints'


# -- the backends, wherever the docs list them ---------------------------------------------

#: A backend's name in prose, besides its own (case-insensitive, whole words).
_PROSE_NAMES = {"sge": ("Grid Engine",)}
#: The lists of backends, each found as the paragraph (lines up to a blank one) of a file
#: that holds the given text.
BACKEND_LISTS = [
    ("README.md", "fiber is the `multiprocessing` API on a computer cluster"),
    ("README.md", "| backend | the cluster needs |"),
    ("README.md", "`scripts/test` runs every test on the `local` backend"),
    ("docs/index.md", "fiber is the `multiprocessing` API on a computer cluster"),
    ("docs/index.md", "| run on a cluster |"),
    ("docs/getting-started.md", "Each backend's page"),
    ("docs/configuration.md", "| `backend` (`FIBER_BACKEND`)"),
    ("docs/backends/index.md", "| backend | the cluster needs |"),
    ("docs/concepts.md", "**backend.**"),
    ("docs/concepts.md", "**relay.**"),
    ("docs/contributing/architecture.md", "backend layer   Backend ABC"),
    ("docs/contributing/testing.md", "| local | `pytest --fiber-backend local"),
    ("docs/contributing/testing.md", "The cluster stages each start their cluster"),
    ("docs/troubleshooting.md", "Where each backend keeps a job's own log"),
    ("mkdocs.yml", "- backends/index.md"),
    ("src/fiber/backends/__init__.py", "fiber's own ("),
]


def _builtin_backends() -> List[str]:
    """fiber's own backends: its distribution's entry points in the backends' group."""
    dist = importlib.metadata.distribution(DISTRIBUTION)
    return sorted(ep.name for ep in dist.entry_points if ep.group == "fiber.backends")


def _paragraph(path: str, anchor: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        paragraphs = re.split(r"\n\s*\n", f.read())
    found = [p for p in paragraphs if anchor in p]
    assert len(found) == 1, f"{path}: {len(found)} paragraphs hold {anchor!r}"
    return found[0]


def _names(text: str, backend: str) -> bool:
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE)
               for name in (backend, *_PROSE_NAMES.get(backend, ())))


def test_every_list_of_backends_names_each_built_in_one():
    builtin = _builtin_backends()
    assert {"local", "slurm", "sge", "ssh", "docker", "kubernetes"} <= set(builtin)
    missing = [f"{path} ({anchor!r}...): {backend}" for path, anchor in BACKEND_LISTS
               for backend in builtin if not _names(_paragraph(path, anchor), backend)]
    assert not missing, "lists of backends that miss one:\n" + "\n".join(missing)
    pages = [b for b in builtin if not os.path.exists(os.path.join(DOCS, "backends", b + ".md"))]
    assert not pages, f"built-in backends without a page in docs/backends/: {pages}"


def test_a_list_of_backends_that_misses_one_is_found():
    assert _names("Slurm jobs, Grid Engine jobs", "sge") and _names("`sge`", "sge")
    assert not _names("Slurm jobs, Docker containers", "sge")
    assert not _names("ssh-nodes.sh", "ssh") and not _names("fiber-local", "local")


@pytest.fixture(scope="module")
def pytest_options() -> str:
    out = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_pytest_commands_of_the_docs_exist(pytest_options):
    """Each ``pytest`` command line of the docs uses options pytest (and fiber's plugin)
    has, names a known backend, and paths of this repository: ``--backend sge tests/api``
    was none of these (``mycluster`` is the backend a page shows how to write)."""
    files = [README] + glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)
    wrong, seen = [], 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in re.finditer(r"\bpytest((?: +[^ `|#]+)+)", line):
                    seen += 1
                    where = f"{os.path.relpath(path, ROOT)}:{n}"
                    words = m.group(1).split()
                    for option in (w.split("=")[0] for w in words if w.startswith("--")):
                        if not re.search(rf"(?<![\w-]){re.escape(option)}\b", pytest_options):
                            wrong.append(f"{where}: pytest has no option {option}")
                    for a, b in zip(words, words[1:]):
                        if a == "--fiber-backend" and b not in (*BACKENDS, "mycluster"):
                            wrong.append(f"{where}: no backend {b}")
                    for w in words:
                        if re.match(r"(tests|src)/", w) and not glob.glob(
                                os.path.join(ROOT, re.sub(r"::.*|\{.*", "", w))):
                            wrong.append(f"{where}: no path {w}")
    assert seen >= 20, seen  # the walk sees them
    assert not wrong, "\n".join(wrong)


# -- the site's checks ---------------------------------------------------------------------

def test_the_strict_build_runs_the_checks():
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = f.read()
    assert "strict: true" in config
    assert "- docs/check_site.py" in config  # the hook: the one build is checked


def test_the_checks_cover_the_public_modules(checker):
    import test_docstrings

    assert checker["PUBLIC_MODULES"] == test_docstrings.PUBLIC_MODULES


def _site(tmp_path, pages: Dict[str, str]) -> str:
    for path, body in pages.items():
        full = tmp_path / "site" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(f"<html><body><article>{body}</article></body></html>")
    return str(tmp_path / "site")


def test_a_sphinx_role_or_a_literal_marker_left_visible_is_found(checker, tmp_path):
    """In a code span too (the testing page showed two roles so), but for a code block."""
    site = _site(tmp_path, {
        "a/index.html": "<p>Use :class:<code>Pool</code> here.</p>",
        "b/index.html": "<p>The diagram::</p>",
        "c/index.html": "<p>A role is written <code>:class:</code>, in code.</p>",
        "d/index.html": "<li>See <code>Pool</code>_ and <code>Queue</code>__ there.</li>",
        "e/index.html": "<p>Not <code>a_b</code>_c, nor <code>x</code> _ nor <code>y</code>::x "
                        "nor a time, 10:30:00.</p><pre><code>:func:`f` `g`_ h::</code></pre>"})
    problems = checker["raw_markup"](checker["read_site"](site))
    assert [p.split(":")[0] for p in problems] == ["a/index.html", "b/index.html",
                                                   "c/index.html", "d/index.html"], problems


_ENTRY = '<h2 id="{}" class="doc doc-heading">x</h2>'
_SIGNATURE = '<div class="doc-signature highlight"><pre><code>f()</code></pre></div>'


def test_a_public_name_without_an_entry_or_with_two_is_found(checker, tmp_path):
    meta, resources_of, resources = ("fiber.meta.meta", "fiber.meta.resources_of",
                                     "fiber.backends.Resources")
    pages = {"reference/meta/index.html": _ENTRY.format(meta) + _SIGNATURE
             + _ENTRY.format(resources_of) + _SIGNATURE,
             "reference/backends/index.html": _ENTRY.format(resources) + _SIGNATURE}
    entries = checker["entries"]
    assert entries(checker["read_site"](_site(tmp_path / "1", pages)), ["fiber.meta"]) == []

    missing = dict(pages)
    missing["reference/meta/index.html"] = _ENTRY.format(meta) + _SIGNATURE
    problems = entries(checker["read_site"](_site(tmp_path / "2", missing)), ["fiber.meta"])
    assert problems == ["no entry on any reference page for fiber.meta.resources_of"]

    twice = dict(pages)
    twice["reference/other/index.html"] = _ENTRY.format("fiber.meta.Resources")
    problems = entries(checker["read_site"](_site(tmp_path / "3", twice)), ["fiber.meta"])
    assert len(problems) == 1 and "documented on 2 reference pages" in problems[0]

    unsigned = dict(pages)
    unsigned["reference/meta/index.html"] = (_ENTRY.format(meta) + _ENTRY.format(resources_of)
                                             + _SIGNATURE)
    problems = entries(checker["read_site"](_site(tmp_path / "4", unsigned)), ["fiber.meta"])
    assert problems == ["reference/meta/index.html: the entry of fiber.meta.meta shows no "
                        "signature"]


def test_a_private_or_internal_name_on_a_reference_page_is_found(checker, tmp_path):
    site = _site(tmp_path, {
        "reference/meta/index.html":
            _ENTRY.format("fiber.meta._helper") + _ENTRY.format("fiber.meta.MetaFunction")
            + '<p class="doc doc-class-bases">Bases: <code><span title="fiber.pool._api_extras'
              '.PoolExtras">PoolExtras</span></code></p>'
            + "<p>See fiber.pool._pool for more.</p>",
        "guide/index.html": "<p>fiber.pool._pool is where Pool lives.</p>"})
    problems = checker["private_names"](checker["read_site"](site), ["fiber.meta"])
    assert len(problems) == 4, problems
    assert all(p.startswith("reference/meta/index.html") for p in problems)
    assert any("fiber.meta.MetaFunction, not in fiber.meta.__all__" in p for p in problems)


def test_a_broken_link_or_anchor_is_found(checker, tmp_path):
    site = _site(tmp_path, {
        "a/index.html": '<p id="here"><a href="../b/">b</a> <a href="../c/">c</a> '
                        '<a href="../b/#there">b</a> <a href="../b/#nowhere">b</a> '
                        '<a href="#here">here</a> <a href="https://example.org/">out</a></p>',
        "b/index.html": '<h2 id="there">there</h2>'})
    problems = checker["broken_links"](checker["read_site"](site), site)
    assert problems == ["a/index.html: broken anchor: ../b/#nowhere",
                        "a/index.html: broken link: ../c/"]


def test_a_broken_link_of_the_readme_into_the_docs_is_found(checker, tmp_path):
    site = _site(tmp_path, {"b/index.html": '<h2 id="there">there</h2>',
                            "index.html": "<p>home</p>"})
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "b.md").write_text("# b\n")
    (repo / "docs" / "index.md").write_text("# home\n")
    readme = repo / "README.md"
    readme.write_text("# Title\n\n[ok](docs/b.md#there) [home](docs/index.md) [top](#title)\n"
                      "[gone](docs/nothing.md) [anchor](docs/b.md#nowhere) [self](#nowhere)\n")
    problems = checker["readme_links"](str(readme), str(repo), str(repo / "docs"),
                                       checker["read_site"](site))
    assert problems == ["README.md: broken anchor: #nowhere",
                        "README.md: broken anchor: docs/b.md#nowhere",
                        "README.md: broken link: docs/nothing.md"]


# -- the programs of the documentation -------------------------------------------------------

def test_every_program_of_the_docs_is_marked_and_parses():
    blocks = all_blocks()
    assert len([b for b in blocks if "local" in b.backends]) >= 10  # the walk sees them
    unmarked = [b.name for b in blocks if "__main__" in b.code and not b.backends]
    assert not unmarked, f"programs without a '# run: BACKEND' first line: {unmarked}"
    unknown = [(b.name, b.backends) for b in blocks if set(b.backends) - set(BACKENDS)]
    assert not unknown, f"'# run:' names a backend that is not {BACKENDS}: {unknown}"
    for b in blocks:
        if b.backends:
            compile(b.code, b.name, "exec")
