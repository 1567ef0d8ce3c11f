"""What ``--help`` tells a user: every positional and option of the ``fiber`` command and
of the examples' command lines has a help text (``fiber run``'s ``COMMAND`` had none)."""

from __future__ import annotations

import argparse
import ast
import glob
import os
from typing import Iterator, Tuple

from fiber import cli

import support


def _arguments(parser: argparse.ArgumentParser) -> Iterator[Tuple[str, argparse.Action]]:
    """(the command, the argument) of ``parser`` and of its subcommands."""
    for action in parser._actions:
        yield parser.prog, action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _arguments(sub)


def test_every_argument_of_the_fiber_command_has_help():
    arguments = list(_arguments(cli._parser()))
    assert len(arguments) > 20  # run, ps, logs, stop and top were all walked
    missing = [f"{prog}: {'/'.join(a.option_strings) or a.metavar or a.dest}"
               for prog, a in arguments if not a.help]
    assert not missing, missing


def test_every_argument_of_the_examples_has_help():
    paths = glob.glob(os.path.join(support.REPO, "examples", "*.py"))
    seen, missing = 0, []
    for path in paths:
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                seen += 1
                if not any(k.arg == "help" for k in node.keywords):
                    missing.append(f"{os.path.basename(path)}:{node.lineno}")
    assert seen > 20, paths  # the examples' parsers were found
    assert not missing, missing
