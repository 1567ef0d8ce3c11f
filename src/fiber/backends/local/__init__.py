"""The ``local`` backend: every job a subprocess of this machine.

- :mod:`._backend`: :class:`LocalBackend` (submit, watch, cancel subprocesses).
- :mod:`._forkserver`: the fork server that starts jobs from a pre-imported template
  process; :mod:`._forkserver_template`: that template's program.
"""

from ..._exports import publish
from ._backend import LocalBackend

__all__ = ["LocalBackend"]

publish(__name__, LocalBackend)
