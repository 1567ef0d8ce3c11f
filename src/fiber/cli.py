"""The ``fiber`` command: run a program as a cluster job, and list, read and stop jobs.

    fiber run [-b BACKEND] [--image IMAGE] [-c KEY=VALUE]... [-v VOLUME]... [-d|-a]
              [--] COMMAND [ARG]...
    fiber ps [-b BACKEND] [--all] [PROGRAM]
    fiber logs [-b BACKEND] [--tail N] JOB
    fiber stop [-b BACKEND] PROGRAM|JOB...
    fiber top [PROGRAM] [--once]

What each does, its options and its limits: docs/cli.md.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from . import _top, config
from ._backoff import retrying
from ._version import DISTRIBUTION
from .backends import CommandLineBackend, JobHandle, JobSpec, JobStatus, Resources, get_backend
from .errors import BackendError, FiberError

__all__ = ["main"]

_NAME = "fiber run"  # the name of every main program's job (``fiber ps`` shows it)


class UsageError(Exception):
    """A command line that cannot be run (exit status 2, as argparse's own errors)."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``fiber`` command; its exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):  # a job's output may not fit this terminal
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        if args.command == "top":  # the program's hub, not a cluster: no backend
            return _top.run(args)
        if args.command == "dashboard":
            return _top.run_dashboard(args)
        overrides = _overrides(args)
        if overrides:
            config.init(**overrides)
        backend = get_backend(config.get_config().backend)
        if not isinstance(backend, CommandLineBackend):
            raise BackendError(f"the {backend.name} backend does not support the fiber "
                               f"command ({args.command}): use the cluster's own tools")
        return int(args.handler(backend, args))
    except UsageError as e:
        parser.error(str(e))  # exits with status 2
    except FiberError as e:
        print(f"fiber: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1


def version_line() -> str:
    """``fiber-cluster 0.1.0 (fiber at /path/to/fiber)``: the distribution, its version and
    where the imported package is, so that another distribution of the same import name
    (the original fiber) cannot pass for this one."""
    import fiber

    return (f"{DISTRIBUTION} {fiber.__version__} (fiber at "
            f"{os.path.dirname(os.path.abspath(fiber.__file__))}, Python "
            f"{sys.version.split()[0]})")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the option or command meant."""

    #: Every option and command of the ``fiber`` command, filled in by `_parser`.
    known: List[str] = []

    def error(self, message: str) -> NoReturn:
        words = re.findall(r"unrecognized arguments: (.*)$|invalid choice: '([^']*)'",
                           message)
        if words:
            typed = (words[0][0].split() or [""])[0] or words[0][1]
            close = difflib.get_close_matches(typed, self.known, n=1, cutoff=0.6)
            if close:
                message += f" (did you mean {close[0]!r}?)"
        super().error(message)


class _Version(argparse.Action):
    """``--version``: `version_line` as it is, on one line (argparse's own version
    action wraps it to the terminal's width, and the path in it is often wider)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: Optional[str] = None) -> NoReturn:
        print(version_line())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="fiber", description="Run a program as a job on a cluster; list, read and "
        "stop fiber jobs. Settings come from .fiberconfig and FIBER_* variables, as for a "
        "program using fiber.")
    top.add_argument("-V", "--version", action=_Version, nargs=0,
                     help="print the distribution, its version and where it is, and exit")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                  help="what to do (fiber COMMAND --help tells more)")

    def command(name: str,
                handler: Callable[[CommandLineBackend, argparse.Namespace], int],
                help: str) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help, description=help)
        _Parser.known.append(name)
        p.add_argument("-b", "--backend", help="the backend (config key backend)")
        p.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE",
                       help="a config value, as in .fiberconfig (repeatable)")
        p.set_defaults(handler=handler)
        return p

    run = command("run", _run, "start a program as a job and follow its output")
    run.add_argument("--image", help="the image of its container or pod (config key image)")
    run.add_argument("--cpu", type=float, help="CPUs for the program's own job")
    run.add_argument("--memory", type=int, metavar="MB", help="memory for its own job")
    run.add_argument("--gpu", type=int, help="GPUs for its own job")
    run.add_argument("-e", "--env", action="append", default=[], metavar="NAME=VALUE",
                     help="an environment variable of the program (repeatable)")
    run.add_argument("-v", "--volume", action="append", default=[],
                     metavar="NAME[:PATH][:ro]",
                     help="a persistent volume mounted in the program's job and its jobs, "
                     "on a backend that has them (a volume claim, at /persistent unless "
                     "PATH; repeatable)")
    follow = run.add_mutually_exclusive_group()
    follow.add_argument("-d", "--detach", action="store_true",
                        help="print the job's id and leave the program running")
    follow.add_argument("-a", "--attach", action="store_true",
                        help="follow the program's output until it ends (the default; "
                        "the original fiber's flag)")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="COMMAND [ARG]...",
                     help="the program to run and its arguments (python main.py); a -- "
                     "before it ends fiber run's own options")

    ps = command("ps", _ps, "list the fiber jobs on the cluster that have not ended, "
                 "oldest first")
    ps.add_argument("filter", nargs="?", default="", metavar="PROGRAM",
                    help="only this program's jobs")
    ps.add_argument("-a", "--all", action="store_true",
                    help="also the jobs that have ended, while the cluster keeps them "
                    "(local keeps those of running programs and, of ended programs, "
                    "the newest 200 jobs and programs that ended in the last 24 h)")

    logs = command("logs", _logs, "print a job's output")
    logs.add_argument("job", metavar="JOB", help="the job's id, as fiber ps lists it")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")

    stop = command("stop", _stop, "kill and remove programs (all their jobs) or jobs "
                   "(a batch scheduler's jobs are cancelled)")
    stop.add_argument("targets", nargs="+", metavar="PROGRAM|JOB",
                      help="programs or jobs, as fiber ps lists them (a program's main "
                      "job stands for the whole program)")
    top_command = _top.add_parser(commands)
    board_command = _top.add_dashboard_parser(commands)
    _Parser.known.extend(["top", "dashboard"])
    for parser in (top, run, ps, logs, stop, top_command, board_command):
        _Parser.known.extend(o for a in parser._actions for o in a.option_strings)  # noqa: SLF001
    return top


