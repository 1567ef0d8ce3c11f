"""What a running program says of itself to ``fiber top``: its pools and its processes,
served on its hub (the ``status`` service), to a client holding the program's secret.

    fiber top ── reads <user dir>/programs/<pid>.json (0600: hub address, secret)
              ── connects to the hub, authenticates with the program's secret
              ── [status, get] ─────────▶ StatusService: each source's snapshot
              ◀─ {program, pools: [...], processes: [...]}   (a dict of plain values)

The API packages register their *sources* here (a pool its ``status()``, the process
package the children of this process); a source is held by a weak reference to its
owner, so that a pool collected or terminated drops out by itself. Nothing listens
anywhere but on the hub, which refuses whoever does not hold the secret.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Tuple

from .._log import recent_warnings
from ..transport.server import Peer, Server, Service

__all__ = ["SERVICE", "StatusService", "add_source", "snapshot"]

SERVICE = b"status"

_lock = threading.Lock()
_ids = itertools.count(1)
#: id -> (kind, weak reference to the owner, its snapshot function of the owner)
_sources: Dict[int, Tuple[str, weakref.ref[Any], Callable[[Any], Any]]] = {}


def add_source(kind: str, owner: Any, describe: Callable[[Any], Any]) -> None:
    """Show ``describe(owner)`` under ``kind`` ("pools", "processes") while ``owner``
    lives (and ``describe`` does not return None).

    No weak-reference callback removes a source: it would run wherever garbage collection
    does, also inside this module's lock (a deadlock). Sources whose owner is gone are
    dropped here and by `snapshot` instead."""
    ref = weakref.ref(owner)
    with _lock:
        _prune()
        _sources[next(_ids)] = (kind, ref, describe)


def _prune() -> None:
    """Drop the sources whose owner is gone (under ``_lock``)."""
    for dead in [k for k, (_, r, _) in _sources.items() if r() is None]:
        del _sources[dead]


def snapshot() -> Dict[str, Any]:
    """This program as ``fiber top`` shows it."""
    with _lock:
        _prune()
        sources = list(_sources.values())
    warned, recent = recent_warnings()
    out: Dict[str, Any] = {"pid": os.getpid(), "argv": list(sys.argv), "time": time.time(),
                           "pools": [], "processes": [], "warnings_total": warned,
                           "warnings": [{"time": t, "text": text} for t, text in recent]}
    for kind, ref, describe in sources:
        owner = ref()
        if owner is None:
            continue
        try:
            value = describe(owner)
        except Exception as e:  # one broken source must not hide the others
            value = {"error": f"{type(e).__name__}: {e}"}
        if value is None:
            continue
        if isinstance(value, list):
            out.setdefault(kind, []).extend(value)
        else:
            out.setdefault(kind, []).append(value)
    return out


class StatusService(Service):
    """Answers ``get`` with `snapshot` (on the hub's thread, under its lock)."""

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        if op != b"get":
            raise ValueError(f"unknown status operation {op!r}")
        server.reply_value(peer, req_id, snapshot())
