"""A process that greets, in the style of the original fiber's examples/basic_process.py
(written here): the program's output is the child's and the master's."""

from fiber import Process


def greet(who):
    print("Hello", who, flush=True)


if __name__ == "__main__":
    p = Process(target=greet, args=("Fiber",))
    p.start()
    p.join()
    print("Done")
