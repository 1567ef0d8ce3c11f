"""An Optuna study that the workers of a fiber pool share, on any hosts: its journal held
by a fiber manager, with no shared file system and no database server.

Optuna runs one study on many machines as many processes that share its storage; its
journal storage (``optuna.storages.JournalStorage``) keeps every change to the study as a
log entry, in order, in a journal backend: a file, Redis, or this, a list in a
`fiber.Manager`.

How reads and appends go: the API reference's page of this module."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

from ._version import install_hint

try:
    from optuna.storages.journal import BaseJournalBackend
except ImportError as e:  # an extra: say how to install it
    raise ImportError(f"fiber.optuna needs optuna 4.0 or later, which is not installed: "
                      f"{install_hint('optuna')}", name=e.name) from e

__all__ = ["ManagerJournal"]


class ManagerJournal(BaseJournalBackend):  # type: ignore[misc]
    """Optuna's journal backend over a list that a fiber manager holds (``manager.list()``):
    it pickles with its proxy, so every worker of a pool, on any host, reads and appends
    the same journal."""

    def __init__(self, logs: Any) -> None:
        self._logs = logs

    def read_logs(self, log_number_from: int) -> Iterable[Dict[str, Any]]:
        """The entries from number ``log_number_from`` on (one round trip)."""
        entries: List[Dict[str, Any]] = self._logs[log_number_from:]
        return entries

    def append_logs(self, logs: List[Dict[str, Any]]) -> None:
        """Append ``logs`` together (one call to the manager)."""
        self._logs.extend(logs)