def _overrides(args: argparse.Namespace) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    if args.backend:
        out["backend"] = args.backend
    if getattr(args, "image", None):
        out["image"] = args.image
    return out


# -- run ------------------------------------------------------------------------------------


def _run(backend: CommandLineBackend, args: argparse.Namespace) -> int:
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("fiber run needs the command to run")
    if args.volume:  # before to_env: the program and its jobs mount them too
        config.init(**backend.volume_settings(args.volume))
    cfg = config.get_config()
    env = config.to_env(cfg)  # the program's processes become jobs of the same cluster
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    try:
        resources = Resources(cpu=args.cpu, memory_mb=args.memory, gpu=args.gpu)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--cpu/--memory/--gpu: {e}") from None
    spec = backend.main_spec(JobSpec(
        command=tuple(command), env=env, image=cfg.image, resources=resources,
        name=f"{_NAME}: {shlex.join(command)}"[:200]))
    if args.detach:
        backend.detach()  # before submit: this process's jobs now outlive it
        [handle] = backend.submit([spec])
        print(handle.job_id)
        # its threads (a Kubernetes watch, mid-read) end before the interpreter does: one
        # still reading while it finalized made `fiber run --detach` abort (SIGABRT)
        backend.close()
        return 0
    with _Stopper(backend) as stopper:  # before submit: Ctrl-C then stops what it started
        [handle] = backend.submit([spec])
        print(f"fiber: {handle.job_id} started ({backend.name}); Ctrl-C stops it",
              file=sys.stderr, flush=True)
        stopper.attach(handle)
        try:
            _print_output(backend, handle)
        except BrokenPipeError:  # our reader is gone (| head): end the job, as SIGPIPE would
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the exit's flush
            stopper.stop(force=False)
            _wait(backend, handle)
            return 128 + signal.SIGPIPE
        status = _wait(backend, handle)
    return _exit_code(handle, status)


def _print_output(backend: CommandLineBackend, handle: JobHandle) -> None:
    """The job's output, as it is written, while the backend can stream it."""
    try:
        stream = backend.follow(handle)
        if stream is None:
            return
        for text in stream:
            sys.stdout.write(text)
            sys.stdout.flush()
    except FiberError as e:
        _say(f"lost the output of {handle.job_id} ({e}); still waiting for its end")


