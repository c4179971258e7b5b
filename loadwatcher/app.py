"""Wiring: the one place that builds the long-lived tasks and shuts them down.

Start-up order makes a restart useful at once: start the HTTP server, open the journal,
load its samples and publish the last snapshot rebuilt from them, then poll. Signals only set
the stop event; shutdown finishes the cycle in flight, flushes and closes the journal,
then stops the HTTP server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from typing import TYPE_CHECKING

from aiohttp import web

from loadwatcher.config import Settings
from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.engine.clocks import ClockWatch
from loadwatcher.http import api, edge
from loadwatcher.http.security import TlsReloader, TokenFile
from loadwatcher.journal import identity
from loadwatcher.journal.sqlite import Journal
from loadwatcher.pipeline import analysis
from loadwatcher.providers import push as push_provider
from loadwatcher.providers import registry, source
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.providers.push.provider import PushProvider

if TYPE_CHECKING:
    from loadwatcher.http import push as push_http

log = logging.getLogger("loadwatcher")

SHUTDOWN_GRACE_S = 10.0
# At a stop, how long the requests in flight have to finish before the journal is closed
# (aiohttp's own default, a minute, could outlast a pod's grace period of 30 s).
REQUESTS_GRACE_S = 5.0
TLS_RELOAD_CHECK_S = 30.0
# Connections the kernel queues until the loop accepts them. aiohttp's default (128)
# overflows when hundreds of clients connect at once: the kernel then drops their
# handshakes and they retry after seconds (TCP's SYN back-off), so requests time out
# (tests/system/test_load.py). Linux caps it at net.core.somaxconn.
LISTEN_BACKLOG = 1024


async def _reload_tls(tls: TlsReloader, stop: asyncio.Event) -> None:
    """Pick up a renewed certificate (cert-manager, a rotated Secret) without a restart."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), TLS_RELOAD_CHECK_S)
        tls.reload()


def build_engine(settings: Settings) -> Engine:
    path = settings.journal.path
    journal = Journal(path, source.source_of(settings)) if path else None
    a = settings.analysis
    provider = registry.build_provider(settings)
    push = settings.section(push_provider.SECTION)
    mixed = push.receive and not isinstance(provider, PushProvider)
    if mixed:
        provider = PushProvider(
            PushBuffer(push_provider.buffer_limit(push)),
            poller=provider,
            poll_interval_s=settings.poll.interval_s,
            # As the engine caps a Retry-After: nodes only the poller reports stay fresh.
            max_backoff_s=max(
                settings.poll.interval_s, settings.analysis.stale_after_s - settings.poll.interval_s
            ),
        )
    receiving = isinstance(provider, PushProvider)
    options = EngineOptions(
        poll_interval_s=settings.poll.interval_s,
        retention_s=settings.journal.retention_s,
        thresholds=analysis.Thresholds(a.stale_after_s, a.frozen_after_s, a.min_coverage),
        provider_timeout_s=settings.provider.timeout_s,
        corroborate_threshold_pct=settings.corroborate.threshold_pct,
        max_bad_node_share=settings.health.max_bad_node_share,
        future_tolerance_s=a.future_tolerance_s,
        max_new_series=settings.provider.max_new_series,
        cycle_interval_s=push.publish_interval_s if receiving else None,
        one_source_per_node=mixed,
        gone_visible_s=a.gone_visible_s,
    )
    engine = Engine(
        provider,
        journal,
        options,
        registry.metric_names(settings),
        corroborating=registry.build_corroborating_provider(settings),
    )
    engine.clock_watch = ClockWatch(accept_after_s=settings.journal.retention_s)
    # Health names the provider as the configuration does (prometheus, metrics-server);
    # the wire `source` keeps the Go load-watcher's spelling (Prometheus, ...).
    engine.provider_status.name = settings.provider.name
    return engine


