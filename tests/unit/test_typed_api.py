"""A program's type checker sees fiber's Pool as it sees multiprocessing's (typeshed's
annotations): ``pool.map(f, xs)`` is a list of what ``f`` returns, not ``Any``, and a
function that does not take the items is an error. mypy (the dev extra) checks a real
program in which each call is made on both pools."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

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


def _program() -> str:
    lines = ["import multiprocessing", "import fiber", "", "",
             "def square(x: int) -> int:", "    return x * x", "", "",
             "def main() -> None:",
             "    with fiber.Pool(2) as pool, multiprocessing.Pool(2) as mp_pool:"]
    for call in CALLS:
        lines.append(f"        reveal_type({call})")
        lines.append(f"        reveal_type({call.replace('pool.', 'mp_pool.')})")
    lines.append('        pool.map(square, ["a"])  # the items are not what square takes')
    return "\n".join(lines) + "\n"


def test_pool_results_are_typed_as_multiprocessings(tmp_path):
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
    assert len(revealed) == 2 * len(CALLS), out
    for call, fiber_type, mp_type in zip(CALLS, revealed[0::2], revealed[1::2]):
        assert fiber_type == mp_type, f"{call}: fiber {fiber_type}, multiprocessing {mp_type}"
        assert "Any" not in fiber_type, call
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'Argument 1 to "map" of "Pool"' in errors[0], textwrap.indent(
        out, "  ")
