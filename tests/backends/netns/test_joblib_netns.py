"""fiber.joblib on several hosts (network namespaces, fiber_ci.netns): joblib's tasks
and scikit-learn's n_jobs run on pool workers of the netns hosts, with the results of a
sequential run, and a worker killed mid-Parallel costs nothing but its rerun. The scenario
runs in a fresh interpreter (tests/backends/netns/scripts/mh_joblib.py), as those of
test_multihost.py do."""

from __future__ import annotations

from test_multihost import hosts, run_scenario  # noqa: F401 - the module's fixture

from fiber_ci import netns


def test_joblib_and_scikit_learn_run_on_the_hosts(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_joblib.py", timeout=240)
    host_ips = set(r["host_ips"])
    assert set(r["task_ips"]) <= host_ips and len(r["task_ips"]) >= 2, r
    assert r["names"] and all(n.startswith("PoolWorker-") for n in r["names"]), r
    assert r["values_ok"], r
    assert r["learned_ok"], r  # GridSearchCV, cross_val_score: the sequential results
    assert r["killed"] and r["killed_ok"], r  # each result once, after the worker's death
