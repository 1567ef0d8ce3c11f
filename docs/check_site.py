"""Checks of the built documentation site, run by ``mkdocs build`` (a hook: mkdocs.yml).

The strict build turns each problem into a warning, and so a failed build:

- reST markup left visible in a page's text, code spans included (Markdown renders a
  docstring's ``:class:`Pool``` as ``:class:`` and a code span, a reST link ```Pool`_`` as a
  code span and ``_``): a Sphinx role (``:class:``, ``:mod:``, ``:func:``...), a reST
  hyperlink reference, or a literal-block marker (a paragraph ending with ``::``). The
  docstrings are Markdown; only a code block (``<pre>``) may show such markup;
- a public name without an entry: every name of ``__all__`` of ``fiber`` and of each public
  module (``PUBLIC_MODULES``) is documented on exactly one reference page, under one of its
  public names or the path of the object it is (``fiber.Pool`` is ``fiber.pool.Pool``);
  the entry of a function, or of a class that defines its constructor, shows its signature
  (one that inherits it, an exception, an enum, takes its base's);
- a private or internal name on a reference page: an entry whose path has a part with a
  leading underscore, an entry for a name of a public module that is not in its
  ``__all__``, a base class that has no entry (``Bases: PoolExtras``), or a dotted path
  through a private module in the text (``fiber.pool._pool``);
- a broken internal link or anchor, on any page of the site or in README.md (whose links
  into ``docs/`` must reach a page and an anchor of the built site).

``python docs/check_site.py SITE_DIR`` checks a site built before (exit 1 on a problem).
One build is enough: the hook checks the site that the build just wrote.
"""

from __future__ import annotations

import html.parser
import importlib
import logging
import os
import posixpath
import re
import sys
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple
from urllib.parse import unquote, urlsplit

#: The modules whose ``__all__`` is fiber's public API (tests/unit/test_docstrings.py
#: checks that each name has a docstring; tests/unit/test_docs.py that the two lists agree).
PUBLIC_MODULES = [
    "fiber", "fiber.backends", "fiber.config", "fiber.connection", "fiber.context",
    "fiber.errors", "fiber.experimental", "fiber.futures", "fiber.managers", "fiber.meta",
    "fiber.pool", "fiber.process", "fiber.queues", "fiber.ring", "fiber.sharedctypes",
    "fiber.synchronize", "fiber.dashboard", "fiber.joblib", "fiber.optuna",
]

#: Where the API reference lives in the site.
REFERENCE = "reference/"

ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|data|attr|exc|obj|const|ref|doc|file|"
                  r"envvar|term|option|program|any):")
#: A reST hyperlink reference, ```name`_``: a code span then an underscore, in the text of a
#: block with its code spans marked off (`Page.marked`).
REST_LINK = re.compile(r"\x00[^\x00]*\x00__?(?!\w)")
LITERAL_MARKER = re.compile(r"::\s*$")
PRIVATE_PATH = re.compile(r"\bfiber(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*")
MD_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")

_log = logging.getLogger("mkdocs.plugins.fiber.check_site")


