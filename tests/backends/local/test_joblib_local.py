"""fiber.joblib, joblib's backend "fiber", with the real joblib and scikit-learn on the local
backend: results equal to the sequential ones and to joblib's own loky backend, the work on
fiber pool workers, a task's error with its traceback, a killed worker, an abort, the pool
kept across calls and ended with its parallel_config block."""

from __future__ import annotations

import gc
import os
import signal
import time
from typing import Any, List, Tuple

import joblib
import psutil
import pytest
from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score

import fiber
import fiber.joblib
from fiber.errors import BrokenPoolError, RemoteTraceback
from fiber.joblib import FiberBackend
from fiber.testing.conformance.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


def square(x: int) -> int:
    return x * x


def where(x: int) -> Tuple[str, int, int]:
    """Which process ran the task: its fiber name and pid, with the task's value."""
    return fiber.current_process().name, os.getpid(), x * x


def fails_on_five(x: int) -> int:
    if x == 5:
        raise KeyError(f"no key {x}")
    return x


def kills_its_worker_once(x: int, marker: str) -> int:
    if x == 7 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def fails_or_sleeps(x: int) -> int:
    if x == 0:
        time.sleep(0.5)  # the others are running by then
        raise ValueError("the first task failed")
    time.sleep(60)
    return x


def nested(x: int) -> Tuple[str, int, List[Tuple[int, int]]]:
    """A task that runs a Parallel of its own: in which processes its tasks ran."""
    inner = Parallel(n_jobs=2)(delayed(lambda y: (os.getpid(), y * y))(y) for y in range(4))
    return fiber.current_process().name, os.getpid(), inner


def refuse_while(marker: str) -> None:
    """A pool initializer that fails while ``marker`` exists: the pool breaks."""
    if os.path.exists(marker):
        raise RuntimeError("this host is not ready")


def _collect_the_failed_call() -> None:
    """A call that raised is kept in a reference cycle (joblib's Parallel keeps the error,
    whose traceback holds the Parallel), and with it the block's backend and its pool
    (the next call's): the pool ends at Python's next garbage collection, as documented
    (docs/libraries.md), which the test does not wait for."""
    gc.collect()


def test_parallel_equals_sequential_on_fiber_pool_workers():
    with parallel_config(backend="fiber", n_jobs=4):
        out = Parallel()(delayed(where)(i) for i in range(100))
    assert [value for _, _, value in out] == [square(i) for i in range(100)]
    names = {name for name, _, _ in out}
    assert names and all(name.startswith("PoolWorker-") for name in names), names
    assert os.getpid() not in {pid for _, pid, _ in out}


def test_the_pool_is_kept_across_calls_and_ends_with_its_block():
    with parallel_config(backend="fiber", n_jobs=2):
        first = {pid for _, pid, _ in Parallel()(delayed(where)(i) for i in range(20))}
        second = {pid for _, pid, _ in Parallel()(delayed(where)(i) for i in range(20))}
    assert second <= first  # the same workers, not a new pool
    wait_until(lambda: not any(psutil.pid_exists(pid) for pid in first), timeout=30,
               message="the workers of the block's pool to end")


def test_a_parallel_of_backend_fiber_has_its_own_pool_which_ends_with_it():
    parallel = Parallel(backend="fiber", n_jobs=2)
    pids = {pid for _, pid, _ in parallel(delayed(where)(i) for i in range(10))}
    assert os.getpid() not in pids
    del parallel
    wait_until(lambda: not any(psutil.pid_exists(pid) for pid in pids), timeout=30,
               message="the workers of the Parallel's pool to end")


def test_a_call_with_another_n_jobs_resizes_the_pool():
    backend = FiberBackend()
    try:
        assert backend.configure(n_jobs=2) == 2
        pool = backend._pool
        assert backend.configure(n_jobs=3) == 3
        assert backend._pool is pool and pool.status().size == 3
        default = fiber.get_config().pool_processes or os.cpu_count()
        assert backend.effective_n_jobs(-1) == backend.effective_n_jobs(None) == default
        assert backend.effective_n_jobs(-default - 5) == 1
        with pytest.raises(ValueError, match="n_jobs == 0"):
            backend.effective_n_jobs(0)
    finally:
        backend.abort_everything(ensure_ready=False)


def test_a_nested_parallel_runs_in_its_fiber_worker():
    """joblib's nested backend (threads) in the worker: no process started from it."""
    with parallel_config(backend="fiber", n_jobs=2):
        out = Parallel()(delayed(nested)(x) for x in range(3))
    for name, worker, inner in out:
        assert name.startswith("PoolWorker-")
        assert [value for _, value in inner] == [0, 1, 4, 9]
        assert {pid for pid, _ in inner} == {worker}


