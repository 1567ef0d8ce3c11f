"""Managers and locks against multiprocessing, measured in the same run.

    .venv/bin/python benchmarks/managers.py [--quick]

1. Round trips (median and p99 over N calls): a managed dict's ``d[k] = v`` and ``d[k]``;
   a managed Lock's acquire + release; a top-level Lock's acquire + release from its
   creating process. fiber: ``fiber.Manager()``, a job on the local backend;
   multiprocessing: ``multiprocessing.Manager()``.
2. Parallel ``step`` throughput: E environments whose ``step`` burns about 2 ms of CPU,
   stepped in lock-step rounds (send every action, then wait for every result), as an RL
   rollout does. fiber: ``AsyncManager`` (each environment in its own job); multiprocessing:
   a ``BaseManager`` serving the same type (all environments in its one process), called
   one after the other and from one thread per environment. Also real gymnasium
   CartPole environments (a ~20 us step: the per-call overhead).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.managers
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List

from _common import latencies, table

import fiber
import fiber.managers

QUICK = "--quick" in sys.argv
N = 500 if QUICK else 3000
ENVS = 4
ROUNDS = 50 if QUICK else 200
BURN_S = 0.002


class BusyEnv:
    """An environment whose step costs about ``BURN_S`` of CPU."""

    def __init__(self) -> None:
        self.t = 0

    def reset(self) -> int:
        self.t = 0
        return 0

    def step(self, action: int) -> tuple:
        end = time.perf_counter() + BURN_S
        x = 0
        while time.perf_counter() < end:
            x += 1
        self.t += 1
        return self.t, 1.0, False, {}


class CartPole:
    def __init__(self) -> None:
        import gymnasium as gym

        self.env = gym.make("CartPole-v1")

    def reset(self) -> Any:
        return self.env.reset(seed=0)[0]

    def step(self, action: int) -> tuple:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            obs, _ = self.env.reset()
        return obs, reward, terminated or truncated, info


class FiberEnvs(fiber.managers.AsyncManager):
    pass


class MpEnvs(multiprocessing.managers.BaseManager):
    pass


for _cls in (FiberEnvs, MpEnvs):
    _cls.register("Busy", BusyEnv)
    _cls.register("CartPole", CartPole)


def round_trips() -> List[List[Any]]:
    rows = []
    fm = fiber.Manager()
    with multiprocessing.Manager() as mm:
        fd, md = fm.dict(), mm.dict()
        fl, ml = fm.Lock(), mm.Lock()
        for name, f_call, m_call in (
                ("managed dict d[k] = v", lambda: fd.__setitem__("k", 1),
                 lambda: md.__setitem__("k", 1)),
                ("managed dict d[k]", lambda: fd["k"], lambda: md["k"]),
                ("managed Lock acquire+release", lambda: (fl.acquire(), fl.release()),
                 lambda: (ml.acquire(), ml.release()))):
            f_call()
            m_call()
            f = latencies(f_call, N)
            m = latencies(m_call, N)
            rows.append([name, f["median"] * 1e6, f["p99"] * 1e6, m["median"] * 1e6,
                         m["p99"] * 1e6, f["median"] / m["median"]])
    fm.shutdown()
    lock, mlock = fiber.Lock(), multiprocessing.Lock()
    f = latencies(lambda: (lock.acquire(), lock.release()), N)
    m = latencies(lambda: (mlock.acquire(), mlock.release()), N)
    rows.append(["Lock acquire+release (creator)", f["median"] * 1e6, f["p99"] * 1e6,
                 m["median"] * 1e6, m["p99"] * 1e6, f["median"] / m["median"]])
    return rows


def fiber_steps(typeid: str, envs: int, rounds: int) -> float:
    manager = FiberEnvs()
    manager.start()
    try:
        proxies = [getattr(manager, typeid)() for _ in range(envs)]
        [h.get() for h in [p.reset() for p in proxies]]  # every job is up
        t = time.perf_counter()
        for _ in range(rounds):
            handles = [p.step(0) for p in proxies]
            [h.get() for h in handles]
        return envs * rounds / (time.perf_counter() - t)
    finally:
        manager.shutdown()


def mp_steps(typeid: str, envs: int, rounds: int, threads: bool) -> float:
    with MpEnvs() as manager:
        proxies = [getattr(manager, typeid)() for _ in range(envs)]
        for p in proxies:
            p.reset()
        t = time.perf_counter()
        if threads:
            with ThreadPoolExecutor(envs) as ex:
                for _ in range(rounds):
                    list(ex.map(lambda p: p.step(0), proxies))
        else:
            for _ in range(rounds):
                for p in proxies:
                    p.step(0)
        return envs * rounds / (time.perf_counter() - t)


def main() -> None:
    print(f"{multiprocessing.cpu_count()} CPUs; {N} calls per round-trip row; "
          f"{ENVS} environments x {ROUNDS} rounds")
    table("1. round trips (us)",
          ["operation", "fiber median", "fiber p99", "mp median", "mp p99", "fiber/mp"],
          round_trips())
    rows = []
    for typeid, label in (("Busy", "2 ms CPU step"), ("CartPole", "gymnasium CartPole")):
        f = fiber_steps(typeid, ENVS, ROUNDS)
        m_seq = mp_steps(typeid, ENVS, ROUNDS, threads=False)
        m_thr = mp_steps(typeid, ENVS, ROUNDS, threads=True)
        rows.append([label, f, m_seq, m_thr, f / max(m_seq, m_thr)])
    table("2. parallel step throughput (steps/s, higher is better)",
          ["environment", "fiber AsyncManager", "mp Manager", "mp Manager+threads",
           "fiber/best mp"], rows)


if __name__ == "__main__":
    main()
