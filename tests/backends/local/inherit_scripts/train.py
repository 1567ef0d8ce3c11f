"""python train.py --lr 0.1 [--backend B]: prints what the master and its workers see, as
JSON: the learning rate parsed at import by settings.py, sys.argv, sys.flags and the
interpreter options, for a Pool's workers and a Process."""

import json
import sys

import settings

import fiber


def seen(_=None):
    return {"lr": settings.lr, "argv": sys.argv,
            "flags": [sys.flags.optimize, sys.flags.dont_write_bytecode, sys.flags.utf8_mode,
                      sys.flags.no_user_site],
            "warnoptions": sys.warnoptions, "xoptions": sorted(sys._xoptions),
            "assert_stripped": _asserts_stripped()}


def _asserts_stripped():
    try:
        assert False  # noqa: B011 - removed under -O, which is what is checked
    except AssertionError:
        return False
    return True


def report(q):
    q.put(seen())


if __name__ == "__main__":
    backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "local"
    fiber.init(backend=backend)
    with fiber.Pool(2) as pool:
        workers = pool.map(seen, range(4))
    q = fiber.SimpleQueue()
    p = fiber.Process(target=report, args=(q,))
    p.start()
    child = q.get()
    p.join()
    print(json.dumps({"master": seen(), "workers": workers, "child": child}))
