"""The ``ssh`` backend: every job a process started over ssh on a list of hosts.

- `_backend`: `SshBackend` (placement by free slots, sessions, status, cancel).
- `_hosts`: the hosts, their slots and their state (up, down, new).
- `_session`: one ssh client in the master: a job's session, or a probe of a host.
- `_keeper`: what runs on a host for each job: takes the job's values from the
  session's stdin, starts the job, passes signals on, ends as the job ended.
- `_jobs`: the jobs' logs and records on the master's machine (``fiber ps``, ``logs``,
  ``stop``).
- `_settings`: `SshSettings` (``ssh_*`` keys) and the host list's syntax.
"""

from ..._exports import publish
from ._backend import SshBackend
from ._settings import SshSettings, parse_hosts

__all__ = ["SshBackend", "SshSettings", "parse_hosts"]

publish(__name__, SshBackend)
