"""The documentation agrees with the code, and its checks check.

- The configuration reference (docs/configuration.md) is the one generated from
  ``fiber.config.Config`` (docs/config_reference.py).
- README.md is a door: at most 250 lines, with the two commands, the install and links
  that reach the guide.
- docs/check_site.py, which ``mkdocs build --strict`` runs on the site it has just built
  (a hook in mkdocs.yml: one build checks it all), finds each kind of problem it is for,
  on small pages made to have it.
- Every ```python block that is a program carries a ``# run:`` marker naming known
  backends (fiber/testing/conformance/test_doc_programs.py runs them), and parses.
"""

from __future__ import annotations

import dataclasses
import os
import runpy
import subprocess
import sys
from typing import Any, Dict

import pytest

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
                   'pip install "fiber-cluster[', "docs/getting-started.md",
                   "docs/backends/index.md", "docs/pools.md"):
        assert needed in text, needed


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
    site = _site(tmp_path, {
        "a/index.html": "<p>Use :class:<code>Pool</code> here.</p>",
        "b/index.html": "<p>The diagram::</p>",
        "c/index.html": "<p>A role is written <code>:class:`X`</code>, in code.</p>"})
    problems = checker["raw_markup"](checker["read_site"](site))
    assert [p.split(":")[0] for p in problems] == ["a/index.html", "b/index.html"]


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
