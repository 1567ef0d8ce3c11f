"""Serialization: out-of-band buffers, by-value functions, framing of large messages."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from fiber.transport.framing import FrameReader, ProtocolError, send_frames
from fiber.transport.serialization import dumps, loads


def test_large_array_travels_out_of_band():
    a = np.random.rand(1_000_000)  # 8 MB
    frames = dumps(a)
    assert len(frames) == 2
    assert memoryview(frames[0]).nbytes < 1024  # the pickle holds no array data
    assert memoryview(frames[1]).nbytes == a.nbytes
    b = loads(frames)
    assert np.array_equal(a, b) and b.flags.writeable


def test_small_objects_stay_in_band():
    assert len(dumps({"a": b"x" * 100})) == 1


def test_lambdas_and_closures_by_value():
    k = 3
    f = loads(dumps(lambda x: x * k))
    assert f(2) == 6


def test_unpicklable_raises_type_error():
    with pytest.raises(TypeError):
        dumps(threading.Lock())


def test_framing_200mb_over_a_socket_pair():
    a, b = socket.socketpair()
    big = np.arange(25_000_000, dtype=np.float64)
    t = threading.Thread(target=send_frames, args=(a, dumps(big)))
    t.start()
    reader = FrameReader()
    while not reader.messages:
        assert reader.feed_from(b)
    t.join()
    got = loads(reader.messages.popleft())
    assert np.array_equal(big, got)
    a.close()
    b.close()


def test_malformed_stream_is_rejected():
    a, b = socket.socketpair()
    a.sendall(b"\x00\x00\x00\x00garbage")
    with pytest.raises(ProtocolError):
        FrameReader().feed_from(b)
    a.close()
    b.close()
