"""Run as ``__main__`` by tests/unit/test_serialization.py: a program whose pool, processes and
queue carry what only goes by value (functions and a class of this script, a lambda, a
closure), left for the interpreter's exit to clean up as users' programs do. It must exit
with code 0 and write nothing to stderr on every supported Python (3.12 crashed at exit,
3.13 printed a BufferError, while memoryviews of pickles were still exported)."""

import sys

import fiber


class Point:
    def __init__(self, x):
        self.x = x

    def double(self):
        return Point(self.x * 2)


def scale(p):
    return p.double().x


def put_point(q, x):
    q.put(Point(x))


def main():
    offset = 10
    pool = fiber.Pool(2)  # never closed: the exit handlers end it
    print(pool.map(scale, [Point(i) for i in range(4)]))
    print(pool.map(lambda x: x + offset, range(3)))
    print(pool.apply_async(Point, (7,)).get(timeout=60).x)
    q = fiber.Queue()
    p = fiber.Process(target=put_point, args=(q, 5))
    p.start()
    print(q.get(timeout=60).x)
    p.join(60)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
