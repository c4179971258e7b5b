"""A journal belongs to one source: what the settings measure is recorded in the file, and a
file another source wrote (or an earlier release, unrecorded, with data) is moved aside and
never restored.

No backend: these drive ``Journal`` and ``source_of`` directly (the real processes across a
restart are in tests/system/test_journal_other_source.py).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.engine.persistence import Persistence
from loadwatcher.engine.selfmetrics import SelfMetrics
from loadwatcher.journal import schema
from loadwatcher.journal.sqlite import Journal
from loadwatcher.pipeline import health
from loadwatcher.providers.source import public_address, source_of
from tests.support.service import settings
from tests.unit.journal.test_journal_format import KEYS, cols

PROM = {"provider": "prometheus", "address": "http://prom:9090", "node_label": "instance"}
HOST = {"provider": "host", "metric.cpu": "host.cpu.utilisation"}


async def written(db: Path, source: dict[str, str] | None) -> None:
    journal = Journal(str(db), source)
    await journal.open()
    try:
        await journal.write_cycle(KEYS, cols([0, 1], [10, 10], [1, 2]), 0, b"snap", 10.0)
    finally:
        await journal.close()


def recorded(db: Path) -> dict[str, str] | None:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'source'").fetchone()
    return None if row is None else json.loads(row[0])


def moved_files(db: Path) -> list[Path]:
    found = db.parent.glob(db.name + ".other-source-*")
    return sorted(p for p in found if not p.name.endswith(("-wal", "-shm")))


async def test_the_same_source_restores_and_another_is_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    await written(db, HOST)
    assert recorded(db) == HOST

    same = Journal(str(db), dict(HOST))
    report = await same.open()
    try:
        assert report.other_source is None
        assert len((await same.load_samples(0)).samples) == 2
    finally:
        await same.close()
    assert not moved_files(db)

    other = Journal(str(db), PROM)
    report = await other.open()
    try:
        assert report.previous == HOST
        assert report.other_source is not None
        assert [Path(report.other_source)] == moved_files(db)
        stored = await other.load_samples(0)
        assert (stored.keys, len(stored.samples)) == ([], 0)  # nothing of the host's
        assert await other.load_snapshot() is None
    finally:
        await other.close()
    assert recorded(db) == PROM
    assert recorded(Path(report.other_source)) == HOST  # kept as it was


async def test_an_unrecorded_journal_with_data_is_moved_aside_an_empty_one_is_kept(
    tmp_path: Path,
) -> None:
    """A journal of an earlier release records no source: its data may be anyone's."""
    old, empty = tmp_path / "old.db", tmp_path / "empty.db"
    await written(old, None)
    journal = Journal(str(old), PROM)
    report = await journal.open()
    await journal.close()
    assert report.other_source is not None and report.previous is None
    assert recorded(old) == PROM

    bare = Journal(str(empty))
    await bare.open()  # tables, no data, no source
    await bare.close()
    journal = Journal(str(empty), PROM)
    report = await journal.open()
    await journal.close()
    assert report.other_source is None and not moved_files(empty)
    assert recorded(empty) == PROM


