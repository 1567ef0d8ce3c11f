"""The ``sge`` backend on a real Grid Engine cluster.

The cluster is the one ``scripts/test`` starts (``scripts/sge-cluster.sh start 3``:
sge_qmaster and three sge_execd in network namespaces, nodes ``node1..3``; queue all.q with
2 slots a node, and wide.q with 64 slots a node for jobs of project "wide"). This module
starts nothing itself: without ``SGE_ROOT`` or with an unreachable cluster its tests fail
under ``CI=true`` and are skipped otherwise. Scenarios that kill or end the master run it as
a script under ``tests/backends/sge/scripts/`` (a fresh interpreter) that prints ``RESULT
<json>``. The tests without a cluster are in test_sge_commands.py.

Run by hand (as root)::

    scripts/sge-cluster.sh start 3 && eval "$(scripts/sge-cluster.sh env)"
    FIBER_LISTEN_HOST=$FIBER_SGE_DRIVER_ADDR .venv/bin/python -m pytest tests/backends/sge
    scripts/sge-cluster.sh stop
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List

import pytest

import fiber
from fiber._core import _runtime
from fiber.backends import JobHandle, JobState, get_backend
from fiber.backends.sge import _jobs
from fiber.backends.sge._status import parse_qstat
from fiber.errors import SubmitError
from fiber.testing.conformance.support.waiting import unusable, wait_until

import support
from support.cli_helpers import (
    MAIN,
    fiber_cli,
    program_of,
    ready_and_listed,
    started_job,
    stop_program,
    tagged,
)

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
CLUSTER_SH = os.path.join(support.REPO, "scripts", "sge-cluster.sh")
NODES = ["node1", "node2", "node3"]

if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

import sge_targets  # noqa: E402

from support.retire_helpers import (  # noqa: E402
    check_a_stopped_worker_retires,
    mark_then_sleep,
    starts,
)

pytestmark = pytest.mark.timeout(600)


def _run(argv: List[str], timeout: float = 30, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def _cluster_sh(*args: str) -> None:
    cp = _run([CLUSTER_SH, *args], timeout=90)
    assert cp.returncode == 0, cp.stderr


def _queues_up() -> List[str]:
    """The nodes whose all.q instance has reported and is not in state u."""
    cp = _run(["qstat", "-f", "-q", "all.q"], timeout=15)
    up = []
    for line in cp.stdout.splitlines():
        words = line.split()
        if words and words[0].startswith("all.q@") and len(words) >= 5 and words[3] != "-NA-" \
                and (len(words) < 6 or "u" not in words[5]):
            up.append(words[0].split("@", 1)[1])
    return sorted(up)


def _jobs_listed() -> List[str]:
    """Every job qstat lists, of every user: ``<job>``, or ``<job>.<task>`` for each task
    of an array job."""
    cp = _run(["qstat", "-u", "*", "-xml"], timeout=15)
    assert cp.returncode == 0, cp.stderr
    return [f"{r.job}.{t}" for r in parse_qstat(cp.stdout) for t in r.tasks] + [
        r.job for r in parse_qstat(cp.stdout) if not r.tasks]


def _live(ids: List[str]) -> List[str]:
    """Those of ``ids`` qstat still lists."""
    listed = set(_jobs_listed())
    return [i for i in ids if i in listed]


def _wait_idle(timeout: float = 90) -> None:
    """No job left and every node up: the next test starts on a quiet cluster."""
    deadline = time.monotonic() + timeout
    while _jobs_listed() or _queues_up() != NODES:
        if time.monotonic() > deadline:
            pytest.fail(f"cluster not idle after {timeout} s:\n"
                        + _run(["qstat", "-f", "-u", "*"]).stdout)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The running test cluster; the driver address (where the master listens)."""
    problem = ""
    if not os.environ.get("SGE_ROOT"):
        problem = "SGE_ROOT is not set"
    else:
        try:
            up = _queues_up()
            if up != NODES:
                problem = f"qstat -f shows queue instances up on {up}, expected {NODES}"
        except (OSError, subprocess.TimeoutExpired) as e:
            problem = f"`qstat` failed: {e}"
    if problem:
        unusable("the Grid Engine test cluster",
                 f"no Grid Engine test cluster: {problem} (start it with `scripts/sge-cluster"
                 ".sh start 3` and `eval \"$(scripts/sge-cluster.sh env)\"`)")
    driver = os.environ.get("FIBER_SGE_DRIVER_ADDR", "10.207.0.1")
    hub = _runtime.hub_if_started()
    if hub is None and not fiber.get_config().listen_host:
        fiber.init(listen_host=driver)  # one hub per process: jobs on the nodes reach it
    elif hub is not None and hub.address.split("://")[-1].startswith("127."):
        pytest.fail(f"this process's hub listens on {hub.address}, which Grid Engine jobs "
                    "cannot reach: set FIBER_LISTEN_HOST to the cluster address",
                    pytrace=False)
    _wait_idle()
    yield driver


