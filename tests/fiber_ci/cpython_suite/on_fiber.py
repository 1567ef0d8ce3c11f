"""CPython's multiprocessing tests with ``fiber`` as ``multiprocessing`` (see `_mapped`)."""

from ._mapped import load

load(globals(), "fiber")