def _wait(backend: CommandLineBackend, handle: JobHandle) -> JobStatus:
    """The job's final status. A cluster that does not answer for a while is asked again:
    a failed query must not end ``fiber run``, whose exit would remove the job."""
    backoff, failures = retrying(), 0
    while True:
        try:
            status = backend.wait(handle, timeout=60)
        except FiberError as e:
            failures += 1
            if failures == 1 or failures % 10 == 0:
                _say(f"cannot read the state of {handle.job_id} ({e}); trying again")
            time.sleep(backoff.next())
            continue
        if status is not None:
            return status
        backoff.reset()
        failures = 0


def _say(text: str) -> None:
    print(f"fiber: {text}", file=sys.stderr, flush=True)


def _exit_code(handle: JobHandle, status: JobStatus) -> int:
    """The program's exit code as a shell gives it (128 + n: killed by signal n)."""
    code = status.exitcode
    if code == 0:
        return 0
    _say(f"{handle.job_id} {status.state.value}: {status.reason or code}")
    if code is None:
        return 1
    return 128 - code if code < 0 else code


class _Stopper:
    """While ``fiber run`` waits: SIGINT, SIGTERM and SIGHUP stop the job (SIGTERM-like)
    and a second one kills it; the job's end, not the signal, ends ``fiber run``. A third
    gives up waiting (KeyboardInterrupt; the exit hooks still remove the jobs)."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, backend: CommandLineBackend) -> None:
        self._backend = backend
        self._handle: Optional[JobHandle] = None
        self._count = 0
        self._old: Dict[int, Any] = {}

    def __enter__(self) -> _Stopper:
        for sig in self._SIGNALS:
            self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def attach(self, handle: JobHandle) -> None:
        """The job submitted; a signal that came during the submission acts now."""
        self._handle = handle
        if self._count:
            self.stop(force=self._count > 1)

    def stop(self, force: bool) -> None:
        """Cancel the job from a thread of its own (a cluster call may take a while)."""
        threading.Thread(target=self._cancel, args=(force,), daemon=True).start()

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self._count += 1
        if self._count > 2:
            raise KeyboardInterrupt
        force = self._count > 1
        what = self._handle.job_id if self._handle is not None else "the program"
        print(f"\nfiber: {'killing' if force else 'stopping'} {what} (again to "
              f"{'stop waiting' if force else 'kill it'})", file=sys.stderr, flush=True)
        if self._handle is not None:
            self.stop(force)

    def _cancel(self, force: bool) -> None:
        if self._handle is None:
            return
        try:
            self._backend.stop_main(self._handle, force=force)
        except FiberError as e:
            _say(f"cannot stop {self._handle.job_id}: {e}")


# -- ps, logs, stop ---------------------------------------------------------------------------


def _ps(backend: CommandLineBackend, args: argparse.Namespace) -> int:
    jobs = [j for j in backend.find_jobs(args.filter) if args.all or not j.ended]
    rows: List[Sequence[str]] = [("JOB", "PROGRAM", "STATE", "CREATED", "NAME")]
    rows += [(j.job_id, j.program, j.state, j.created, j.name) for j in jobs]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    return 0


def _logs(backend: CommandLineBackend, args: argparse.Namespace) -> int:
    sys.stdout.write(backend.read_logs(args.job, args.tail))
    return 0


def _stop(backend: CommandLineBackend, args: argparse.Namespace) -> int:
    known = {j.job_id: j for j in backend.find_jobs()}
    programs = {j.program for j in known.values()}
    missing = [t for t in args.targets if t not in programs and t not in known]
    for target in [t for t in args.targets if t not in missing]:
        job = known.get(target)
        if job is not None and job.name.startswith(_NAME + ":"):
            target = job.program  # a program's main job: the whole program
        if target in programs:
            removed = backend.remove_jobs(program=target)
            print(f"program {target}: removed {len(removed)} job(s)")
        else:
            removed = backend.remove_jobs(job_ids=[target])
            print(f"job {target}: {'removed' if removed else 'not removed'}")
        if not removed:
            missing.append(target)
    for target in missing:
        print(f"fiber: no fiber program or job named {target!r} was removed", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
