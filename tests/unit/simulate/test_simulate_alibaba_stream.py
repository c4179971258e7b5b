"""The Alibaba reader's usage is spilled to a temporary SQLite file and read back a step at
a time: memory does not grow with the hours read, the values are those of the in-memory
series, and the order of ``container_usage.csv`` does not matter."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.simulate import alibaba, profiles, replay, series
from loadwatcher.simulate.spill import Spill, SpilledUsage
from tests.support.fuzzing import examples

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "alibaba-v2018-sample"
CONTAINERS = 40


def write_trace(root: Path, hours: int, every_s: int = 10) -> None:
    """An Alibaba-format directory: 2 machines, CONTAINERS containers, a usage row per
    container every ``every_s`` seconds for ``hours``, machine by machine (not by time)."""
    root.mkdir()
    (root / "machine_meta.csv").write_text("m_1,0,1,a,96,100,USING\nm_2,0,2,b,96,100,USING\n")
    (root / "container_meta.csv").write_text(
        "".join(f"c_{i},m_{1 + i % 2},0,app,started,400,400,1.5\n" for i in range(CONTAINERS))
    )
    with (root / "container_usage.csv").open("w") as f:
        for i in range(CONTAINERS):
            for t in range(0, hours * 3600, every_s):
                f.write(f"c_{i},m_{1 + i % 2},{t},{(i + t) % 90},{30 + i % 7},1,1,1,1,1,1\n")


def read_and_step(root: Path, hours: float) -> tuple[int, int]:
    """tracemalloc's peak while reading ``root`` and reading its usage at every 15 s step,
    and the most samples held at one step."""
    tracemalloc.start()
    try:
        trace, _ = alibaba.read(str(root), machines=2, hours=hours)
        everyone = np.arange(len(trace.pods))
        for step in range(round(hours * 3600 / 15) + 1):
            trace.usage.at(everyone, step * 15.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(trace.usage, SpilledUsage)
    return peak, trace.usage.rows_held_most


def test_memory_does_not_grow_with_the_hours_read(tmp_path: Path) -> None:
    write_trace(tmp_path / "one", 1)
    write_trace(tmp_path / "four", 4)
    peak_1h, held_1h = read_and_step(tmp_path / "one", 1.0)
    peak_4h, held_4h = read_and_step(tmp_path / "four", 4.0)
    # One step reads the samples of the last 15 s: two per container at most.
    assert held_1h == held_4h <= 2 * CONTAINERS
    # Holding the samples (as the reader did) made the 4-hour peak about four times the
    # 1-hour one; streamed, the hours add nothing but noise.
    assert peak_4h < 1.3 * peak_1h, (peak_1h, peak_4h)


def test_the_order_of_the_usage_file_does_not_change_the_outcome(tmp_path: Path) -> None:
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for name in ("machine_meta.csv", "container_meta.csv"):
        (shuffled / name).write_text((SAMPLE / name).read_text())
    lines = (SAMPLE / "container_usage.csv").read_text().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    (shuffled / "container_usage.csv").write_text("".join(lines))
    profile = profiles.parse_profile("TargetLoadPacking")
    results = []
    for root in (SAMPLE, shuffled):
        trace, spec = alibaba.read(str(root), machines=4, hours=2.0)
        results.append(replay.replay(spec, trace, profile))
        # A second replay of the same trace (the next profile) starts its usage afresh.
        results.append(replay.replay(spec, trace, profile))
    assert results[0] == results[1] == results[2] == results[3]


samples = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from([0.0, 15.0, 20.0, 30.0, 45.0, 100.0]),
        st.integers(0, 3).map(float),
        st.integers(0, 3).map(float),
    ),
    max_size=30,
)


@settings(max_examples=examples(80), deadline=None)
@given(samples, st.lists(st.sampled_from([0.0, 10.0, 15.0, 30.0, 60.0, 120.0]), max_size=8))
def test_spilled_usage_reads_what_the_in_memory_series_reads(
    rows: list[tuple[int, float, float, float]], times: list[float]
) -> None:
    """Any samples in any order (several at one time included), read at any times: in
    order, then again from the start as the next replay does, then out of order."""
    lists: list[list[tuple[float, float, float]]] = [[] for _ in range(4)]
    spill = Spill(4)
    for src, t, c, m in rows:
        lists[src].append((t, c, m))
        spill.add(src, t, c, m)
    order = np.array([2, 0, 3, 1])
    expected = series.from_lists([lists[i] for i in order])
    got = spill.usage(order)
    everyone = np.arange(4)
    for when in [*sorted(times), *sorted(times), *times]:
        want_cpu, want_mem = expected.at(everyone, when)
        cpu, mem = got.at(everyone, when)
        assert cpu.tolist() == want_cpu.tolist() and mem.tolist() == want_mem.tolist(), when
