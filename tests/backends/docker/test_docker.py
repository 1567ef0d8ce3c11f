"""The ``docker`` backend against a real Docker engine.

Needs an engine at ``DOCKER_HOST`` with the image ``fiber-test:latest`` (``FIBER_IMAGE``);
``scripts/test`` starts one with ``scripts/container-engine.sh``; by hand::

    scripts/container-engine.sh install && scripts/container-engine.sh start
    scripts/container-engine.sh image && eval "$(scripts/container-engine.sh test-env)"
    pytest tests/backends/docker

Without a usable engine these tests are skipped, except under ``CI=true``, where they fail.
They use the backend's defaults (own PID namespace per container, tini as PID 1) on host
networking, with the tests directory mounted so that children import this module; the
bridge network and an image without any mount are exercised by scripts run as ``__main__``
(tests/backends/docker/scripts/), whose functions travel by value.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import fiber
from fiber._version import install_hint
from fiber.backends import JobSpec, get_backend
from fiber.backends.docker import DockerBackend, exit_status, parse_mounts
from fiber.errors import ConfigError, ProcessError, SubmitError
from fiber.testing.conformance.support import observe_helpers
from fiber.testing.conformance.support.lost_warnings import (
    LostWarnings,
    check_an_oom_killed_worker_is_one_warning,
)
from fiber.testing.conformance.support.waiting import unusable, wait_until

import support
from support.cli_helpers import (
    MAIN,
    fiber_cli,
    fiber_popen,
    ready_and_listed,
    started_job,
    stop_program,
    tagged,
)
from support.retire_helpers import check_a_stopped_worker_retires

IMAGE = os.environ.get("FIBER_IMAGE") or "fiber-test:latest"
ENGINE = "the Docker engine"  # what tests/conftest.unusable names
TESTS = support.TESTS  # mounted into the containers: their jobs import this module
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


# -- targets (run in containers: this module is imported there through the mount) --------


def report(q: Any) -> None:
    q.put((socket.gethostname(), os.getpid()))


def report_parent(q: Any) -> None:
    q.put((os.getpid(), os.getppid()))


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def exit_with(code: int) -> None:
    sys.exit(code)


def kill_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(30)


def chatty(text: str) -> None:
    print(text)
    print(text + "-on-stderr", file=sys.stderr)


@fiber.meta(cpu=0.5, memory=128)
def limited(q: Any) -> None:
    q.put("started")
    time.sleep(60)


@fiber.meta(gpu=1)
def wants_gpu() -> None:
    pass


def slow_square(x: int) -> int:
    time.sleep(0.05)
    return x * x


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_api() -> Iterator[Any]:
    """A client of the test engine (the one the backend uses: DOCKER_HOST), with or
    without the test image."""
    try:
        import docker
    except ImportError:
        unusable(ENGINE, "the Docker SDK for Python is not installed (pip install docker)")
    where = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        api = docker.APIClient(version="auto", timeout=30, **docker.utils.kwargs_from_env())
    except Exception as e:
        unusable(ENGINE, f"no Docker engine at {where}: {e}")
    yield api
    api.close()


@pytest.fixture(scope="module")
def engine(engine_api: Any) -> Any:
    """A client of the test engine, which has the test image."""
    try:
        engine_api.inspect_image(IMAGE)
    except Exception as e:
        unusable(ENGINE, f"image {IMAGE} is not on the engine at "
                 f"{os.environ.get('DOCKER_HOST', 'the default socket')} "
                 f"(scripts/container-engine.sh image): {e}")
    return engine_api


@pytest.fixture(autouse=True)
def docker_config(request: pytest.FixtureRequest) -> Iterator[None]:
    """For tests on the engine (those taking ``engine``): the backend's defaults, on host
    networking, with this directory mounted; afterwards no container of this program may
    still run."""
    if "engine" not in request.fixturenames:
        yield
        return
    engine = request.getfixturevalue("engine")
    with fiber.config.override(backend="docker", image=IMAGE, docker_network="host",
                               docker_mounts=f"{TESTS}:{TESTS}:ro", docker_pid_host=False):
        yield
    program = backend().program
    running: List[Any] = []

    def none_running() -> bool:
        running[:] = engine.containers(filters={"label": f"fiber.program={program}"})
        return not running

    deadline = time.monotonic() + 30
    while not none_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    for c in running:
        engine.remove_container(c["Id"], force=True)
    assert not running, f"containers left running: {[c['Names'] for c in running]}"


@pytest.fixture
def warnings(capfd: Any, caplog: Any) -> LostWarnings:
    """The lost-worker warnings of this test's pools."""
    return LostWarnings(capfd, caplog)