@pytest.fixture
def sge(cluster: str) -> Any:
    _wait_idle()
    return fiber.get_context("sge")


class _Calls(List[List[str]]):
    """The argv of each command run, and (``threads``) the thread that ran it: the
    backend's watcher polls on a thread of its own meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: List[int] = []

    def clear(self) -> None:
        super().clear()
        self.threads.clear()

    def mine(self) -> List[List[str]]:
        """Those the calling thread ran."""
        me = threading.get_ident()
        return [argv for argv, t in zip(self, self.threads) if t == me]


@pytest.fixture
def commands(monkeypatch) -> _Calls:
    """The cluster commands the backend runs from now on (argv each)."""
    backend = get_backend("sge")
    calls = _Calls()
    run = backend.run_command

    def recording(argv, **kw):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        calls.threads.append(threading.get_ident())
        return run(argv, **kw)

    monkeypatch.setattr(backend, "run_command", recording)
    return calls


def _scenario_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FIBER_BACKEND",)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _result(stdout: str, stderr: str = "", returncode: int = 0) -> Dict[str, Any]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no RESULT (exit {returncode})\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


def _pool_handles(pool: Any) -> List[JobHandle]:
    return [ws.process._job.handle for ws in list(pool._core.procs.values())]


def _connected(pool: Any) -> int:
    core = pool._core
    with core.hub.lock:
        return sum(1 for ws in core.live_workers() if ws.connected)


# -- processes ---------------------------------------------------------------------------


def test_process_exit_codes_kill_and_terminate(sge):
    p = sge.Process(target=sge_targets.exit_with, args=(3,))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    assert p._job.handle.pid is None and p.pid >= 1 << 22  # synthetic pid
    assert p.host in NODES  # the child's own report
    wait_until(lambda: p._job.handle.host in NODES, 30, 0.1, "the job's node from qstat")
    s = sge.Process(target=sge_targets.kill_self, args=(signal.SIGKILL,))
    s.start()
    s.join(60)
    assert s.exitcode == -9  # exit_status 137: the script exec-s python
    for how, code in (("kill", -9), ("terminate", -15)):
        k = sge.Process(target=sge_targets.sleep, args=(120,))
        k.start()
        wait_until(lambda k=k: bool(k.host), 60, 0.05, "the job connected")
        assert k.is_alive()
        getattr(k, how)()
        k.join(30)
        assert k.exitcode == code, how
    held = sge.Process(target=sge_targets.sleep, args=(120,))
    with fiber.config.override(sge_extra_args="-h"):  # a user hold: stays queued
        held.start()
    st = get_backend("sge").status([held._job.handle])[held._job.handle.job_id]
    assert st.state == JobState.PENDING and "h" in st.reason
    held.terminate()
    held.join(30)
    assert held.exitcode == -15
    wait_until(lambda: not _live([k._job.handle.job_id, held._job.handle.job_id]), 30, 0.2,
               "the deleted jobs gone from qstat")


def test_the_backend_knows_the_size_of_the_nodes(sge):
    """The CPUs a pool's job fits workers to (issue 45, fiber.pool._sizing): the smallest
    execution host's, as ``qhost`` tells them; none without a parallel environment (a
    job has one slot then)."""
    backend = get_backend("sge")
    with fiber.config.override(sge_pe="smp"):
        assert backend.node_cpus() == 2  # the test cluster's nodes
    with fiber.config.override(sge_pe=""):
        assert backend.node_cpus() is None


def test_a_job_is_kept_off_the_hosts_it_avoids_while_others_are_left(sge, commands):
    """A pool's suspected hosts (``JobSpec.avoid_hosts``, issue 45): ``-l h=!(...)``
    keeps the job off them while another host is left; every host avoided, it runs
    anyway."""
    from fiber.backends import JobSpec

    backend = get_backend("sge")
    for avoid, allowed in (({"node1", "node2"}, {"node3"}),
                           ({"node1", "node2", "node3"}, set(NODES))):
        (h,) = backend.submit([JobSpec(command=("sleep", "60"), name="avoider",
                                       avoid_hosts=frozenset(avoid))])
        try:
            wait_until(lambda h=h: backend.status([h])[h.job_id].state == JobState.RUNNING
                       and bool(h.host), 120, 0.3, "the job running")
            assert h.host.split(".")[0] in allowed, h.host
        finally:
            backend.cancel([h], force=True)
    qsubs = [c for c in commands if c[0] == "qsub"]
    assert "h=!(node1|node2)" in qsubs[0] and "h=!" not in " ".join(qsubs[1]), qsubs


def test_resources_reach_the_qmaster(sge, commands):
    """``@fiber.meta(cpu=2, memory=2048)`` with sge_pe=smp: ``-pe smp 2 -l h_vmem=1024M``
    (memory is per slot), which the qmaster records and the job runs with."""
    q = sge.Queue()
    with fiber.config.override(sge_pe="smp", sge_time_limit="600"):
        p = sge.Process(target=sge_targets.two_slots, args=(q,))
        p.start()
        try:
            (argv,) = [c for c in commands if c[0] == "qsub"]
            assert argv[argv.index("-pe"):][:3] == ["-pe", "smp", "2"]
            asked = [argv[i + 1] for i, a in enumerate(argv) if a == "-l"]
            assert asked == ["h_vmem=1024M", "h_rt=600"]
            job = p._job.handle.job_id
            shown = _run(["qstat", "-j", job]).stdout
            assert re.search(r"parallel environment:\s+smp range:\s+2", shown), shown
            assert re.search(r"hard resource_list:\s+.*h_vmem=1024M", shown), shown
            assert re.search(r"h_rt=600", shown), shown
            # the job got its two slots, and a virtual memory limit of what it asked for
            # (kB): 1024M a slot, two slots
            assert q.get(timeout=120) == (2, 2048 * 1024)
        finally:
            p.join(60)
    assert p.exitcode == 0


def test_failed_qsub_is_a_clear_submit_error(sge):
    for key, value, said in (("sge_queue", "no-such.q", "unknown queue"),
                             ("sge_project", "no-such-project", "project")):
        p = sge.Process(target=sge_targets.sleep, args=(0,))
        with fiber.config.override(**{key: value}):
            t = time.monotonic()
            with pytest.raises(SubmitError) as err:
                p.start()
        assert time.monotonic() - t < 10
        e = err.value
        assert value in e.stderr and said in e.stderr, e.stderr
        assert e.command and e.command[0] == "qsub" and e.returncode not in (None, 0)
        assert "qsub" in str(e) and value in str(e)
        assert p not in fiber.active_children()


def test_a_job_that_cannot_start_fails_with_the_reason(sge, caplog):
    """A job Grid Engine cannot start (here: its working directory does not exist) goes to
    state Eqw and would stay there: it is FAILED, with Grid Engine's reason, and deleted."""
    p = sge.Process(target=sge_targets.sleep, args=(0,))
    with fiber.config.override(sge_extra_args="-wd /nonexistent-fiber-dir"):
        p.start()
    p.join(60)
    assert p.exitcode is not None and p.exitcode != 0
    assert "nonexistent-fiber-dir" in p.exit_reason and "Eqw" in p.exit_reason
    wait_until(lambda: not _live([p._job.handle.job_id]), 30, 0.2, "the job deleted")


