"""Argument parsing shared by the ``loadwatcher`` commands (the service's and the scoring ones)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

_PARSER = "_parser"  # the namespace attribute that names the (sub)command's own parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Have every (sub)command's parser put itself in the namespace, so that a mistake in
    its arguments is reported with its own usage line."""
    parser.set_defaults(**{_PARSER: parser})
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parsers(child)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that an unknown argument is reported by the
    subcommand that was given it (``usage: loadwatcher serve ...``), not by the top level."""
    _remember_parsers(parser)  # idempotent; parsers built elsewhere get it too
    args, unknown = parser.parse_known_args(argv)
    owner: argparse.ArgumentParser = getattr(args, _PARSER, parser)
    if unknown:
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def reader_gone() -> int:
    """The reader of stdout went away (``| head -1``): it has what it wanted; exit 0.

    stdout is pointed at /dev/null so that the interpreter's own flush at exit does not
    fail on the closed pipe a second time."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0
