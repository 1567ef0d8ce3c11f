"""What a dashboard counts of every worker without building its row (`tally`) and the
bytes of every worker's connection added up (`Server.traffic`): both are figures of a
1,024-worker pool's /metrics, computed in bulk; they must be what one row, one
connection at a time gives."""

from __future__ import annotations

import collections
import types
from typing import Any, List

from fiber.pool._state import WorkerState
from fiber.pool._status import new_tally, rows, tally
from fiber.transport.server import Server


def _workers() -> List[WorkerState]:
    out = []
    for i in range(40):
        ws = WorkerState(i, types.SimpleNamespace(name=f"PoolWorker-{i}", job_id=str(i),
                                                  host="h"))  # type: ignore[arg-type]
        kind = i % 8
        ws.connected = kind != 0  # 0: starting
        ws.lost = kind == 1
        ws.retiring = kind == 2
        ws.resume_by = 5.0 if kind == 3 else 0.0  # reconnecting
        ws.connected = ws.connected and kind != 3
        ws.restarts = i % 3
        if kind in (2, 3, 4, 5):  # holding tasks: one, or a chunk of several items
            for t in range(kind - 1):
                ws.pending[t] = types.SimpleNamespace(  # type: ignore[assignment]
                    items=t + 1, label=f"map(f) {t}")
        out.append(ws)
    return out


def test_a_tally_counts_what_the_rows_show() -> None:
    workers = _workers()
    by_rows = rows(workers, 10.0)
    counts = new_tally()
    for start in range(0, len(workers), 7):  # in slices, as a viewer's thread takes them
        tally(workers[start:start + 7], counts)
    assert counts == {
        "workers_total": len(by_rows),
        "worker_states": dict(collections.Counter(r["state"] for r in by_rows)),
        "restarts": sum(r["restarts"] for r in by_rows),
        "running": sum(r["held"] for r in by_rows)}
    assert set(counts["worker_states"]) == {"starting", "retiring", "reconnecting",
                                            "running", "idle"}
    assert counts["workers_total"] == 35 and counts["running"] > 0


def test_the_bytes_of_many_connections_add_up() -> None:
    def peer(sent: int, received: int) -> Any:
        conn = types.SimpleNamespace(outbox=types.SimpleNamespace(nbytes=sent),
                                     reader=types.SimpleNamespace(nbytes=received))
        return types.SimpleNamespace(conn=conn)

    peers = [peer(i, 3 * i) for i in range(1, 300)] + [types.SimpleNamespace(conn=None)]
    assert Server.traffic(peers) == (sum(range(1, 300)), 3 * sum(range(1, 300)))
    assert Server.traffic([]) == (0, 0)
    assert Server.traffic(peers[-1:]) == (0, 0)  # a thread of this process: no bytes
