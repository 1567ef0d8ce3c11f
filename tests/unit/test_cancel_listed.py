"""``fiber stop`` on a batch scheduler (`fiber.backends._batch.cancel_listed`): a program's
master may submit a replacement worker until its own job has ended, and the stop must
cancel that one too. The listings here are scripted: what Slurm's ``squeue`` showed in
the CI run where a replacement escaped (the Slurm stage runs the real case)."""

from typing import List

import pytest

from fiber.backends import _batch
from fiber.backends._base import JobInfo
from fiber.backends._batch import cancel_listed


@pytest.fixture(autouse=True)
def _short_settle(monkeypatch):
    monkeypatch.setattr(_batch, "SETTLE_S", 1.0)  # (5 s in fiber stop)


def _job(job_id: str, state: str) -> JobInfo:
    return JobInfo(job_id, "p", "w", state, ended=state in ("cancelled", "failed"))


class Cluster:
    """Listings in turn (the last one repeats); the ids cancelled, in calls."""

    def __init__(self, *listings: List[JobInfo]) -> None:
        self.listings = list(listings)
        self.calls: List[List[str]] = []

    def listing(self) -> List[JobInfo]:
        return self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]

    def cancel(self, ids: List[str]) -> None:
        self.calls.append(list(ids))


def _stoppable(j: JobInfo) -> bool:
    return j.state in ("pending", "running")


def test_a_replacement_submitted_while_the_master_ends_is_cancelled_too():
    cluster = Cluster(
        [_job("1", "running"), _job("2", "running"), _job("3", "running")],
        [_job("1", "completing"), _job("2", "cancelled"), _job("3", "cancelled")],
        [_job("1", "completing"), _job("2", "cancelled"), _job("3", "cancelled"),
         _job("4", "pending")],  # the master's last sbatch
        [_job("1", "cancelled"), _job("2", "cancelled"), _job("3", "cancelled"),
         _job("4", "cancelled")])
    got = cancel_listed(cluster.listing, _stoppable, cluster.cancel, timeout=30,
                        until_ended=True)
    assert got == ["1", "2", "3", "4"] and cluster.calls == [["1", "2", "3"], ["4"]]


def test_without_until_ended_the_stop_returns_at_the_first_quiet_listing():
    cluster = Cluster(
        [_job("1", "running"), _job("2", "running")],
        [_job("1", "completing"), _job("2", "cancelled")],
        [_job("1", "completing"), _job("2", "cancelled"), _job("3", "pending")])
    got = cancel_listed(cluster.listing, _stoppable, cluster.cancel, timeout=30)
    assert got == ["1", "2"] and len(cluster.listings) == 1  # the third listing unread


def test_no_timeout_is_one_listing_and_a_stuck_job_ends_the_wait_at_the_timeout():
    cluster = Cluster([_job("1", "running")], [_job("1", "completing")])
    assert cancel_listed(cluster.listing, _stoppable, cluster.cancel) == ["1"]
    assert len(cluster.listings) == 1
    once = Cluster([_job("1", "running")], [_job("1", "completing")])
    assert cancel_listed(once.listing, _stoppable, once.cancel, until_ended=True) == ["1"]
    assert len(once.listings) == 1  # no timeout: one listing, whatever until_ended says
    stuck = Cluster([_job("1", "running")], [_job("1", "completing")])
    got = cancel_listed(stuck.listing, _stoppable, stuck.cancel, timeout=1.2, until_ended=True)
    assert got == ["1"] and stuck.calls == [["1"]]


def test_a_submission_that_outlives_the_masters_job_is_cancelled_too():
    """The master's last sbatch, in flight when it was killed, outlives its job (the test
    cluster tracks processes by their parent, proctrack/linuxproc: an orphan escapes):
    its job shows once every job cancelled has ended. The stop lists again for
    ``SETTLE_S`` then, and cancels it (in CI it escaped, started, and failed)."""
    cluster = Cluster(
        [_job("1", "running"), _job("2", "running")],
        [_job("1", "cancelled"), _job("2", "cancelled")],
        [_job("1", "cancelled"), _job("2", "cancelled")],
        [_job("1", "cancelled"), _job("2", "cancelled"), _job("3", "pending")],
        [_job("1", "cancelled"), _job("2", "cancelled"), _job("3", "cancelled")])
    got = cancel_listed(cluster.listing, _stoppable, cluster.cancel, timeout=30,
                        until_ended=True)
    assert got == ["1", "2", "3"] and cluster.calls == [["1", "2"], ["3"]]
