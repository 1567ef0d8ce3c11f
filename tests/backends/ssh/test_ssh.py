"""The ``ssh`` backend.

Two kinds of tests:

- without hosts: the settings and the host list's syntax, the ssh command line, and the
  keeper (the program a job's session runs on its host), run here as the host would;
- on the real sshd hosts that ``scripts/test`` starts (``scripts/ssh-nodes.sh start 3``:
  one sshd in each of three network namespaces, hosts ``node1..3``). This module starts
  nothing itself. Without ``FIBER_SSH_CONFIG`` (``eval "$(scripts/ssh-nodes.sh env)"``) those
  tests fail under ``CI=true`` and are skipped otherwise. Scenarios that kill the master
  run it as a script under ``tests/backends/ssh/scripts/`` that prints ``RESULT <json>``.

Run by hand (as root)::

    scripts/ssh-nodes.sh start 3 && eval "$(scripts/ssh-nodes.sh env)"
    FIBER_LISTEN_HOST=$FIBER_SSH_DRIVER_ADDR .venv/bin/python -m pytest tests/backends/ssh
    scripts/ssh-nodes.sh stop
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List

import psutil
import pytest

import fiber
from fiber.backends import JobSpec, JobState, get_backend
from fiber.backends.ssh import SshBackend, SshSettings, parse_hosts
from fiber.backends.ssh._session import (
    JOB_STUB,
    LOADER,
    keeper_source,
    launch_data,
    remote_command,
    ssh_base,
)
from fiber.errors import ConfigError, SubmitError
from fiber.testing.conformance.support.waiting import gone, unusable, wait_until

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

import ssh_targets  # noqa: E402

NODES = ["node1", "node2", "node3"]

# -- without hosts: settings -------------------------------------------------------------


def test_host_lists_and_their_slots():
    assert parse_hosts("node1:8, node2:8,user@gpu1:2,solo") == [
        ("node1", 8), ("node2", 8), ("user@gpu1", 2), ("solo", 1)]
    assert parse_hosts("[fd00::2]:4,[fd00::3],10.0.0.5:3") == [
        ("fd00::2", 4), ("fd00::3", 1), ("10.0.0.5", 3)]
    assert parse_hosts("") == []


@pytest.mark.parametrize("key, value, said", [
    ("ssh_hosts", "node1:0", "at least 1"),
    ("ssh_hosts", "node1:many", "whole number"),
    ("ssh_hosts", "-oProxyCommand=evil:2", "not a host name"),
    ("ssh_hosts", "node1 node2:2", "not a host name"),
    ("ssh_hosts", "node1:2,node1:4", "twice"),
    ("ssh_hosts", "[fd00::2:4", "[address]"),
    ("ssh_connect_timeout", 0, "at least 1"),
    ("ssh_alive_interval", -5, "at least 1"),
    ("ssh_max_startups", 0, "at least 1"),
    ("ssh_retry_interval", 0, "positive"),
    ("ssh_options", "-o 'unbalanced", "split"),
    ("ssh_options", "node1", "start with an option"),
    ("ssh_env", "PATH,1BAD", "not a variable name"),
])
def test_bad_settings_are_refused_with_the_key(key, value, said):
    with pytest.raises(ConfigError) as info:
        fiber.config.resolve({key: value}, environ={})
    assert key in str(info.value) and said in str(info.value)


def test_an_unknown_ssh_key_names_the_closest(monkeypatch):
    with pytest.raises(ConfigError) as info:
        fiber.config.resolve({"ssh_hots": "node1:2"}, environ={})
    assert "ssh_hosts" in str(info.value)
    cfg = fiber.config.resolve({}, environ={"FIBER_SSH_HOSTS": "a:2,b",
                                            "FIBER_SSH_ALIVE_COUNT": "5"})
    own = fiber.config.settings(SshSettings, "ssh", cfg)
    assert own.host_list() == [("a", 2), ("b", 1)] and own.alive_count == 5


def test_the_ssh_command_line_holds_no_value_of_the_job():
    own = SshSettings(hosts="node1:2", config="/etc/lab_ssh_config",
                      options="-o Port=2222 -i /keys/lab", connect_timeout=7)
    argv = ssh_base(own, "/tmp/x.log")
    # the user's options first (ssh takes the first value it gets), then fiber's
    assert argv[:5] == ["ssh", "-o", "Port=2222", "-i", "/keys/lab"]
    assert argv[argv.index("-F") + 1] == "/etc/lab_ssh_config"
    for option in ("BatchMode=yes", "ConnectTimeout=7", "ServerAliveInterval=5",
                   "ServerAliveCountMax=3", "ClearAllForwardings=yes"):
        assert option in argv
    assert argv[argv.index("-E") + 1] == "/tmp/x.log"
    command = remote_command("/opt/py env/bin/python", LOADER, "4242")
    assert command.startswith("exec '/opt/py env/bin/python' -c 'import os,sys;")
    assert command.endswith(" 4242") and "FIBER" not in command
    data = launch_data(["python", "-c", JOB_STUB], {"FIBER_SECRET": "ab" * 32})
    assert data.startswith(keeper_source()) and data.endswith(b"\n")
    assert json.loads(data[len(keeper_source()):])["env"] == {"FIBER_SECRET": "ab" * 32}


def test_jobs_that_cannot_be_placed_are_refused_at_submit():
    backend = SshBackend()
    with fiber.config.override(ssh_hosts=""):
        with pytest.raises(SubmitError, match="no hosts"):
            backend.submit([JobSpec(command=("true",))])
    with fiber.config.override(ssh_hosts="nowhere:2"):
        from fiber.backends import Resources

        with pytest.raises(SubmitError, match="GPUs"):
            backend.submit([JobSpec(command=("true",), resources=Resources(gpu=1))])


def _listen_host_error(hosts: str, ssh_config: str = "", netns: bool = False) -> str:
    """What SshBackend.listen_host() raises for ``ssh_hosts=hosts`` (run with ``netns`` in
    a fresh network namespace of its own, where nothing but loopback exists)."""
    code = ("import fiber\nfrom fiber.backends.ssh import SshBackend\n"
            f"with fiber.config.override(listen_host='', ssh_hosts={hosts!r}, ssh_options='',"
            f" ssh_config={ssh_config!r}):\n"
            "    try:\n        print('RESULT', SshBackend().listen_host())\n"
            "    except Exception as e:\n        print(f'RESULT {type(e).__name__}: {e}')\n")
    argv = [sys.executable, "-c", code]
    cp = subprocess.run(["unshare", "--net", *argv] if netns else argv, capture_output=True,
                        text=True, timeout=60)
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"exit {cp.returncode}: {cp.stdout}{cp.stderr}"
    return lines[-1][len("RESULT "):]


def test_a_host_name_that_does_not_resolve_is_said_so_and_listen_host_is_no_remedy():
    said = _listen_host_error("nosuchhost.invalid:2")
    assert said.startswith("BackendError: ssh host 'nosuchhost.invalid' does not resolve"), said
    assert "ssh_hosts" in said and "listen_host" not in said


def test_listen_host_is_suggested_where_no_local_address_routes_to_the_host():
    said = _listen_host_error("10.255.0.1:2", netns=True)
    assert said.startswith("BackendError: no local address routes to ssh host '10.255.0.1' "
                           "(Network is unreachable)"), said
    assert "set listen_host (FIBER_LISTEN_HOST)" in said


def test_a_host_behind_a_proxy_with_no_route_of_ours_needs_listen_host(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host behind\n  HostName nosuchhost.invalid\n"
                      "  ProxyJump gateway.invalid\n")
    said = _listen_host_error("behind:2", ssh_config=str(config))
    assert said.startswith("BackendError: ssh host 'behind' (HostName 'nosuchhost.invalid') "
                           "is reached through a proxy (proxyjump gateway.invalid)"), said
    assert "set listen_host (FIBER_LISTEN_HOST)" in said


# -- without hosts: the keeper, run here as a host runs it ---------------------------------

#: A job's first lines as fiber's (`JOB_STUB`), then: report what it got, and wait.
_STUB_PROBE = JOB_STUB.split("from fiber")[0] + (
    "import subprocess,time\n"
    "startup=open('/proc/self/environ','rb').read()\n"
    "child=subprocess.Popen(['sleep','60'])\n"
    "print(os.environ.get('FIBER_SECRET'), b'FIBER_SECRET' in startup, os.getpid(),"
    " child.pid, flush=True)\n"
    "time.sleep(60)\n")


class _Keeper:
    """The keeper as ssh runs it on a host: ``python -c LOADER N``, its stdin, stdout and
    stderr pipes of this test (sshd's, on a host)."""

    def __init__(self, argv: List[str], env: Dict[str, str], pipe: bool = True) -> None:
        source = keeper_source()
        self.proc = subprocess.Popen([sys.executable, "-c", LOADER, str(len(source))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert self.proc.stdin is not None
        self.err = ""
        self.proc.stdin.write(launch_data(argv, env, pipe))
        self.proc.stdin.flush()

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def send(self, text: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def wait(self) -> int:
        """The keeper's exit code; what it and the job wrote on stderr is in ``err``."""
        try:
            _, err = self.proc.communicate(timeout=30)
            self.err = err.decode()
            return self.proc.returncode
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None and not f.closed:
                try:
                    f.close()
                except BrokenPipeError:
                    pass


@pytest.fixture
def keeper() -> Iterator[Any]:
    made: List[_Keeper] = []

    def make(*args: Any, **kw: Any) -> _Keeper:
        made.append(_Keeper(*args, **kw))
        return made[-1]

    yield make
    for k in made:
        k.close()


def test_the_keeper_hands_the_values_in_a_pipe_not_the_environment(keeper):
    k = keeper([sys.executable, "-c", _STUB_PROBE], {"FIBER_SECRET": "cafe" * 16})
    secret, in_startup, pid, child = k.line().split()
    assert secret == "cafe" * 16 and in_startup == "False"
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert b"cafe" * 16 not in f.read()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"cafe" * 16 not in f.read()
    k.send(b"TERM\n")
    assert k.wait() == 128 + signal.SIGTERM  # the job died of SIGTERM
    wait_until(lambda: gone(int(child)), 10, message="the job's own child to end with it")


def test_the_keeper_passes_kill_and_exit_codes_on(keeper):
    k = keeper(["sleep", "60"], {}, pipe=False)
    time.sleep(0.2)
    k.send(b"KILL\n")
    assert k.wait() == 128 + signal.SIGKILL
    k = keeper(["sh", "-c", "echo $GREETING; exit 3"], {"GREETING": "hi"}, pipe=False)
    assert k.line() == "hi"
    assert k.wait() == 3
    k = keeper(["/no/such/python"], {})
    assert k.wait() == 127
    assert "cannot run /no/such/python" in k.err


def test_the_keeper_outlives_the_end_of_its_stdin_but_not_its_session(keeper):
    """stdin's end alone is the process that started the job gone (its program goes on:
    its lifelines decide); nobody reading the session's output is the session gone."""
    k = keeper([sys.executable, "-c", _STUB_PROBE], {"FIBER_SECRET": "00"})
    _, _, pid, child = k.line().split()
    k.proc.stdin.close()  # type: ignore[union-attr]
    time.sleep(0.5)
    assert k.proc.poll() is None and not gone(int(pid))
    k.proc.stdout.close()  # type: ignore[union-attr]
    k.proc.stderr.close()  # type: ignore[union-attr]
    assert k.proc.wait(30) == 128 + signal.SIGKILL
    wait_until(lambda: gone(int(pid)) and gone(int(child)), 10,
               message="the job and its child to end with the session")


# -- on the test hosts ---------------------------------------------------------------------

NODES_SH = os.environ.get("FIBER_SSH_NODES_SH") or os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "scripts", "ssh-nodes.sh")
#: What the hosts' processes of fiber look like in ps: the keeper's loader, or a job.
_FIBER_WORDS = ("import os,sys;n=int(sys.argv[1])", "fiber: ", "fiber.process._bootstrap")


def _run(argv: List[str], timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def _nodes_sh(*args: str) -> None:
    cp = _run([NODES_SH, *args], timeout=120)
    assert cp.returncode == 0, cp.stderr


def _fiber_processes(node: str) -> List[str]:
    """The processes of fiber (keepers, jobs) on host ``node``, as ``pid: command``."""
    cp = _run([NODES_SH, "pids", node[len("node"):]], timeout=30)
    out = []
    for word in cp.stdout.split():
        try:
            with open(f"/proc/{word}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(w in command for w in _FIBER_WORDS):
            out.append(f"{word}: {command[:120]}")
    return out


@pytest.fixture(scope="module")
def hosts() -> Iterator[str]:
    """The running test hosts; the driver address (where the master listens)."""
    config = os.environ.get("FIBER_SSH_CONFIG", "")
    problem = ""
    if not config or not os.path.exists(NODES_SH):
        problem = "FIBER_SSH_CONFIG is not set"
    else:
        for node in NODES:
            try:
                cp = _run(["ssh", "-F", config, node, "true"], timeout=30)
            except subprocess.TimeoutExpired:
                problem = f"{node} does not answer over ssh within 30 s"
                break
            if cp.returncode != 0:
                problem = f"ssh {node} failed (exit {cp.returncode}): {cp.stderr.strip()}"
                break
    if problem:
        unusable("the ssh test hosts", f"no ssh test hosts: {problem} (start them with "
                 "`scripts/ssh-nodes.sh start 3` and `eval \"$(scripts/ssh-nodes.sh env)\"`)")
    driver = os.environ.get("FIBER_SSH_DRIVER_ADDR", "10.208.0.1")
    from fiber._core import _runtime

    hub = _runtime.hub_if_started()
    if hub is None and not fiber.get_config().listen_host:
        fiber.init(listen_host=driver)  # one hub per process: jobs on the hosts reach it
    elif hub is not None and hub.address.split("://")[-1].startswith("127."):
        pytest.fail(f"this process's hub listens on {hub.address}, which the hosts cannot "
                    "reach: set FIBER_LISTEN_HOST to the driver address", pytrace=False)
    yield driver


def _all_up(slots: int = 4) -> None:
    """Every host up in the backend (tried again now if it was down)."""
    states = {name: state for name, _, _, state in get_backend("ssh").check_hosts()}
    assert states == {n: "up" for n in NODES}, states


@pytest.fixture
def ssh(hosts: str) -> Iterator[Any]:
    """The ssh context on node1..3, 4 slots each; a lost host is found within ~3 s."""
    with fiber.config.override(ssh_hosts="node1:4,node2:4,node3:4", ssh_alive_interval=1,
                               ssh_alive_count=3, ssh_retry_interval=1.0):
        _all_up()
        yield fiber.get_context("ssh")


def _handles(pool: Any) -> List[Any]:
    """The pool's workers' jobs, as the backend knows them."""
    jobs = [ws.process._job for ws in list(pool._core.procs.values())]
    return [job.handle for job in jobs if job is not None and job.handle is not None]


def _connected(pool: Any) -> int:
    core = pool._core
    with core.hub.lock:
        return sum(1 for ws in core.live_workers() if ws.connected)


def _usage(handles: List[Any]) -> Dict[str, int]:
    """Jobs holding a slot now, by host: started (their host is set) and not over."""
    states = get_backend("ssh").status(handles)
    out: Dict[str, int] = {}
    for h in handles:
        st = states[h.job_id]
        if h.host and not st.state.finished and st.reason != "waiting for a slot":
            out[h.host] = out.get(h.host, 0) + 1
    return out


@pytest.mark.scale
def test_pool_of_128_over_120_slots_queues_the_rest_and_runs_every_task_once(hosts):
    """Pool(128) on three hosts of 40 slots: 120 workers start, 40 a host, 8 wait; 8
    workers killed mid-map free their slots, and the 8 that waited start then (the 8
    that replace the killed wait in their turn). Every result comes once; no host ever
    holds more jobs than it has slots (sampled every 0.1 s from the backend's status).
    A job a worker, as asked (the pool would choose jobs of 40 here: see
    test_a_large_pool_chooses_jobs_of_a_host_s_slots)."""
    import threading

    n, total = 128, 512
    seen: Dict[str, int] = {}
    stop = threading.Event()
    delivered: Dict[int, int] = {}
    with fiber.config.override(ssh_hosts="node1:40,node2:40,node3:40"):
        _all_up()
        ctx = fiber.get_context("ssh")
        t0 = time.monotonic()
        with ctx.Pool(n, workers_per_job=1) as pool:
            def sample() -> None:
                while not stop.is_set():
                    for host, k in _usage(_handles(pool)).items():
                        seen[host] = max(seen.get(host, 0), k)
                    stop.wait(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                wait_until(lambda: _connected(pool) == 120, 420, 0.2, "120 workers connected")
                started = time.monotonic() - t0
                first = _handles(pool)
                states = get_backend("ssh").status(first)
                waiting = [h for h in first if states[h.job_id].reason == "waiting for a slot"]
                assert len(waiting) == 8 and not any(h.host for h in waiting), states
                assert {h.host for h in first if h not in waiting} == set(NODES)
                it = pool.imap_unordered(ssh_targets.square_where, range(total), chunksize=1)
                victims: List[Any] = []
                for x, y, _host, _ in it:
                    assert y == x * x
                    delivered[x] = delivered.get(x, 0) + 1
                    if not victims and len(delivered) >= total // 4:
                        workers = [ws.process for ws in pool._core.live_workers()
                                   if ws.connected][:8]
                        victims = [p._job.handle for p in workers]
                        for p in workers:
                            p.kill()
                assert sorted(delivered) == list(range(total))
                assert [x for x, k in delivered.items() if k != 1] == []
                wait_until(lambda: all(s.state.finished for s in get_backend("ssh").status(
                    victims).values()), 60, 0.2, "the killed workers' ends")
                ends = get_backend("ssh").status(victims).values()
                assert [(s.state, s.exitcode) for s in ends] == [
                    (JobState.FAILED, -signal.SIGKILL)] * 8, ends
                # the 8 that waited took the slots the killed ones left
                wait_until(lambda: all(get_backend("ssh").status([h])[h.job_id].state
                                       == JobState.RUNNING for h in waiting), 120, 0.2,
                           "the waiting workers' start")
                assert {h.host for h in waiting} <= set(NODES)
                again = pool.map(ssh_targets.square_where, range(n), chunksize=1)
                assert [y for _, y, _, _ in again] == [x * x for x in range(n)]
            finally:
                stop.set()
                sampler.join(10)
    assert seen == {"node1": 40, "node2": 40, "node3": 40}, seen
    print(f"Pool({n}) over 3 x 40 ssh slots: 120 connected {started:.0f} s after Pool(), "
          f"all done in {time.monotonic() - t0:.0f} s")


def test_jobs_beyond_the_slots_wait_and_start_as_slots_free(hosts):
    """Six jobs of 4 s on node1:2,node2:1: three start at once, three wait (pending,
    "waiting for a slot") and start as the first end; no host ever runs more at once
    than its slots, and the host not listed runs none. (4 s: starting six processes on a
    loaded machine can take longer than a shorter job lasts, and the status is asked
    after the last start.)"""
    # the jobs of the tests before (a Pool(128)'s, ended under load) must have left their
    # slots, and both hosts must be up: else fewer than three start at once (ci10: one did,
    # five waited; ci of 7cb09f2: two did). A process leaves active_children() when its
    # connection says it ended, which can be before its ssh client exits and frees the slot.
    wait_until(lambda: not fiber.active_children(), 120, 0.1, "the earlier jobs gone")
    with fiber.config.override(ssh_hosts="node1:2,node2:1"):
        wait_until(lambda: all(state == "up" and used == 0 for _, _, used, state
                               in get_backend("ssh").check_hosts()), 120, 0.2,
                   "both hosts up with every slot free")
        ctx = fiber.get_context("ssh")
        q = ctx.Queue()
        procs = [ctx.Process(target=ssh_targets.span_to, args=(q, 4.0)) for _ in range(6)]
        for p in procs:
            p.start()
        handles = [p._job.handle for p in procs]
        states = get_backend("ssh").status(handles)
        waiting = [h for h in handles if states[h.job_id].reason == "waiting for a slot"]
        assert len(waiting) == 3 and all(
            states[h.job_id].state == JobState.PENDING for h in waiting), (
                states, get_backend("ssh").check_hosts())
        spans = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 6
    assert sorted({host for host, _, _ in spans}) == ["node1", "node2"]
    for host, slots in (("node1", 2), ("node2", 1)):
        mine = [(s, e) for h, s, e in spans if h == host]
        for start, _ in mine:  # jobs running at each start (its own included)
            assert sum(1 for s, e in mine if s <= start < e) <= slots, (host, spans)
    assert max(s for _, s, _ in spans) - min(s for _, s, _ in spans) >= 3.0  # some waited


@pytest.mark.parametrize("after", [0.0, 0.01, 0.1, 0.3, 1.0])
def test_terminate_soon_after_start_ends_the_job(hosts, after):
    """terminate() at any moment of a job's start (at once, or some time after it is
    alive) ends it with SIGTERM: a request that
    reaches the keeper together with the launch line (before the job exists) is acted
    on once the job does (it was held until the next request came)."""
    with fiber.config.override(ssh_hosts="node1:4"):
        p = fiber.get_context("ssh").Process(target=ssh_targets.sleep, args=(60,))
        p.start()
        if after:  # else: at once, before the job has started
            wait_until(p.is_alive, 30, 0.02, "the job running")
            time.sleep(after)
        t = time.monotonic()
        p.terminate()
        p.join(20)
    assert p.exitcode == -signal.SIGTERM and time.monotonic() - t < 10, p.exitcode


def test_a_waiting_job_is_cancelled_without_starting_and_a_running_one_is_killed(hosts):
    with fiber.config.override(ssh_hosts="node1:1"):
        ctx = fiber.get_context("ssh")
        running = ctx.Process(target=ssh_targets.sleep, args=(60,))
        waiting = ctx.Process(target=ssh_targets.sleep, args=(60,))
        running.start()
        waiting.start()
        wait_until(lambda: get_backend("ssh").status([running._job.handle])[
            running._job.handle.job_id].state == JobState.RUNNING, 60, 0.05, "the first job")
        t = time.monotonic()
        waiting.terminate()
        waiting.join(10)
        assert waiting.exitcode == -signal.SIGTERM and time.monotonic() - t < 5
        assert waiting._job.remote_pid is None and waiting._job.handle.host == ""
        running.kill()
        running.join(30)
        assert running.exitcode == -signal.SIGKILL
    wait_until(lambda: not _fiber_processes("node1"), 30, 0.2, "node1 without fiber's processes")


@pytest.mark.parametrize("how", ["crash", "partition"])
def test_host_lost_mid_map_every_result_once_and_workers_replaced_elsewhere(ssh, how):
    """Pool(6) over three hosts of 4 slots (2 workers a host); mid-map, node2 dies (every
    process of it killed: sshd, sessions, jobs) or node3 is cut off. Every task's result
    comes once, in order; the lost workers' jobs are LOST with ssh's word for it; their
    replacements run on the two other hosts; nothing of fiber is left on the lost host."""
    node = "node2" if how == "crash" else "node3"
    tasks = [(i, 0.3) for i in range(120)]
    try:
        with ssh.Pool(6) as pool:
            result = pool.starmap_async(ssh_targets.where, tasks, chunksize=1)
            wait_until(lambda: _connected(pool) == 6, 120, 0.1, "6 workers connected")
            time.sleep(1.5)  # every worker busy
            victims = [h for h in _handles(pool) if h.host == node]
            assert len(victims) == 2, [(h.job_id, h.host) for h in _handles(pool)]
            if how == "crash":
                _nodes_sh("crash", node[-1])
            else:
                _nodes_sh("partition", node[-1], "on")
            t = time.monotonic()
            values = result.get(timeout=180)
            took = time.monotonic() - t
            assert [x for x, _, _ in values] == list(range(120))  # each once, in order
            st = get_backend("ssh").status(victims)
            wait_until(lambda: all(s.state.finished for s in
                                   get_backend("ssh").status(victims).values()), 60, 0.1,
                       "the victims' ends")
            st = get_backend("ssh").status(victims)
            for h in victims:
                assert st[h.job_id].state == JobState.LOST, st
                assert f"the ssh connection to {node} was lost" in st[h.job_id].reason, st
            wait_until(lambda: _connected(pool) == 6, 120, 0.1, "the replacements connected")
            hosts_now = sorted(h.host for h in _handles(pool) if h not in victims)
            assert node not in hosts_now and len(hosts_now) == 6, hosts_now
            again = pool.map(ssh_targets.where, range(24), chunksize=1)
            assert node not in {host for _, host, _ in again}
            print(f"{how}: map done {took:.1f} s after the failure; victims {st}")
    finally:
        if how == "crash":
            _nodes_sh("start", "3")
        else:
            _nodes_sh("partition", node[-1], "off")
    wait_until(lambda: not _fiber_processes(node), 60, 0.5, f"{node} without fiber's processes")
    _all_up()


def test_kill_reaches_a_job_whose_host_stopped_answering(ssh):
    """kill() of a job on a host cut off: the KILL line cannot reach the keeper, so the
    ssh client ends (keepalive, or killed after a grace); the job ends by its lifeline."""
    with fiber.config.override(ssh_hosts="node3:2"):
        p = ssh.Process(target=ssh_targets.sleep, args=(120,))
        p.start()
        wait_until(lambda: p._job.remote_pid is not None, 60, 0.05, "the job's start")
        _nodes_sh("partition", "3", "on")
        try:
            t = time.monotonic()
            p.kill()
            p.join(30)
            assert p.exitcode == -signal.SIGKILL and time.monotonic() - t < 15
        finally:
            _nodes_sh("partition", "3", "off")
    wait_until(lambda: not _fiber_processes("node3"), 60, 0.5, "node3 without the job")
    _all_up()


def test_no_job_is_left_on_any_host_after_the_masters_sigkill(hosts):
    env = {k: v for k, v in os.environ.items() if k != "FIBER_BACKEND"}
    env.update(PYTHONUNBUFFERED="1", FIBER_SSH_HOSTS="node1:4,node2:4,node3:4",
               FIBER_LISTEN_HOST=hosts)
    proc = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "ssh_master_killed.py")],
                            env=env, cwd=SCRIPTS, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 180
        while not line.startswith("RESULT ") and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith("RESULT "), proc.stderr.read() if proc.poll() is not None else ""
        r = json.loads(line[len("RESULT "):])
        assert len(r["clients"]) == 7 and r["hosts"] == NODES
        assert all(_fiber_processes(node) for node in NODES)
        proc.kill()
        proc.wait(30)
        t = time.monotonic()
        wait_until(lambda: not any(_fiber_processes(node) for node in NODES), 30, 0.2,
                   "every host without fiber's processes")
        wait_until(lambda: all(gone(pid) for pid in r["clients"]), 30, 0.2,
                   "the master's ssh clients gone")
        print(f"every job and ssh client gone {time.monotonic() - t:.1f} s after the "
              "master's SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _readable_files_holding(needles: List[bytes], roots: List[str]) -> List[str]:
    """Files under ``roots`` that others may read and that hold one of ``needles``,
    among those written since this process started (the secret was made in it: an older
    file cannot hold it, and reading every venv under /tmp took minutes)."""
    found = []
    since = psutil.Process().create_time() - 2
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                    if not (st.st_mode & 0o004) or not os.path.isfile(path) or (
                            st.st_size > 8 << 20) or st.st_mtime < since:
                        continue
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                if any(n in data for n in needles):
                    found.append(path)
    return found


def test_the_secret_is_on_no_command_line_environment_or_readable_file(ssh):
    """While jobs run on every host: no process of this machine or of the hosts (one
    PID namespace: `ps` shows them all, and `ps eww` on a host too) has the program's
    secret in its command line or its environment; no file others can read holds it;
    the job has it nowhere but in memory (its startup environment has no FIBER_)."""
    from fiber.transport.auth import program_secret

    secret = program_secret()
    needles = [secret.hex().encode(), secret.hex().upper().encode(), secret]
    q = ssh.Queue()
    gate = ssh.Event()
    with ssh.Pool(3) as pool:
        result = pool.map_async(ssh_targets.wait_for, [gate] * 3, chunksize=1)
        p = ssh.Process(target=ssh_targets.environment, args=(q, ("FIBER_SECRET",
                                                                  "FIBER_PARENT")))
        p.start()
        values, startup_has_fiber = q.get(timeout=120)
        assert values["FIBER_SECRET"] is None and values["FIBER_PARENT"]  # taken, popped
        assert startup_has_fiber is False
        wait_until(lambda: all(_fiber_processes(n) for n in NODES), 60, 0.2, "jobs everywhere")
        leaks = []
        for proc in psutil.process_iter():
            for what in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{proc.pid}/{what}", "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                if any(n in data for n in needles):
                    leaks.append((proc.pid, what))
        assert leaks == []
        local_ps = _run(["ps", "eww", "-e", "-o", "pid,args"]).stdout
        assert local_ps and not any(n.decode(errors="replace") in local_ps for n in needles[:2])
        for node in NODES:
            cp = _run(["ssh", "-F", os.environ["FIBER_SSH_CONFIG"], node, "ps eww -e -o pid,args"])
            assert "fiber: PoolWorker" in cp.stdout, cp.stdout[-2000:]
            assert not any(n.decode() in cp.stdout for n in needles[:2])
        assert _readable_files_holding(needles, ["/tmp", "/var/tmp", "/dev/shm", "/run"]) == []
        gate.set()
        assert result.get(timeout=60) == [True] * 3
        p.join(60)


def test_unreachable_hosts_are_clear_errors(hosts, caplog):
    ctx = fiber.get_context("ssh")
    for listed, said in (("nosuch:2", "Could not resolve hostname nosuch"),
                         (f"{hosts}:2", "Connection refused")):
        with fiber.config.override(ssh_hosts=listed):
            p = ctx.Process(target=ssh_targets.sleep, args=(0,))
            with pytest.raises(SubmitError) as info:
                p.start()
            assert "no ssh host can take fiber's jobs" in str(info.value)
            assert said in str(info.value)
    with fiber.config.override(ssh_hosts="nosuch2:2,node1:1"):
        q = ctx.Queue()
        p = ctx.Process(target=ssh_targets.put_where, args=(q,))
        p.start()
        assert q.get(timeout=60)[0] == "node1"
        p.join(60)
        assert p.exitcode == 0
    assert "ssh host nosuch2 cannot take fiber's jobs (ssh: Could not resolve" in caplog.text
    with fiber.config.override(ssh_hosts="node1:1", ssh_python="/no/such/python"):
        with pytest.raises(SubmitError, match="/no/such/python cannot run on node1"):
            ctx.Process(target=ssh_targets.sleep, args=(0,)).start()


def test_listen_host_is_this_machines_address_on_the_route_to_the_first_host(hosts):
    with fiber.config.override(listen_host="", ssh_hosts="node2:1,node1:1"):
        assert get_backend("ssh").listen_host() == hosts  # node2's HostName, by ssh -G


def test_fiber_ps_logs_and_stop_find_the_jobs_started_here(ssh):
    from support.cli_helpers import fiber_cli

    p = ssh.Process(target=ssh_targets.say_then_sleep, args=("said on its host", 120))
    p.start()
    wait_until(lambda: p._job.remote_pid is not None, 60, 0.05, "the job's start")
    job, host = p.job_id, p._job.handle.host
    ps = fiber_cli("ps", "-b", "ssh", timeout=60)
    assert ps.returncode == 0, ps.stderr
    rows = [ln for ln in ps.stdout.splitlines() if ln.startswith(job + " ")]
    assert rows and f"running on {host}" in rows[0], ps.stdout
    wait_until(lambda: "said on its host" in fiber_cli("logs", "-b", "ssh", job,
                                                       timeout=60).stdout,
               30, 0.5, "the job's log")
    stop = fiber_cli("stop", "-b", "ssh", job, timeout=60)
    assert stop.returncode == 0 and job in stop.stdout, stop
    p.join(30)
    assert p.exitcode is not None and p.exitcode != 0
    wait_until(lambda: not _fiber_processes(host), 30, 0.2, f"{host} without the job")
    ps = fiber_cli("ps", "-b", "ssh", "-a", timeout=60)
    rows = [ln for ln in ps.stdout.splitlines() if ln.startswith(job + " ")]
    assert rows and "running" not in rows[0], ps.stdout


def test_fiber_run_runs_a_program_on_a_host(ssh):
    from support.cli_helpers import fiber_cli

    env = {**os.environ, "FIBER_SSH_HOSTS": "node2:1",
           "FIBER_SSH_CONFIG": os.environ["FIBER_SSH_CONFIG"]}
    cp = fiber_cli("run", "-b", "ssh", "--", "python3", "-c",
                   "import socket, sys; print('on', socket.gethostname()); sys.exit(3)",
                   env=env, timeout=120)
    assert cp.returncode == 3, cp
    assert "on node2" in cp.stdout, cp


@pytest.mark.parametrize("target, arg, code", [
    (ssh_targets.exit_with, 3, 3),
    (ssh_targets.exit_with, 130, 130),  # as 128 + SIGINT, but the job said it itself
    (ssh_targets.hard_exit, 7, 7),  # os._exit: the keeper's exit code says it
    (ssh_targets.kill_self, signal.SIGTERM, -signal.SIGTERM),
    (ssh_targets.kill_self, signal.SIGKILL, -signal.SIGKILL),
])
def test_exit_codes_and_signals_come_back_as_multiprocessing_says(ssh, target, arg, code):
    p = ssh.Process(target=target, args=(arg,))
    p.start()
    p.join(60)
    assert p.exitcode == code


def test_a_job_dies_with_its_ssh_client(ssh):
    """SIGKILL to a job's ssh client (the OOM killer, a person) ends its session: the
    keeper on the host finds nobody reads the job's output any more and kills it."""
    with fiber.config.override(ssh_hosts="node1:2"):
        p = ssh.Process(target=ssh_targets.sleep, args=(120,))
        p.start()
        wait_until(lambda: p._job.remote_pid is not None, 60, 0.05, "the job's start")
        assert _fiber_processes("node1")
        [client] = [job.session.pid for job in get_backend("ssh")._running
                    if job.handle.job_id == p.job_id]
        os.kill(client, signal.SIGKILL)
        p.join(30)
        assert p.exitcode == -signal.SIGKILL  # lost: no code of its own
        st = get_backend("ssh").status([p._job.handle])[p.job_id]
        assert st.state == JobState.LOST and "its ssh client was killed by SIGKILL" in st.reason
    wait_until(lambda: not _fiber_processes("node1"), 30, 0.2, "node1 without the job")