def test_a_task_error_surfaces_with_its_remote_traceback():
    with parallel_config(backend="fiber", n_jobs=2):
        with pytest.raises(KeyError, match="no key 5") as info:
            Parallel()(delayed(fails_on_five)(i) for i in range(10))
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "fails_on_five" in str(cause) and 'raise KeyError(f"no key {x}")' in str(cause)


def test_a_killed_worker_is_replaced_and_each_result_comes_once(tmp_path):
    marker = str(tmp_path / "killed-once")
    with parallel_config(backend="fiber", n_jobs=3):
        out = Parallel(timeout=120)(
            delayed(kills_its_worker_once)(i, marker) for i in range(30))
    assert os.path.exists(marker)  # a worker was killed
    assert out == [square(i) for i in range(30)]


def test_an_error_aborts_the_running_tasks_promptly_and_the_next_call_works():
    with parallel_config(backend="fiber", n_jobs=3):
        start = time.monotonic()
        with pytest.raises(ValueError, match="the first task failed"):
            Parallel()(delayed(fails_or_sleeps)(i) for i in range(6))
        assert time.monotonic() - start < 20  # not the 60 s the other tasks sleep
        assert Parallel()(delayed(square)(i) for i in range(10)) == [
            square(i) for i in range(10)]
    _collect_the_failed_call()


def test_a_broken_pool_is_replaced_at_the_next_call(tmp_path):
    marker = tmp_path / "not-ready"
    marker.touch()
    with parallel_config(backend="fiber", n_jobs=2, initializer=refuse_while,
                         initargs=(str(marker),)):
        with pytest.raises(BrokenPoolError, match="this host is not ready"):
            Parallel(timeout=120)(delayed(square)(i) for i in range(4))
        marker.unlink()
        assert Parallel(timeout=120)(delayed(square)(i) for i in range(4)) == [0, 1, 4, 9]
    _collect_the_failed_call()


def test_an_unknown_argument_is_refused_with_what_is_taken():
    with pytest.raises(TypeError, match="unexpected arguments cpus: it takes context"):
        with parallel_config(backend="fiber", cpus=2):
            pass


def test_a_backend_name_selects_the_fiber_backend():
    with parallel_config(backend="fiber", n_jobs=2, context="local"):
        out = Parallel()(delayed(where)(i) for i in range(4))
    assert all(name.startswith("PoolWorker-") for name, _, _ in out)


# -- scikit-learn: the same results as joblib's own process backend ------------------------

def _data() -> Any:
    return make_classification(n_samples=120, n_features=8, random_state=0)


def _grid_search() -> Tuple[List[float], Any]:
    X, y = _data()
    search = GridSearchCV(LogisticRegression(max_iter=200), {"C": [0.1, 1.0, 10.0]}, cv=3,
                          n_jobs=2).fit(X, y)
    return list(search.cv_results_["mean_test_score"]), search.best_params_


def _cross_val_score() -> List[float]:
    X, y = _data()
    return list(cross_val_score(LogisticRegression(max_iter=200), X, y, cv=4, n_jobs=2))


def _random_forest() -> List[float]:
    X, y = _data()
    forest = RandomForestClassifier(n_estimators=20, random_state=0, n_jobs=2).fit(X, y)
    return list(forest.predict_proba(X)[:, 1])


class KillsItsWorkerOnce(LogisticRegression):
    """A model whose first fit anywhere SIGKILLs the worker it runs on (``marker``)."""

    def __init__(self, C: float = 1.0, marker: str = "") -> None:
        super().__init__(C=C, max_iter=200)
        self.marker = marker

    def fit(self, X: Any, y: Any) -> Any:
        if self.marker and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().fit(X, y)


def test_a_worker_killed_mid_grid_search_changes_nothing(tmp_path):
    X, y = _data()
    grid = {"C": [0.1, 1.0, 10.0]}
    expected = GridSearchCV(KillsItsWorkerOnce(), grid, cv=3).fit(X, y).cv_results_
    marker = str(tmp_path / "killed-once")
    with parallel_config(backend="fiber", n_jobs=3):
        got = GridSearchCV(KillsItsWorkerOnce(marker=marker), grid, cv=3).fit(X, y).cv_results_
    assert os.path.exists(marker)  # a worker was killed
    assert list(got["mean_test_score"]) == list(expected["mean_test_score"])


@pytest.mark.parametrize("run", [_grid_search, _cross_val_score, _random_forest],
                         ids=["GridSearchCV", "cross_val_score", "RandomForestClassifier"])
def test_scikit_learn_gives_loky_s_results(run):
    with parallel_config(backend="loky"):
        expected = run()
    with parallel_config(backend="fiber"):
        got = run()
    assert got == expected
    joblib.externals.loky.get_reusable_executor().shutdown(wait=True)
