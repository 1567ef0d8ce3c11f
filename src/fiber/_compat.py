"""Names of ``multiprocessing.__all__`` that fiber does not provide (yet), with why.

The public-name test checks that every name of ``multiprocessing.__all__`` is either
provided by ``fiber`` or listed here with its reason; an entry is removed when the name
lands.
"""

from __future__ import annotations

from typing import Dict

UNSUPPORTED: Dict[str, str] = {}
