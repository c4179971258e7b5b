"""Faults against the real service process and a real Prometheus: outages, slowness, bad disks.

* provider outage: Prometheus stopped for several poll intervals, then started again;
* provider slowness: Prometheus behind ``faults.DelayProxy`` answering slower than the poll
  interval, then slower than the timeout, then at full speed again;
* disk trouble: the journal on a small tmpfs that fills up, or that is read-only when the
  service starts (Linux refuses ``mount -o remount,ro`` while a process has a file open for
  writing there, so a read-only disk can only be produced before the service opens it);
* graceful shutdown: SIGTERM while a cycle is in flight.

Each test runs the service as ``python -m loadwatcher serve`` with a 0.2-0.3 s poll interval
while ``faults.Pusher`` feeds Prometheus a new sample per series every 0.2 s.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadwatcher.app import SHUTDOWN_GRACE_S
from tests.support.backends import Server, start_prometheus
from tests.support.faults import (
    DelayProxy,
    ProxiedRequest,
    Pusher,
    Service,
    fetch_groups,
    fill,
    history,
    integrity,
    journal_samples,
    journal_snapshot_time,
    metric,
    remount,
    tmpfs,
    wait_for,
)
from tests.support.remote_write import push

pytestmark = [pytest.mark.backend, pytest.mark.alone]

NODES = 20


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One Prometheus with a remote-write receiver and 15 minutes of history, for the module."""
    server = start_prometheus(
        tmp_path_factory.mktemp("prometheus"), extra_args=["--web.enable-remote-write-receiver"]
    )
    try:
        push(server, history(NODES, time.time() - 1))
        yield server
    finally:
        server.stop()


def _watcher_time(service: Service) -> int:
    status, body = service.get("/watcher")
    assert status == 200, body[:300]
    return int(orjson.loads(body)["timestamp"])


def _healthy(service: Service) -> bool:
    return service.health()[0] == 200


def _journal(service: Service) -> dict[str, Any]:
    body: dict[str, Any] = service.health()[1]["journal"]
    return body


