"""The ``local`` backend: every job a subprocess of this machine.

- `_backend`: `LocalBackend` (submit, watch, cancel subprocesses).
- `_forkserver`: the fork server that starts jobs from a pre-imported template
  process; `_forkserver_template`: that template's program.
"""

from ..._exports import publish
from ._backend import LocalBackend

__all__ = ["LocalBackend"]

publish(__name__, LocalBackend)
