"""``fiber top``: a running fiber program's pools and processes, refreshed in the terminal. It
finds the program by its file (`fiber._machine`) and asks its hub's ``status`` service,
proving the program's secret. The design: docs/contributing/processes.md, "fiber top"."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, TypeVar

from . import _machine
from .errors import FiberError, TransportError
from .transport import auth
from .transport.client import Client
from .transport.serialization import loads

__all__ = ["add_parser", "add_dashboard_parser", "run", "run_dashboard", "fetch", "render"]

SERVICE = b"status"
#: The command line's parser class (its subcommands' parsers are of that class).
_P = TypeVar("_P", bound=argparse.ArgumentParser)


def add_parser(commands: argparse._SubParsersAction[_P]
               ) -> argparse.ArgumentParser:
    top: argparse.ArgumentParser = commands.add_parser(
        "top", help="show a running program's pools and processes, refreshed",
        description="Show a running fiber program's pools (workers, the task each runs "
        "and for how long) and processes, refreshed every second; run it on the machine "
        "of the program's main process. With its output not a terminal (redirected to a "
        "file or a pipe) it prints one snapshot and exits 0, as with --once.")
    top.add_argument("program", nargs="?", default="", metavar="PROGRAM",
                     help="the program (its main process's pid); default: the newest")
    top.add_argument("--once", action="store_true",
                     help="print one snapshot and exit (what it does when its output is "
                     "not a terminal)")
    top.add_argument("--interval", type=float, default=1.0, metavar="S",
                     help="seconds between refreshes (default 1)")
    return top


def find_program(program: str) -> Dict[str, Any]:
    """The program file of ``program`` (a pid), or of the newest running program.

    Raises:
        FiberError: none runs here, or not that one.
    """
    running = _machine.programs()
    if program:
        for info in running:
            if info["program"] == program:
                return info
        known = ", ".join(i["program"] for i in running) or "none"
        raise FiberError(f"no running fiber program {program!r} of this user on this "
                         f"machine (running: {known})")
    if not running:
        raise FiberError("no fiber program of this user runs on this machine (fiber top "
                         "runs where the program's main process runs)")
    return running[-1]


def fetch(info: Dict[str, Any], timeout: float = 10.0) -> Dict[str, Any]:
    """One snapshot of the program of ``info`` (its program file), through its hub.

    Raises:
        TransportError, AuthenticationError: the program's hub cannot be reached.
    """
    auth.adopt_secret(bytes.fromhex(info["secret"]))
    client = Client(info["address"], timeout=timeout)
    try:
        status, frames = client.request(SERVICE, b"get", timeout=timeout)
    finally:
        client.close()
    if status != b"ok":
        raise FiberError(f"program {info['program']} did not answer: {loads(frames)}")
    result: Dict[str, Any] = loads(frames)
    return result


def _seconds(value: Optional[float]) -> str:
    if value is None:
        return ""
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 \
        else f"{minutes}:{secs:02d}"


def _table(rows: List[Sequence[str]]) -> List[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render(snap: Dict[str, Any], info: Dict[str, Any], height: int = 0) -> str:
    """The text of one screen (``height`` rows of workers at most; 0: all)."""
    command = " ".join(snap.get("argv") or info.get("argv") or [])
    lines = [f"fiber top — program {info['program']} ({command}) on {info.get('backend')} "
             f"— {time.strftime('%H:%M:%S', time.localtime(snap.get('time', 0)))}"]
    in_pools = set()
    for n, pool in enumerate(snap.get("pools", []), 1):
        if "error" in pool:
            lines.append(f"Pool {n}: cannot be read ({pool['error']})")
            continue
        lines.append(
            f"Pool {n} ({pool['state']}, {len(pool['workers'])} of {pool['size']} workers): "
            f"tasks pending {pool['pending']}, running {pool['running']}, done "
            f"{pool['done']}, failed {pool['failed']}, retried {pool['retried']}; "
            f"{pool['tasks_per_s']} tasks/s")
        workers = sorted(pool["workers"], key=lambda w: -(w["running_s"] or -1.0))
        rows: List[Sequence[str]] = [("WORKER", "JOB", "HOST", "STATE", "TASK", "FOR",
                                      "DONE", "RESTARTS")]
        shown = workers if not height else workers[:max(1, height)]
        for w in shown:
            in_pools.add(w["job_id"])
            rows.append((w["name"], w["job_id"], w["host"], w["state"], w["task"] or "",
                         _seconds(w["running_s"]), str(w["done"]), str(w["restarts"])))
        lines += _table(rows)
        if len(shown) < len(workers):
            lines.append(f"  ... and {len(workers) - len(shown)} more workers")
        in_pools.update(w["job_id"] for w in workers)
    others = [p for p in snap.get("processes", []) if p.get("job_id") not in in_pools]
    if others:
        lines.append("Processes:")
        rows = [("NAME", "JOB", "PID", "HOST", "STATE", "FOR")]
        rows += [(p["name"], p["job_id"], str(p["pid"]), p["host"], p["state"],
                  _seconds(p.get("running_s"))) for p in others]
        lines += _table(rows)
    if not snap.get("pools") and not others:
        lines.append("(no pool and no process running)")
    cluster = snap.get("cluster")
    if isinstance(cluster, dict) and (cluster.get("jobs") or cluster.get("errors")):
        told = [f"{backend}: " + ", ".join(f"{state} {n}" for state, n in sorted(states.items()))
                for backend, states in sorted(cluster.get("jobs", {}).items())]
        told += [f"{backend}: cannot be asked ({error})"
                 for backend, error in sorted(cluster.get("errors", {}).items())]
        lines.append(f"Jobs on the cluster (asked {cluster.get('age_s', 0)} s ago): "
                     + "; ".join(told))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """``fiber top``: its exit status."""
    info = find_program(args.program)
    if args.interval <= 0:
        raise FiberError(f"--interval must be positive, got {args.interval}")
    if args.once or not sys.stdout.isatty():
        sys.stdout.write(render(fetch(info), info))
        return 0
    try:
        while True:
            try:
                snap = fetch(info)
            except TransportError:
                if not _machine.running(info["pid"], info["start"]):
                    print(f"fiber top: program {info['program']} has ended")
                    return 0
                raise
            text = render(snap, info, shutil.get_terminal_size().lines - 6)
            sys.stdout.write("\x1b[H\x1b[2J" + text)
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def add_dashboard_parser(commands: argparse._SubParsersAction[_P]
                         ) -> argparse.ArgumentParser:
    board: argparse.ArgumentParser = commands.add_parser(
        "dashboard", help="serve a running program's web dashboard and /metrics",
        description="Serve the web dashboard and Prometheus /metrics of a running fiber "
        "program (see fiber.dashboard), attached as fiber top is: run it on the machine of "
        "the program's main process; it prints the address to open, with its token, and "
        "serves until Ctrl-C.")
    board.add_argument("program", nargs="?", default="", metavar="PROGRAM",
                       help="the program (its main process's pid); default: the newest")
    board.add_argument("--address", default="127.0.0.1:0", metavar="HOST:PORT",
                       help="where to serve (default 127.0.0.1:0, a free port)")
    return board


def run_dashboard(args: argparse.Namespace) -> int:
    """``fiber dashboard``: serve until interrupted, or the program ends; exit status."""
    from .dashboard import start  # the HTTP server: for this command only

    info = find_program(args.program)
    fetch(info)  # reachable (else the error now, not in the browser)
    board = start(lambda: fetch(info), args.address)
    try:
        while _machine.running(info["pid"], info["start"]):
            time.sleep(1.0)
        print(f"fiber dashboard: program {info['program']} has ended")
    except KeyboardInterrupt:
        pass
    finally:
        board.close()
    return 0
