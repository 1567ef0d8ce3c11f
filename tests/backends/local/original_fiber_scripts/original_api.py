"""The original fiber's own names, as its tests and users call them (written here):
fiber.Pool(n, error_handling=True) with start_workers() and wait_until_workers_up(),
fiber.pool.ResilientZPool, fiber.queues.SimpleQueuePush and fiber.queues.Pipe
(ZConnection ends), and fiber.init/fiber.reset with its configuration keys."""

import fiber
import fiber.pool
import fiber.queues


def square(x):
    return x * x


def echo(conn):
    conn.send(conn.recv() * 2)


def relay(inq, outq):
    outq.put(inq.get() + 1)


def main():
    fiber.init(log_level="warning")
    pool = fiber.Pool(3, error_handling=True)
    pool.start_workers()
    pool.wait_until_workers_up()
    assert pool.map(square, range(100)) == [x * x for x in range(100)]
    assert len(pool._pool) == 3
    pool.terminate()
    pool.join()

    pool = fiber.pool.ResilientZPool(2)
    assert sorted(pool.imap_unordered(square, range(10))) == [x * x for x in range(10)]
    pool.terminate()
    pool.join()

    inq, outq = fiber.queues.SimpleQueuePush(), fiber.queues.SimpleQueuePush()
    assert isinstance(inq, fiber.SimpleQueue)
    p = fiber.Process(target=relay, args=(inq, outq))
    p.start()
    inq.put(41)
    assert outq.get() == 42
    p.join()

    parent, child = fiber.queues.Pipe()
    assert isinstance(parent, fiber.queues.ZConnection)
    p = fiber.Process(target=echo, args=(child,))
    p.start()
    parent.send(21)
    assert parent.recv() == 42
    p.join()
    fiber.reset()
    print("original API OK")


if __name__ == "__main__":
    main()