def test_child_job_starts_a_grandchild_job(sge):
    q = sge.Queue()
    p = sge.Process(target=sge_targets.start_grandchild, args=(q,))
    p.start()
    r = q.get(timeout=180)
    p.join(60)
    assert p.exitcode == 0 and r["grandchild_exitcode"] == 0
    (child_host, child_job), (grand_host, grand_job) = r["child"], r["grandchild"]
    assert child_host in NODES and grand_host in NODES
    assert child_job and grand_job and child_job != grand_job  # a job of its own


# -- pools -------------------------------------------------------------------------------


def test_pool_is_one_array_job_spread_over_three_nodes(sge, commands):
    with sge.Pool(6) as pool:
        results = pool.map(sge_targets.square_where, range(60), chunksize=1)
        assert [y for _, y, _, _ in results] == [x * x for x in range(60)]
        assert sorted({h for _, _, h, _ in results}) == NODES  # all three nodes worked
        qsubs = [c for c in commands if c[0] == "qsub"]
        assert len(qsubs) == 1 and qsubs[0][qsubs[0].index("-t") + 1] == "1-6"
        handles = _pool_handles(pool)
        job = handles[0].job_id.split(".")[0]
        assert sorted(h.job_id for h in handles) == sorted(f"{job}.{i}" for i in range(1, 7))
        assert {t for _, _, _, t in results} <= {h.job_id for h in handles}
        wait_until(lambda: all(h.host for h in _pool_handles(pool)), 30, 0.1, "qstat hosts")
        assert sorted({h.host for h in handles}) == NODES
        commands.clear()
        statuses = get_backend("sge").status(handles)
        assert [c[0] for c in commands.mine()] == ["qstat"]  # one query for all jobs
        assert all(st.state == JobState.RUNNING for st in statuses.values())
    qdels = [c for c in commands if c[0] == "qdel"]
    assert qdels == [["qdel", f"{job}.1-6"]]  # the pool's end: one qdel, one range


