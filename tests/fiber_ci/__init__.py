"""What serves only fiber's own tests, benchmarks and CI, kept out of the wheel (users get
`fiber.testing.conformance`, the API suite a backend's author runs):

- `fiber_ci.netns`: several "hosts" on one Linux machine (network namespaces joined by a
  bridge, root only; `_hosts`, `_namespaces`) with a userspace link shaper (`_shaper`), and
  the ``netns`` backend that runs every job in one of them, so that multi-host behaviour
  (addresses, partitions, killed hosts, lossy links) is tested without a cluster.
- `fiber_ci.standins`: the ``standins`` backend, whose jobs are simulated pool workers
  (`_standin`), so that a real master is measured at sizes this machine cannot hold as
  processes (``benchmarks/master_scale.py``).
- `fiber_ci.cpython_suite`: CPython's own multiprocessing tests run on fiber.
- `fiber_ci.pool_service`: the pool's master-side service driven through its handlers
  with no hub, for the unit tests of the pool's protocol.
- `fiber_ci.failure_log`: a pytest plugin of scripts/test that writes each failed test's
  message down as it fails (a run stopped at its time limit writes no report).

Importable from the checkout's ``tests/`` (pytest's ``pythonpath``, and so a job's, whose
``sys.path`` is its master's); the processes these modules start themselves are given it
(`HOME`, `subprocess_env`).
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Mapping, Optional

#: The directory that holds this package (the checkout's ``tests/``).
HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subprocess_env(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``env`` (default: this process's environment) with `HOME` first on ``PYTHONPATH``,
    so that a new interpreter imports this package (``python -m fiber_ci...``)."""
    env = dict(os.environ if env is None else env)
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != HOME]
    env["PYTHONPATH"] = os.pathsep.join([HOME, *path])
    return env


def shipped(names: Iterable[str]) -> List[str]:
    """The files of a wheel (``names``, as its zip lists them) that serve only fiber's CI:
    a file outside the package ``fiber`` and its ``.dist-info`` (this package included),
    or one of ``fiber/testing/`` but the conformance suite and ``__init__.py``, this
    package's former home. ``scripts/package-check`` and ``tests/unit/test_install.py``
    fail on any."""
    return [n for n in names
            if not n.split("/")[0].endswith(".dist-info")
            and (not n.startswith("fiber/")
                 or n.startswith("fiber/testing/") and n != "fiber/testing/__init__.py"
                 and not n.startswith("fiber/testing/conformance/"))]
