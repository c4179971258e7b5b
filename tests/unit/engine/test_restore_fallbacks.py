"""A restart whose journal snapshot cannot be trusted serves nothing from it: a snapshot
row that is damaged, of a form this version does not know, or taken ahead of the restarted
clock is ignored and said so; the journal's samples are still loaded (those not ahead of
the clock), and the first poll publishes from them and what it fetches.

A scripted provider stands in for the backend; the journal is the real one.
"""

from __future__ import annotations

import logging
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from loadwatcher.engine.options import DEFAULT_FUTURE_TOLERANCE_S
from loadwatcher.pipeline import snapshot
from tests.support.restarts import NODES, engine_over, journal_of

LAST = 1_700_000_000.0


def _rewrite_snapshot(db: Path, change: Callable[[bytes], bytes]) -> None:
    with sqlite3.connect(db) as conn:
        (body,) = conn.execute("SELECT body FROM snapshot").fetchone()
        conn.execute("UPDATE snapshot SET body = ?", (change(bytes(body)),))


def _garbled(body: bytes) -> bytes:
    return body[:8] + bytes(b ^ 0x5A for b in body[8:64]) + body[64:]


def _unknown_form(body: bytes) -> bytes:
    """The same snapshot, its ``format`` a later version's."""
    magic = snapshot._WITHOUT_WINDOWS_MAGIC
    if body.startswith(magic):  # gzip-compressed JSON after the magic
        doc = orjson.loads(zlib.decompress(body[len(magic) :], wbits=31))
        doc["format"] = 99
        packer = zlib.compressobj(wbits=31)
        return magic + packer.compress(orjson.dumps(doc)) + packer.flush()
    header = snapshot._HEADER
    magic, size = header.unpack_from(body)
    doc = orjson.loads(body[header.size : header.size + size])
    doc["format"] = 99
    text = orjson.dumps(doc)
    return header.pack(magic, len(text)) + text + body[header.size + size :]


@pytest.mark.parametrize("clean", [True, False], ids=["clean stop", "crash"])
@pytest.mark.parametrize("change", [_garbled, _unknown_form], ids=["damaged", "unknown form"])
async def test_a_snapshot_row_that_cannot_be_read_is_ignored_and_the_samples_still_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clean: bool, change: Callable[[bytes], bytes]
) -> None:
    db = tmp_path / "lw.db"
    await journal_of(db, LAST, clean=clean)
    _rewrite_snapshot(db, change)
    with sqlite3.connect(db) as conn:
        (body,) = conn.execute("SELECT body FROM snapshot").fetchone()
    with pytest.raises(ValueError, match="snapshot"):
        snapshot.decode(bytes(body))

    engine = engine_over(db, lambda: LAST + 30)
    with caplog.at_level(logging.WARNING, logger="loadwatcher.engine"):
        await engine.recover()
    assert engine.current is None  # nothing served from the row
    assert "journal snapshot unreadable, ignoring it" in caplog.text
    assert len(engine.store.columns) == 8 * len(NODES) * 2  # every sample of the journal
    assert engine.restored

    await engine.cycle(LAST + 30)
    assert engine.current is not None
    served = engine.current.snapshot
    assert served.taken_at == LAST + 30 and sorted(served.nodes) == NODES
    await engine.close()


async def test_a_snapshot_taken_ahead_of_the_restarted_clock_is_not_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The clock went back ten minutes across the restart: the snapshot, and every sample
    the journal holds, are ahead of it by more than the tolerance."""
    db = tmp_path / "lw.db"
    await journal_of(db, LAST)
    behind = LAST - 600
    assert behind + DEFAULT_FUTURE_TOLERANCE_S < LAST - 15 * 7

    engine = engine_over(db, lambda: behind)
    with caplog.at_level(logging.WARNING, logger="loadwatcher.engine"):
        await engine.recover()
    assert engine.current is None
    assert "journal snapshot taken 600 s ahead of the clock, ignoring it" in caplog.text
    assert len(engine.store.columns) == 0  # all of them ahead too

    await engine.cycle(behind)
    assert engine.current is not None
    served = engine.current.snapshot
    assert served.taken_at == behind and sorted(served.nodes) == NODES
    # Built from the poll's samples alone: one a series.
    assert served.windows["15m"].count.tolist() == [1] * (len(NODES) * 2)
    await engine.close()