@pytest.mark.scale
def test_pool_of_128_is_one_array_job(sge, commands):
    """Pool(128) in project "wide" (wide.q: 64 slots a node, so that 128 one-slot jobs run
    at once on 3 nodes of 2 cores): one qsub, one array job of 128 tasks, every result
    right; the pool's end is one qdel of one range."""
    n = 128
    t0 = time.monotonic()
    with fiber.config.override(sge_project="wide"), sge.Pool(n) as pool:
        wait_until(lambda: _connected(pool) == n, 420, 0.5, f"{n} workers connected")
        started = time.monotonic() - t0
        qsubs = [c for c in commands if c[0] == "qsub"]
        assert len(qsubs) == 1, qsubs
        assert qsubs[0][qsubs[0].index("-t") + 1] == f"1-{n}"
        assert qsubs[0][qsubs[0].index("-P") + 1] == "wide"
        handles = _pool_handles(pool)
        job = handles[0].job_id.split(".")[0]
        assert sorted(h.job_id for h in handles) == sorted(f"{job}.{i}" for i in range(1, n + 1))
        results = pool.map(sge_targets.square_where, range(4 * n), chunksize=1)
        assert [(x, y) for x, y, _, _ in results] == [(x, x * x) for x in range(4 * n)]
        assert sorted({h for _, _, h, _ in results}) == NODES
        assert len({t for _, _, _, t in results}) > n // 2  # many tasks of the array worked
        polls = [c for c in commands if c[0] == "qstat"]
    qdels = [c for c in commands if c[0] == "qdel"]
    assert qdels == [["qdel", f"{job}.1-{n}"]], qdels
    wait_until(lambda: not _live([h.job_id for h in handles]), 60, 0.5, "the array deleted")
    print(f"Pool({n}) on Grid Engine: all connected {started:.0f} s after Pool(); "
          f"{len(polls)} qstat polls; done in {time.monotonic() - t0:.0f} s")


def _lost(caplog: Any, capfd: Any, seen: List[str]) -> List[str]:
    seen.extend(line for line in capfd.readouterr().err.splitlines() if " WARNING: " in line)
    lines = seen + [r.getMessage() for r in caplog.records
                    if r.name == "fiber" and r.levelno == logging.WARNING]
    return [line for line in lines if " was lost" in line]


