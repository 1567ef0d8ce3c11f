"""A pool of N workers maps 4N short tasks, one task in 200 killing its worker (SIGKILL)
the first time it runs: python kills_at_size.py N MARKS_DIR.

Prints the number of workers killed and 'ok' when every result is right, in order, once;
the lost workers' warnings are on stderr.
"""

import os
import signal
import sys
import time

import fiber


def task(args: tuple) -> int:
    i, marks = args
    if i % 200 == 7:
        try:  # the first attempt only: a mark says it was made
            os.close(os.open(os.path.join(marks, str(i)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            os.kill(os.getpid(), signal.SIGKILL)
        except FileExistsError:
            pass
    time.sleep(0.01)
    return i * i


if __name__ == "__main__":
    n, marks = int(sys.argv[1]), sys.argv[2]
    with fiber.Pool(n) as pool:
        results = pool.map(task, [(i, marks) for i in range(4 * n)], chunksize=1)
        assert results == [i * i for i in range(4 * n)], "a result lost, repeated or wrong"
    print(f"killed {len(os.listdir(marks))}")
    print("ok")
