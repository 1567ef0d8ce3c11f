"""Run as ``__main__`` by tests/backends/local/test_managers_local.py: a program that
leaves its managers to the interpreter's exit, as the original fiber's
``examples/async_manager.py`` does. It must exit with code 0 and write nothing to
stderr: every manager's server is shut down (its object jobs with it) before fiber's exit
function would end its job.

``python manager_exit_script.py global``: the managers live in globals until exit.
``python manager_exit_script.py collected``: they are collected when ``run`` returns.
"""

import sys

import fiber
from fiber.testing.conformance.support import manager_helpers as mh

kept = []


def run() -> None:
    remote = mh.Remote()
    remote.start()
    counters = [remote.Counter(i) for i in range(3)]
    print([h.get(timeout=60) for h in [c.add(1) for c in counters]])
    sync = fiber.Manager()
    shared = sync.dict(a=1)
    print(sorted(shared.items()))
    if sys.argv[1] == "global":
        kept.extend([remote, counters, sync, shared])


if __name__ == "__main__":
    run()
    sys.stdout.flush()
