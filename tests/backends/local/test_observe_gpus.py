"""GPUs on a workstation (issue 19): ``gpu=n`` on the local backend gives each job its own
GPUs, from those the host has, and refuses what it cannot meet. There is no GPU on this
machine: the host's GPUs are given as a host (or Slurm's --gpus) reports them to a
process, through CUDA_VISIBLE_DEVICES in the master's environment; what the jobs get is
read from their own environment. Local backend only (other backends ask their cluster)."""

from __future__ import annotations

import pytest

import fiber
from fiber._process_state import here
from fiber.backends.local._gpus import host_gpus
from fiber.errors import BrokenPoolError, SubmitError
from fiber.testing.conformance.support import observe_helpers as oh

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def local():
    return fiber.get_context("local")


@pytest.fixture
def three_gpus(monkeypatch):
    """The host's GPUs, as the environment reports them: 0, 1 and 2."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")


def _gpus_of(local, gpu: int, count: int) -> list:
    out = local.SimpleQueue()
    target = fiber.meta(gpu=gpu)(oh.visible_gpus)
    procs = [local.Process(target=target, args=(out,)) for _ in range(count)]
    started = []
    try:
        for p in procs:
            p.start()
            started.append(p)
        return sorted(out.get() for _ in procs)
    finally:
        for p in started:
            p.join(60)


def _gpus_then_wait(out, gate):
    import os

    out.put(os.environ.get("CUDA_VISIBLE_DEVICES"))
    gate.wait(60)


def test_jobs_get_distinct_gpus(local, three_gpus):
    """Three jobs alive at once (each waits until all three have said): three GPUs."""
    out, gate = local.SimpleQueue(), local.Event()
    target = fiber.meta(gpu=1)(_gpus_then_wait)
    procs = [local.Process(target=target, args=(out, gate)) for _ in range(3)]
    try:
        for p in procs:
            p.start()
        assert sorted(out.get() for _ in procs) == ["0", "1", "2"]
    finally:
        gate.set()
        for p in procs:
            p.join(60)


def test_a_pool_with_gpu_1_gives_each_worker_its_own(local, three_gpus):
    with local.Pool(3, gpu=1) as pool:
        seen = pool.map(_own_gpu, range(30), chunksize=1)
    by_worker = {}
    for name, gpu in seen:
        by_worker.setdefault(name, set()).add(gpu)
    assert all(len(g) == 1 for g in by_worker.values()), by_worker  # one GPU per worker
    gpus = [next(iter(g)) for g in by_worker.values()]
    assert len(set(gpus)) == len(gpus) and set(gpus) <= {"0", "1", "2"}


def _own_gpu(x):
    import os

    return fiber.current_process().name, os.environ.get("CUDA_VISIBLE_DEVICES")


def test_gpus_come_back_when_a_job_ends(local, three_gpus):
    assert _gpus_of(local, 2, 1) == ["0,1"]
    assert _gpus_of(local, 3, 1) == ["0,1,2"]  # the first job's two are free again


def test_a_request_the_host_cannot_meet_is_refused(local, three_gpus):
    p = local.Process(target=fiber.meta(gpu=4)(oh.sleep), args=(0,))
    with pytest.raises(SubmitError, match=r"gpu=4; this host has 3 GPUs "
                                          r"\(CUDA_VISIBLE_DEVICES=0,1,2\)"):
        p.start()
    with pytest.raises((SubmitError, BrokenPoolError),
                       match=r"2 jobs ask for 4 GPUs in all \(gpu=2 each\); this host has 3"):
        with local.Pool(2, gpu=2) as pool:  # refused at once, not after a wait
            pool.map(oh.sleep, [0] * 4)


def test_no_gpu_on_a_host_that_has_none(local, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert host_gpus() == []
    p = local.Process(target=fiber.meta(gpu=1)(oh.sleep), args=(0,))
    with pytest.raises(SubmitError, match="gpu=1; this host has 0 GPUs"):
        p.start()


def test_nvidia_smi_list_is_read(monkeypatch, tmp_path):
    """Without CUDA_VISIBLE_DEVICES the host's GPUs are nvidia-smi's list (a stand-in
    nvidia-smi on PATH prints what a 2-GPU host's does: no GPU here)."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)'\n"
                    "echo 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)'\n")
    fake.chmod(0o755)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}:" + __import__("os").environ["PATH"])
    assert host_gpus() == ["0", "1"]


def test_cpu_and_memory_are_not_enforced_and_say_so(local, capfd):
    here.jobs.local_noted.clear()
    with local.Pool(1, memory=256) as pool:
        assert pool.apply(oh.sleep, (0,)) == 0
    with local.Pool(1, cpu=2) as pool:  # said once only
        assert pool.apply(oh.sleep, (0,)) == 0
    err = capfd.readouterr().err
    assert err.count("does not enforce cpu= and memory=") == 1, err
    assert "the local backend does not enforce" in err, err


def test_a_job_of_several_workers_that_set_no_cpu_says_nothing_of_cpus(local, capfd):
    """Its job asks for a CPU a worker (fiber's choice, not the program's): no note that
    cpu= is not enforced, which the program never set."""
    here.jobs.local_noted.clear()
    with local.Pool(4, workers_per_job=2) as pool:
        assert pool.map(oh.sleep, [0] * 4) == [0] * 4
    err = capfd.readouterr().err
    assert "does not enforce cpu=" not in err, err
