"""joblib's backend "fiber" (fiber.joblib) against joblib's own loky backend, in the same run.

    .venv/bin/python benchmarks/joblib_backend.py [--workers 8] [--repeat 3]

1. scikit-learn's ``cross_val_score`` of a small model (a random forest of 20 trees,
   ``cv`` = the workers) with ``n_jobs`` workers under ``parallel_config(backend=...)``,
   fiber and loky alternating: the first call of a block (its pool or executor started)
   and a later call (reused), best of ``--repeat``; the ratio fiber / loky.
2. The backend's cost per ``Parallel`` call and per task, warm: a call of 1 no-op task,
   and of 200, against the same work through ``fiber.Pool.apply_async`` and ``map``.
   joblib's own result loop sleeps 10 ms whenever the next result is not in yet: a call
   whose result is not back at its first look costs those 10 ms, on any backend.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Dict, List

from _common import table
from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import cross_val_score

import fiber
import fiber.joblib  # noqa: F401 - registers the backend


def noop(x: int) -> int:
    return x


def _seconds(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cross_validation(workers: int, repeat: int) -> None:
    X, y = make_classification(n_samples=600, n_features=20, random_state=0)
    model = RandomForestClassifier(n_estimators=20, random_state=0)
    best: Dict[str, List[float]] = {"fiber": [1e9, 1e9], "loky": [1e9, 1e9]}
    for _ in range(repeat):
        for backend in ("fiber", "loky"):  # alternating, so that load hits both alike
            with parallel_config(backend=backend, n_jobs=workers):
                for i in range(2):
                    s = _seconds(lambda: cross_val_score(model, X, y, cv=workers))
                    best[backend][i] = min(best[backend][i], s)
    rows = [[f"{name} (s)", first, later] for name, (first, later) in best.items()]
    rows.append(["fiber / loky", best["fiber"][0] / best["loky"][0],
                 best["fiber"][1] / best["loky"][1]])
    table(f"cross_val_score, random forest, {workers} workers (best of {repeat})",
          ["", "first call of a block", "later call"], rows)


def per_call(workers: int, repeat: int) -> None:
    calls = 30 * repeat
    with parallel_config(backend="fiber", n_jobs=workers):
        Parallel()(delayed(noop)(i) for i in range(workers))  # the pool started
        one = min(_seconds(lambda: Parallel()([delayed(noop)(0)])) for _ in range(calls))
        many = min(_seconds(lambda: Parallel()(delayed(noop)(i) for i in range(200)))
                   for _ in range(repeat))
    with fiber.Pool(workers) as pool:
        pool.map(noop, range(workers))
        apply = min(_seconds(lambda: pool.apply_async(noop, (0,)).get()) for _ in range(calls))
        mapped = min(_seconds(lambda: pool.map(noop, range(200), chunksize=1))
                     for _ in range(repeat))
    table("a call's cost, warm (best, ms)", ["", "1 task", "200 tasks"], [
        ["Parallel on backend fiber", one * 1e3, many * 1e3],
        ["fiber.Pool (apply_async, map)", apply * 1e3, mapped * 1e3]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cross_validation(args.workers, args.repeat)
    per_call(args.workers, args.repeat)


if __name__ == "__main__":
    main()
