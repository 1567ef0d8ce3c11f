"""Imported by a pool's job of several before it forks its workers, if its pool_preload
names it (tests/backends/local/test_pool_preload_local.py): the process that imported
it."""

import os

IMPORTED_IN = os.getpid()
