"""fiber.Ring and fiber.experimental.Ring, on every backend (the ``ctx`` fixture).

The tests without torch run on every Python and backend; those marked ``torch`` run real
``torch.distributed`` (gloo) where torch is installed (Python 3.11; not in the Docker and
Kubernetes test images: scripts/test deselects them there). On the netns backend members
run on different IPs, so the rendezvous crosses a real network.
"""

from __future__ import annotations

import ipaddress
import multiprocessing
import pickle
import signal
import time

import pytest

import fiber
from fiber.errors import RemoteTraceback, RingError

from . import support
from .support import ring_helpers as rh

pytestmark = pytest.mark.timeout(240)

RUN_S = 180  # every run() of these tests has this deadline (a loaded machine is slow)


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


# -- ranks, size, environment, results --------------------------------------------------------


def test_ranks_size_and_rendezvous_environment(ctx):
    ring = fiber.Ring(4, rh.environment, context=ctx, torch_store=False)
    results = ring.run(timeout=RUN_S)
    assert [r[0] for r in results] == [0, 1, 2, 3] and {r[1] for r in results} == {4}
    hosts = ring.hosts
    assert [r[3] for r in results] == hosts  # each member's own address, as it reported it
    groups = list(dict.fromkeys(hosts))  # hosts in the order of their lowest rank
    for rank, (_, _, env, address, _) in enumerate(results):
        same_host = [r for r, h in enumerate(hosts) if h == address]
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "4"
        assert env["MASTER_ADDR"] == hosts[0] and env["MASTER_PORT"] == str(ring.master_port)
        assert env["LOCAL_RANK"] == str(same_host.index(rank))
        assert env["LOCAL_WORLD_SIZE"] == str(len(same_host))
        assert env["GROUP_RANK"] == str(groups.index(address))
        assert env["GROUP_WORLD_SIZE"] == str(len(groups))
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        # the interface of the member's own address (lo for a loopback one)
        assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"]
        if env["GLOO_SOCKET_IFNAME"] is not None:
            assert (env["GLOO_SOCKET_IFNAME"] == "lo") == _is_loopback(address)
    assert results[0][4] is True  # rank 0 could bind the port: it was released for it
    if ctx.get_start_method() == "netns":  # three hosts, four members: one host has two
        assert len(groups) == 3 and all(not _is_loopback(h) for h in hosts)
        assert all(r[2]["GLOO_SOCKET_IFNAME"] == "eth0" for r in results)


def test_results_come_back_in_rank_order(ctx):
    assert fiber.Ring(4, rh.square_late, context=ctx, torch_store=False).run(
        timeout=RUN_S) == [0, 1, 4, 9]


def test_a_ring_of_one(ctx):
    assert fiber.Ring(1, rh.square_late, context=ctx, torch_store=False).run(
        timeout=RUN_S) == [0]


# -- failures ---------------------------------------------------------------------------------


def test_a_member_that_raises_names_its_rank_and_traceback(ctx):
    barrier = ctx.Barrier(3)
    ring = fiber.Ring(3, rh.raise_on, args=(1, barrier), context=ctx, torch_store=False)
    with pytest.raises(RingError) as info:
        ring.run(timeout=RUN_S)
    err = info.value
    assert isinstance(err, multiprocessing.ProcessError)
    assert err.rank == 1 and err.size == 3 and err.exitcode is None
    assert "rank 1 of 3" in str(err) and "ValueError: boom from rank 1" in str(err)
    assert "raise_on" in err.traceback and "boom from rank 1" in err.traceback
    assert isinstance(err.__cause__, ValueError)
    assert isinstance(err.__cause__.__cause__, RemoteTraceback)
    assert pickle.loads(pickle.dumps(err)).rank == 1


def test_a_killed_member_ends_the_others_within_seconds(ctx):
    barrier, when = ctx.Barrier(4), ctx.Queue()
    ring = fiber.Ring(4, rh.kill_on, args=(2, barrier, when), context=ctx, torch_store=False)
    with pytest.raises(RingError) as info:
        ring.run(timeout=RUN_S)
    raised = time.time()
    killed = when.get(timeout=30)
    err = info.value
    assert err.rank == 2 and err.exitcode == -signal.SIGKILL, str(err)
    assert "killed by SIGKILL" in str(err)
    print(f"\nring of 4 on {ctx.get_start_method()}: raised {raised - killed:.2f} s after "
          "a member was SIGKILLed")
    # the others waited on a barrier that can never complete: without the ring they would
    # wait for ever (generous bound: the machine is shared; the printed time is typical)
    assert raised - killed < 60


def test_a_member_that_exits_names_its_exit_code(ctx):
    with pytest.raises(RingError) as info:
        fiber.Ring(3, rh.exit_with, args=(7,), context=ctx, torch_store=False).run(
            timeout=RUN_S)
    assert info.value.rank == 1 and info.value.exitcode == 7
    assert "exit code 7" in str(info.value)


