"""What ``score`` and ``predict`` share: error handling, option types, the watcher and node
options, and reading the candidate nodes."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from loadwatcher.client import TOKEN_ENV, InvalidSnapshotError, Snapshot, access
from loadwatcher.commandline import reader_gone
from loadwatcher.config import parsers
from loadwatcher.errors import ClientError, without_credentials
from loadwatcher.model import WINDOWS, Format
from loadwatcher.scoring import inputs
from loadwatcher.scoring.nodes import NodeInput, merge_snapshot

__all__ = [
    "COUNT",
    "DEFAULT_URL_MAX_AGE_S",
    "NUMBER",
    "POSITIVE_SECONDS",
    "SECONDS",
    "add_common",
    "candidates",
    "check_watcher",
    "guarded",
    "print_json",
    "report_skipped",
]

Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")
DEFAULT_URL_MAX_AGE_S = 300.0
# These commands report every failure themselves, in one line. Without a handler of its own,
# kubernetes_asyncio's log records (a failed exec plugin ...) would reach Python's last-resort
# handler and add lines to stderr; a configured root logger still receives them.
_LIBRARY_LOGS = logging.NullHandler()


def guarded(command: str, fn: Handler) -> Handler:
    """``fn`` with every failure as one line on stderr and its exit code (see the package)."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        logging.getLogger("kubernetes_asyncio").addHandler(_LIBRARY_LOGS)  # idempotent
        try:
            code = fn(args)
            sys.stdout.flush()  # here, not at exit: a closed pipe is seen while handled
            return code
        except BrokenPipeError:
            return reader_gone()
        except (ValueError, InvalidSnapshotError) as exc:
            code, message = 2, str(exc)
        except ClientError as exc:
            code, message = 1, str(exc)
        except OSError as exc:  # a file or socket failure no reader mapped
            code, message = 2, f"{type(exc).__name__}: {exc}"
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # a bug: still one line, never a traceback
            code, message = 1, f"internal error ({type(exc).__name__}: {exc}); please report it"
        # A --watcher URL with a user and password may be in any message, ours or a library's.
        line = without_credentials(" ".join(message.split())) or type(message).__name__
        print(f"loadwatcher {command}: error: {line}", file=sys.stderr)
        return code

    return run


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A setting parser as an argparse ``type``: its reason becomes argparse's message
    (``argument --timeout: expected a positive number of seconds, got 'x'``)."""

    def run(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return run


NUMBER = _checked(parsers.number)
SECONDS = _checked(parsers.non_negative_seconds)
POSITIVE_SECONDS = _checked(parsers.positive_seconds)
COUNT = _checked(parsers.non_negative_int)


def add_common(p: argparse.ArgumentParser) -> None:
    """The watcher, node-source and output options of both commands."""
    p.add_argument(
        "--watcher",
        metavar="URL|FILE",
        help="load watcher base URL (http://host:2020) or a saved /watcher document (required)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--nodes",
        metavar="FILE",
        help="nodes (capacity, allocatable, pods) as "
        "YAML/JSON, or `kubectl get nodes,pods -A -o json` output (default: "
        "none; capacities from the watcher's capacity.* metadata)",
    )
    src.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read nodes and pods from the API server of this kubeconfig (default: none)",
    )
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    p.add_argument(
        "--window",
        choices=tuple(w.name for w in WINDOWS),
        help="rollup window to fetch (default: the watcher's, the longest with data)",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        choices=tuple(str(f) for f in Format),
        default="default",
        help="watcher wire format to request (default: %(default)s)",
    )
    p.add_argument(
        "--max-age",
        type=SECONDS,
        metavar="SECONDS",
        help="reject older snapshots "
        f"(default: {DEFAULT_URL_MAX_AGE_S:g} s for URLs, unchecked for files)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file whose first line is the bearer token of a protected watcher "
        f"(server.auth_token_file); without it, the environment variable {TOKEN_ENV} "
        "(default: no token)",
    )
    p.add_argument(
        "--ca-file",
        metavar="FILE",
        help="CA bundle (PEM) that signed an https:// watcher's certificate "
        "(default: the system's CAs)",
    )
    p.add_argument(
        "--timeout",
        type=POSITIVE_SECONDS,
        default=10.0,
        metavar="SECONDS",
        help="HTTP timeout per attempt (default: %(default)g)",
    )
    p.add_argument(
        "--retries",
        type=COUNT,
        default=3,
        metavar="N",
        help="retries of transient failures (default: %(default)s)",
    )
    p.add_argument(
        "--now",
        type=NUMBER,
        metavar="UNIX",
        help="evaluate at this Unix time (default: the current time)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (default: a table)")


def candidates(
    args: argparse.Namespace, now: float, windows: set[str] | None = None
) -> tuple[Snapshot, list[NodeInput], list[str]]:
    """(snapshot, nodes with a known capacity, names skipped for want of one).

    ``windows``: rollup windows to fetch besides the main one (from a URL only)."""
    check_watcher(args.watcher)
    is_url = args.watcher.startswith(("http://", "https://"))
    max_age = (
        args.max_age if args.max_age is not None else (DEFAULT_URL_MAX_AGE_S if is_url else None)
    )
    known = inputs.read_nodes(args.nodes, args.kubeconfig, args.context, now, args.timeout)
    reach: dict[str, Any] = {
        "fmt": args.fmt,
        "max_age_s": max_age,
        "timeout_s": args.timeout,
        "retries": args.retries,
        # The flag wins over the environment; neither is ever shown (not in --help either).
        "token_file": args.token_file,
        "token": None if args.token_file else os.environ.get(TOKEN_ENV),
        "ca_file": args.ca_file,
    }
    if is_url:  # once, not per window: a bad file is one message, a good one read once
        reach["token"] = access.resolve_token(reach["token"], reach.pop("token_file"))
        access.ssl_context(args.ca_file)
    snapshot = inputs.read_snapshot(args.watcher, now=now, window=args.window, **reach)
    if is_url and windows:  # plugins that read other rollup windows (LoadAware: 5m)
        extra = [
            inputs.read_snapshot(args.watcher, now=now, window=w, **reach)
            for w in sorted(windows - {snapshot.duration})
        ]
        snapshot = inputs.with_windows(snapshot, extra)
    nodes, skipped = merge_snapshot(known, snapshot.nodes)
    if not nodes:
        raise ValueError(
            "no node has a known capacity: give --nodes or --kubeconfig, or run "
            "a watcher that reports capacity.* metadata"
        )
    return snapshot, nodes, skipped


def check_watcher(watcher: str | None) -> None:
    """--watcher is given; a host:port that is no file gets the URL it probably meant."""
    if not watcher:
        raise ValueError("--watcher URL|FILE is required")
    if (
        not watcher.startswith(("http://", "https://"))
        and not os.path.exists(watcher)
        and parsers.looks_like_host_port(watcher)
    ):
        raise ValueError(
            f"--watcher {watcher!r} is neither a file nor a URL; "
            f"did you mean --watcher http://{watcher.strip()}?"
        )


def print_json(doc: Any) -> None:
    """``doc`` as one JSON line on stdout."""
    sys.stdout.write(orjson.dumps(doc).decode() + "\n")


def report_skipped(skipped: list[str]) -> None:
    """The nodes left out for want of a capacity, on stderr (the table is on stdout)."""
    if skipped:
        print(f"skipped (no capacity known): {', '.join(sorted(skipped))}", file=sys.stderr)
