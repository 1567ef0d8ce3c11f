"""The attributes of a `Process` that read or set its record and
nothing else: its name, daemon flag and authkey (as multiprocessing's), and what fiber
adds, the job's host, id and how it ended. A base class, so that ``_process`` keeps to
the life cycle of the job."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..errors import ProcessStateError
from ..transport import auth
from ._job import Job

__all__ = ["ProcessAttributes"]


class ProcessAttributes:
    """Name, daemon, authkey, and the job's host, id and end (see the module)."""

    _name: str
    _config: Dict[str, Any]
    _job: Optional[Job]

    @property
    def name(self) -> str:
        """The process's name (``Process-1``, ``PoolWorker-3``...): in reprs, logs and the
        prefix of its forwarded output; settable.

        Raises:
            TypeError: (assignment) the name is not a string.
        """
        return self._name

    @name.setter
    def name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError("name must be a string")
        self._name = name

    @property
    def daemon(self) -> bool:
        """Whether the process is daemonic: terminated when its parent exits, and unable to
        start children of its own.

        Set it before ``start``. At exit a parent cancels its daemonic children's jobs and
        joins the others, as multiprocessing does.

        Raises:
            fiber.errors.ProcessStateError (an AssertionError, as multiprocessing's):
                (assignment) the process has already started.
        """
        return bool(self._config.get("daemon", False))

    @daemon.setter
    def daemon(self, daemonic: bool) -> None:
        if self._job is not None:
            raise ProcessStateError("process has already started")
        self._config["daemon"] = bool(daemonic)

    @property
    def authkey(self) -> bytes:
        """The program's secret unless set for this process (as in multiprocessing)."""
        key = self._config.get("authkey")
        return bytes(key) if key is not None else auth.program_secret()

    @authkey.setter
    def authkey(self, authkey: bytes) -> None:
        self._config["authkey"] = bytes(authkey)

    @property
    def host(self) -> str:
        """The host the job runs on, once it has connected (fiber extension)."""
        job = self._job
        return job.remote_host if job is not None else ""

    @property
    def job_id(self) -> str:
        """The backend's id of the job (fiber extension); "" before ``start``."""
        job = self._job
        return job.handle.job_id if job is not None and job.handle is not None else ""

    @property
    def cancelled(self) -> bool:
        """Whether this process asked the job to end (``terminate``, ``kill``, a pool's
        shutdown): its end is then no failure (fiber extension)."""
        job = self._job
        return job is not None and job.cancel_requested

    @property
    def exit_reason(self) -> str:
        """What the backend said of the job's end ("OOMKilled", "node failure", ...); ""
        while it runs or when it said nothing more than the exit code (fiber extension)."""
        job = self._job
        status = job.status if job is not None else None
        return status.reason if status is not None else ""
