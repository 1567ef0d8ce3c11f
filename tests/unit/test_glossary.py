"""The glossary's words of the code (docs/concepts.md) name modules that use them: an entry
whose word left its module, or whose module moved, fails here."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRY = re.compile(r"^\*\*([^*]+)\*\* \(`([\w/]+\.py)`\)\.", re.M)


def _entries():
    with open(os.path.join(ROOT, "docs", "concepts.md"), encoding="utf-8") as f:
        text = f.read()
    return ENTRY.findall(text.split("## Words of the code", 1)[1])


def test_the_words_a_newcomer_meets_are_defined():
    words = {word for word, _ in _entries()}
    assert {"ticket", "receipts", "lease", "park", "Made", "StandIn", "SpinPays", "Door",
            "Keeper", "group", "late", "suspected", "retire", "resume"} <= words


def test_each_word_is_used_by_its_module():
    for word, path in _entries():
        full = os.path.join(ROOT, "src", "fiber", path)
        assert os.path.exists(full), f"glossary: {word!r} names {path}, which is gone"
        with open(full, encoding="utf-8") as f:
            code = f.read().lower()
        forms = {word.lower(), word.lower().replace(" ", "_")}
        assert any(form in code for form in forms), f"glossary: {path} no longer says {word!r}"
