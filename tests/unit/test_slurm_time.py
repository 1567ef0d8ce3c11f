"""Slurm's ``--time`` formats, the notice a job asks for before its limit, and a pool's
renewal plan (issue 29): no cluster needed; tests/backends/slurm runs them on one."""

from __future__ import annotations

import pytest

import fiber
from fiber.backends import get_backend
from fiber.backends.slurm._time import notice_seconds, time_limit_seconds
from fiber.errors import ConfigError
from fiber.pool import _renew


@pytest.mark.parametrize("text,seconds", [
    ("30", 1800), ("1", 60), ("5:30", 330), ("1:00:00", 3600), ("2-0", 172800),
    ("1-12:30", 131400), ("1-0:0:10", 86410), ("0:45", 45)])
def test_slurm_times(text, seconds):
    assert time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "infinite", "0", "1-2:3:4:5"])
def test_not_slurm_times(text):
    assert time_limit_seconds(text) is None


def test_the_notice_is_a_quarter_of_the_limit_within_bounds():
    assert notice_seconds(60) == 15 and notice_seconds(20) == 10
    assert notice_seconds(86400) == 120


def test_the_backend_says_its_jobs_limit_and_refuses_a_bad_one():
    backend = get_backend("slurm")
    with fiber.config.override(slurm_time_limit=""):
        assert backend.job_time_limit() is None
    with fiber.config.override(slurm_time_limit="1:30"):
        assert backend.job_time_limit() == 90
    with fiber.config.override(slurm_time_limit="soon"), pytest.raises(ConfigError):
        backend.job_time_limit()


def test_renewal_comes_a_margin_before_the_limit_and_spread():
    assert _renew.lifetime(0, None, 60) is None
    assert _renew.lifetime(0, 3600, 60) == 3540
    assert _renew.lifetime(0, 60, 60) == 40  # at most a third of the limit
    assert _renew.lifetime(100, 3600, 60) == 100
    times = [_renew.renew_at(1000.0, 100.0, slot) for slot in range(1, 9)]
    assert all(1085.0 <= t <= 1100.0 for t in times) and len(set(times)) == 8
    assert _renew.renew_at(1000.0, None, 1) == 0