def test_an_unpicklable_result_fails_its_rank(ctx):
    with pytest.raises(RingError) as info:
        fiber.Ring(2, rh.unpicklable_result, context=ctx, torch_store=False).run(
            timeout=RUN_S)
    assert info.value.rank == 1 and "pickle" in str(info.value)


def test_timeout_ends_every_member(ctx):
    ring = fiber.Ring(2, rh.sleep, args=(600,), context=ctx, torch_store=False)
    with pytest.raises(fiber.TimeoutError):
        ring.run(timeout=5)
    # no member left behind: the no_leaks fixture fails the test otherwise


# -- restarts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_max_restarts_reforms_the_whole_ring(ctx, capfd, how):
    ring = fiber.Ring(3, rh.fail_first_time, args=(how,), context=ctx, max_restarts=2,
                      torch_store=False)
    results = ring.run(timeout=RUN_S)
    assert [r[0] for r in results] == [0, 1, 2]
    assert all(r[1] == "1" and r[3] == 1 for r in results)  # every member saw restart 1
    assert len({r[2] for r in results}) == 1 and ring.restarts == 1
    assert "re-forming the ring (restart 1 of 2)" in capfd.readouterr().err


def test_restarts_run_out(ctx):
    ring = fiber.Ring(2, rh.always_fail, context=ctx, max_restarts=1, torch_store=False)
    with pytest.raises(RingError) as info:
        ring.run(timeout=RUN_S)
    assert info.value.rank == 1 and info.value.restarts == 1
    assert "after 1 restarts" in str(info.value)


# -- resources, bad input ------------------------------------------------------------------------


# -- fiber.experimental.Ring ---------------------------------------------------------------------


def test_experimental_ring_runs_initializer_then_func(ctx):
    from fiber.experimental import Ring

    ring = Ring(3, rh.old_style_func, rh.old_style_init, initargs=("tagged",))
    assert ring.rank == 0 and ring.size == 3 and not any(m.connected for m in ring.members)
    results = ring.run()
    for rank, seen in enumerate(results):
        assert seen["rank"] == seen["func_rank"] == rank and seen["env_rank"] == str(rank)
        assert seen["size"] == seen["func_size"] == 3 and seen["tag"] == "tagged"
        assert seen["connected"] == [True] * 3
        assert seen["ip"] == ring.members[0].ip and seen["port"] == ring.members[0].port
    assert [m.connected for m in ring.members] == [True] * 3
    assert isinstance(ring.members[0].port, int)


# -- real torch.distributed ---------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("torch_store", [None, False])
def test_torch_all_reduce_on_a_ring_of_four(ctx, torch_store):
    """The issue's example. torch_store=None: rank 0 serves torch's TCPStore on the port it
    reserved; False: it frees the port just before the member's code, whose
    init_process_group binds it."""
    ring = fiber.Ring(4, rh.all_reduce_rank, context=ctx, torch_store=torch_store)
    assert ring.run(timeout=RUN_S) == [6.0] * 4
    if ctx.get_start_method() == "netns":
        assert len(set(ring.hosts)) == 3  # the collective crossed the bridge


@pytest.mark.torch
def test_torch_member_killed_in_a_collective(ctx):
    """Gloo makes the survivors raise ("connection reset by peer") about when the ring
    hears of the death: the error names the killed rank, not its victims."""
    when = ctx.Queue()
    ring = fiber.Ring(4, rh.die_in_collective, args=(when,), context=ctx)
    with pytest.raises(RingError) as info:
        ring.run(timeout=RUN_S)
    raised = time.time()
    killed = when.get(timeout=30)
    assert info.value.rank == 2 and info.value.exitcode == -signal.SIGKILL, str(info.value)
    print(f"\ntorch ring of 4 on {ctx.get_start_method()}: raised {raised - killed:.2f} s "
          "after rank 2 was SIGKILLed in a collective")
    assert raised - killed < 60


# -- examples/ddp_ring.py -------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("members", [2, 4])
def test_ddp_example_matches_one_process(ctx, monkeypatch, members):
    """DistributedDataParallel on a ring follows the path of one process training on the
    same global batches: equal losses, step by step, within float rounding."""
    # the members import the example by name too
    monkeypatch.syspath_prepend(support.in_checkout("examples"))
    import ddp_ring

    steps = 12
    ring = ddp_ring.train_on_ring(members, steps, context=ctx, timeout=RUN_S)
    single = ddp_ring.train_single(steps, 64, 0.2)
    assert ring["losses"] == pytest.approx(single["losses"], rel=1e-5, abs=1e-6)
    assert ring["final"] == pytest.approx(single["final"], rel=1e-5, abs=1e-6)
    assert ring["losses"][-1] < ring["losses"][0]  # it learns


