"""What the journal vouches for: one process at a time, and rows that prove their bytes.

Driven on ``codec`` and ``Journal`` directly; the same behaviours through the engine are in
tests/unit/test_fault_handling.py and through real processes in tests/system/test_journal_lock.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.journal import codec
from loadwatcher.journal.lock import JournalLocked
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Resource, Series
from loadwatcher.pipeline.store import SampleStore
from tests.support.fuzzing import examples

values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2, max_value=103),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(values, min_size=1, max_size=30))
def test_a_journal_sample_passes_exactly_when_the_store_would_take_it_fresh(
    vals: list[float],
) -> None:
    ts = np.arange(len(vals), dtype=np.float64)
    val = np.asarray(vals, np.float64)
    store = SampleStore()
    kept = store.add([Series("n", Resource.CPU, ts, val)]).added
    assert codec.plausible(ts, val, np.inf).tolist() == np.isin(ts, kept.ts).tolist()


def test_a_sample_ahead_of_the_clock_beyond_the_tolerance_is_refused() -> None:
    ts = np.array([100.0, 100.0 + 60.0, 101.0 + 60.0])
    assert codec.plausible(ts, np.full(3, 5.0), 100.0 + 60.0).tolist() == [
        True,
        True,
        False,
    ]


def _rows(n_rows: int) -> list[tuple[bytes, bytes, bytes, int]]:
    rows = []
    for k in range(n_rows):
        _, _, _, sid_b, ts_b, val_b, crc = codec.encode(
            np.array([0, 1]), np.array([10.0 * k, 10.0 * k]), np.array([1.0 + k, 2.0 + k])
        )
        rows.append((sid_b, ts_b, val_b, crc))
    return rows


@settings(max_examples=examples(300), deadline=None)
@given(
    st.integers(0, 3),  # the row
    st.integers(0, 2),  # the column
    st.integers(0, 15),  # the byte
    st.integers(1, 255),  # the change (never 0: the byte does change)
)
def test_any_changed_byte_drops_its_row_and_only_it(
    row: int, column: int, at: int, change: int
) -> None:
    rows: list[tuple[bytes, bytes, bytes, int]] = _rows(4)
    blobs = list(rows[row][:3])
    damaged = bytearray(blobs[column])
    damaged[at] ^= change
    blobs[column] = bytes(damaged)
    rows[row] = (blobs[0], blobs[1], blobs[2], rows[row][3])
    got, refused = codec.samples_since(rows, np.array([0, 1]), 0.0)
    assert refused == codec.Refused(damaged_rows=1)
    assert sorted(set(got.ts.tolist())) == [10.0 * k for k in range(4) if k != row]


def test_a_row_that_is_not_blobs_is_dropped_not_a_crash() -> None:
    rows: list[object] = [*_rows(2), (None, 12, "x", 0)]
    got, refused = codec.samples_since(rows, np.array([0, 1]), 0.0)
    assert refused.damaged_rows == 1 and len(got) == 4


async def test_a_second_journal_on_the_file_is_refused_naming_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    first, second = Journal(str(db)), Journal(str(db))
    await first.open()
    try:
        assert Path(f"{db}.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(JournalLocked) as refused:
            await second.open()
        assert str(refused.value) == (
            f"journal {db} is in use by another process (PID {os.getpid()}, lock {db}.lock)"
        )
        assert not second.is_open
    finally:
        await first.close()
    await second.open()  # released at close
    await second.close()


async def test_a_pid_left_in_the_lock_file_by_a_dead_process_does_not_block(
    tmp_path: Path,
) -> None:
    """Only the kernel's flock counts, and it dies with its process (kill -9 included)."""
    db = tmp_path / "lw.db"
    Path(f"{db}.lock").write_text("999999999\n")
    journal = Journal(str(db))
    await journal.open()
    try:
        assert Path(f"{db}.lock").read_text() == f"{os.getpid()}\n"
    finally:
        await journal.close()
