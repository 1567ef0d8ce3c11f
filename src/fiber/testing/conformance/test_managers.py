"""Managers (SyncManager, BaseManager with registered types, AsyncManager) on the backend
under test."""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.managers
import pickle
import queue
import threading
import time

import pytest

import fiber
from fiber.errors import RemoteTraceback
from fiber.managers import SyncManager
from fiber.transport.client import ConnectionLost

from .support import manager_helpers as mh
from .support.waiting import wait_until


@pytest.fixture
def manager(ctx):
    m = ctx.Manager()
    yield m
    m.shutdown()


def test_containers_match_multiprocessing(manager):
    def scenario(m):
        d, lst, ns = m.dict({"a": 1}), m.list([3, 1]), m.Namespace(x=1)
        d["b"] = [1, 2]
        d.update(c=3)
        lst.append(2)
        lst += [0]
        lst.sort()
        ns.y = ns.x + 1
        v, a = m.Value("i", 5), m.Array("i", [1, 2, 3])
        v.value += 1
        a[0] = 9
        out = [sorted(d.items()), d.get("zz", "default"), len(d), "a" in d, sorted(d),
               d.keys(), d.values(), d.items(), d.keys()[0], lst[:], lst[1], len(lst),
               (ns.x, ns.y), v.value, v.get(), list(a[:]), len(a), d.copy(), d.pop("a"), str(lst)]
        with pytest.raises(KeyError):
            d["missing"]
        with pytest.raises(AttributeError):
            ns.missing  # noqa: B018
        with pytest.raises(IndexError):
            lst[99]
        out.append(lst._getvalue())
        return out
    with multiprocessing.Manager() as reference:
        expected = scenario(reference)
    assert scenario(manager) == expected


def test_a_systemexit_in_a_containers_call_goes_to_the_caller(manager):
    """A SystemExit raised by the caller's code in a managed list's method (its sort
    key) goes back to the caller, as a registered type's does (it ended the manager's
    hub: every proxy then lost its connection); the manager goes on serving."""
    lst, d = manager.list([2, 1]), manager.dict(a=1)
    with pytest.raises(SystemExit):
        lst.sort(key=mh.exit_key)
    assert lst[:] == [2, 1] and d["a"] == 1
    assert manager.dict(b=2)["b"] == 2