def backend() -> DockerBackend:
    b = get_backend("docker")
    assert isinstance(b, DockerBackend)
    return b


def dctx() -> Any:
    return fiber.get_context("docker")


def containers_of(engine: Any, **labels: str) -> List[Dict[str, Any]]:
    filters = [f"{k.replace('_', '.')}={v}" for k, v in labels.items()]
    return list(engine.containers(all=True, filters={"label": filters}))


def final_status(p: Any) -> Any:
    """The backend's final status of a joined process (the watcher may lag its join)."""
    st = backend().wait(p._job.handle, 30)
    assert st is not None and st.state.finished, st
    return st


def script_env() -> Dict[str, str]:
    """The environment of a scenario script: no FIBER_* setting of this run but the engine."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FIBER_") or k == "FIBER_DOCKER_HOST"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SCRIPTS, env.get("PYTHONPATH")]))
    return env


def run_script(*args: str, timeout: float = 180) -> Dict[str, Any]:
    cp = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                        timeout=timeout, env=script_env())
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT ")]
    assert cp.returncode == 0 and lines, f"{args}: exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    return dict(json.loads(lines[-1][len("RESULT "):]))


# -- processes ------------------------------------------------------------------------------


def test_a_process_runs_in_a_labelled_container(engine):
    q = dctx().Queue()
    p = dctx().Process(target=report, args=(q,), name="labelled")
    p.start()
    host, pid = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    handle = p._job.handle
    assert p.pid != pid and p.pid > 1 << 22  # a synthetic pid: the container has its own
    assert pid < 100  # ... PID namespace, in which tini is PID 1
    (c,) = containers_of(engine, fiber_job=handle.job_id)  # not yet removed, or exited
    assert c["Labels"]["fiber.program"] == backend().program
    assert c["Labels"]["fiber.name"] == "labelled"
    assert c["Id"].startswith(handle.host) and len(handle.host) == 12
    assert c["Names"] == [f"/{handle.job_id}"]
    assert c["HostConfig"]["NetworkMode"] == "host"
    assert host == socket.gethostname()  # host networking shares the host's name
    final_status(p)
    wait_until(lambda: not containers_of(engine, fiber_job=handle.job_id), 10,
               message="the exited container removed")


def test_exit_codes(engine):
    cases = [(exit_with, 0, 0), (exit_with, 3, 3), (exit_with, 137, 137),
             (kill_self, signal.SIGKILL, -9), (kill_self, signal.SIGTERM, -15)]
    procs = [dctx().Process(target=f, args=(a,)) for f, a, _ in cases]
    fiber.process.start_all(procs)  # one submit: the containers are created in parallel
    for p, (f, a, want) in zip(procs, cases):
        p.join(60)
        assert p.exitcode == want, (f.__name__, a)
        st = final_status(p)
        assert st.exitcode == want and st.state.value == ("succeeded" if want == 0 else "failed")


def test_kill_and_terminate_give_negative_signals(engine):
    for method, sig in (("kill", signal.SIGKILL), ("terminate", signal.SIGTERM)):
        q = dctx().Queue()
        p = dctx().Process(target=limited.__wrapped__, args=(q,))
        p.start()
        assert q.get(timeout=60) == "started"
        getattr(p, method)()
        p.join(30)
        assert p.exitcode == -sig, method
        st = final_status(p)
        assert st.state.value == "cancelled" and st.exitcode == -sig
        assert signal.Signals(sig).name in st.reason


def test_resources_are_mapped(engine):
    q = dctx().Queue()
    p = dctx().Process(target=limited, args=(q,))
    p.start()
    assert q.get(timeout=60) == "started"
    info = engine.inspect_container(p._job.handle.job_id)
    hc = info["HostConfig"]
    assert hc["NanoCpus"] == 500_000_000
    assert hc["Memory"] == 128 * 2**20 and hc["MemorySwap"] == 128 * 2**20
    assert hc["Init"] is True
    p.kill()
    p.join(30)


def test_out_of_memory_is_reported(engine, capfd):
    p = dctx().Process(target=observe_helpers.hog)
    p.start()
    p.join(60)
    assert p.exitcode == -9
    st = final_status(p)
    assert "OOM" in st.reason and "96 MB" in st.reason
    # its line before the end, relayed by its first process (the OOM killer took the job)
    out = capfd.readouterr().out
    assert re.search(rf"^\({re.escape(p.name)}@\S+\) hogging memory now$", out, re.M), out


def test_gpu_request_fails_with_the_engines_reason(engine):
    if "nvidia" in (engine.info().get("Runtimes") or {}):
        unusable("an engine without the NVIDIA runtime", "this engine has the NVIDIA runtime")
    p = dctx().Process(target=wants_gpu)
    t = time.monotonic()
    with pytest.raises(SubmitError) as info:
        p.start()
    assert time.monotonic() - t < 30
    assert "gpu" in str(info.value).lower()
    assert not containers_of(engine, fiber_program=backend().program, fiber_name=p.name)


def test_output_is_kept_after_the_container_is_removed(engine):
    p = dctx().Process(target=chatty, args=("hello-logs",))
    p.start()
    p.join(60)
    final_status(p)
    handle = p._job.handle
    wait_until(lambda: not containers_of(engine, fiber_job=handle.job_id), 10,
               message="the exited container removed")
    out = backend().logs(handle)
    assert "hello-logs\n" in out and "hello-logs-on-stderr" in out
    assert "tini" not in out  # tini's own report of the exit is not the job's output
    assert backend().logs(handle, tail=1).count("\n") == 1
    # fiber logs' path (by job id) too: the container is gone, its output is not
    assert "hello-logs\n" in backend().read_logs(handle.job_id)
    assert backend().read_logs(handle.job_id, tail=1).count("\n") == 1


def test_many_processes_start_with_one_submit(engine):
    q = dctx().Queue()
    procs = [dctx().Process(target=report, args=(q,)) for _ in range(8)]
    t = time.monotonic()
    fiber.process.start_all(procs)
    submit = time.monotonic() - t
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(got) == 8
    print(f"8 containers created and started in {submit:.2f} s")


def test_pid_host_mode_gives_real_pids(engine):
    import psutil

    with fiber.config.override(docker_pid_host=True):
        q = dctx().Queue()
        p = dctx().Process(target=report_parent, args=(q,))
        p.start()
        _, parent = q.get(timeout=60)
        # Process.pid is the container's first process, the job's output relay, of which
        # the job is the child (fiber.process._relay)
        assert parent == p.pid
        p.join(60)
        assert p.exitcode == 0
        p = dctx().Process(target=sleep, args=(60,))
        p.start()
        wait_until(lambda: p.host != "", 60, message="the child connected")
        # a process of this host
        assert "fiber.process._bootstrap" in psutil.Process(p.pid).cmdline()
        hc = engine.inspect_container(p._job.handle.job_id)["HostConfig"]
        assert hc["PidMode"] == "host" and not hc["Init"]
        os.kill(p.pid, signal.SIGTERM)  # from this host, by pid, as with multiprocessing
        p.join(30)
        assert p.exitcode == -15


# -- pools --------------------------------------------------------------------------------


def test_pool_workers_are_containers_on_the_bridge_network(engine):
    got = run_script(os.path.join(SCRIPTS, "pool_hostnames.py"), IMAGE)
    short_ids = {cid[:12] for cid in got["ids"]}
    assert len(got["ids"]) == 3
    assert set(got["hosts"]) <= short_ids and len(set(got["hosts"])) >= 2, got
    gateway = engine.inspect_network("bridge")["IPAM"]["Config"][0]["Gateway"]
    assert got["listen"].startswith(f"tcp://{gateway}:")  # the master listened on the bridge
    wait_until(lambda: not containers_of(engine, fiber_program=got["program"]), 30,
               message="every container of the script removed at its exit")


def test_a_worker_container_killed_mid_map_is_one_warning_and_loses_no_result(
        engine, warnings):
    with dctx().Pool(2) as pool:
        r = pool.map_async(slow_square, range(60), 1)
        busy = lambda: [ws for ws in pool._core.live_workers()  # noqa: E731
                        if ws.connected and ws.pending]
        wait_until(lambda: len(busy()) >= 1, 60, message="a worker holds tasks")
        victim = busy()[0].process._job.handle
        engine.kill(victim.job_id, signal="SIGKILL")  # `docker kill`, from outside fiber
        assert r.get(timeout=120) == [x * x for x in range(60)]
        st = backend().wait(victim, 30)
        assert st is not None and st.exitcode == -9 and st.state.value == "failed"
        lines = warnings.wait(1)
    assert len(lines) == 1 and f"(job {victim.job_id} on " in lines[0], lines
    assert " was lost: killed by SIGKILL; resubmitted map(slow_square) task" in lines[0]


def test_a_worker_container_docker_stopped_retires_and_no_task_pays(engine, tmp_path,
                                                                      caplog):
    """`docker stop` (SIGTERM to the container's first process, the job's relay, which
    passes it on; SIGKILL 10 s later): the worker retires (issue 29). The tasks mark
    their starts in ``tmp_path``, mounted."""
    with fiber.config.override(log_level="info",
                               docker_mounts=f"{TESTS}:{TESTS}:ro,{tmp_path}:{tmp_path}"):
        check_a_stopped_worker_retires(
            dctx(), str(tmp_path), lambda w: engine.stop(w.job_id, timeout=10),
            lambda: caplog.records)


def test_a_task_that_sigkills_its_worker_under_tini_is_one_warning(engine, warnings):
    """Without ``docker_pid_host`` (the default) a worker is not PID 1 of its container
    (tini is, which ignores a SIGKILL from inside): a task's ``os.kill(os.getpid(),
    SIGKILL)`` ends its worker, as on a host."""
    flag = dctx().Event()
    with dctx().Pool(1) as pool:
        assert pool.map(functools.partial(observe_helpers.kill_own_worker_once, flag),
                        range(4), chunksize=1) == list(range(4))
        lines = warnings.wait(1)
    assert len(lines) == 1, lines
    assert re.search(r"PoolWorker-1 \(job \S+ on \S+\) was lost: killed by SIGKILL; "
                     r"resubmitted map\(kill_own_worker_once\) (task 2|tasks 2, 3)$",
                     lines[0]), lines  # task 3 too where its link was measured slow


def test_a_worker_the_oom_killer_ended_is_one_warning_saying_so(engine, warnings):
    check_an_oom_killed_worker_is_one_warning(dctx(), warnings)


# -- the master's end ------------------------------------------------------------------------


def _start_master(mode: str) -> Tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "master.py"), mode, IMAGE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=script_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"master.py {mode} did not start: {line!r}\n{err}")
    return proc, line.split()[1]


def test_a_sigkilled_master_leaves_no_running_container(engine):
    proc, program = _start_master("wait")
    try:
        assert len(engine.containers(filters={"label": f"fiber.program={program}"})) == 3
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        t = time.monotonic()
        wait_until(lambda: not engine.containers(
            filters={"label": f"fiber.program={program}"}), 30,
            message="no container of the killed master running")
        print(f"containers ended {time.monotonic() - t:.1f} s after the master's SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        for c in containers_of(engine, fiber_program=program):  # exited ones stay
            engine.remove_container(c["Id"], force=True)


def test_the_masters_exit_removes_all_its_containers(engine):
    proc, program = _start_master("exit")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert not containers_of(engine, fiber_program=program)  # running or exited


def test_a_master_in_a_container_runs_its_children_on_its_image(engine):
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        unusable("a Unix-socket engine", "the engine's socket must be mountable into a container")
    sock = host[len("unix://"):]
    c = engine.create_container(
        IMAGE, ["python3", os.path.join(SCRIPTS, "in_container.py")],
        environment={"DOCKER_HOST": host, "PYTHONPATH": SCRIPTS},
        host_config=engine.create_host_config(
            network_mode="host", init=True, binds=[f"{TESTS}:{TESTS}:ro", f"{sock}:{sock}"]),
        labels={"fiber.test": "in-container"})
    try:
        engine.start(c["Id"])
        code = engine.wait(c["Id"], timeout=120)["StatusCode"]
        out = engine.logs(c["Id"]).decode()
        assert code == 0, out
        got = json.loads([ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1][7:])
    finally:
        engine.remove_container(c["Id"], force=True)
    image_id = engine.inspect_image(IMAGE)["Id"]
    assert got["own"] == c["Id"]
    assert got["got"] == "hello from a child" and got["exitcode"] == 0
    assert got["child_image"] == image_id  # its own image, though `image` was not set
    assert got["child_network"] == "host"  # and its own network
    assert got["child_command"][0] == got["executable"]  # and its own interpreter


# -- failures are quick and say why -------------------------------------------------------


def test_a_missing_image_fails_the_submit_quickly(engine):
    with fiber.config.override(image="fiber-no-such-image:never"):
        p = dctx().Process(target=sleep, args=(1,))
        t = time.monotonic()
        with pytest.raises(SubmitError) as info:
            p.start()
        assert time.monotonic() - t < 10
    assert "fiber-no-such-image:never" in str(info.value)
    assert not containers_of(engine, fiber_program=backend().program, fiber_name=p.name)


def test_a_failed_submit_of_many_removes_the_containers_it_created(engine):
    procs = [dctx().Process(target=sleep, args=(30,)) for _ in range(3)]
    procs.append(dctx().Process(target=wants_gpu))
    if "nvidia" in (engine.info().get("Runtimes") or {}):
        unusable("an engine without the NVIDIA runtime", "this engine has the NVIDIA runtime")
    with pytest.raises(SubmitError) as info:
        fiber.process.start_all(procs)
    assert "1 of 4 jobs failed" in str(info.value)
    for p in procs:
        assert not containers_of(engine, fiber_program=backend().program, fiber_name=p.name)


def test_an_unreachable_engine_fails_the_submit_quickly(engine, tmp_path):
    dead = f"unix://{tmp_path}/no-engine.sock"
    with fiber.config.override(docker_host=dead):
        p = dctx().Process(target=sleep, args=(1,))
        t = time.monotonic()
        with pytest.raises(SubmitError) as info:
            p.start()
        assert time.monotonic() - t < 10
    assert "no-engine.sock" in str(info.value)


def test_a_network_the_engine_lacks_is_said_so_not_as_listen_host(engine_api):
    with fiber.config.override(docker_network="fiber-no-such-network"):
        with pytest.raises(SubmitError) as info:
            DockerBackend().listen_host()
    said = str(info.value)
    assert said.startswith("cannot find the gateway of Docker network 'fiber-no-such-network'"
                           ), said
    assert "check docker_network" in said and "set listen_host" not in said


def test_a_bridge_job_of_a_master_on_loopback_fails_at_once(engine):
    from fiber._core import _runtime
    from fiber.transport.sockets import split_address

    dctx().Queue()  # the hub is up, on the address of host networking
    if split_address(_runtime.hub().address)[0] != "127.0.0.1":
        unusable("a hub on loopback", "this process's hub does not listen on loopback")
    with fiber.config.override(docker_network="bridge"):
        with pytest.raises(ProcessError) as info:  # fiber.process checks before submitting
            dctx().Process(target=sleep, args=(1,)).start()
    gateway = engine.inspect_network("bridge")["IPAM"]["Config"][0]["Gateway"]
    assert "cannot reach" in str(info.value) and gateway in str(info.value)


# -- the fiber command ----------------------------------------------------------------------


def test_fiber_run_runs_the_program_in_a_container_with_its_pool_on_the_engine(engine):
    r = fiber_cli("run", "-b", "docker", "-c", "pool_prefetch=5", "--", "python3", MAIN, "3")
    assert r.returncode == 3, r.stderr
    got = tagged(r.stdout, "RESULT")
    job = started_job(r.stderr)
    program = job.split("-")[1]
    assert got["squares"] == [x * x for x in range(20)]
    assert got["backend"] == "docker" and got["prefetch"] == 5  # the command's config
    assert len(got["main"]) == 64 and len(got["workers"]) == 2  # all in containers
    assert got["main"] not in got["workers"]
    assert f"{job} failed: exit code 3" in r.stderr
    assert not containers_of(engine, fiber_program=program)  # main and workers removed


def test_fiber_run_detached_then_ps_logs_and_stop(engine):
    r = fiber_cli("run", "-b", "docker", "--detach", "--", "python3", MAIN, "hold")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    program = job.split("-")[1]
    try:
        got = ready_and_listed("docker", job, 3)  # the main program and its 2 workers
        assert len(got["workers"]) == 2
        assert len(containers_of(engine, fiber_program=program)) == 3
        # the main job's id stops the whole program
        stop_program("docker", job, lambda: not containers_of(engine, fiber_program=program))
        gone = fiber_cli("logs", "-b", "docker", job)
        assert gone.returncode == 1 and job in gone.stderr
    finally:
        for c in containers_of(engine, fiber_program=program):
            engine.remove_container(c["Id"], force=True)


def test_a_closed_output_pipe_ends_fiber_run_and_its_program_quietly(engine):
    code = "import time\nfor i in range(10**6):\n    print(i, flush=True)\n    time.sleep(0.001)"
    proc = fiber_popen("run", "-b", "docker", "--", "python3", "-c", code)
    program = ""
    try:
        assert proc.stdout.readline() == "0\n", proc.stderr.read()
        proc.stdout.close()  # as `| head -1` does
        proc.wait(120)
        err = proc.stderr.read()
        assert proc.returncode == 128 + signal.SIGPIPE, err
        assert "Traceback" not in err
        program = started_job(err).split("-")[1]
        assert not containers_of(engine, fiber_program=program)  # the program was ended
    finally:
        proc.kill()
        proc.wait()
        for c in containers_of(engine, fiber_program=program) if program else []:
            engine.remove_container(c["Id"], force=True)


def test_ctrl_c_on_fiber_run_removes_the_program_and_its_workers(engine):
    proc = fiber_popen("run", "-b", "docker", "--", "python3", MAIN, "hold")
    program = ""
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line + proc.stderr.read()
        program = started_job(proc.stderr.readline()).split("-")[1]
        assert len(containers_of(engine, fiber_program=program)) == 3
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read()
        assert not containers_of(engine, fiber_program=program)
    finally:
        proc.kill()
        proc.wait()
        for c in containers_of(engine, fiber_program=program) if program else []:
            engine.remove_container(c["Id"], force=True)


# -- units ---------------------------------------------------------------------------------


def test_exit_status_reads_tinis_report():
    assert exit_status(0).exitcode == 0
    assert exit_status(3).exitcode == 3
    signalled = b"[INFO  tini (1)] Main child exited with signal (with signal 'Killed')\n"
    normal = b"[INFO  tini (1)] Main child exited normally (with status '137')\n"
    assert exit_status(137, output=signalled).exitcode == -9
    assert exit_status(137, output=normal).exitcode == 137
    assert exit_status(137).exitcode == -9  # tini itself killed: taken as SIGKILL
    st = exit_status(143, signalled=[15], output=b"x")
    assert st.exitcode == -15 and st.state.value == "cancelled"
    st = exit_status(137, oom_killed=True, memory_mb=64)
    assert st.exitcode == -9 and "OOM" in st.reason and "64 MB" in st.reason


def test_parse_mounts():
    assert parse_mounts("") == []
    assert parse_mounts("/a, /b:/c:ro ,/d:rw") == ["/a:/a:rw", "/b:/c:ro", "/d:/d:rw"]
    with pytest.raises(ConfigError):
        parse_mounts("relative:/x")


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "docker", None)
    with fiber.config.override(backend="docker"):
        with pytest.raises(SubmitError, match=re.escape(install_hint("docker"))):
            DockerBackend().submit([JobSpec(command=("true",))])
