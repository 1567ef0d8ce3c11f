"""Scenarios run as ``__main__`` by tests/unit/test_serialization.py: the functions of this script
travel by value, as a user's main script's do. Prints the scenario's result as JSON.

    python tests/unit/scripts/main_namespace.py initializer|task_global|redefinition|
        mutated_in_place|process_target
"""

import json
import sys

import fiber

model = None
cache = None
state = None
seen = []
registry = {}


def init(value):
    global model
    model = value


def use(_):
    return model


def fill(value):
    global cache
    cache = value
    return "filled"


def read_cache():
    return cache


def helper():
    return "old"


def call_helper(_):
    return helper()


def call_helper_again(_):
    return helper()


def record(i):
    seen.append(i)
    return len(seen)


def count_seen(_):
    return len(seen)


def register(key):
    registry[key] = "set by the initializer"


def lookup(key):
    return registry.get(key)


def set_state_then_serve(conn):
    global state
    state = "set by the target"
    fn = conn.recv()  # pickled after the target: a separate pickle
    conn.send(fn())


def read_state():
    return state


def initializer():
    with fiber.Pool(2, initializer=init, initargs=("loaded",)) as pool:
        return pool.map(use, range(4))


def task_global():
    with fiber.Pool(1) as pool:  # one worker: both tasks run in the same process
        return [pool.apply(fill, ("from the first task",)), pool.apply(read_cache)]


def redefinition():
    global helper
    with fiber.Pool(1) as pool:
        first = pool.map(call_helper, range(2))

        def helper():  # a notebook cell run again with a new body
            return "new"

        # the pool sends call_helper once (same object); a new function brings the new helper
        return [first, pool.map(call_helper_again, range(2)), pool.map(call_helper, range(2))]


def mutated_in_place():
    """Globals changed in place (a list a task appends to, a dict an initializer fills)
    are not reset by a later function's copy of them from the parent."""
    with fiber.Pool(1) as pool:
        counts = [pool.apply(record, (i,)) for i in range(4)]
        after = pool.apply(count_seen, (0,))
    with fiber.Pool(2, initializer=register, initargs=("k",)) as pool:
        looked = pool.map(lookup, ["k"] * 4)
    return [counts, after, looked]


def process_target():
    here, there = fiber.Pipe()
    proc = fiber.Process(target=set_state_then_serve, args=(there,))
    proc.start()
    here.send(read_state)
    got = here.recv()
    proc.join()
    return got


if __name__ == "__main__":
    print(json.dumps(globals()[sys.argv[1]]()))
