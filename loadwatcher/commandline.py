"""Argument parsing shared by the ``loadwatcher`` commands (the service's and the scoring ones)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

_PARSER = "_parser"  # the namespace attribute that names the (sub)command's own parser
# The argparse internals _remember_parsers walks (not argparse's documented API): a parser's
# actions, and the class of the action that holds the subcommands' parsers in ``choices``.
_ACTIONS = "_actions"
_SUBPARSERS: Any = getattr(argparse, "_SubParsersAction", None)


@cache
def argparse_mismatch() -> str | None:
    """What is missing of the argparse internals ``_remember_parsers`` walks, or None.
    Checked once, at the first command line parsed: without them, a mistake is reported
    with the top level's usage line instead of the subcommand's."""
    if not isinstance(_SUBPARSERS, type):
        return "argparse._SubParsersAction is not a class"
    probe = argparse.ArgumentParser(add_help=False)
    child = probe.add_subparsers().add_parser("probe", add_help=False)
    for action in getattr(probe, _ACTIONS, None) or ():
        choices = getattr(action, "choices", None)
        if (
            isinstance(action, _SUBPARSERS)
            and isinstance(choices, dict)
            and choices.get("probe") is child
        ):
            return None
    return "ArgumentParser._actions does not hold the subcommands' parsers"


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Have every (sub)command's parser put itself in the namespace, so that a mistake in
    its arguments is reported with its own usage line."""
    parser.set_defaults(**{_PARSER: parser})
    if argparse_mismatch() is not None:
        return
    for action in getattr(parser, _ACTIONS):
        if isinstance(action, _SUBPARSERS):
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
