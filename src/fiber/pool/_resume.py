"""A pool worker (or a job of several) whose connection was reset, while it and its
master both live, connects again, names the tasks it holds and goes on: every result is
delivered once, a task may run twice. The protocol: docs/contributing/resets.md, "Pools"."""

from __future__ import annotations

import time
from typing import Iterable, List, Optional, Sequence, Tuple

from .._core._clients import get_client
from ..transport.client import CannotConnect, Client, ConnectionLost
from ..transport.receipts import REANCHOR_WAIT_S
from ..transport.serialization import Frame

__all__ = ["RESUME_WAIT_S", "reconnect", "held_ids"]

#: Seconds the master holds the tasks of a worker whose connection was reset, for it to
#: connect again: as long as a process's wait to anchor again (see ``REANCHOR_WAIT_S``:
#: with 5 s, a worker 100 ms away behind 10% loss was now and then replaced).
RESUME_WAIT_S = REANCHOR_WAIT_S
#: Seconds the worker tries: longer, as the master's wait may have begun after the
#: worker's (the reset's RST lost on the way, the master learns of it later); the
#: master's answer (``ok``, or ``stop`` once its wait is over) settles it.
_TRY_S = 2 * RESUME_WAIT_S
_RETRY_S = 0.2


def reconnect(address: str, pool_name: bytes, op: bytes, frames: Sequence[Frame]
              ) -> Optional[Tuple[Client, List[Frame]]]:
    """A new connection to the master, on which it answered ``op`` (``resume``: a
    worker and the ids of the tasks it holds; ``resume_job``: a job's workers, see
    `_group`) with ``ok``: the connection and the answer's payload. None when the master
    no longer waits for it (it ends). Tried for ``_TRY_S``.

    Raises:
        ConnectionLost: the master is gone (refused), or could not be reached in time.
    """
    deadline = time.monotonic() + _TRY_S
    while True:
        try:
            client = get_client(address)
            assert isinstance(client, Client)  # a worker is a job: its master is elsewhere
            status, payload = client.request(pool_name, op, frames,
                                             timeout=max(1.0, deadline - time.monotonic()))
        except ConnectionLost as e:
            if (isinstance(e, CannotConnect) and e.refused) or time.monotonic() >= deadline:
                raise
            time.sleep(_RETRY_S)
            continue
        return (client, payload) if status == b"ok" else None


def held_ids(held: Iterable[Tuple[int, object, object]],
             out: Iterable[Tuple[int, object, object]]) -> Iterable[int]:
    """The ids of the tasks a worker holds (``held``) and of its unsent results (``out``)."""
    yield from (task[0] for task in held)
    yield from (result[0] for result in out)