def test_node_crash_mid_map_every_result_once(sge, caplog, capfd):
    """``sge-cluster.sh crash 2`` kills node2's execd, shepherds and jobs mid-map: every
    result comes once, in order (the pool resubmits what node2's workers held); Grid
    Engine goes on listing their jobs as running until the node's queue instance turns
    ``u``: the backend then reports them LOST, naming the node, and deletes them."""
    tasks = [(i, 0.3) for i in range(120)]
    seen: List[str] = []
    backend = get_backend("sge")
    try:
        with sge.Pool(6) as pool:
            result = pool.starmap_async(sge_targets.where, tasks, chunksize=1)
            wait_until(lambda: _connected(pool) == 6 and all(
                h.host for h in _pool_handles(pool)), 120, 0.1, "every worker connected")
            time.sleep(1)  # every worker busy
            victims = [h for h in _pool_handles(pool) if h.host == "node2"]
            assert len(victims) == 2, [(h.job_id, h.host) for h in _pool_handles(pool)]
            _cluster_sh("crash", "2")
            t = time.monotonic()
            values = result.get(timeout=180)
            took = time.monotonic() - t
            assert [x for x, _, _ in values] == list(range(120))  # each once, in order
            assert "node2" not in {h for _, h, _ in values[-20:]}
            deadline = time.monotonic() + 90
            while True:
                st = backend.status(victims)
                if all(s.state.finished for s in st.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            for h in victims:
                assert st[h.job_id].state == JobState.LOST, st
                assert "node2" in st[h.job_id].reason, st
            lost_after = time.monotonic() - t
            # deleted (qdel -f): not left running in qstat
            wait_until(lambda: not _live([h.job_id for h in victims]), 30, 0.5,
                       "the lost jobs deleted")
            wait_until(lambda: len(_lost(caplog, capfd, seen)) >= 2, 60, 0.2,
                       "the lost-worker warnings")
            with capfd.disabled():
                print(f"\ncrash: map finished {took:.1f} s after it, jobs LOST after "
                      f"{lost_after:.1f} s: {st}")
    finally:
        _cluster_sh("restart-node", "2")
    lines = _lost(caplog, capfd, seen)
    for h in victims:
        assert sum(1 for line in lines if f"(job {h.job_id} on node2)" in line) == 1, lines
    _wait_idle()


# -- time limits and deletions (issue 29) -------------------------------------------------


def test_a_map_longer_than_the_time_limit_runs_at_full_width_and_exact(sge, tmp_path, caplog):
    """h_rt of 45 s (with -notify), a map of 30 tasks of 5 s on Pool(3) (50 s of work a
    worker, over the limit): workers are renewed before their limit (or retire on the
    SIGUSR2 of -notify); every result once, no task started twice, no retry counted, no
    WARNING."""
    marks = str(tmp_path)
    os.chmod(marks, 0o777)
    with fiber.config.override(sge_time_limit="45", log_level="info"):
        assert get_backend("sge").job_time_limit() == 45.0
        started = time.monotonic()
        with sge.Pool(3) as pool:
            got = pool.starmap(mark_then_sleep, [(x, marks, 5) for x in range(30)],
                               chunksize=1)
            status = pool.status()
        took = time.monotonic() - started
    assert got == list(range(30))
    runs = starts(marks)
    assert sorted(runs) == list(range(30))
    assert all(len(r) == 1 for r in runs.values()), runs  # none started twice
    assert status.retried == 0
    said = [r for r in caplog.records if r.name == "fiber"]
    assert not [r for r in said if r.levelname == "WARNING"], [r.getMessage() for r in said]
    renewed = [r for r in said if " is renewed " in r.getMessage()
               or " retires: " in r.getMessage()]
    assert len(renewed) >= 3, [r.getMessage() for r in said]
    print(f"30 tasks of 5 s on Pool(3), h_rt=45: {took:.0f} s; {len(renewed)} renewals "
          "or retirements")
    _wait_idle()


def test_a_worker_whose_job_is_deleted_by_someone_else_retires(sge, tmp_path, caplog):
    """A job with a time limit is submitted with -notify: a ``qdel`` by someone else (an
    administrator, ``fiber stop`` elsewhere) sends it SIGUSR2 first, SIGKILL 5 s later
    on the test cluster: its worker retires and no task pays for it."""
    with fiber.config.override(sge_time_limit="600", log_level="info"):
        check_a_stopped_worker_retires(
            sge, str(tmp_path), lambda w: _run(["qdel", w.job_id]), lambda: caplog.records)
    _wait_idle()


# -- the master's end --------------------------------------------------------------------


def test_master_sigkilled_every_job_gone(cluster):
    proc = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "sk_master_killed.py")],
                            env=_scenario_env(), cwd=SCRIPTS, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 120
        while not line.startswith("RESULT ") and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        r = _result(line, "" if proc.poll() is None else proc.stderr.read())  # type: ignore
        ids = r["job_ids"]
        assert len(ids) == 9 and set(r["hosts"]) <= set(NODES)
        assert len(_live(ids)) == 9, "the jobs should be listed before the kill"
        proc.kill()
        proc.wait(30)
        t = time.monotonic()
        while _live(ids):
            assert time.monotonic() - t < 60, f"jobs alive 60 s after SIGKILL: {_live(ids)}"
            time.sleep(0.2)
        print(f"all {len(ids)} jobs gone {time.monotonic() - t:.1f} s after the master's "
              "SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
    _wait_idle()


@pytest.mark.parametrize("how", ["normal", "exception"])
def test_master_exit_deletes_its_jobs(cluster, how):
    cp = _run([sys.executable, os.path.join(SCRIPTS, "sk_exit_cleanup.py"), how], timeout=180,
              env=_scenario_env(), cwd=SCRIPTS)
    r = _result(cp.stdout, cp.stderr, cp.returncode)
    assert cp.returncode == (0 if how == "normal" else 1), cp.stderr
    assert r["states"] == ["RUNNING", "PENDING"]
    wait_until(lambda: not _live(r["job_ids"]), 30, 0.2, "the jobs deleted")
    for job in r["job_ids"]:  # deleted, not ended by themselves (qacct: killed, or never ran)
        cp = _run(["qacct", "-j", job])
        if cp.returncode == 0:
            assert re.search(r"exit_status\s+137", cp.stdout), cp.stdout


# -- the fiber command -------------------------------------------------------------------


def test_fiber_run_runs_the_program_as_a_job_and_follows_its_output(cluster):
    r = fiber_cli("run", "-b", "sge", "-c", "pool_prefetch=5", "--", sys.executable, MAIN,
                  "3", timeout=600)
    assert r.returncode == 3, r.stderr
    got = tagged(r.stdout, "RESULT")  # read from the job's output file as it grew
    assert got["squares"] == [x * x for x in range(20)]
    assert got["backend"] == "sge" and got["prefetch"] == 5  # the command's config
    job = started_job(r.stderr)
    assert job.isdigit() and f"{job} failed" in r.stderr and "exit code 3" in r.stderr
    assert len(got["workers"]) == 2  # its pool: Grid Engine jobs of their own
    _wait_idle()


def test_fiber_run_detached_then_ps_logs_and_stop(cluster):
    """A detached program and its pool are this user's fiber jobs: listed by program (their
    context), their output read from the job's file, all deleted by the main job's id."""
    r = fiber_cli("run", "-b", "sge", "--detach", "--", sys.executable, MAIN, "hold")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit(), r.stdout
    stale = os.path.join(_jobs.output_dir(), "earlier-program", f"x.o{job}")
    try:
        got = ready_and_listed("sge", job, 3, python=sys.executable)
        assert len(got["workers"]) == 2
        program = program_of("sge", job)
        ps = fiber_cli("ps", "-b", "sge", program).stdout.splitlines()[1:]
        ids = [ln.split()[0] for ln in ps]
        assert ids[0] == job and ids[1:] == [f"{ids[1].split('.')[0]}.{i}" for i in (1, 2)]
        assert [ln.split()[2] for ln in ps] == ["running"] * 3, ps
        # an earlier cluster's job of the same id, whose file is newer: not this job's
        os.makedirs(os.path.dirname(stale), exist_ok=True)
        with open(stale, "w") as f:
            f.write("READY {\"stale\": true}\n")
        tail = fiber_cli("logs", "-b", "sge", "--tail", "1", job)
        assert tail.returncode == 0 and tail.stdout.startswith("READY "), tail
        assert "stale" not in tail.stdout, tail
        stop_program("sge", job, lambda: not _live(ids))
        assert fiber_cli("ps", "-b", "sge", program).stdout.splitlines()[1:] == []
    finally:
        _run(["qdel", job])
        if os.path.exists(stale):
            os.unlink(stale)
    unknown = fiber_cli("logs", "-b", "sge", "999999")
    assert unknown.returncode == 1 and "999999" in unknown.stderr
    _wait_idle()
