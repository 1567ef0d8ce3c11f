"""Hand a fiber Pipe end and a fiber SimpleQueue to a multiprocessing child:
python hand_to_stdlib.py METHOD. Prints what came back, then the child's exit code."""

import multiprocessing
import sys

import fiber


def child(conn, queue) -> None:
    conn.send("pipe ok")
    queue.put("queue ok")
    conn.send(conn.recv() * 2)


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    here, there = fiber.Pipe()
    queue = fiber.SimpleQueue()
    p = ctx.Process(target=child, args=(there, queue))
    p.start()
    print(here.recv())
    print(queue.get())
    here.send(21)
    print(here.recv())
    p.join(60)
    print("exit", p.exitcode)
