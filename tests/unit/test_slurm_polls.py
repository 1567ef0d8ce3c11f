"""The ``squeue`` calls of a Slurm status poll: one job id a call, so that each is a
single-job RPC to slurmctld (squeue given several ids loads the whole cluster's queue),
or past ``ALONE`` ids one call for the user's jobs. No cluster needed:
tests/backends/slurm counts slurmctld's RPCs on one."""

from __future__ import annotations

import pathlib
from typing import List

from fiber.backends.slurm import SlurmBackend
from fiber.backends.slurm._status import ALONE, SQUEUE_FORMAT, squeue_commands


def _jobs(argv: List[str]) -> List[str]:
    return [a.split("=", 1)[1] for a in argv if a.startswith("--jobs=")]


def test_one_id_is_one_call_for_that_id():
    assert squeue_commands(["101"], uid=1000) == [
        ["squeue", "--noheader", "--array", "--states=all", "--jobs=101",
         f"--Format={SQUEUE_FORMAT}"]]


def test_an_array_and_a_replacement_are_two_calls_of_one_id_each():
    calls = squeue_commands(["101", "135"], uid=1000)
    assert [_jobs(argv) for argv in calls] == [["101"], ["135"]]
    assert not any(a.startswith("--user") for argv in calls for a in argv)
    assert all(argv[:4] == ["squeue", "--noheader", "--array", "--states=all"]
               and argv[-1] == f"--Format={SQUEUE_FORMAT}" for argv in calls)


def test_up_to_alone_ids_each_its_own_call():
    ids = [str(100 + i) for i in range(ALONE)]
    assert [_jobs(argv) for argv in squeue_commands(ids, uid=0)] == [[i] for i in ids]
    assert ALONE >= 10  # the 10 arrays of a 10,000-worker pool are asked one by one


def test_more_ids_are_one_call_for_the_users_jobs():
    ids = [str(100 + i) for i in range(ALONE + 1)]
    assert squeue_commands(ids, uid=1234) == [
        ["squeue", "--noheader", "--array", "--states=all", "--user=1234",
         f"--Format={SQUEUE_FORMAT}"]]
    assert squeue_commands(ids[:3], uid=1234, alone=2) == squeue_commands(ids, uid=1234)


def test_no_ids_no_call():
    assert squeue_commands([], uid=0) == []


def test_the_slurm_page_says_the_poll_as_the_code_makes_it():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "backends" / "slurm.md")
    text = " ".join(page.read_text(encoding="utf-8").split())
    assert f"Past {ALONE} ids" in text
    assert (f"every {SlurmBackend.poll_min_interval:g} s after a change, backing off to "
            f"{SlurmBackend.poll_max_interval:g} s") in text
