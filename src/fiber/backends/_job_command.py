"""The command line of a fiber job: ``python [interpreter flags] -m fiber.process._bootstrap``.

A job's interpreter is started with the master's interpreter flags (``-O``, ``-B``, ``-W``
warning filters, ``-X`` options, ``-E``/``-s``/``-I``...), as ``multiprocessing``'s spawn and
forkserver children are: ``python -O -W error train.py`` runs its workers under ``-O`` and
with warnings as errors too. Backends that recognise the bootstrap (the local fork server,
the netns test hosts) take the command apart with `bootstrap_parts`.
"""

from __future__ import annotations

import sys
from typing import List, Optional, Sequence, Tuple

__all__ = ["BOOTSTRAP_MODULE", "JOB_HOST_ENV", "JOB_LOG_ENV", "bootstrap_command",
           "bootstrap_parts", "interpreter_flags"]

BOOTSTRAP_MODULE = "fiber.process._bootstrap"
#: Set by a backend whose jobs' own host name is not the host a person knows them by (a
#: pod's host name is its pod's name): the name a job reports as its host (Process.host,
#: the lost-worker warnings, pool status) in place of its host name.
JOB_HOST_ENV = "FIBER_JOB_HOST"
#: Set for a job whose output its parent captures (``JobSpec.capture_output``): the job's
#: log file, where the job writes itself once nobody reads its pipes (its parent ended).
JOB_LOG_ENV = "FIBER_JOB_LOG"

#: sys.flags that a command-line switch sets, repeated as often as the flag's level.
_COUNTED_FLAGS = (("debug", "d"), ("dont_write_bytecode", "B"), ("no_site", "S"),
                  ("verbose", "v"), ("bytes_warning", "b"), ("quiet", "q"), ("optimize", "O"))


def interpreter_flags() -> List[str]:
    """The switches that give a new interpreter this one's ``sys.flags``,
    ``sys.warnoptions`` and ``sys._xoptions``.

    ``-P`` (3.11's safe path) is left out: it only drops ``sys.path[0]``, which a job
    replaces by the master's path anyway, and an older Python on a cluster node would
    refuse it.
    """
    flags = sys.flags
    args = [f"-{letter * getattr(flags, name)}" for name, letter in _COUNTED_FLAGS
            if getattr(flags, name) > 0]
    if flags.isolated:
        args.append("-I")
    else:
        if flags.ignore_environment:
            args.append("-E")
        if flags.no_user_site:
            args.append("-s")
    warnings = list(sys.warnoptions)
    # Filters the interpreter adds itself for -b/-bb and -X dev: the switch brings them back.
    for implied in ("default::BytesWarning", "error::BytesWarning"):
        if flags.bytes_warning and implied in warnings:
            warnings.remove(implied)
    if flags.dev_mode and "default" in warnings:
        warnings.remove("default")
    args.extend(f"-W{w}" for w in warnings)
    for key, value in getattr(sys, "_xoptions", {}).items():
        args.extend(("-X", key if value is True else f"{key}={value}"))
    return args


def bootstrap_command(python: str) -> Tuple[str, ...]:
    """The command of a job: ``python``, this interpreter's flags, the bootstrap module."""
    return (python, *interpreter_flags(), "-m", BOOTSTRAP_MODULE)


def bootstrap_parts(command: Sequence[str]) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """``(python, flags)`` of a `bootstrap_command`; None for any other command."""
    if len(command) < 3 or tuple(command[-2:]) != ("-m", BOOTSTRAP_MODULE):
        return None
    return command[0], tuple(command[1:-2])
