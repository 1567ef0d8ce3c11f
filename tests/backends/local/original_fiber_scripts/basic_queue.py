"""A child puts a sum on a SimpleQueue, in the style of the original fiber's
examples/basic_queue.py (written here)."""

from fiber import Process, SimpleQueue


def add(q, a, b):
    q.put(a + b)


if __name__ == "__main__":
    q = SimpleQueue()
    p = Process(target=add, args=(q, 40, 2))
    p.start()
    print(q.get())
    p.join()
