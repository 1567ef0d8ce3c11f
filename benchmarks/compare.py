"""Two (or more) versions of fiber timed against each other in one run, alternating.

    .venv/bin/python benchmarks/compare.py --baseline REV [--baseline REV2 ...]
        [--candidate REV|DIR|python:PATH]
        [--bench apply map rounds pipe queue drain start es async lock]
        [--runs 7] [--calls 2000] [--tasks 20000] [--workers 64] [--wait-quiet S]
        [--markdown] [--verbose]

A figure measured in another run, or on another day, does not compare on a shared VM: its
load changes from minute to minute. So every version is measured in the same run, its
runs interleaved with the others' (the order rotates from one round to the next, so that
none always comes first or last after another's pool), and each figure is the median over
``--runs`` fresh processes. A hot-path change is checked against the commit before it
this way before it lands (see the conventions' "Measure against the last commit too").

A version is given as:

- a git revision of this repository (``a6a9ea7``, ``main``, ``HEAD~3``): its ``src/``
  is exported (``git archive``) into a temporary folder, its bytecode compiled (where
  ``PYTHONDONTWRITEBYTECODE`` is set every job would otherwise compile fiber anew), and
  it runs on this interpreter with ``PYTHONPATH`` at that folder, this interpreter's
  packages serving as its dependencies;
- a source tree (a folder with ``src/fiber``, such as a worktree, uncommitted changes
  included), run the same way; the default candidate is this script's own tree;
- ``python:PATH``: an interpreter with fiber installed (another venv), run as it is.

The timed program is ``_compare_child.py``: fiber's public API only, so that it runs
against old commits too. It checks that a pool worker imported the same fiber as its
master. The table gives each version's median (and the spread of its runs) and its
ratio to each baseline (below 1: faster): the median of the rounds' own ratios (a run over
the baseline's run of the same round, so that the load's drift over minutes cancels), with
the count of rounds in which it was the slower; every figure is a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_compare_child.py")
REPO = os.path.dirname(HERE)
BENCHES = ["apply", "map", "rounds", "pipe", "queue", "drain", "start", "es", "async", "lock"]
RUN_TIMEOUT_S = 600


@dataclasses.dataclass
class Version:
    """One fiber to time: how to run it and what to call it in the table."""

    label: str
    python: str
    pythonpath: Optional[str]  # None: the interpreter's own install
    describe: str


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _compile(src: str) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(src, "fiber")],
                   check=True, stdout=subprocess.DEVNULL)


def _tree_describe(tree: str) -> str:
    try:
        return subprocess.run(["git", "-C", tree, "describe", "--always", "--dirty"],
                              check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git tree"


def resolve(spec: str, scratch: str) -> Version:
    """The :class:`Version` that ``spec`` names (see the module's docstring).

    Raises:
        ValueError: ``spec`` is neither an interpreter, a source tree nor a revision.
    """
    if spec.startswith("python:"):
        python = spec[len("python:"):]
        return Version(spec, python, None, f"the fiber installed for {python}")
    if os.path.isdir(os.path.join(spec, "src", "fiber")):
        src = os.path.join(os.path.abspath(spec), "src")
        _compile(src)
        return Version(os.path.basename(os.path.abspath(spec)) or spec, sys.executable, src,
                       f"source tree {os.path.abspath(spec)} ({_tree_describe(spec)})")
    try:
        sha = _git("rev-parse", "--verify", "--quiet", spec + "^{commit}")
    except subprocess.CalledProcessError:
        raise ValueError(f"{spec!r} is neither python:PATH, a folder with src/fiber, "
                         f"nor a revision of {REPO}") from None
    folder = os.path.join(scratch, sha[:12])
    if not os.path.isdir(folder):
        os.makedirs(folder)
        archive = subprocess.run(["git", "-C", REPO, "archive", sha, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        _compile(os.path.join(folder, "src"))
    subject = _git("log", "-1", "--format=%s", sha)
    return Version(spec if spec == sha[:len(spec)] else f"{spec} ({sha[:7]})",
                   sys.executable, os.path.join(folder, "src"), f"{sha[:10]} {subject}")


def run_once(version: Version, bench: str, args: argparse.Namespace, cwd: str) -> Dict:
    """One fresh process of ``version`` timing ``bench``: the child's JSON record.

    Raises:
        RuntimeError: the child failed, or its worker ran another fiber than its master.
    """
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if version.pythonpath is not None:
        env["PYTHONPATH"] = version.pythonpath
    cmd = [version.python, CHILD, bench, "--calls", str(args.calls), "--tasks",
           str(args.tasks), "--workers", str(args.workers)]
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{version.label} {bench} exited with {done.returncode}:\n"
                           f"{done.stderr[-4000:]}")
    record: Dict = json.loads(done.stdout.strip().splitlines()[-1])
    if os.path.dirname(record["worker_fiber"]) != os.path.dirname(record["fiber"]):
        raise RuntimeError(f"{version.label}: the master imported {record['fiber']}, a "
                           f"worker {record['worker_fiber']}")
    return record


def quiet_host(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for a host on which nothing else runs (sampled 10
    times over 200 ms: ``/proc/loadavg`` counts its reader as running); whether it came.

    fiber polls for a message only while a CPU is spare (``fiber.transport.cpus``): a
    regression of the polling path shows on a quiet host only, and a host shared with
    test runs is quiet now and then."""
    end = time.monotonic() + timeout
    while True:
        for _ in range(10):
            with open("/proc/loadavg", "rb") as f:
                if int(f.read().split()[3].split(b"/")[0]) > 1:
                    break
            time.sleep(0.02)
        else:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.2)


