"""joblib's backend "fiber" (fiber.joblib) with its pool's workers spread over three
hosts: a Parallel's tasks and scikit-learn's n_jobs run there, with the results of a
sequential run, also when a task kills its worker once."""

import os
import signal
import sys
import tempfile
import time

import _common
from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score

import fiber.joblib  # noqa: F401 - registers the backend

WORKERS = 6


def where(x):
    # long enough that the pool's workers, still starting on the hosts, each take some
    # (instant tasks all went to the first worker up, once: one host)
    time.sleep(0.05)
    return _common.my_ip(), fiber.current_process().name, x * x


def kills_its_worker_once(x, marker):
    if x == 7 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def learn(n_jobs):
    """A grid search's scores and a cross-validation's, with ``n_jobs``."""
    X, y = make_classification(n_samples=120, n_features=8, random_state=0)
    model = LogisticRegression(max_iter=200)
    search = GridSearchCV(model, {"C": [0.1, 1.0, 10.0]}, cv=3, n_jobs=n_jobs).fit(X, y)
    scores = cross_val_score(model, X, y, cv=4, n_jobs=n_jobs)
    return [float(s) for s in search.cv_results_["mean_test_score"]], [float(s) for s in scores]


def main():
    hosts = _common.setup()
    marker = os.path.join(tempfile.mkdtemp(), "killed-once")
    expected = learn(n_jobs=1)  # sequential, in this process
    with parallel_config(backend="fiber", n_jobs=WORKERS):
        first = Parallel(timeout=_common.TIMEOUT)(delayed(where)(x) for x in range(60))
        learned = learn(n_jobs=WORKERS)
        killed = Parallel(timeout=_common.TIMEOUT)(
            delayed(kills_its_worker_once)(x, marker) for x in range(30))
    _common.result(
        host_ips=[ip for _, ip in hosts.hosts],
        task_ips=sorted({ip for ip, _, _ in first}),
        names=sorted({name for _, name, _ in first}),
        values_ok=[v for _, _, v in first] == [x * x for x in range(60)],
        learned_ok=learned == expected,
        killed=os.path.exists(marker),
        killed_ok=killed == [x * x for x in range(30)])


if __name__ == "__main__":
    sys.exit(main())
