"""The ``sge`` backend: every fiber process is a Grid Engine job; a batch of them (a
pool's workers) one array job.

- `_backend`: `SgeBackend` (submit, watch, cancel; array jobs; lost nodes).
- `_jobs`: the jobs of a program, found again by their context; their output.
- `_status`: ``qstat``/``qacct`` output parsed into job states.
- `_settings`: `SgeSettings`, the ``sge_*`` configuration keys.
"""

from ..._exports import publish
from ._backend import PROGRAM_ENV, SgeBackend, qmaster_host, resource_args
from ._settings import SgeSettings

__all__ = ["SgeBackend", "SgeSettings", "PROGRAM_ENV", "qmaster_host", "resource_args"]

publish(__name__, SgeBackend)
