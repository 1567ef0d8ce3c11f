"""CPython's multiprocessing tests on the standard library itself, run by the same runner
(the reference count)."""

from ._mapped import load

load(globals(), "stdlib")
