"""The ``loadwatcher`` command: ``serve``, ``config check`` (and the scoring commands)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Sequence
from typing import Any

from loadwatcher import __version__, allocator, config
from loadwatcher.commandline import parse_args, reader_gone
from loadwatcher.errors import ConfigError, StartError
from loadwatcher.journal import identity
from loadwatcher.providers import registry

log = logging.getLogger("loadwatcher")

EXIT_CONFIG = 2


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML configuration file")
    parser.add_argument("--port", help="HTTP port (default 2020)")
    parser.add_argument("--host", help="listen address (default 0.0.0.0)")
    parser.add_argument("--db", metavar="PATH", help="SQLite journal file ('' disables it)")
    parser.add_argument("--poll-interval-s", help="seconds between polls (default 15)")
    parser.add_argument("--provider", help=" | ".join(registry.names()))
    parser.add_argument("--address", help="backend base URL")
    parser.add_argument("--log-level", help="DEBUG | INFO | WARNING | ERROR")


def build_parser(scoring: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadwatcher",
        description="Node utilisation rollups for Kubernetes schedulers (Trimaran wire format).",
    )
    parser.add_argument("--version", action="version", version=f"loadwatcher {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the service")
    _add_settings_flags(serve)
    serve.set_defaults(func=_serve)

    cfg = sub.add_parser("config", help="configuration tools")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    check = cfg_sub.add_parser("check", help="validate and print the effective configuration")
    _add_settings_flags(check)
    check.set_defaults(func=_config_check)
    table = cfg_sub.add_parser("table", help="print every setting as a Markdown table")
    table.set_defaults(func=_config_table)

    if scoring:
        from loadwatcher.scoring import cli as scoring_cli
        from loadwatcher.simulate import cli as simulate_cli

        scoring_cli.register(sub)
        simulate_cli.add_parser(sub)
    return parser


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        name: getattr(args, name, None)
        for name in ("port", "host", "db", "poll_interval_s", "provider", "address", "log_level")
    }


def _settings(args: argparse.Namespace) -> config.Settings:
    return config.load(args.config, os.environ, _flags(args), catalogue=registry.catalogue())


def _config_check(args: argparse.Namespace) -> int:
    # Everything serve refuses before it starts is refused by config.load, for both.
    settings = _settings(args)
    identity.refuse_foreign(settings.journal.path)  # as serve does before it starts
    effective = config.effective(settings, registry.catalogue())
    import yaml  # not at the top: `serve` reads YAML only when given a --config file

    sys.stdout.write(yaml.safe_dump(effective, sort_keys=False))
    return 0


def _config_table(args: argparse.Namespace) -> int:
    sys.stdout.write(config.markdown_table(registry.catalogue()))
    return 0


def _serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    logging.basicConfig(
        level=settings.log.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # A SIGTERM while the service still imports must stop it cleanly (exit 0), as later
    # ones do: remember it until serve() has its own handlers.
    received: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    allocator.configure()  # before any thread starts: arenas are made per thread
    from loadwatcher import app  # imported late: `config check` need not load aiohttp

    async def run() -> None:
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(settings, stop))
        await asyncio.sleep(0)  # serve() installs its signal handlers before its first await
        if received:
            log.info("signal %d received during start-up: stopping", received[0])
            stop.set()
        await serving

    try:
        asyncio.run(run())
    except ssl.SSLError as exc:
        print(f"loadwatcher: bad configuration: server.tls_cert_file: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StartError as exc:
        print(f"loadwatcher: cannot start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"loadwatcher: cannot listen on {settings.server.host}:{settings.server.port}: "
            f"{exc.strerror}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `serve` skips the scoring commands' imports: start-up is on the restart path.
    parser = build_parser(scoring=argv[:1] != ["serve"])
    args = parse_args(parser, argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is seen while handled
    except BrokenPipeError:
        return reader_gone()
    except ConfigError as exc:
        print(f"loadwatcher: bad configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return code


if __name__ == "__main__":
    sys.exit(main())