async def test_an_unreadable_source_record_is_another_source(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    await written(db, PROM)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '[not json' WHERE key = 'source'")
    journal = Journal(str(db), PROM)
    report = await journal.open()
    await journal.close()
    assert report.other_source is not None and report.previous == {"unreadable": "[not json"}


async def test_one_log_line_names_both_sources_and_health_says_so_until_a_good_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "lw.db"
    await written(db, HOST)
    status = health.JournalStatus(str(db))
    persistence = Persistence(Journal(str(db), PROM), status, SelfMetrics())
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    await persistence.open()
    try:
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert "provider=host" in errors[0] and "provider=prometheus" in errors[0]
        assert str(moved_files(db)[0]) in errors[0]
        assert status.other_source is not None and "another source" in status.other_source
        await persistence.write(KEYS, cols([0], [20], [1]), b"snap", 20.0, 0.0)
        assert status.other_source is None
    finally:
        await persistence.journal.close()


def test_the_description_has_no_credentials_and_only_what_is_measured() -> None:
    described = source_of(
        settings(
            {
                "METRICS_PROVIDER_NAME": "Prometheus",
                "METRICS_PROVIDER_ADDRESS": "https://alice:hunter2@Prom.Example:9090/api/?t=s3cr",
                "METRICS_PROVIDER_TOKEN": "tok-123",
                "LOADWATCHER_PROVIDER_TIMEOUT_S": "3",
            }
        )
    )
    text = json.dumps(described)
    for secret in ("alice", "hunter2", "s3cr", "tok-123"):
        assert secret not in text
    assert described["address"] == "https://prom.example:9090/api"
    assert described["provider"] == "prometheus" and "cpu_query" in described
    assert not any(k.endswith("_s") for k in described)
    slower = source_of(
        settings(
            {
                "METRICS_PROVIDER_NAME": "Prometheus",
                "METRICS_PROVIDER_ADDRESS": "https://prom.example:9090/api",
                "LOADWATCHER_PROVIDER_TIMEOUT_S": "9",
                "LOADWATCHER_POLL_INTERVAL_S": "30",
            }
        )
    )
    assert slower == described  # how often or how patiently: the same source


def test_the_vendors_descriptions_hold_their_cluster_and_no_key(tmp_path: Path) -> None:
    """Datadog's application key (inline or its file) and the API key are never in the
    description; the cluster and the host suffix, which decide the nodes, are."""
    key_file = tmp_path / "app-key"
    key_file.write_text("app-from-file\n")
    for env in (
        {
            "METRICS_PROVIDER_NAME": "Datadog",
            "METRICS_PROVIDER_ADDRESS": "datadoghq.eu",
            "METRICS_PROVIDER_TOKEN": "api-s3cr",
            "METRICS_PROVIDER_APP_KEY": "app-s3cr",
            "LOADWATCHER_DATADOG_APP_KEY_FILE": str(key_file),
            "DATADOG_CLUSTER_NAME": "prod",
            "DATADOG_HOST_NAME_SUFFIX": ".dev.example.com",
        },
        {
            "METRICS_PROVIDER_NAME": "SignalFx",
            "METRICS_PROVIDER_TOKEN": "sfx-s3cr",
            "SIGNALFX_CLUSTER_NAME": "prod",
            "SIGNALFX_HOST_NAME_SUFFIX": ".dev.example.com",
        },
    ):
        described = source_of(settings(env))
        text = json.dumps(described)
        assert "s3cr" not in text and "app-from-file" not in text and "app-key" not in text
        assert described["cluster_name"] == "prod"
        assert described["host_name_suffix"] == ".dev.example.com"
        other = source_of(settings({**env, env_name(env, "CLUSTER_NAME"): "staging"}))
        assert other != described  # another cluster: another source


def env_name(env: dict[str, str], what: str) -> str:
    return ("DATADOG_" if env["METRICS_PROVIDER_NAME"] == "Datadog" else "SIGNALFX_") + what


def test_pushes_beside_a_poller_are_part_of_its_description() -> None:
    base = {"METRICS_PROVIDER_NAME": "Prometheus", "METRICS_PROVIDER_ADDRESS": "http://p:9090"}
    polled = source_of(settings(base))
    mixed = source_of(settings({**base, "LOADWATCHER_PUSH_RECEIVE": "true"}))
    assert "push" not in polled and mixed["push"] == "yes" and mixed != polled
    pushed = source_of(settings({"LOADWATCHER_PROVIDER_NAME": "push"}))
    assert pushed["provider"] == "push" and "address" not in pushed


@given(
    user=st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8),
    password=st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1),
)
def test_userinfo_never_survives_the_address(user: str, password: str) -> None:
    address = public_address(f"http://{user}:{password}@host:9090/")
    assert address == "http://host:9090"


async def test_two_moves_in_one_second_keep_both_files(tmp_path: Path) -> None:
    """host, prometheus, host again within a second: each moved file is kept."""
    db = tmp_path / "lw.db"
    await written(db, HOST)
    await written(db, PROM)  # moves the host's aside
    await written(db, HOST)  # moves prometheus's aside, perhaps in the same second
    moved = moved_files(db)
    assert len(moved) == 2
    assert sorted(json.dumps(recorded(p), sort_keys=True) for p in moved) == sorted(
        json.dumps(s, sort_keys=True) for s in (HOST, PROM)
    )


def test_a_move_stopped_half_way_never_leaves_the_old_wal_beside_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the renames: a new file at the path must never meet the old one's
    WAL (SQLite would replay it into the new file); the old main file may stay."""
    db = tmp_path / "lw.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").write_bytes(b"x")
    real_replace = os.replace
    calls: list[str] = []

    def replace_once(src: str, dst: str) -> None:
        calls.append(src)
        if len(calls) > 1:
            raise OSError(5, "Input/output error")  # the kill, after the first rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_once)
    with pytest.raises(OSError):
        schema.move_aside(str(db), "other-source")
    assert not Path(f"{db}-wal").exists() and db.exists()