def _stop(service: Service, db: Path) -> None:
    code, took = service.terminate()
    assert code == 0, service.log_tail()
    assert took <= SHUTDOWN_GRACE_S + 3
    assert integrity(db) == "ok"
    wal = Path(str(db) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "WAL not checkpointed at shutdown"
    assert "Traceback" not in service.log_text(), service.log_tail()


def _ms(times: list[float]) -> set[int]:
    return {round(t * 1000) for t in times}


def _journaled_ms(db: Path, node: str) -> set[int]:
    return {round(ts * 1000) for n, r, ts in journal_samples(db) if n == node and r == "cpu"}


# --------------------------------------------------------------------------- provider outage


def test_prometheus_down_for_several_polls_then_back(prom: Server, tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    service = Service.prometheus(
        prom.url, db, tmp_path / "service.log", poll_interval_s=0.3, timeout_s=0.5
    )
    with Pusher(prom, NODES) as pusher:
        service.start()
        try:
            service.wait_status("/watcher")
            service.wait_until("healthy", lambda: _healthy(service))
            prom.stop()
            down_at = time.time()
            service.wait_until("503 provider down", lambda: not _healthy(service), 5)
            time.sleep(6 * 0.3)  # several more poll intervals without a provider
            status, body = service.health()
            assert status == 503 and body["provider"]["errorKind"] == "connect", body
            assert any(r.startswith("provider down: connect") for r in body["reasons"]), body
            # The last good snapshot is still served, with its true (old) time.
            assert _watcher_time(service) <= down_at + 0.5
            errors = metric(service.metrics(), "loadwatcher_provider_errors_total", kind="connect")
            assert errors >= 4, errors

            prom.start()
            back_at = time.time()
            service.wait_until("healthy again", lambda: _healthy(service), 10)
            recovered_s = time.time() - back_at
            assert _watcher_time(service) >= int(back_at)
            # Samples pushed after the restart reach the journal.
            wait_for(
                "fresh samples journaled",
                lambda: max(_journaled_ms(db, "10.0.0.1")) >= round(back_at * 1000),
            )
        finally:
            _stop(service, db)
    print(f"\noutage: healthy again {recovered_s:.2f} s after Prometheus was ready")
    log = service.log_text()
    assert 1 <= log.count("WARNING loadwatcher.engine: provider down") <= 3, log[-3000:]
    assert "recovered: provider down" in log
    assert pusher.failures > 0  # the outage was real


# --------------------------------------------------------------------------- provider slowness


def _client_end(r: ProxiedRequest, timeout_s: float) -> float:
    """When the service stopped waiting for ``r``: the answer, or its own timeout."""
    ended = r.ended if r.ended is not None else float("inf")
    return min(ended, r.arrived + timeout_s)


def _assert_fetches_never_overlap(groups: list[list[ProxiedRequest]], timeout_s: float) -> None:
    assert len(groups) >= 3, f"too few fetches to judge: {len(groups)}"
    for prev, nxt in itertools.pairwise(groups):
        # One poll asks CPU, memory, the node list (kube_node_info) and the two GPU
        # defaults (DCGM's mean and busiest device) side by side.
        assert len(nxt) <= 5, f"more than one fetch at once: {[r.path for r in nxt]}"
        done = max(_client_end(r, timeout_s) for r in prev)
        assert nxt[0].arrived >= done - 0.02, (
            f"a fetch started {done - nxt[0].arrived:.3f} s before the previous one ended"
        )


def test_slow_prometheus_polls_never_overlap_and_recover(prom: Server, tmp_path: Path) -> None:
    interval_s, timeout_s = 0.2, 1.0
    db = tmp_path / "lw.db"
    with DelayProxy(prom.url) as proxy, Pusher(prom, NODES):
        service = Service.prometheus(
            proxy.url, db, tmp_path / "service.log", poll_interval_s=interval_s, timeout_s=timeout_s
        )
        service.start()
        try:
            service.wait_status("/watcher")
            service.wait_until("healthy", lambda: _healthy(service))

            # Slower than the poll interval, within the timeout: polls run back to back.
            text = service.metrics()
            polls_before = metric(text, "loadwatcher_poll_duration_seconds_count")
            fast_before = metric(text, "loadwatcher_poll_duration_seconds_bucket", le="0.5")
            proxy.delay_s = 0.6
            mark = len(proxy.requests)  # from here on every request is held 0.6 s
            time.sleep(3.0)
            _assert_fetches_never_overlap(fetch_groups(proxy.requests[mark:]), timeout_s)
            text = service.metrics()
            polls = metric(text, "loadwatcher_poll_duration_seconds_count") - polls_before
            fast = metric(text, "loadwatcher_poll_duration_seconds_bucket", le="0.5")
            assert 3 <= polls <= 3.0 / 0.6 + 1, polls  # one at a time, each >= 0.6 s
            assert fast - fast_before <= 1, "polls faster than the proxy's delay"  # in-flight one
            assert _healthy(service), service.health()

            # Slower than the timeout: every fetch times out, cleanly and one at a time.
            timeouts_before = metric(text, "loadwatcher_provider_errors_total", kind="timeout")
            proxy.delay_s = 3.0
            mark = len(proxy.requests)
            time.sleep(4.0)
            stuck = proxy.requests[mark:]
            _assert_fetches_never_overlap(fetch_groups(stuck), timeout_s)
            status, body = service.health()
            assert status == 503 and body["provider"]["errorKind"] == "timeout", body
            text = service.metrics()
            timeouts = metric(text, "loadwatcher_provider_errors_total", kind="timeout")
            assert timeouts - timeouts_before >= 3
            assert _watcher_time(service) > 0  # still serving the last snapshot

            # Back to full speed: it recovers by itself.
            proxy.delay_s = 0.0
            back = time.monotonic()
            service.wait_until("healthy again", lambda: _healthy(service), 5)
            print(f"\nslowness: healthy {time.monotonic() - back:.2f} s after the delay went")
            # Every timed-out request was dropped by the service, not left hanging.
            wait_for("abandoned requests closed", lambda: all(r.ended for r in stuck), 5)
            waited = [r for r in stuck if r.ended and r.ended - r.arrived < 2.9]
            assert waited and all(r.outcome == "abandoned by client" for r in waited), [
                (r.outcome, r.ended and r.ended - r.arrived) for r in stuck
            ]
        finally:
            _stop(service, db)
    log = service.log_text()
    assert "provider down: timeout" in log and "recovered: provider down: timeout" in log


# --------------------------------------------------------------------------- disk trouble


def test_journal_disk_full_then_freed(prom: Server, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", size="16m") as disk:
        db = disk / "lw.db"
        service = Service.prometheus(prom.url, db, tmp_path / "service.log")
        # Enough new series that the file must grow every cycle or two: with 64 KiB pages
        # and WAL space reused after each fold, a few nodes' samples fit in pages the file
        # already has for a long time, and a full disk rightly goes unnoticed until then.
        with Pusher(prom, 10 * NODES) as pusher:
            service.start()
            try:
                service.wait_status("/watcher")
                wait_for("samples in the journal", lambda: len(journal_samples(db)) > 0)
                filler = fill(disk)
                full_at = time.time()
                service.wait_until("journal error", lambda: not _journal(service)["ok"], 5)
                status, body = service.health()
                assert status == 503
                assert "database or disk is full" in body["journal"]["error"], body
                assert any(
                    r.startswith("journal unwritable, running without persistence")
                    for r in body["reasons"]
                ), body
                # Still polling and serving from memory.
                first = _watcher_time(service)
                time.sleep(2.0)
                assert _watcher_time(service) > first
                errors = metric(service.metrics(), "loadwatcher_journal_errors_total")
                assert errors >= 3, errors

                filler.unlink()
                freed_at = time.time()
                service.wait_until("journal ok", lambda: _journal(service)["ok"], 5)
                wait_for("a snapshot written", lambda: (journal_snapshot_time(db) or 0) > freed_at)
            finally:
                _stop(service, db)
        # Samples fetched while the disk was full were written once it had room again.
        during = _ms([t for t in pusher.pushed if full_at + 0.3 < t < freed_at - 0.3])
        assert len(during) >= 5
        missing = during - _journaled_ms(db, "10.0.0.1")
        assert not missing, f"{len(missing)} of {len(during)} samples from the full period lost"
    log = service.log_text()
    assert log.count("serving from memory without persistence") == 1, log[-3000:]
    assert "persistence resumed" in log


def test_journal_read_only_at_start_then_writable(prom: Server, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk") as disk:
        (disk / "journal").mkdir()
        remount(disk, "ro")
        db = disk / "journal" / "lw.db"
        service = Service.prometheus(prom.url, db, tmp_path / "service.log")
        with Pusher(prom, NODES):
            started = time.time()
            service.start()
            try:
                service.wait_status("/watcher")  # served from memory
                status, body = service.health()
                assert status == 503 and body["journal"]["ok"] is False, body
                assert "Read-only file system" in body["journal"]["error"], body
                assert not db.exists()
                time.sleep(1.0)

                remount(disk, "rw")
                writable_at = time.time()
                service.wait_until("journal ok", lambda: _journal(service)["ok"], 5)
                service.wait_until("healthy", lambda: _healthy(service), 5)
                snap = journal_snapshot_time(db)
                assert snap is not None and snap >= writable_at
            finally:
                _stop(service, db)
        # What was fetched while the disk was read-only is in the file too: the 15-minute
        # history of the cold start and the fresh samples of the first seconds.
        have = _journaled_ms(db, "10.0.0.1")
        assert min(have) <= round((started - 800) * 1000)
        assert len([t for t in have if round(started * 1000) <= t < writable_at * 1000]) >= 3


# --------------------------------------------------------------------------- graceful shutdown


def test_sigterm_during_a_slow_cycle_finishes_it_and_exits_0(prom: Server, tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    with DelayProxy(prom.url) as proxy, Pusher(prom, NODES):
        service = Service.prometheus(proxy.url, db, tmp_path / "service.log", timeout_s=5.0)
        service.start()
        try:
            service.wait_status("/watcher")
            wait_for("a snapshot in the journal", lambda: journal_snapshot_time(db) is not None)
            mark = len(proxy.requests)
            proxy.delay_s = 2.0
            wait_for("a slow request", lambda: len(proxy.requests) > mark, 5, every_s=0.01)
            in_flight = proxy.requests[mark]
            time.sleep(0.3)
            assert proxy.in_flight > 0
        finally:
            code, took = service.terminate()
        print(f"\nshutdown: exit {code} {took:.2f} s after SIGTERM (a 2 s fetch in flight)")
        assert code == 0, service.log_tail()
        assert 1.0 <= took <= SHUTDOWN_GRACE_S + 3
    # The cycle in flight was finished and persisted: its snapshot is the journal's.
    snap = journal_snapshot_time(db)
    assert snap is not None and snap >= in_flight.arrived_wall - 0.5
    assert integrity(db) == "ok"
    wal = Path(str(db) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    log = service.log_text()
    assert "stopping: finishing the cycle in flight" in log and "INFO loadwatcher: stopped" in log
    assert "abandoned" not in log and "Traceback" not in log
