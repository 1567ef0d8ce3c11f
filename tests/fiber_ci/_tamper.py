"""The link shaper's tamper mode (`fiber_ci._shaper`): an on-path writer that flips one
byte of a TCP stream, as an attacker on the link or a corruption past TCP's checksum
would. Its place and its command: docs/contributing/testing.md, "The link shaper"."""

from __future__ import annotations

import ipaddress
from typing import Dict, Optional, Tuple

_VNET = 10  # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start/offset
_NEEDS_CSUM = 1  # VIRTIO_NET_HDR_F_NEEDS_CSUM: the checksum is made after us (partial)
_ETH = _VNET + 14
_SYN = 0x02
_IPV4 = b"\x08\x00"  # the Ethernet type
Flow = Tuple[bytes, bytes, bytes]  # source address, destination address, the two ports


class Tamper:
    """Flips the byte at offset ``after`` of the TCP payload of each connection that
    starts (its SYN seen) once this is armed, in one direction of the link, till
    ``connections`` connections were altered; with ``peer``, only the connections
    to or from that address.

    The TCP checksum stays right: a frame whose checksum is partial (made later, by the
    device or the stack that takes it) needs nothing; one whose checksum is whole gets it
    updated for the changed word (RFC 1624). The receiving TCP takes the altered bytes as
    sent; only what reads the stream above TCP (TLS) can tell.
    """

    def __init__(self, after: int, connections: int, peer: Optional[str]) -> None:
        if after < 0 or connections < 0:
            raise ValueError(f"after and connections must be >= 0, got {after}, {connections}")
        self.after, self.left = after, connections
        self.peer = ipaddress.IPv4Address(peer).packed if peer else None
        #: The sequence number of the first payload byte of each connection not altered yet
        self._start: Dict[Flow, int] = {}
        self.altered = self.partial = 0  # frames altered; of those, partial checksums

    def alter(self, frame: memoryview) -> None:
        """Flip the byte of ``frame`` (a virtio-net header, then Ethernet) that is due,
        if it holds one."""
        if not self.left or len(frame) < _ETH + 40 or frame[_ETH - 2:_ETH].tobytes() != _IPV4:
            return
        ip = frame[_ETH:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6 or (self.peer is not None and self.peer not in (ip[12:16], ip[16:20])):
            return
        tcp = ip[ihl:min(len(ip), int.from_bytes(ip[2:4], "big") or len(ip))]
        flow = (bytes(ip[12:16]), bytes(ip[16:20]), bytes(tcp[0:4]))
        seq = int.from_bytes(tcp[4:8], "big")
        if tcp[13] & _SYN:  # a new connection (its 4-tuple may be an old one's)
            self._start[flow] = (seq + 1) & 0xFFFFFFFF
            return
        start = self._start.get(flow)
        offset = (self.after - (seq - start)) & 0xFFFFFFFF if start is not None else -1
        where = (tcp[12] >> 4) * 4 + offset
        if offset < 0 or where >= len(tcp):
            return
        old = tcp[where]
        tcp[where] = old ^ 0xFF
        if frame[0] & _NEEDS_CSUM:
            self.partial += 1
        else:
            shift = 8 if where % 2 == 0 else 0  # the byte's place in its 16-bit word
            tcp[16:18] = _updated(int.from_bytes(tcp[16:18], "big"), old << shift,
                                  (old ^ 0xFF) << shift).to_bytes(2, "big")
        del self._start[flow]  # once a connection: its retransmission goes as it came
        self.altered += 1
        self.left -= 1


def _updated(checksum: int, old: int, new: int) -> int:
    """An Internet checksum with one 16-bit word changed from ``old`` to ``new``
    (RFC 1624, eq. 3: HC' = ~(~HC + ~m + m'))."""
    total = (~checksum & 0xFFFF) + (~old & 0xFFFF) + new
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
