"""Managed namespace, list and dict changed by a child, and a customized BaseManager
used as a context manager, in the style of the original fiber's examples/shared_data.py
(written here)."""

import fiber
from fiber.managers import BaseManager


def change(ns, items, table):
    ns.count += 1
    items[0] += 1
    items[1].append("child")  # a managed list inside a managed list
    table["seen"] = True


class Calculator:
    def add(self, x, y):
        return x + y

    def mul(self, x, y):
        return x * y


class CalcManager(BaseManager):
    pass


def standard():
    manager = fiber.Manager()
    ns = manager.Namespace()
    ns.count = 1
    items = manager.list([1, manager.list(["master"])])
    table = manager.dict({"seen": False})
    p = fiber.Process(target=change, args=(ns, items, table))
    p.start()
    p.join()
    print(ns.count, items[0], list(items[1]), dict(table))
    assert (ns.count, items[0], list(items[1]), table["seen"]) == (2, 2, ["master", "child"],
                                                                   True)


def customized():
    CalcManager.register("Calculator", Calculator)
    with CalcManager() as manager:
        calc = manager.Calculator()
        print(calc.add(4, 3), calc.mul(7, 8))


if __name__ == "__main__":
    standard()
    customized()
