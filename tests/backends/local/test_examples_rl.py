"""The reinforcement-learning examples, run as a user runs them, with small settings.

- ``examples/remote_envs.py``: AsyncManager environments, each in its own job.
- ``examples/ppo_cartpole.py``: stable-baselines3's PPO with ``SubprocVecEnv``'s
  environment processes as fiber jobs (needs torch: marked ``torch``).

Each runs as its own program (a subprocess) on the local backend and on network-namespace
hosts (its jobs on other IPs than the master's; needs root, skipped without it but under
``CI=true``), and must exit with code 0, a clean stderr and the result it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Dict, Iterator, List, Optional

import pytest

import support
from fiber_ci import netns, subprocess_env
from support.hosts import start_hosts

ROOT = support.REPO
EXAMPLES = os.path.join(ROOT, "examples")
TIMEOUT = 600  # seconds a program may take here, on a loaded 2-core machine

#: Runs an example with netns as the backend: ``FIBER_BACKEND=netns`` alone cannot, as the
#: backend is registered by importing fiber_ci.netns (as the test-only backend it is).
ON_NETNS = ("import runpy, sys, fiber, fiber_ci.netns\n"
            "fiber.init(backend='netns')\n"
            "sys.argv = sys.argv[1:]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")

# The PPO settings of the tests: a few seconds of training that shows learning (the mean
# return of the last 20 episodes is about 5 times that of the first 20 with seed 0).
PPO_TINY = ["--envs", "4", "--timesteps", "4096", "--epochs", "10", "--print-every", "0"]


def run_example(name: str, *args: str, hosts: Optional[netns.Hosts] = None,
                expect_rc: int = 0) -> subprocess.CompletedProcess:
    """Run ``examples/<name>`` with ``args`` (on ``hosts`` if given); check its exit code."""
    env = subprocess_env({k: v for k, v in os.environ.items()
                          if not k.startswith("FIBER_") and k != netns.HOSTS_ENV})
    path = os.path.join(EXAMPLES, name)
    command: List[str] = [sys.executable, path, *args]
    if hosts is not None:
        env[netns.HOSTS_ENV] = hosts.to_env()
        command = [sys.executable, "-c", ON_NETNS, path, *args]
    cp = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env,
                        cwd=ROOT, stdin=subprocess.DEVNULL)
    assert cp.returncode == expect_rc, (
        f"exit code {cp.returncode}\n--- stdout\n{cp.stdout}\n--- stderr\n{cp.stderr}")
    return cp


@pytest.fixture(scope="module")
def hosts() -> Iterator[netns.Hosts]:
    h = start_hosts(3)
    try:
        yield h
    finally:
        h.stop()


# -- remote environments with AsyncManager -----------------------------------------------


@pytest.mark.parametrize("where", ["local", "netns"])
def test_remote_envs(where: str, request: pytest.FixtureRequest) -> None:
    on = request.getfixturevalue("hosts") if where == "netns" else None
    cp = run_example("remote_envs.py", "--envs", "3", "--steps", "500", hosts=on)
    assert cp.stderr == ""
    lines = cp.stdout.splitlines()
    assert len(lines) == 2, cp.stdout
    assert lines[0].startswith(f"3 environments, each in its own {where} job, stepped 500 "
                               f"times: 1500 steps in ")
    # every cart balanced for the whole episode: the controller ran in every job
    assert lines[1] == "3 episodes finished, mean return 500.0 (500 is CartPole-v1's maximum)"


def test_remote_envs_bad_arguments() -> None:
    cp = run_example("remote_envs.py", "--envs", "0", expect_rc=2)
    assert "--envs and --steps must be at least 1" in cp.stderr


# -- PPO with SubprocVecEnv's environments as fiber jobs ----------------------------------

REPORT = re.compile(r"^(?P<library>fiber|multiprocessing): mean return of the first 20 "
                    r"training episodes (?P<first>[\d.]+), of the last 20 (?P<last>[\d.]+) "
                    r"\((?P<episodes>\d+) episodes\); the trained policy scores "
                    r"(?P<score>[\d.]+) .*; weights sha256 (?P<sha>[0-9a-f]{16}); ")


def ppo_reports(stdout: str) -> Dict[str, Dict[str, str]]:
    """The report line of each run, by library."""
    found = {m["library"]: m.groupdict() for m in map(REPORT.match, stdout.splitlines()) if m}
    assert found, stdout
    return found


@pytest.fixture(scope="module")
def ppo_compared() -> Dict[str, Dict[str, str]]:
    """``--compare`` on the local backend: multiprocessing, then fiber."""
    cp = run_example("ppo_cartpole.py", "--compare", *PPO_TINY)
    assert cp.stderr == ""
    assert cp.stdout.splitlines()[-1] == ("identical: the same episode returns, evaluation "
                                          "and weights with fiber as with multiprocessing")
    return ppo_reports(cp.stdout)


@pytest.mark.torch
def test_ppo_fiber_equals_multiprocessing_and_learns(ppo_compared) -> None:
    mp, fb = ppo_compared["multiprocessing"], ppo_compared["fiber"]
    assert {k: v for k, v in fb.items() if k != "library"} == \
        {k: v for k, v in mp.items() if k != "library"}
    first, last, score = float(fb["first"]), float(fb["last"]), float(fb["score"])
    assert first < 40  # an untrained policy: about 20 steps
    assert last > 2 * first and score > 2 * first, fb


@pytest.mark.torch
def test_ppo_on_netns_hosts_gives_the_same_run(ppo_compared, hosts) -> None:
    """The environments on other hosts, across a real network: the same training run."""
    cp = run_example("ppo_cartpole.py", "--with", "fiber", *PPO_TINY, hosts=hosts)
    assert cp.stderr == ""
    assert "4 environment processes started by fiber (netns backend)" in cp.stdout
    assert ppo_reports(cp.stdout)["fiber"] == ppo_compared["fiber"]


@pytest.mark.torch
def test_ppo_bad_arguments() -> None:
    cp = run_example("ppo_cartpole.py", "--envs", "0", expect_rc=2)
    assert "--envs must be at least 1" in cp.stderr


@pytest.mark.torch
def test_subproc_vec_env_with_a_dead_environment_raises(monkeypatch) -> None:
    """An environment job that dies makes the next step raise, as with multiprocessing
    (BrokenPipeError there too), never hang: BrokenPipeError from the send, or EOFError
    from the receive if the pipe's server has not yet seen the job's connection close."""
    import numpy as np
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, subproc_vec_env

    import fiber

    monkeypatch.setattr(subproc_vec_env, "mp", fiber)
    envs = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv)
    try:
        assert all(isinstance(p, fiber.Process) and p.daemon for p in envs.processes)
        assert envs.reset().shape == (2, 4)
        envs.processes[0].kill()
        envs.processes[0].join(60)
        with pytest.raises((BrokenPipeError, EOFError)):
            envs.step(np.zeros(2, dtype=int))
    finally:
        for p in envs.processes:
            p.kill()
            p.join(60)
