"""Functions that ring members run (test_ring.py); importable by the members, which have
fiber installed where they run (see support)."""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import fiber

if TYPE_CHECKING:
    from fiber.queues import Queue
    from fiber.synchronize import Barrier

RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                   "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "GLOO_SOCKET_IFNAME",
                   "NCCL_SOCKET_IFNAME", "TORCHELASTIC_RESTART_COUNT",
                   "TORCHELASTIC_USE_AGENT_STORE")


def environment(rank: int, size: int) -> Tuple[int, int, Dict[str, Optional[str]], str, bool]:
    """What a member sees: its arguments, the rendezvous variables, the address fiber's
    hub listens on in this member and, on rank 0, whether the port is free to bind now
    (it was reserved until just before this function)."""
    from fiber._core import _runtime

    env = {k: os.environ.get(k) for k in RENDEZVOUS_VARS}
    bindable = False
    if rank == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((env["MASTER_ADDR"] or "", int(env["MASTER_PORT"] or 0)))
            bindable = True
    ifname = env["GLOO_SOCKET_IFNAME"]
    if ifname is not None:
        socket.if_nametoindex(ifname)  # raises if this host has no such interface
    return rank, size, env, _runtime.listen_host(), bindable


def square_late(rank: int, size: int) -> int:
    """Later ranks answer first: the results must still come back in rank order."""
    time.sleep(0.3 * (size - rank))
    return rank * rank


def raise_on(rank: int, size: int, bad: int, barrier: Barrier) -> None:
    """Rank ``bad`` raises; the others wait on a barrier it never reaches (a collective
    that cannot complete)."""
    if rank == bad:
        time.sleep(0.3)
        raise ValueError(f"boom from rank {rank}")
    barrier.wait()


def kill_on(rank: int, size: int, bad: int, barrier: Barrier, when: Queue[float]) -> None:
    """Rank ``bad`` SIGKILLs itself once the others wait on the barrier; it puts the time
    of its death on ``when`` first."""
    if rank == bad:
        deadline = time.monotonic() + 60
        while barrier.n_waiting < size - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        when.put(time.time())
        os.kill(os.getpid(), signal.SIGKILL)
    barrier.wait()


def fail_first_time(rank: int, size: int, how: str) -> Tuple[int, str, str, int]:
    """Rank 1 fails in the first formation of the ring (raises, or is killed); every rank
    returns what it sees of the restart."""
    restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
    if rank == 1 and restart == "0":
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("first formation fails")
    member = fiber.ring.current_member()
    assert member is not None
    return rank, restart, os.environ["MASTER_PORT"], member.restart


def always_fail(rank: int, size: int) -> None:
    if rank == size - 1:
        raise RuntimeError(f"rank {rank} always fails")
    time.sleep(600)


def sleep(rank: int, size: int, seconds: float) -> None:
    time.sleep(seconds)


def exit_with(rank: int, size: int, code: int) -> None:
    if rank == 1:
        raise SystemExit(code)
    time.sleep(600)


def unpicklable_result(rank: int, size: int) -> object:
    import threading

    return threading.Lock() if rank == 1 else rank


@fiber.meta(memory=256)
def with_meta(rank: int, size: int) -> int:
    return rank


# -- fiber.experimental.Ring --------------------------------------------------------------

_seen: Dict[str, object] = {}


def old_style_init(ring: Any, tag: str = "") -> None:
    """What the original fiber's initializers read of the ring."""
    master = ring.members[0]
    _seen.update(rank=ring.rank, size=ring.size, connected=[m.connected for m in ring.members],
                 ip=master.ip, port=master.port, tag=tag)
    os.environ["MASTER_ADDR"] = master.ip
    os.environ["MASTER_PORT"] = str(master.port)


def old_style_func(rank: int, size: int) -> Dict[str, object]:
    return dict(_seen, func_rank=rank, func_size=size, env_rank=os.environ["RANK"])


# -- torch ------------------------------------------------------------------------------------


def all_reduce_rank(rank: int, size: int) -> float:
    """The issue's example: every rank adds its rank; also checks that the store serves
    on MASTER_ADDR:MASTER_PORT before init when rank 0 hosts it."""
    import torch
    import torch.distributed as dist

    if os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True":
        socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])),
                                 timeout=30).close()
    dist.init_process_group("gloo")
    try:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        assert dist.get_rank() == rank and dist.get_world_size() == size
        return float(t.item())
    finally:
        dist.destroy_process_group()


def die_in_collective(rank: int, size: int, when: Queue[float]) -> float:
    """Rank 2 is SIGKILLed between two all_reduces; the others are in the second one."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    if rank == 2:
        time.sleep(0.5)
        when.put(time.time())
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(t)
    return float(t.item())