def measure(versions: Sequence[Version], args: argparse.Namespace) -> Dict:
    """``{bench: {label: [record, ...]}}``, the versions' runs interleaved, the order
    rotating by one each round; each record says whether the host was quiet when it
    started (see :func:`quiet_host`)."""
    results: Dict[str, Dict[str, List[Dict]]] = {
        b: {v.label: [] for v in versions} for b in args.bench}
    with tempfile.TemporaryDirectory(prefix="fiber-compare-cwd-") as cwd:
        for r in range(args.runs):
            for bench in args.bench:
                order = list(versions[r % len(versions):]) + list(versions[:r % len(versions)])
                for v in order:
                    quiet = quiet_host(args.wait_quiet) if args.wait_quiet else False
                    record = run_once(v, bench, args, cwd)
                    record["quiet"] = quiet
                    results[bench][v.label].append(record)
                    if args.verbose:
                        print(f"  round {r + 1} {bench} {v.label}: {record['value']:.1f} "
                              f"{record['unit']}{' (quiet host)' if quiet else ''}",
                              file=sys.stderr, flush=True)
    return results


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def rows(versions: Sequence[Version], baselines: int, results: Dict,
         quiet: bool) -> List[List[str]]:
    """A table row per bench and version: its median, the range of its runs, the median
    p99 (where the bench has one), its ratio to each baseline's median, and with
    ``quiet`` how many of its runs started on a quiet host."""
    out = []
    for bench, by_label in results.items():
        medians = {v.label: statistics.median(r["value"] for r in by_label[v.label])
                   for v in versions}
        for v in versions:
            values = [r["value"] for r in by_label[v.label]]
            p99 = [r["p99"] for r in by_label[v.label] if "p99" in r]
            out.append([bench, v.label, f"{_num(medians[v.label])} {by_label[v.label][0]['unit']}",
                        f"{_num(min(values))}-{_num(max(values))}",
                        _num(statistics.median(p99)) if p99 else "",
                        *(_paired(values, [r["value"] for r in by_label[b.label]])
                          for b in versions[:baselines]),
                        *([f"{sum(r['quiet'] for r in by_label[v.label])}/{len(values)}"]
                          if quiet else [])])
    return out


def _paired(values: Sequence[float], base: Sequence[float]) -> str:
    """The median of the rounds' ratios (each run over the baseline's run of the same
    round, minutes apart at most) and in how many rounds the version was the slower:
    a VM's load drifts from minute to minute, which a ratio of two medians takes in and
    a round's own ratio mostly does not."""
    ratios = [v / b for v, b in zip(values, base) if b > 0]
    if not ratios:
        return ""
    slower = sum(r > 1 for r in ratios)
    return f"{statistics.median(ratios):.2f}x ({slower}/{len(ratios)})"


def print_table(header: List[str], table_rows: List[List[str]], markdown: bool) -> None:
    """The table aligned for a terminal, or as Markdown for the README."""
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in table_rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in [header, *table_rows]) for i in range(len(header))]
    for i, row in enumerate([header, *table_rows]):
        print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", action="append", required=True,
                        help="a revision, source tree or python:PATH (repeatable)")
    parser.add_argument("--candidate", default=REPO,
                        help="a revision, source tree or python:PATH (default: this tree)")
    parser.add_argument("--bench", nargs="+", choices=BENCHES, default=["apply"])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per version")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=64, help="Pool size of 'start' and 'es'")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="before each run wait up to S s for nothing else to run")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="each run on stderr")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="fiber-compare-")
    try:
        versions = [resolve(spec, scratch) for spec in [*args.baseline, args.candidate]]
        for i, v in enumerate(versions):
            if any(w.label == v.label for w in versions[:i]):
                v.label = f"{v.label} #{i + 1}"
        print(f"fiber compare {datetime.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} "
              f"CPUs, {args.runs} runs a version alternating, load average {_load()}")
        for v in versions:
            print(f"  {v.label}: {v.describe}", flush=True)
        results = measure(versions, args)
        print(f"load average at the end {_load()}; every figure a time (lower: faster)",
              flush=True)
        bases = versions[:len(args.baseline)]
        header = ["bench", "version", "median", "runs' range", "p99",
                  *(f"vs {b.label}" for b in bases),
                  *(["quiet host"] if args.wait_quiet else [])]
        print_table(header, rows(versions, len(bases), results, bool(args.wait_quiet)),
                    args.markdown)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
