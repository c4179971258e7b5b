"""The trimmed merge (``merge.moves``) on both of its paths (a slice copy per run of equal
shift, and the generic merge it falls back to beyond a number of runs) against the plain
definition: insert every new sample after its series' samples, then drop what is older
than the cut."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Columns
from loadwatcher.pipeline import merge
from tests.support.fuzzing import examples

# Per series: how many old samples (times 0, 10, 20...) and how many new ones after them.
shapes = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), min_size=1, max_size=12)


def _columns(shape: list[tuple[int, int]]) -> tuple[Columns, Columns]:
    old_sid, old_ts, new_sid, new_ts = [], [], [], []
    for sid, (held, added) in enumerate(shape):
        old_sid += [sid] * held
        old_ts += [10.0 * k for k in range(held)]
        new_sid += [sid] * added
        new_ts += [10.0 * (held + k) for k in range(added)]

    def cols(sid: list[int], ts: list[float], base: float) -> Columns:
        t = np.asarray(ts, np.float64)
        return Columns(np.asarray(sid, np.int32), t, base + t / 1000.0)

    return cols(old_sid, old_ts, 1.0), cols(new_sid, new_ts, 2.0)


def _plain(old: Columns, new: Columns, keep_from: float) -> Columns:
    rows = sorted(
        zip(
            np.concatenate([old.sid, new.sid]).tolist(),
            np.concatenate([old.ts, new.ts]).tolist(),
            np.concatenate([old.val, new.val]).tolist(),
            strict=True,
        )
    )
    kept = [r for r in rows if r[1] >= keep_from]
    return Columns(
        np.asarray([r[0] for r in kept], np.int32),
        np.asarray([r[1] for r in kept], np.float64),
        np.asarray([r[2] for r in kept], np.float64),
    )


def _merged(old: Columns, new: Columns, keep_from: float, n_series: int) -> Columns:
    """The store's merge: the plan's columns made from the old ones, or the merge itself."""
    plan = merge.moves(old, new, keep_from, n_series)
    if isinstance(plan, Columns):
        return plan
    return Columns(*(plan.column(name, getattr(old, name)) for name in ("sid", "ts", "val")))


@pytest.mark.parametrize("path", ["runs", "generic"])
@settings(max_examples=examples(200), deadline=None)
@given(shapes, st.integers(0, 12).map(lambda k: 10.0 * k - 5.0))
def test_merge_trimmed_is_insert_then_trim(
    path: str, shape: list[tuple[int, int]], keep_from: float
) -> None:
    old, new = _columns(shape)
    expected = _plain(old, new, keep_from)
    saved = merge._MAX_RUNS, merge._RUN_SAMPLES
    # Every merge on one path: unlimited runs, or none allowed.
    merge._MAX_RUNS, merge._RUN_SAMPLES = (10**9, 1) if path == "runs" else (-1, 10**9)
    try:
        got = _merged(old, new, keep_from, len(shape))
    finally:
        merge._MAX_RUNS, merge._RUN_SAMPLES = saved
    assert got.sid.dtype == old.sid.dtype
    for name in ("sid", "ts", "val"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), name)
