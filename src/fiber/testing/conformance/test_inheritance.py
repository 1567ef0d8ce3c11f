"""What a job inherits from the program, as a spawn child of multiprocessing does: sys.argv,
sys.path in its order, the working directory, the interpreter's flags, -W and -X options.

A job that did not get them computes silently with other settings (a module that parses
the program's arguments at import sees the defaults), so each has a test.
"""

from __future__ import annotations

import os
import sys


def report_inherited(q) -> None:  # type: ignore[no-untyped-def]
    q.put((list(sys.argv), list(sys.path), os.getcwd()))


def test_child_gets_the_programs_argv_path_and_cwd(ctx, monkeypatch):
    argv = ["train.py", "--lr", "0.1", "--seed=3"]
    entry = "/nonexistent/fiber-test-path-entry"
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "path", [entry, *sys.path])
    monkeypatch.chdir("/tmp")  # exists on every backend's hosts and images
    q = ctx.SimpleQueue()
    p = ctx.Process(target=report_inherited, args=(q,))
    p.start()
    child_argv, child_path, child_cwd = q.get()
    p.join(60)
    assert child_argv == argv
    assert child_path[0] == entry  # the parent's order: its first entry is searched first
    assert [e for e in child_path if e in sys.path] == sys.path
    assert child_cwd == "/tmp"


def test_pool_workers_get_the_programs_argv(ctx, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["es.py", "--population", "64"])
    with ctx.Pool(2) as pool:
        assert pool.map(_argv, range(3)) == [["es.py", "--population", "64"]] * 3


def _argv(_: int) -> list:
    return list(sys.argv)


def report_flags(q) -> None:  # type: ignore[no-untyped-def]
    q.put(_flags())


def _flags() -> tuple:
    return (tuple(sys.flags), list(sys.warnoptions), dict(sys._xoptions))


def test_child_runs_with_the_programs_interpreter_flags(ctx):
    """sys.flags, -W and -X options are the parent's (scripts/test runs pytest with -X
    options so that this compares something on every backend)."""
    q = ctx.SimpleQueue()
    p = ctx.Process(target=report_flags, args=(q,))
    p.start()
    assert q.get() == _flags()
    p.join(60)


