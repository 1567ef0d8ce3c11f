"""A local backend whose jobs go through an output relay, as jobs on other hosts do.

Slurm, Docker and Kubernetes jobs are not their parent's children: each one's first
process stays as its output relay (fiber.process._relay). This backend runs local jobs
that way (``jobs_are_children`` False, and no descriptors handed over: they connect back
over TCP), so that the relay is tested with real processes and real signals in the local
suite too; the cluster stages run it on the real engines. Not a fake of anything: the
jobs, the relay, the pipes and the signals are the real ones."""

from __future__ import annotations

from fiber.backends import register_backend
from fiber.backends.local import LocalBackend

NAME = "local-relayed"


class RelayedLocalBackend(LocalBackend):
    name = NAME
    passes_fds = False
    jobs_are_children = False


def register() -> str:
    register_backend(NAME, RelayedLocalBackend)
    return NAME
