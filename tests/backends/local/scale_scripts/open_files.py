"""Start a pool under the open-file limits given: python open_files.py SOFT HARD N.

Prints 'ok LIMIT' (the soft limit in force after the pool ran), or 'refused: MESSAGE'
and the number of jobs left running when the pool was refused.
"""

import resource
import sys

import fiber
from fiber.errors import ResourceLimitError

if __name__ == "__main__":
    soft, hard, n = (int(a) for a in sys.argv[1:4])
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        with fiber.Pool(n) as pool:
            assert pool.map(abs, range(-n, 0), chunksize=1) == list(range(n, 0, -1))
    except ResourceLimitError as e:
        print(f"refused: {e}")
        print(f"running {len(fiber.active_children())}")
    else:
        print(f"ok {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
