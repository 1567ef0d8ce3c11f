"""The link shaper's tamper mode (`fiber_ci._tamper`) on frames made here: which byte it
flips, once a connection, and that a whole TCP checksum stays right (the netns hosts'
veths hand it partial checksums only: tests/backends/netns/test_shaper.py)."""

from __future__ import annotations

import struct
from typing import Tuple

import pytest

from fiber_ci._tamper import Tamper

A, B = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
ISN = 0xFFFFFF00  # the sequence numbers wrap within the stream


def _sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def frame(payload: bytes, seq: int, syn: bool = False, partial: bool = False,
          src: bytes = A, dst: bytes = B) -> bytearray:
    """A virtio-net header, Ethernet, IPv4 and TCP (whole checksum unless ``partial``)."""
    tcp = bytearray(struct.pack("!HHIIBBHHH", 40000, 5000, seq & 0xFFFFFFFF, 0, 5 << 4,
                                0x02 if syn else 0x18, 65535, 0, 0) + payload)
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp[16:18] = struct.pack("!H", 0 if partial else ~_sum(pseudo + bytes(tcp)) & 0xFFFF)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, src, dst)
    vnet = struct.pack("<BBHHHH", 1 if partial else 0, 0, 0, 0, 34, 16)
    return bytearray(vnet + b"\2" * 6 + b"\4" * 6 + b"\x08\x00" + ip + bytes(tcp))


def checksum_right(f: bytearray) -> bool:
    ip = bytes(f[24:44])
    return _sum(ip[12:20] + struct.pack("!BBH", 0, 6, len(f) - 44) + bytes(f[44:])) == 0xFFFF


def stream(tamper: Tamper, segments: Tuple[int, ...], partial: bool = False) -> bytes:
    """Payload bytes 0, 1, 2... in segments of these sizes after a SYN, through
    ``tamper``: what reaches the other end (each checksum checked)."""
    tamper.alter(memoryview(frame(b"", ISN, syn=True)))
    seq, out = ISN + 1, b""
    for size in segments:
        payload = bytes((seq - ISN - 1 + k) % 251 for k in range(size))
        f = frame(payload, seq, partial=partial)
        tamper.alter(memoryview(f))
        assert partial or checksum_right(f)
        out += bytes(f[64:])
        seq += size
    return out


def sent(n: int) -> bytes:
    return bytes(k % 251 for k in range(n))


@pytest.mark.parametrize("after", [0, 299, 300, 301, 1000, 1099])
def test_the_byte_at_after_is_flipped_and_the_checksum_stays_right(after: int) -> None:
    tamper = Tamper(after, 1, None)
    got = stream(tamper, (300, 701, 99))
    want = bytearray(sent(1100))
    want[after] ^= 0xFF
    assert got == bytes(want) and tamper.altered == 1 and tamper.partial == 0


def test_a_partial_checksum_is_left_to_the_device() -> None:
    tamper = Tamper(10, 1, None)
    got = stream(tamper, (100,), partial=True)
    assert got[10] == sent(100)[10] ^ 0xFF and tamper.partial == 1


def test_once_a_connection_up_to_the_count_and_only_the_peers() -> None:
    tamper = Tamper(5, 1, None)
    assert stream(tamper, (50,)) != sent(50)
    assert stream(tamper, (50,)) == sent(50)  # a second connection: the count is spent
    two = Tamper(5, 2, None)
    assert stream(two, (50,)) != sent(50) and stream(two, (50,)) != sent(50)
    elsewhere = Tamper(5, 1, "10.0.0.9")
    assert stream(elsewhere, (50,)) == sent(50) and elsewhere.altered == 0


def test_a_connection_begun_before_it_was_armed_is_left_alone() -> None:
    tamper = Tamper(5, 1, None)
    f = frame(sent(50), ISN + 1)
    tamper.alter(memoryview(f))
    assert bytes(f[64:]) == sent(50) and tamper.altered == 0


def test_settings_checked() -> None:
    for after, connections, peer in ((-1, 1, None), (0, -1, None), (0, 1, "nowhere")):
        with pytest.raises(ValueError):
            Tamper(after, connections, peer)
