"""fiber.Ring and fiber.experimental.Ring on the local backend alone: bad arguments refused,
the resources of every member's job (a backend that records them), and the DDP example
run as a script (see fiber/testing/conformance/test_ring.py for what every backend runs)."""

from __future__ import annotations

import os
import sys
from typing import Any, List

import pytest

import fiber
from fiber.backends import JobSpec, register_backend
from fiber.backends.local import LocalBackend
from fiber.testing.conformance.support import ring_helpers as rh
from fiber.testing.conformance.support.programs import run_program

import support


class _Recording(LocalBackend):
    """The local backend, keeping the spec of every job it starts."""

    name = "ring-recording"
    specs: List[JobSpec] = []

    def submit(self, specs: Any) -> Any:
        _Recording.specs.extend(specs)
        return super().submit(specs)


RUN_S = 180  # every run() of these tests has this deadline (a loaded machine is slow)


EXAMPLES = os.path.join(support.REPO, "examples")


def test_resources_reach_every_members_job():
    register_backend("ring-recording", _Recording)
    _Recording.specs.clear()
    ring = fiber.Ring(2, rh.with_meta, cpu=1, context=fiber.get_context("ring-recording"),
                      torch_store=False)
    assert ring.run(timeout=RUN_S) == [0, 1]
    assert len(_Recording.specs) == 2
    for spec in _Recording.specs:  # cpu from Ring, memory from @fiber.meta
        assert spec.resources.cpu == 1 and spec.resources.memory_mb == 256


@pytest.mark.parametrize("args,error", [
    ((0, rh.square_late), ValueError),
    ((2.0, rh.square_late), TypeError),
    ((True, rh.square_late), TypeError),
    ((2, "not a function"), TypeError),
])
def test_bad_arguments_are_refused(args, error):
    with pytest.raises(error, match="Ring"):
        fiber.Ring(*args)


def test_bad_max_restarts_and_torch_store_are_refused():
    with pytest.raises(ValueError, match="max_restarts"):
        fiber.Ring(2, rh.square_late, max_restarts=-1)
    with pytest.raises(TypeError, match="torch_store"):
        fiber.Ring(2, rh.square_late, torch_store="yes")  # type: ignore[arg-type]


def test_experimental_ring_bad_input():
    from fiber.experimental import Ring

    assert Ring(0, rh.old_style_func, rh.old_style_init).run() == []
    with pytest.raises(ValueError):
        Ring(-1, rh.old_style_func, rh.old_style_init)
    with pytest.raises(TypeError):
        Ring(2, rh.old_style_func, None)  # type: ignore[arg-type]


@pytest.mark.torch
def test_ddp_example_script():
    cp = run_program([sys.executable, os.path.join(EXAMPLES, "ddp_ring.py"), "--members",
                      "2", "--steps", "20"], RUN_S)  # (a hang: every process's threads)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "the same" in cp.stdout and "ring of 2" in cp.stdout
