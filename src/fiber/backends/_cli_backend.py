"""What the ``fiber`` command needs of a backend: an interface of its own, optional.

``fiber run`` starts a program as a job of the cluster and follows its output
(``main_spec``, ``follow``, ``stop_main``, ``detach``, ``volume_settings``); ``fiber ps``,
``fiber logs`` and ``fiber stop`` list, read and remove the fiber jobs of any program
that the cluster still keeps (``find_jobs``, ``read_logs``, ``remove_jobs``). A backend
that can do some of it subclasses `CommandLineBackend` instead of ``Backend`` and
overrides what it can; the defaults say what it cannot. The command refuses a backend
that is not one.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence

from ..errors import BackendError
from ._base import Backend, JobHandle, JobInfo, JobSpec

__all__ = ["CommandLineBackend"]


class CommandLineBackend(Backend):
    """A backend that the ``fiber`` command can use (see the module)."""

    def follow(self, handle: JobHandle) -> Optional[Iterator[str]]:
        """The job's output as it is written, until the job ends; None when the backend
        cannot stream it (the local backend: the job writes to this process's own stdout)."""
        return None

    def main_spec(self, spec: JobSpec) -> JobSpec:
        """The spec of a main program started by ``fiber run``: ``spec`` with what it needs
        to start jobs of its own on this cluster (the Docker backend gives it the engine)."""
        return spec

    def stop_main(self, handle: JobHandle, force: bool = False) -> None:
        """Stop a program that ``fiber run`` started as job ``handle``: by default its job
        alone (its processes end the jobs they started). A backend whose cluster would
        start the program's queued jobs meanwhile cancels those too."""
        self.cancel([handle], force=force)

    def detach(self) -> None:
        """From now on, let this process's jobs outlive it (``fiber run --detach``).

        Raises:
            BackendError: the backend cannot (its jobs are this process's children).
        """
        raise BackendError(f"the {self.name} backend cannot leave a job running after "
                           "fiber run ends (run fiber run itself in the background)")

    def volume_settings(self, volumes: Sequence[str]) -> Dict[str, str]:
        """``fiber run -v VOLUME``: the config values (``fiber.init`` keys) that mount
        these persistent volumes in the program's job and in the jobs it starts (the
        values travel to the program with the rest of its config).

        Raises:
            fiber.errors.BackendError: the backend has no persistent volumes (the default).
            fiber.errors.ConfigError: a volume is not in the backend's form.
        """
        raise BackendError(f"the {self.name} backend has no persistent volumes to mount "
                           f"(fiber run --volume {' '.join(volumes)}); its settings "
                           "(fiber.config) say what it can mount")

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        """Every fiber job the cluster knows (only ``program``'s if given), oldest first.

        Raises:
            fiber.errors.BackendError: the backend keeps no record of jobs (the default).
        """
        raise BackendError(self._no_record("list jobs"))

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        """The output of any fiber job the cluster still has.

        Raises:
            fiber.errors.BackendError: the backend keeps no record of jobs (the default).
        """
        raise BackendError(self._no_record("read the logs of a job it did not start"))

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        """Kill and remove every job of ``program``, or (no program) the jobs named; the
        ids of the jobs removed.

        Raises:
            fiber.errors.BackendError: the backend keeps no record of jobs (the default).
        """
        raise BackendError(self._no_record("stop a job it did not start"))

    def _no_record(self, what: str) -> str:
        """Why this backend cannot do ``what``: it keeps no record of its jobs."""
        return (f"the {self.name} backend cannot {what} (use the cluster's own tools)")
