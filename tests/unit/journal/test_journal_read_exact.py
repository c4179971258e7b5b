"""The journal's read is exact: whatever order the rows have in the file, a restore gives back
the set of (series, time, value) that was written, the last written of a repeated (series,
time) included.

Properties: one on ``codec.samples_since`` with rows shuffled, split and interleaved, one
through the real ``Journal`` driving what puts a series' rows out of time order in a real
file: a takeover (a second instance opens the file without loading it), a clock stepped
back, and the clean-up that rewrites a row holding a sample ahead of the clock.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loadwatcher.journal import codec, sqlite
from loadwatcher.journal.sqlite import Journal
from loadwatcher.model import Columns, Resource
from loadwatcher.pipeline import plausible
from loadwatcher.pipeline.plausible import STALE
from tests.support.fuzzing import examples

Written = dict[tuple[int, float], float]

sample = st.tuples(
    st.integers(0, 5),  # series
    st.integers(0, 40).map(float),  # time: few values, so that times repeat
    st.floats(0, 100),
)


def _expected(written: list[tuple[int, float, float]]) -> Written:
    out: Written = {}
    for sid, ts, val in written:  # in write order: the last written wins
        out[(sid, ts)] = val
    return out


def _restored(cols: Columns) -> Written:
    pairs = list(zip(cols.sid.tolist(), cols.ts.tolist(), strict=True))
    assert len(set(pairs)) == len(pairs), "one sample per (series, time)"
    order = np.lexsort((cols.ts, cols.sid))
    assert np.array_equal(order, np.arange(len(cols))), "(series, time) order"
    return {(s, t): v for (s, t), v in zip(pairs, cols.val.tolist(), strict=True)}


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(st.lists(sample, min_size=1, max_size=12), min_size=1, max_size=8), st.randoms())
def test_the_read_gives_back_what_was_written_whatever_the_row_order(
    cycles: list[list[tuple[int, float, float]]], rnd: random.Random
) -> None:
    # Each cycle is one row, its samples in any order; rows in write order (file order).
    rows = []
    written: list[tuple[int, float, float]] = []
    for cycle in cycles:
        rnd.shuffle(cycle)
        # A cycle may be split into several rows, as a large one is.
        cut = rnd.randint(1, len(cycle))
        for part in (cycle[:cut], cycle[cut:]):
            if not part:
                continue
            sid, ts, val = (np.asarray(c) for c in zip(*part, strict=True))
            rows.append(codec.encode(sid.astype(np.int64), ts.astype(float), val)[3:])
            # Within one row a repeated (series, time) keeps its last in row order.
            written.extend(part)
    got, refused = codec.samples_since(rows, np.arange(6), 0.0)
    assert refused == codec.Refused()
    assert _restored(got) == _expected(written)
    # Read a few rows at a time, as a restart reads the file: the same samples.
    reader = codec.Reader(0.0)
    at = 0
    while at < len(rows):
        step = rnd.randint(1, 3)
        assert reader.add(rows[at : at + step]) == [False] * len(rows[at : at + step])
        at += step
    assert _restored(reader.samples(np.arange(6))) == _expected(written)


_FILES = itertools.count()

KEYS = [(f"node-{n}", r) for n in range(3) for r in (Resource.CPU, Resource.MEMORY)]

# One step of a journal's life: a cycle written at some clock (which may step back), a
# restart (a new instance that loads the file, as the service does at start), or a takeover
# (a new instance that writes without loading: the journal opened late, or a second
# instance taking over the file).
step = st.one_of(
    st.tuples(
        st.just("cycle"),
        st.lists(
            st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 60), st.floats(0, 100)),
            min_size=1,
            max_size=10,
        ),
    ),
    st.tuples(st.just("restart"), st.integers(0, 60)),  # the clock at the restart's read
    st.tuples(st.just("takeover"), st.just(0)),
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(step, min_size=1, max_size=10), st.sampled_from([1, 2, sqlite.READ_ROWS]))
# The clean-up rewrites a row that holds a sample ahead of the clock: its sound samples must
# keep the row's place in the file, or an older value of a repeated time comes back last.
@example([("cycle", [(0, 5, 1.0), (0, 50, 3.0)]), ("cycle", [(0, 5, 2.0)]), ("restart", 40)], 1)
def test_takeover_clock_steps_and_clean_up_restore_exactly_what_was_written(
    tmp_path: Path, steps: list[tuple[str, object]], read_rows: int
) -> None:
    # One file per example: the fixture's directory is shared by all of them.
    db = tmp_path / f"lw-{next(_FILES)}.db"
    # The rows read at a time at start: a damaged or rewritten row in any batch.
    default, sqlite.READ_ROWS = sqlite.READ_ROWS, read_rows
    try:
        asyncio.run(_drive(str(db), steps))
    finally:
        sqlite.READ_ROWS = default


async def _drive(db: str, steps: list[tuple[str, object]]) -> None:
    journal = Journal(db)
    await journal.open()
    keys: list[tuple[str, Resource]] = []  # the current instance's store keys
    model: dict[tuple[tuple[str, Resource], float], float] = {}
    try:
        for kind, arg in steps:
            if kind == "cycle":
                assert isinstance(arg, list)
                sid, ts, val = [], [], []
                for k, t, v in arg:
                    if KEYS[k] not in keys:
                        keys.append(KEYS[k])
                    sid.append(keys.index(KEYS[k]))
                    ts.append(float(t))
                    val.append(v)
                    model[(KEYS[k], float(t))] = v
                added = Columns(np.asarray(sid, np.int64), np.asarray(ts), np.asarray(val))
                await journal.write_cycle(list(keys), added, -1.0, b"", 0.0)
                continue
            await journal.close()
            journal = Journal(db)
            await journal.open()
            keys = []
            if kind == "restart":
                assert isinstance(arg, int)
                # A read with the clock at ``arg``: samples ahead of it are refused and the
                # clean-up rewrites their rows without them.
                stored = await journal.load_samples(0.0, float(arg))
                model = {key: v for key, v in model.items() if key[1] <= arg}
                keys = list(stored.keys)
                assert _by_key(stored.keys, stored.samples) == model
        stored = await journal.load_samples(0.0)
        assert _by_key(stored.keys, stored.samples) == model
    finally:
        await journal.close()


def _by_key(
    keys: list[tuple[str, Resource]], cols: Columns
) -> dict[tuple[tuple[str, Resource], float], float]:
    restored = _restored(cols)
    return {(keys[s], t): v for (s, t), v in restored.items()}


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.lists(sample, min_size=1, max_size=12), min_size=1, max_size=6),
    st.lists(st.integers(0, 7), min_size=1, max_size=6, unique=True),
    st.randoms(),
)
def test_file_ids_with_gaps_map_to_store_ids_and_unlisted_series_are_left_out(
    cycles: list[list[tuple[int, float, float]]], listed: list[int], rnd: random.Random
) -> None:
    """The journal lists series ``listed`` (file ids with gaps, in any order: series it
    forgot are gone from its list); a sample of a file id it does not list is left out, the
    others come back under their store id (the place of their file id in the list)."""
    rows, written = [], []
    for cycle in cycles:
        sid, ts, val = (np.asarray(c) for c in zip(*cycle, strict=True))
        rows.append(codec.encode(sid.astype(np.int64), ts.astype(float), val)[3:])
        written.extend(cycle)
    reader = codec.Reader(0.0)
    at = 0
    while at < len(rows):
        step = rnd.randint(1, 3)
        reader.add(rows[at : at + step])
        at += step
    got = _restored(reader.samples(np.asarray(listed, np.int64)))
    expected = {
        (listed.index(fid), ts): v for (fid, ts), v in _expected(written).items() if fid in listed
    }
    assert got == expected


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.lists(sample, min_size=1, max_size=12), min_size=1, max_size=4),
    st.lists(st.sampled_from([-1, -(2**40), 2**31, 2**40, 6, 99]), min_size=1, max_size=4),
)
def test_ids_beyond_the_store_ids_or_negative_are_left_out(
    cycles: list[list[tuple[int, float, float]]], strays: list[int]
) -> None:
    """A row holding a file id that no listed series has (negative, beyond the store's
    32-bit ids, or simply not listed) gives back its listed series' samples and no other."""
    rows, written = [], []
    for k, cycle in enumerate(cycles):
        sid = np.asarray([s for s, _, _ in cycle] + [strays[k % len(strays)]], np.int64)
        ts = np.asarray([t for _, t, _ in cycle] + [1.0])
        val = np.asarray([v for _, _, v in cycle] + [50.0])
        rows.append(codec.encode(sid, ts, val)[3:])
        written.extend(cycle)
    got, refused = codec.samples_since(rows, np.arange(6), 0.0)
    assert refused == codec.Refused()
    assert _restored(got) == _expected(written)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 5),
                st.integers(0, 40).map(float),
                st.one_of(st.floats(0, 100), st.just(STALE)),
            ),
            min_size=1,
            max_size=12,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_markers_come_back_apart_from_the_samples_and_nothing_else_moves(
    cycles: list[list[tuple[int, float, float]]],
) -> None:
    """The restore's read gives the staleness markers apart, as the store holds them: the
    two parts are the whole read's samples, markers on one side only, each part in (series,
    time) order with the last written of a repeated (series, time)."""
    rows, written = [], []
    for cycle in cycles:
        sid, ts, val = (np.asarray(c) for c in zip(*cycle, strict=True))
        rows.append(codec.encode(sid.astype(np.int64), ts.astype(float), val)[3:])
        written.extend(cycle)
    whole, split = codec.Reader(0.0), codec.Reader(0.0)
    whole.add(rows)
    split.add(rows)
    samples, markers = split.samples_and_markers(np.arange(6))
    assert not plausible.stale(samples.val).any()
    assert plausible.stale(markers.val).all()
    # Each part owns its columns: a view would keep the other part's whole column alive
    # in the store (its samples' columns are replaced by the first merge, its markers' not).
    assert all(c.base is None for c in (markers.sid, markers.ts, markers.val))
    everything = _restored(whole.samples(np.arange(6)))
    assert everything.keys() == _expected(written).keys()
    apart = {**_restored(samples), **_restored(markers)}
    assert len(apart) == len(_restored(samples)) + len(_restored(markers))
    # Compared as bits: a marker is a NaN, never equal to itself.
    assert {k: np.float64(v).tobytes() for k, v in apart.items()} == {
        k: np.float64(v).tobytes() for k, v in everything.items()
    }
