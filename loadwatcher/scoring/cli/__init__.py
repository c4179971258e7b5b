"""``loadwatcher score``, ``loadwatcher predict`` and ``loadwatcher forget``.

The main command line calls :func:`register` with its subparsers and then
``sys.exit(args.func(args))``. Exit codes: 0 success, 1 the watcher or the Kubernetes API
failed, 2 bad input (one line on stderr, never a traceback). ``options`` holds what both
commands share, ``score`` and ``predict`` one command each, ``table`` their text output.
"""

from __future__ import annotations

import argparse
import sys

from loadwatcher.commandline import parse_args
from loadwatcher.scoring.cli import forget, predict, score

__all__ = ["main", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``score``, ``predict`` and ``forget`` subcommands."""
    score.add_parser(subparsers)
    predict.add_parser(subparsers)
    forget.add_parser(subparsers)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m loadwatcher.scoring``)."""
    parser = argparse.ArgumentParser(prog="loadwatcher")
    register(parser.add_subparsers(dest="command", required=True))
    args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    code: int = args.func(args)
    return code
