"""Large read-only data on the local backend alone: what is refused with a clear error
(released, unpicklable, objects for one process each), what still travels as before
(small or unshareable initargs), and a sealed mapping sent as its one memfd (see
fiber/testing/conformance/test_shared.py for what every backend runs)."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import fiber


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(SIZE // 8)

MB = 1 << 20


SIZE = 64 * MB


def test_released_data_gives_a_clear_error(table: np.ndarray) -> None:
    handle = fiber.shared(table[:1000])
    data = pickle.dumps(handle)
    handle.release()
    with pytest.raises(LookupError, match="released"):
        pickle.loads(data)


def test_unpicklable_data_is_refused_at_once() -> None:
    with pytest.raises(TypeError):
        fiber.shared(threading.Lock())


def test_objects_handed_to_one_process_each_are_refused() -> None:
    """A pipe end is handed to one process per pickle: it cannot be shared by many."""
    a, b = fiber.Pipe()
    with pytest.raises(ValueError, match="pipe ends"):
        fiber.shared((np.zeros(2 * MB), b))
    a.close()
    b.close()


def test_small_or_unshareable_initargs_travel_as_before() -> None:
    from fiber._core._shared import Shared, share_if_large

    small = (np.zeros(10), "x")
    assert share_if_large(small) is small
    lock = (threading.Lock(), np.zeros(SIZE // 64))
    assert share_if_large(lock) is lock  # not picklable here: the process's own path
    a, b = fiber.Pipe()
    with_pipe = (np.zeros(2 * MB), b)
    assert share_if_large(with_pipe) is with_pipe  # a pipe end goes to each worker alone
    a.close()
    b.close()
    assert isinstance(share_if_large((np.zeros(2 * MB),)), Shared)


def test_a_sealed_mapping_is_sent_as_its_one_memfd() -> None:
    """The transport side: every send of a sealed mapping passes the same memfd, which
    nobody can change (the mapping is read-only, the memfd sealed against writes)."""
    import fcntl
    import os

    from fiber.transport import memfd

    mapping = memfd.sealed(b"x" * (2 * MB))
    fds = [memfd.to_memfd(mapping, len(mapping)) for _ in range(2)]
    try:
        assert os.fstat(fds[0]).st_ino == os.fstat(fds[1]).st_ino
        assert fcntl.fcntl(fds[0], fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
        with pytest.raises(OSError):
            os.write(fds[0], b"y")
    finally:
        for fd in fds:
            os.close(fd)
    with pytest.raises(TypeError):
        mapping[0] = 0
