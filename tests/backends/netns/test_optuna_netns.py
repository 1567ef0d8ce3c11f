"""fiber.optuna on several hosts (network namespaces, fiber_ci.netns): one Optuna
study, its journal in a fiber manager, searched by pool workers of three hosts. The
scenario runs in a fresh interpreter (tests/backends/netns/scripts/mh_optuna.py), as
those of test_multihost.py do."""

from __future__ import annotations

from test_multihost import hosts, run_scenario  # noqa: F401 - the module's fixture

from fiber_ci import netns


def test_one_study_searched_from_three_hosts(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_optuna.py", timeout=240)
    assert set(r["trial_ips"]) <= set(r["host_ips"]) and len(r["trial_ips"]) >= 2, r
    assert r["names"] and all(n.startswith("PoolWorker-") for n in r["names"]), r
    # 6 searches of 10 trials; one died in its fifth trial once, after 4 of its own had
    # completed (they stay), and ran again whole: its dying trial stays RUNNING
    assert r["killed"] and r["running"] == 1, r
    assert r["complete"] == 60 + 4, r
    assert r["numbers_ok"], r  # every trial numbered once, by the one study
    assert r["best"] < 5, r