def test_proxies_work_in_children(ctx, manager):
    d, lst, ns = manager.dict(), manager.list(), manager.Namespace()
    procs = [ctx.Process(target=mh.managed_work, args=(d, lst, ns, f"k{i}")) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert sorted(d.keys()) == ["k0", "k1", "k2"] and sorted(lst) == ["k0", "k1", "k2"]
    assert ns.seen in ("k0", "k1", "k2")


def test_counter_under_managed_lock_is_exact(ctx, manager):
    lock, counter = manager.Lock(), manager.Value("i", 0)
    procs = [ctx.Process(target=mh.add_to_managed, args=(lock, counter, 40)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    assert counter.value == 160


def test_managed_synchronization_types(ctx, manager):
    q = manager.Queue()
    q.put(1)
    assert q.get(timeout=10) == 1
    with pytest.raises(queue.Empty):
        q.get(timeout=0.2)
    jq = manager.JoinableQueue()
    jq.put("x")
    jq.get(timeout=10)
    jq.task_done()
    jq.join()
    lock, rlock = manager.Lock(), manager.RLock()
    with lock:
        assert lock.acquire(False) is False
    with rlock:
        with rlock:
            pass
    sem = manager.BoundedSemaphore(1)
    assert sem.acquire(timeout=1) and not sem.acquire(False)
    sem.release()
    with pytest.raises(ValueError):
        sem.release()
    e, out = manager.Event(), ctx.Queue()
    p = ctx.Process(target=mh.wait_event, args=(e, out, 60))
    p.start()
    time.sleep(0.3)
    e.set()
    assert out.get(timeout=60)[0] is True
    p.join(60)
    cond = manager.Condition(manager.Lock())
    with cond:
        assert cond.wait(0.1) is False
    b = manager.Barrier(2)
    p = ctx.Process(target=mh.barrier_party, args=(b, out))
    p.start()
    assert b.wait(60) in (0, 1) and out.get(timeout=60)[0] == "index"
    p.join(60)
    assert b.parties == 2 and not b.broken


def test_registered_type_exposed_and_method_to_typeid(ctx):
    with mh.Shop(ctx=ctx) as shop:
        shelf = shop.Shelf("a")
        assert shelf.put("b") == 2 and shelf.items() == ["a", "b"]
        with pytest.raises(AttributeError):
            shelf._secret()  # private methods are not exposed
        inner = shelf.child()  # method_to_typeid: a proxy to a new object
        assert isinstance(inner, fiber.managers.BaseProxy) and inner.items() == ["inner"]
        only = shop.OnlyPut()
        assert only.put(1) == 1
        with pytest.raises(AttributeError):
            only.items()
        with pytest.raises(KeyError, match="nope") as info:
            shelf.fail("nope")
        assert isinstance(info.value.__cause__, RemoteTraceback)
        assert "in fail" in info.value.__cause__.tb  # the remote traceback
        with pytest.raises(asyncio.CancelledError, match="in the manager"):
            shelf.cancel()  # no Exception: answered all the same (it waited for ever)
        clone = pickle.loads(pickle.dumps(shelf))
        assert clone.items() == ["a", "b"]


def test_connect_from_another_process(ctx):
    shop = mh.Shop(ctx=ctx)
    shop.start()
    try:
        out = ctx.Queue()
        p = ctx.Process(target=mh.use_manager_at, args=(shop.address, out))
        p.start()
        items, shelf = out.get(timeout=60)
        p.join(60)
        assert items == ["from child"] and shelf.items() == ["from child"]
        other = mh.Shop(address=shop.address)
        other.connect()
        assert other.Shelf(1).items() == [1]
    finally:
        shop.shutdown()
    with pytest.raises(ConnectionLost):
        shelf.items()


def test_manager_states_and_arguments(ctx):
    m = SyncManager(ctx=ctx)
    with pytest.raises(fiber.ProcessError):
        m.dict()
    with pytest.raises(ValueError):
        SyncManager(authkey=b"another program's key")
    with pytest.raises(ValueError):
        SyncManager(serializer="xmlrpclib")
    m.start()
    with pytest.raises(fiber.ProcessError):
        m.start()
    assert m.address.startswith("tcp://")
    m.shutdown()
    m.join(30)
    with pytest.raises(fiber.ProcessError):
        m.dict()


def test_objects_are_freed_with_their_proxies(manager):
    base = manager._number_of_objects()
    d = manager.dict()
    lst = manager.list()
    copy = pickle.loads(pickle.dumps(d))
    assert manager._number_of_objects() == base + 2
    del d
    time.sleep(0.2)
    assert manager._number_of_objects() == base + 2  # the copy still holds it
    del copy, lst
    wait_until(lambda: manager._number_of_objects() == base, 30, message="objects freed")


def test_manager_killed_mid_call_raises(ctx):
    shop = mh.Shop(ctx=ctx)
    shop.start()
    shelf = shop.Shelf()
    errors = []

    def call():
        try:
            shelf.sleep(60)
        except BaseException as e:
            errors.append(e)
    th = threading.Thread(target=call)
    th.start()
    time.sleep(0.5)
    t = time.monotonic()
    shop._process.kill()
    # a cluster ends a killed job when it gets to it (a Kubernetes node under load: tens
    # of seconds); a job whose network goes before its process sends no FIN, and only the
    # heartbeat (heartbeat_timeout, 30 s) then says it is gone, plus one short try to
    # connect again (SPENT_GRACE_CONNECT_S, 3 s): not a second grace (that took over 60 s)
    th.join(60)
    assert not th.is_alive() and time.monotonic() - t < 45
    assert isinstance(errors[0], ConnectionLost) and "manager" in str(errors[0])
    shop.shutdown()


def test_manager_pool(manager):
    pool = manager.Pool(2)
    assert pool.map(abs, [-1, -2, 3]) == [1, 2, 3]
    assert pool.apply_async(abs, (-5,)).get(60) == 5
    pool.close()
    pool.join()


def test_get_server_serves_in_this_process(ctx):
    shop = mh.Shop(ctx=ctx)
    server = shop.get_server()
    th = threading.Thread(target=server.serve_forever, name="fiber-test-serve")
    th.start()
    client = mh.Shop(address=server.address)
    client.connect()
    assert client.Shelf(1).put(2) == 2
    from fiber._core._clients import get_client

    get_client(server.address).request(b"mgr", b"shutdown")
    th.join(30)
    assert not th.is_alive()


# -- AsyncManager ------------------------------------------------------------------------


@pytest.fixture
def remote(ctx):
    m = mh.Remote(ctx=ctx)
    m.start()
    yield m
    m.shutdown()


def test_async_handles_resolve_in_any_order(remote):
    counters = [remote.Counter(100 * i) for i in range(3)]
    handles = [c.add(k) for c in counters for k in (1, 2)]
    got = [h.get(timeout=60) for h in reversed(handles)]
    assert got == [203, 201, 103, 101, 3, 1]
    where = {h.get(timeout=60) for h in [c.where() for c in counters]}
    assert len(where) == 3  # each object in its own job


def test_async_call_of_a_proxy_nobody_keeps(remote):
    """A handle keeps its proxy, so the remote object (and its job) lives until the reply is
    read: the proxy of a temporary object, collected at once, freed it before it answered."""
    import gc

    h = remote.Counter(5).sleep(0.3)
    gc.collect()
    assert h.get(timeout=60) == 0.3
    h = remote.Counter(7).add(1)
    gc.collect()
    assert h.get(timeout=60) == 8


def test_async_calls_run_in_parallel_and_in_order(remote):
    counters = [remote.Counter() for _ in range(2)]
    for h in [c.pid() for c in counters]:
        h.get(timeout=60)  # started
    t = time.monotonic()
    handles = [c.sleep(1.0) for c in counters]
    assert [h.get(timeout=60) for h in handles] == [1.0, 1.0]
    assert time.monotonic() - t < 1.9  # two jobs, not one after the other
    many = [counters[0].add(1) for _ in range(50)]
    assert [h.get(timeout=60) for h in many] == list(range(1, 51))


def test_async_remote_exception_and_timeout(remote):
    c = remote.Counter()
    h = c.fail("bad step")
    with pytest.raises(ValueError, match="bad step") as info:
        h.get(timeout=60)
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert h.ready() and not h.successful()
    slow = c.sleep(0.5)
    with pytest.raises(multiprocessing.TimeoutError):
        slow.get(timeout=0.05)
    assert slow.get(timeout=60) == 0.5 and slow.successful()
    with pytest.raises(AttributeError):
        c.no_such_method  # noqa: B018


def test_async_creation_error_and_lost_job(remote):
    broken = remote.Broken()  # its job dies while creating the object
    with pytest.raises(Exception, match="ended"):
        broken.pid()
    c = remote.Counter()
    assert c.add(1).get(timeout=60) == 1
    h = c.sleep(30)
    time.sleep(0.3)
    remote._process.kill()  # the manager, and with it the object's job
    with pytest.raises(ConnectionLost):
        h.get(timeout=30)


@pytest.mark.local_pids
def test_async_object_in_the_manager_and_freed_jobs(remote):
    local = remote.LocalCounter(5)
    assert local.add(1).get(timeout=60) == 6
    assert local.pid().get(timeout=60) == remote._process.pid
    c = remote.Counter()
    c.add(1).get(timeout=60)
    assert remote._number_of_objects() == 2
    del c
    wait_until(lambda: remote._number_of_objects() == 1, 30, message="the job ended")


# -- lifetime: a manager lives while it or its proxies do; its server stops at exit --------


def test_collected_manager_stops_its_server(ctx):
    """As multiprocessing's: a manager nobody holds (nor any proxy it made here) stops its
    server job, which then leaves ``active_children()``."""
    import gc

    m = ctx.Manager()
    server = m._process
    d = m.dict(a=1)
    del m
    gc.collect()
    assert server.is_alive() and d["a"] == 1  # the proxy keeps its manager
    child = d.copy()  # a plain value; a proxy made by a call keeps the manager too
    assert child == {"a": 1}
    del d
    gc.collect()
    wait_until(lambda: not server.is_alive(), 60, message="the collected manager's server ends")
    assert server not in fiber.active_children()
    assert server.exitcode == 0  # shut down, not terminated


def _use_a_manager(ctx):  # type: ignore[no-untyped-def]
    m = ctx.Manager()
    d = m.dict(a=1)
    assert d["a"] == 1
    return m._process  # m and d are dropped on return


def test_shutdown_and_collection_wait_for_the_server(ctx):
    """As multiprocessing's: ``shutdown()``, and the finalizer of a manager left to the
    garbage collector, wait for the server's job, so that the next ``active_children()``
    does not list it (the original fiber's tests assert ``active_children() == []``
    right after a test that left its manager to the collector)."""
    m = ctx.Manager()
    server = m._process
    m.shutdown()
    assert server not in fiber.active_children() and server.exitcode == 0
    server = _use_a_manager(ctx)
    assert server not in fiber.active_children()
    assert server.exitcode == 0  # shut down, not terminated


def test_async_proxies_keep_their_manager(ctx):
    import gc

    remote = mh.Remote(ctx=ctx)
    remote.start()
    server = remote._process
    counter = remote.Counter(1)
    del remote
    gc.collect()
    assert counter.add(1).get(timeout=60) == 2 and server.is_alive()
    del counter
    gc.collect()
    wait_until(lambda: not server.is_alive(), 60, message="the collected manager's server ends")
    assert server.exitcode == 0


@pytest.mark.local_pids
def test_terminated_manager_ends_its_object_jobs_first(ctx, backend_name, capfd):
    """SIGTERM stops a manager as ``shutdown`` does: its object jobs end before it (they
    do not find their parent gone), and its exit code says it was terminated."""
    import signal

    import psutil

    from fiber.backends import get_backend

    if not get_backend(backend_name).jobs_share_host:
        pytest.skip(f"jobs of {backend_name} are not processes of this host whose stderr "
                    "is ours: what an orphaned object job prints cannot be seen here")
    remote = mh.Remote(ctx=ctx)
    remote.start()
    counters = [remote.Counter() for _ in range(2)]
    pids = [h.get(timeout=60) for h in [c.pid() for c in counters]]
    capfd.readouterr()
    remote._process.terminate()
    remote._process.join(60)
    assert remote._process.exitcode == -signal.SIGTERM
    wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() !=
                               psutil.STATUS_ZOMBIE for p in pids), 30,
               message="the object jobs end")
    time.sleep(0.5)  # what an orphaned object job would print, it prints by now
    assert "is gone" not in capfd.readouterr().err
    remote.shutdown()
