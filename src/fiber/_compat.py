"""Names of ``multiprocessing.__all__`` that fiber does not provide (yet), with why.

The public-name test checks that every name of ``multiprocessing.__all__`` is either
provided by ``fiber`` or listed here with its reason; an entry is removed when the name
lands.
"""

from __future__ import annotations

from typing import Dict

UNSUPPORTED: Dict[str, str] = {
    "Manager": "not built yet: managers are issue #4",
    "Lock": "not built yet: cluster-wide synchronization primitives are issue #4",
    "RLock": "not built yet: issue #4",
    "Semaphore": "not built yet: issue #4",
    "BoundedSemaphore": "not built yet: issue #4",
    "Condition": "not built yet: issue #4",
    "Event": "not built yet: issue #4",
    "Barrier": "not built yet: issue #4",
    "Value": "not built yet: issue #4",
    "Array": "not built yet: issue #4",
    "RawValue": "shared memory without a lock cannot span hosts; use Value (issue #4)",
    "RawArray": "shared memory without a lock cannot span hosts; use Array (issue #4)",
    "set_forkserver_preload": "",  # provided, kept for the test's completeness
}
UNSUPPORTED = {k: v for k, v in UNSUPPORTED.items() if v}
