"""``loadwatcher forget NODE``: tell a watcher that a node is gone on purpose."""

from __future__ import annotations

import argparse
import asyncio
import os

from loadwatcher.client import TOKEN_ENV, WatcherClient
from loadwatcher.scoring.cli.options import POSITIVE_SECONDS, check_watcher, guarded

__all__ = ["add_parser", "run_forget"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``forget``."""
    p = subparsers.add_parser(
        "forget",
        help="tell a watcher that a node is gone on purpose",
        description="POST /watcher/NODE/forget: the watcher drops the node's samples (store "
        "and journal); it is no longer stale, missing, bad or listed as gone. A later sample "
        "of it starts a new node. Exit 0 forgotten, 1 the watcher failed or knows no such "
        "node, 2 bad input.",
    )
    p.add_argument("node", metavar="NODE", help="the node's name as /watcher shows it")
    p.add_argument(
        "--watcher",
        required=True,
        metavar="URL",
        help="load watcher base URL (http://host:2020)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file whose first line is a token of the watcher's server.auth_token_file; "
        f"without it, the environment variable {TOKEN_ENV}",
    )
    p.add_argument(
        "--ca-file",
        metavar="FILE",
        help="CA bundle (PEM) that signed an https:// watcher's certificate",
    )
    p.add_argument(
        "--timeout",
        type=POSITIVE_SECONDS,
        default=10.0,
        metavar="SECONDS",
        help="request timeout (default: %(default)g s)",
    )
    p.set_defaults(func=guarded("forget", run_forget))


def run_forget(args: argparse.Namespace) -> int:
    check_watcher(args.watcher)
    if not args.watcher.startswith(("http://", "https://")):
        raise ValueError(f"--watcher must be an http(s):// URL, got {args.watcher!r}")

    async def run() -> None:
        async with WatcherClient(
            args.watcher,
            timeout_s=args.timeout,
            token_file=args.token_file,
            token=None if args.token_file else os.environ.get(TOKEN_ENV),
            ca_file=args.ca_file,
        ) as client:
            await client.forget(args.node)

    asyncio.run(run())
    print(f"forgot {args.node}")
    return 0
