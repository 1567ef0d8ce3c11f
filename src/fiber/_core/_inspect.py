"""What a running program says of itself to ``fiber top``: its pools and its processes,
served on its hub (the ``status`` service), to a client holding the program's secret.

    fiber top ── reads <user dir>/programs/<pid>.json (0600: hub address, secret)
              ── connects to the hub, authenticates with the program's secret
              ── [status, get] ─────────▶ StatusService: each source's snapshot
              ◀─ {program, pools: [...], processes: [...]}   (a dict of plain values)

The API packages register their *sources* here (a pool its ``status()``, the process
package the children of this process); a source is held by a weak reference to its
owner, so that a pool collected or terminated drops out by itself (the sources are kept
in ``here.transport``). Nothing listens anywhere but on the hub, which refuses whoever
does not hold the secret.
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, TypeVar

from .._log import recent_warnings
from .._process_state import here
from ..transport.serialization import Frame
from ..transport.server import Peer, Server, Service

__all__ = ["SERVICE", "StatusService", "add_source", "add_field", "snapshot", "pause",
           "viewing", "SLICE", "rows_shown", "rows_wanted", "Rows", "Counted"]

SERVICE = b"status"
#: Rows a source builds at a time for a viewer (see `pause`).
SLICE = 64
#: Seconds a viewer's thread sleeps between two slices (see `pause`).
PAUSE_S = 0.0002
#: CPU seconds a viewer's thread computes between two such sleeps, at least.
BUSY_S = 0.0005

# What this thread is (a viewer's, see `viewing`; its rows, `rows_shown`), the sources,
# their ids and lock, and the fields: in ``here.transport`` (``status_viewer``,
# ``status_sources``, ``status_source_ids``, ``status_lock``, ``status_fields``).

#: ``(first, count)``: the rows of a long table (a pool's workers) a viewer shows
Rows = Tuple[int, int]

#: What a source describes (a pool, a process...).
_Owner = TypeVar("_Owner")


def add_source(kind: str, owner: _Owner, describe: Callable[[_Owner], object]) -> None:
    """Show ``describe(owner)`` under ``kind`` ("pools", "processes") while ``owner``
    lives (and ``describe`` does not return None).

    No weak-reference callback removes a source: it would run wherever garbage collection
    does, also inside this module's lock (a deadlock). Sources whose owner is gone are
    dropped here and by `snapshot` instead."""
    ref = weakref.ref(owner)
    state = here.transport
    with state.status_lock:
        _prune()
        state.status_sources[next(state.status_source_ids)] = (kind, ref, describe)


class Counted(NamedTuple):
    """What a source of a long table (a process's children) gives a viewer that shows
    some of its rows (see `rows_shown`): those rows, built, and what every row adds up
    to, counted without a row each. `snapshot` puts the rows under the source's kind and
    adds ``counts`` to its own (numbers added, dicts of numbers added key by key)."""

    rows: List[Any]
    counts: Dict[str, Any]


def add_field(name: str, value: Callable[[], object]) -> None:
    """Give viewers outside the program (``fiber top``, ``fiber dashboard PID``) ``value()``
    under ``name`` with each snapshot. It is called on the hub's thread, under its lock:
    it must not wait (a backend's answer, say, is fetched on a thread of its own)."""
    here.transport.status_fields[name] = value


def _prune() -> None:
    """Drop the sources whose owner is gone (under ``here.transport.status_lock``)."""
    sources = here.transport.status_sources
    for dead in [k for k, (_, r, _) in sources.items() if r() is None]:
        del sources[dead]


def pause() -> None:
    """Between two slices of a long table (`SLICE` rows) that a source builds: on a
    viewer's thread (see `viewing`) that has computed `BUSY_S` since it last paused (or
    began), a short sleep, with the hub's lock let go, that hands the GIL to the hub's
    thread; elsewhere (the hub's own thread), or sooner, nothing.

    Why: the hub's thread gives up the GIL at every send and receive, and gets it back
    from a thread that computes only when that thread lets go, or after the interpreter's
    switch interval (5 ms). A 1,024-worker table built in one go (~25 ms with its JSON)
    so held the hub for several times its own cost: a Pool(1024)'s rounds took 1.26x
    while a page was open. In slices, the hub waits for `BUSY_S` and a slice at most.
    Not at every slice: a sleep costs the sleeper 20-130 µs of CPU (taking the GIL back
    from a busy thread), as much as a slice of a page's rows; a page's poll slept a dozen
    times, for 1 ms of its 6."""
    viewer = here.transport.status_viewer
    if getattr(viewer, "on", False):
        if time.thread_time() - viewer.since >= BUSY_S:
            time.sleep(PAUSE_S)
            viewer.since = time.thread_time()


@contextlib.contextmanager
def viewing(on: bool = True) -> Iterator[None]:
    """Within it, this thread is a viewer's (``on``: the dashboard's, which builds and
    encodes a snapshot in slices, see `pause`), or not (the hub's, which never sleeps)."""
    viewer = here.transport.status_viewer
    before = getattr(viewer, "on", False), getattr(viewer, "since", 0.0)
    viewer.on, viewer.since = on, time.thread_time()
    try:
        yield
    finally:
        viewer.on, viewer.since = before


@contextlib.contextmanager
def rows_shown(rows: Optional[Rows]) -> Iterator[None]:
    """Within it, this thread's snapshots build only ``rows`` (``(first, count)``; None:
    all) of a long table, and count the rest (a pool's workers by state): a dashboard's
    page shows a page of a 1,024-worker table, and /metrics none of its rows."""
    viewer = here.transport.status_viewer
    before = getattr(viewer, "rows", None)
    viewer.rows = rows
    try:
        yield
    finally:
        viewer.rows = before


def rows_wanted() -> Optional[Rows]:
    """The rows of a long table this thread's snapshot builds (None: all; see
    `rows_shown`)."""
    rows: Optional[Rows] = getattr(here.transport.status_viewer, "rows", None)
    return rows


def snapshot(viewer: bool = False) -> Dict[str, Any]:
    """This program as ``fiber top`` shows it. ``viewer``: taken on a thread of its own
    (the dashboard's), not the hub's: the sources then build long tables in slices (see
    `pause`)."""
    with viewing(viewer):
        return _snapshot()


def _snapshot() -> Dict[str, Any]:
    state = here.transport
    with state.status_lock:
        _prune()
        sources = list(state.status_sources.values())
    warned, recent = recent_warnings()
    out: Dict[str, Any] = {"pid": here.pid, "argv": list(sys.argv), "time": time.time(),
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
        if isinstance(value, Counted):
            out.setdefault(kind, []).extend(value.rows)
            _add_counts(out, value.counts)
        elif isinstance(value, list):
            out.setdefault(kind, []).extend(value)
        else:
            out.setdefault(kind, []).append(value)
    return out


def _add_counts(out: Dict[str, Any], counts: Dict[str, Any]) -> None:
    """Add ``counts`` (a `Counted`'s) to ``out``'s."""
    for key, value in counts.items():
        if isinstance(value, dict):
            into = out.setdefault(key, {})
            for name, n in value.items():
                into[name] = into.get(name, 0) + n
        else:
            out[key] = out.get(key, 0) + value


class StatusService(Service):
    """Answers ``get`` with `snapshot` (on the hub's thread, under its lock)."""

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Frame]) -> None:
        if op != b"get":
            raise ValueError(f"unknown status operation {op!r}")
        out = snapshot()
        for name, value in list(here.transport.status_fields.items()):
            try:
                out[name] = value()
            except Exception as e:  # a broken field must not hide the snapshot
                out[name] = {"error": f"{type(e).__name__}: {e}"}
        server.reply_value(peer, req_id, out)