class Page(html.parser.HTMLParser):
    """What the checks need of one HTML page: ids, links, text blocks, bases."""

    BLOCKS = {"p", "li", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "dd", "dt"}
    SKIP = {"script", "style", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: Set[str] = set()
        self.headings: List[str] = []  # ids of the doc headings (mkdocstrings' entries)
        self.signed: Set[str] = set()  # those followed by a signature
        self.links: List[str] = []
        self.paragraphs: List[str] = []  # the text of each block, code spans included
        self.prose: List[str] = []  # the same without the code spans
        self.marked: List[str] = []  # the same with each code span between two NULs
        self.bases: List[Tuple[str, bool]] = []  # (title, linked) of each "Bases:" entry
        self._skip = 0
        self._code = 0
        self._text: List[str] = []
        self._prose: List[str] = []
        self._marked: List[str] = []
        self._in_bases = False
        self._base_title: Optional[str] = None
        self._base_linked = False

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
            if "doc-heading" in a.get("class", "").split():
                self.headings.append(a["id"])
        if "doc-signature" in a.get("class", "").split() and self.headings:
            self.signed.add(self.headings[-1])
        if tag == "a" and "name" in a:
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if key in a and tag in ("a", "img", "link", "script"):
                self.links.append(a[key])
        if tag in self.SKIP:
            self._skip += 1
        if tag == "code":
            self._code += 1
            self._marked.append("\x00")
        if tag in self.BLOCKS:
            self._flush()
            self._in_bases = tag == "p" and "doc-class-bases" in a.get("class", "")
        if self._in_bases and tag == "code":
            self._base_title, self._base_linked = None, False
        if self._in_bases and tag in ("a", "span") and a.get("title"):
            self._base_title = a["title"]
            self._base_linked = tag == "a"

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        if tag == "code":
            self._code = max(0, self._code - 1)
            self._marked.append("\x00")
        if self._in_bases and tag == "code" and self._base_title is not None:
            self.bases.append((self._base_title, self._base_linked))
        if tag in self.BLOCKS:
            self._flush()
            if tag == "p":
                self._in_bases = False

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._text.append(data)
            self._marked.append(data)
            if not self._code:
                self._prose.append(data)

    def _flush(self) -> None:
        text = "".join(self._text).strip()
        if text:
            self.paragraphs.append(text)
            self.prose.append("".join(self._prose).strip())
            self.marked.append("".join(self._marked).strip())
        self._text, self._prose, self._marked = [], [], []

    def close(self) -> None:
        super().close()
        self._flush()


def read_site(site_dir: str) -> Dict[str, Page]:
    """Every HTML page of the site, by its path relative to ``site_dir`` (``a/index.html``)."""
    pages = {}
    for folder, _, files in os.walk(site_dir):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                page = Page()
                with open(path, encoding="utf-8") as f:
                    page.feed(f.read())
                page.close()
                pages[os.path.relpath(path, site_dir).replace(os.sep, "/")] = page
    return pages


# -- text ----------------------------------------------------------------------------------

def raw_markup(pages: Dict[str, Page]) -> List[str]:
    """Sphinx roles, reST hyperlink references and literal-block markers left visible in
    the text of a page, its code spans included (not in its code blocks)."""
    problems = []
    for path, page in sorted(pages.items()):
        for text, prose, marked in zip(page.paragraphs, page.prose, page.marked):
            if ROLE.search(text) or LITERAL_MARKER.search(prose) or REST_LINK.search(marked):
                problems.append(f"{path}: reST markup shows as text: {text[:120]!r}")
    return problems


# -- public names ---------------------------------------------------------------------------

def public_names(modules: Iterable[str] = PUBLIC_MODULES) -> Dict[int, Tuple[Any, Set[str]]]:
    """Each public object (by id) and the entry ids that document it: every public name it
    has (``fiber.queues.Pipe``, ``fiber.Pipe``) and, for fiber's own classes and functions,
    its path (``fiber.connection.Pipe``)."""
    objects: Dict[int, Tuple[Any, Set[str]]] = {}
    for modname in modules:
        module = importlib.import_module(modname)
        for name in module.__all__:
            obj = getattr(module, name)
            ids = objects.setdefault(id(obj), (obj, set()))[1]
            ids.add(f"{modname}.{name}")
            if isinstance(obj, type(sys)):
                ids.add(obj.__name__)
            elif (getattr(obj, "__module__", "") or "").split(".")[0] == "fiber" and hasattr(
                    obj, "__qualname__"):
                ids.add(f"{obj.__module__}.{obj.__qualname__}")
    return objects


def entries(pages: Dict[str, Page], modules: Iterable[str] = PUBLIC_MODULES) -> List[str]:
    """Public names documented on no reference page, or on more than one."""
    reference = {p: page for p, page in pages.items() if p.startswith(REFERENCE)}
    problems = []
    for obj, ids in public_names(modules).values():
        where = sorted(p for p, page in reference.items() if ids & page.ids)
        names = ", ".join(sorted(ids))
        if not where:
            problems.append(f"no entry on any reference page for {names}")
        elif len(where) > 1:
            problems.append(f"{names} documented on {len(where)} reference pages: "
                            + ", ".join(where))
        elif callable(obj) and (not isinstance(obj, type) or "__init__" in vars(obj)):
            page = reference[where[0]]
            generated = ids & set(page.headings)
            if generated and not generated & page.signed:
                problems.append(f"{where[0]}: the entry of {names} shows no signature")
    return problems


def private_names(pages: Dict[str, Page], modules: Iterable[str] = PUBLIC_MODULES) -> List[str]:
    """Private or internal names shown on the reference pages."""
    exported = {m: set(importlib.import_module(m).__all__) for m in modules}
    problems = []
    for path, page in sorted(pages.items()):
        if not path.startswith(REFERENCE):
            continue
        for heading in page.headings:
            module, _, name = heading.rpartition(".")
            if any(part.startswith("_") and not part.startswith("__")
                   for part in heading.split(".")):
                problems.append(f"{path}: an entry for a private name: {heading}")
            elif module in exported and name not in exported[module] and (
                    heading not in exported):
                problems.append(f"{path}: an entry for {heading}, not in {module}.__all__")
        for title, linked in page.bases:
            if title.startswith("fiber.") and not linked:
                problems.append(f"{path}: a base class without an entry: {title}")
        for text in page.paragraphs:
            for match in PRIVATE_PATH.findall(text):
                problems.append(f"{path}: a private module named in the text: {match}")
    return problems


# -- links ----------------------------------------------------------------------------------

def _target(page_path: str, href: str) -> Optional[Tuple[str, str]]:
    """The page (relative to the site) and the fragment that ``href`` on ``page_path``
    points to; None for a link that leaves the site."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:", "data:")):
        return None
    path = unquote(parts.path)
    if not path:
        return page_path, parts.fragment
    base = "" if path.startswith("/") else posixpath.dirname(page_path)  # 404.html: "/x"
    joined = posixpath.normpath(posixpath.join(base, path.lstrip("/")))
    if path.endswith("/") or joined == ".":
        joined = posixpath.join(joined, "index.html") if joined != "." else "index.html"
    return joined, parts.fragment


def broken_links(pages: Dict[str, Page], site_dir: str) -> List[str]:
    """Links and anchors of the site that lead nowhere."""
    problems = []
    for path, page in sorted(pages.items()):
        for href in sorted(set(page.links)):
            target = _target(path, href)
            if target is None:
                continue
            file, fragment = target
            if file.startswith("../"):
                problems.append(f"{path}: link outside the site: {href}")
                continue
            full = os.path.join(site_dir, file)
            if os.path.isdir(full):
                file, full = posixpath.join(file, "index.html"), os.path.join(full, "index.html")
            if not os.path.exists(full):
                problems.append(f"{path}: broken link: {href}")
            elif fragment and file in pages and fragment not in pages[file].ids:
                problems.append(f"{path}: broken anchor: {href}")
    return problems


def _github_anchors(markdown: str) -> Set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def readme_links(readme: str, repo: str, docs_dir: str, pages: Dict[str, Page]) -> List[str]:
    """Relative links of the README: the file exists; a link into the docs reaches a built
    page and, with a fragment, one of its anchors."""
    problems = []
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    docs = os.path.relpath(docs_dir, repo).replace(os.sep, "/")
    for href in sorted(set(MD_LINK.findall(text))):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue
        name = os.path.basename(readme)
        path = posixpath.normpath(unquote(parts.path)) if parts.path else ""
        if path and not os.path.exists(os.path.join(repo, path)):
            problems.append(f"{name}: broken link: {href}")
            continue
        if not parts.fragment:
            continue
        if not path:
            if parts.fragment not in _github_anchors(text):
                problems.append(f"{name}: broken anchor: {href}")
            continue
        if not (path.startswith(docs + "/") and path.endswith(".md")):
            continue
        page = path[len(docs) + 1:-3]
        built = "index.html" if page == "index" else (
            page[:-len("index")] + "index.html" if page.endswith("/index")
            else page + "/index.html")
        if built not in pages:
            problems.append(f"{name}: {href}: the page is not in the site")
        elif parts.fragment not in pages[built].ids:
            problems.append(f"{name}: broken anchor: {href}")
    return problems


# -- all of it ------------------------------------------------------------------------------

def check(site_dir: str, docs_dir: str, readme: Optional[str] = None) -> List[str]:
    """Every problem of the site built in ``site_dir`` from ``docs_dir``."""
    pages = read_site(site_dir)
    problems = raw_markup(pages) + entries(pages) + private_names(pages)
    problems += broken_links(pages, site_dir)
    if readme:
        problems += readme_links(readme, os.path.dirname(os.path.abspath(readme)), docs_dir,
                                 pages)
    return problems


def on_post_build(config: Any, **kwargs: Any) -> None:
    """The mkdocs hook: each problem is a warning, which ``--strict`` makes an error."""
    repo = os.path.dirname(os.path.abspath(config["config_file_path"]))
    src = os.path.join(repo, "src")
    if src not in sys.path:  # the checks import fiber; mkdocstrings reads src/ too
        sys.path.insert(0, src)
    readme = os.path.join(repo, "README.md")
    for problem in check(config["site_dir"], config["docs_dir"], readme):
        _log.warning("check_site: %s", problem)


def main(argv: List[str]) -> int:
    site = argv[0] if argv else "site"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(site, os.path.join(repo, "docs"), os.path.join(repo, "README.md"))
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