def build_receiver(settings: Settings, engine: Engine) -> push_http.Receiver | None:
    """The push endpoints' state when the engine's provider receives pushes, else None."""
    provider = engine.provider
    if not isinstance(provider, PushProvider):
        return None
    # Imported only when receiving: a polling service's start does not pay for them.
    from loadwatcher.http import push as push_http
    from loadwatcher.providers.push.series import SeriesBudget
    from loadwatcher.push.protocol import protocols

    push = settings.section(push_provider.SECTION)
    mappers = [(protocol, protocol.build(settings)) for protocol in protocols()]
    limits = push_http.PushLimits(
        push.max_body_bytes,
        push.max_series_per_request,
        push.max_samples_per_s,
        push.publish_interval_s,
    )
    tokens = TokenFile(push.token_file) if push.token_file else None
    receiver = push_http.Receiver(
        provider.buffer,
        mappers,
        limits,
        engine.metrics,
        tokens,
        clock=engine.clock,
        budget=SeriesBudget(push.max_series, engine.store),
    )

    def published() -> None:
        if receiver.budget is not None:
            receiver.budget.settle()
        arrival = provider.last_oldest_arrival
        if arrival is not None:
            engine.metrics.push_publish_lag.observe(time.monotonic() - arrival)

    engine.on_published = published
    return receiver


async def _publish_pushed(engine: Engine, receiver: push_http.Receiver | None) -> None:
    """One last cycle for the samples pushed since the last one: each was answered 204, and
    a clean stop (a rolling update) must keep them in the journal for the next start."""
    if receiver is None or not receiver.buffer.held:
        return
    log.info("stopping: publishing %d pushed samples first", receiver.buffer.held)
    try:
        await asyncio.wait_for(engine.cycle(), SHUTDOWN_GRACE_S)
    except TimeoutError:
        log.warning("the last cycle did not finish within %.0f s; abandoned", SHUTDOWN_GRACE_S)


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run the service until ``stop`` is set (or SIGINT/SIGTERM arrives)."""
    stop = stop or asyncio.Event()
    server = settings.server
    tokens = TokenFile(server.auth_token_file) if server.auth_token_file else None
    if tokens is not None:
        tokens.require("server.auth_token_file")  # before anything starts: exit 2
    # Someone else's file (a typo'd --db) is refused, never moved aside: exit 2.
    identity.refuse_foreign(settings.journal.path)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tls = None
    if server.tls_cert_file and server.tls_key_file:
        tls = TlsReloader(server.tls_cert_file, server.tls_key_file)
    engine = build_engine(settings)
    receiver = build_receiver(settings, engine)
    if receiver is not None and receiver.tokens is not None:
        receiver.tokens.require("push.token_file")  # before anything starts: exit 2
    elif receiver is not None:
        log.warning("push endpoints open: anyone who reaches the port can write (push.token_file)")
    app = api.make_app(
        engine,
        tokens=tokens,
        protect_metrics=server.auth_metrics,
        receiver=receiver,
        query=settings.query,
    )
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=REQUESTS_GRACE_S
    )
    await runner.setup()
    runner_open = True  # cleaned up once: at the stop, or on the way out
    reloader: asyncio.Task[None] | None = None
    try:
        limits = edge.EdgeLimits(
            server.header_timeout_s, server.keepalive_timeout_s, server.max_connections
        )
        site = edge.GuardedSite(
            runner,
            server.host,
            server.port,
            limits,
            ssl_context=tls.context if tls else None,
            backlog=LISTEN_BACKLOG,
        )
        await site.start()
        log.info(
            "listening on %s://%s:%d (provider %s, journal %s, auth %s)",
            "https" if tls else "http",
            server.host,
            server.port,
            settings.provider.name,
            settings.journal.path or "off",
            "on" if tokens else "off",
        )
        if tls is not None:
            reloader = asyncio.create_task(_reload_tls(tls, stop), name="loadwatcher-tls")
        await engine.recover()
        poller = asyncio.create_task(engine.run(stop), name="loadwatcher-poll")
        await stop.wait()
        log.info("stopping: finishing the cycle in flight")
        try:
            await asyncio.wait_for(poller, SHUTDOWN_GRACE_S)
        except TimeoutError:
            log.warning("poll cycle did not finish within %.0f s; abandoned", SHUTDOWN_GRACE_S)
        # No request is taken from here on, and those in flight are answered.
        await runner.cleanup()
        runner_open = False
        await _publish_pushed(engine, receiver)
    finally:
        if reloader is not None:
            reloader.cancel()
        if runner_open:
            await runner.cleanup()
        await engine.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    log.info("stopped")
