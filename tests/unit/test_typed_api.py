"""A program's type checker sees fiber's Pool, queues and executor as it sees the standard
library's (typeshed's annotations): ``pool.map(f, xs)`` is a list of what ``f`` returns,
not ``Any``, and a function that does not take the items is an error; a ``Queue[int]``'s
``get`` is an int; ``submit(f)`` a Future of what ``f`` returns. mypy (the dev extra)
checks a real program in which each call is made on both."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from typing import List

from fiber.testing.conformance.support.waiting import require

CALLS = [
    "pool.map(square, [1, 2])",
    "pool.map_async(square, [1]).get()",
    "pool.apply(square, (3,))",
    "pool.apply_async(square, (3,)).get()",
    "next(pool.imap(square, [1]))",
    "next(pool.imap_unordered(square, [1]))",
    "pool.starmap(square, [(1,)])",
    "pool.starmap_async(square, [(1,)]).get()",
]


QUEUE_CALLS = ["queue.get()", "queue.get_nowait()", "simple.get()", "joinable.get(timeout=1)"]
EXECUTOR_CALLS = ["executor.submit(square, 2).result()", "executor.submit(square, 2)",
                  "next(executor.map(square, [1], chunksize=2))"]


def _reveals(calls: List[str], indent: str, names: List[str]) -> List[str]:
    """Each call revealed as it is, then on the standard library's object: each of
    ``names`` (``pool``) in it becomes ``mp_`` + that name."""
    lines = []
    for call in calls:
        lines.append(f"{indent}reveal_type({call})")
        theirs = call
        for name in names:
            theirs = re.sub(rf"\b{name}\.", f"mp_{name}.", theirs)
        lines.append(f"{indent}reveal_type({theirs})")
    return lines


def _program() -> str:
    lines = ["import concurrent.futures", "import multiprocessing", "import multiprocessing.queues",
             "import fiber", "import fiber.futures", "import fiber.queues", "", "",
             "def square(x: int) -> int:", "    return x * x", "", "",
             "def main() -> None:",
             "    with fiber.Pool(2) as pool, multiprocessing.Pool(2) as mp_pool:"]
    lines += _reveals(CALLS, "        ", ["pool"])
    lines.append('        pool.map(square, ["a"])  # the items are not what square takes')
    lines += ["", "",
              "def queues(queue: fiber.queues.Queue[int],",
              "           mp_queue: multiprocessing.queues.Queue[int],",
              "           simple: fiber.queues.SimpleQueue[int],",
              "           mp_simple: multiprocessing.queues.SimpleQueue[int],",
              "           joinable: fiber.queues.JoinableQueue[int],",
              "           mp_joinable: multiprocessing.queues.JoinableQueue[int]) -> None:"]
    lines += _reveals(QUEUE_CALLS, "    ", ["queue", "simple", "joinable"])
    lines.append('    queue.put("a")  # not an int')
    lines += ["", "",
              "def executors(executor: fiber.futures.ProcessPoolExecutor,",
              "              mp_executor: concurrent.futures.ProcessPoolExecutor) -> None:"]
    lines += _reveals(EXECUTOR_CALLS, "    ", ["executor"])
    return "\n".join(lines) + "\n"


def test_pools_and_queues_are_typed_as_multiprocessings(tmp_path):
    require("mypy", "dev")
    program = tmp_path / "program.py"
    program.write_text(_program(), encoding="utf-8")
    env = {**os.environ, "MYPYPATH": ""}
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", str(tmp_path / "cache"), str(program)],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env,
                          timeout=240)
    out = done.stdout + done.stderr
    revealed = re.findall(r'Revealed type is "([^"]+)"', out)
    calls = CALLS + QUEUE_CALLS + EXECUTOR_CALLS
    assert len(revealed) == 2 * len(calls), out
    for call, fiber_type, mp_type in zip(calls, revealed[0::2], revealed[1::2]):
        assert fiber_type == mp_type, f"{call}: fiber {fiber_type}, multiprocessing {mp_type}"
        assert "Any" not in fiber_type, call
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 2, textwrap.indent(out, "  ")
    assert 'Argument 1 to "map" of "Pool"' in errors[0], errors
    assert 'Argument 1 to "put" of "Queue"' in errors[1], errors
