"""The first snapshot from the backend's own aggregates (``pipeline.summary``) and the vector
answers it is read from: what it serves, how it judges quality, and what it leaves out."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from loadwatcher.errors import ProviderError
from loadwatcher.model import WINDOWS, Operator, Resource, Summary
from loadwatcher.pipeline import summary
from loadwatcher.pipeline.analysis import Quality, Thresholds
from loadwatcher.providers.prometheus.answer import ParseMemo, Vector, parse_vector
from loadwatcher.providers.prometheus.provider import PrometheusProvider
from loadwatcher.wire import fastencode, formats
from loadwatcher.wire.formats import Format

NAMES = {Resource.CPU: "cpu_q", Resource.MEMORY: "mem_q"}
END = 1_700_000_000


def make(
    avg: list[float],
    std: list[float],
    fresh_within_s: float = 240.0,
    fresh: list[bool] | None = None,
) -> Summary:
    keys = [(f"n{i // 2}", (Resource.CPU, Resource.MEMORY)[i % 2]) for i in range(len(avg))]
    flags = None if fresh is None else np.array(fresh, bool)
    return Summary(END, fresh_within_s, keys, np.array(avg), np.array(std), flags)


def test_it_serves_avg_and_std_of_the_longest_window_only() -> None:
    snap, report = summary.build(
        make([10.0, 20.0, 30.0, 40.0], [1.0, 2.0, 3.0, 4.0]),
        END + 0.5,
        "Prometheus",
        NAMES,
        Thresholds(),
    )
    longest = snap.windows[WINDOWS[-1].name]
    assert (longest.start, longest.end) == (END - 900, END)
    assert longest.operators == (Operator.AVG, Operator.STD)
    assert longest.values[Operator.AVG].tolist() == [10.0, 20.0, 30.0, 40.0]
    assert longest.values[Operator.STD].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert all(snap.windows[w.name].sids.shape[0] == 0 for w in WINDOWS[:-1])
    assert snap.nodes == {"n0", "n1"}
    # Every node says where its rollups come from, and has no lastSample it cannot know.
    assert snap.tags == {
        "n0": {"quality": "ok", "rollups": "backend"},
        "n1": {"quality": "ok", "rollups": "backend"},
    }
    assert report.by_quality.keys() == {Quality.OK}


def test_the_wire_carries_only_the_operators_it_has() -> None:
    snap, _ = summary.build(
        make([10.0, 20.0], [1.0, 2.0]), END + 0.5, "Prometheus", NAMES, Thresholds()
    )
    body = fastencode.encode(snap, "15m", Format.DEFAULT)
    assert body == formats.encode(formats.document(snap, "15m", Format.DEFAULT))
    metrics = orjson.loads(body)["data"]["NodeMetricsMap"]["n0"]["metrics"]
    assert [(m["type"], m["operator"], m["value"]) for m in metrics] == [
        ("CPU", "AVG", 10.0),
        ("CPU", "STD", 1.0),
        ("Memory", "AVG", 20.0),
        ("Memory", "STD", 2.0),
    ]
    kep = orjson.loads(fastencode.encode(snap, "15m", Format.KEP) or b"")
    assert [m["rollup"] for m in kep["data"]["n0"]["metrics"]] == ["AVG", "STD", "AVG", "STD"]
    assert fastencode.encode(snap, "5m", Format.DEFAULT) == formats.encode(
        formats.document(snap, "5m", Format.DEFAULT)
    )


def test_values_that_are_not_a_utilisation_leave_the_series_out() -> None:
    snap, _ = summary.build(
        make([10.0, 250.0, -1.0, np.nan, 30.0, 40.0], [1.0, 1.0, 1.0, 1.0, np.inf, 2.0]),
        END,
        "Prometheus",
        NAMES,
        Thresholds(),
    )
    kept = [snap.keys[s] for s in snap.windows["15m"].sids.tolist()]
    assert kept == [("n0", Resource.CPU), ("n2", Resource.MEMORY)]


def test_a_flat_window_is_frozen_unless_the_rule_is_off() -> None:
    flat = make([10.0, 20.0], [0.0, 2.0])
    _, report = summary.build(flat, END, "Prometheus", NAMES, Thresholds())
    assert report.tags["n0"]["quality"] == "frozen"
    assert report.tags["n0"]["detail"] == {"cpu": "frozen", "memory": "ok"}
    _, report = summary.build(flat, END, "Prometheus", NAMES, Thresholds(frozen_after_s=0))
    assert report.tags["n0"]["quality"] == "ok"


@pytest.mark.parametrize(
    ("fresh_within_s", "since_end_s", "stale_after_s", "quality"),
    [
        (240.0, 0.5, 300.0, "ok"),
        (240.0, 60.0, 300.0, "ok"),
        (240.0, 60.5, 300.0, "stale"),  # samples may be 300.5 s old by now
        (240.0, 1.0, 200.0, "stale"),  # vouched for less than the rule asks
    ],
)
def test_nodes_are_ok_only_while_what_the_backend_vouched_for_holds(
    fresh_within_s: float, since_end_s: float, stale_after_s: float, quality: str
) -> None:
    _, report = summary.build(
        make([10.0, 20.0], [1.0, 2.0], fresh_within_s),
        END + since_end_s,
        "Prometheus",
        NAMES,
        Thresholds(stale_after_s=stale_after_s),
    )
    assert report.tags["n0"]["quality"] == quality


def test_a_node_with_a_stale_series_is_stale_as_the_raw_checks_say() -> None:
    # n0 fresh; n1's CPU stale (and flat: stale is the worse); n2's stale CPU is left out
    # (not a utilisation), its fresh memory kept; n3 all stale.
    snap, report = summary.build(
        make(
            [10.0, 20.0, 30.0, 40.0, 250.0, 50.0, 60.0, 70.0],
            [1.0, 2.0, 0.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            fresh=[True, True, False, True, False, True, False, False],
        ),
        END + 0.5,
        "Prometheus",
        NAMES,
        Thresholds(),
    )
    assert snap.tags == {
        "n0": {"quality": "ok", "rollups": "backend"},
        "n1": {
            "quality": "stale",
            "detail": {"cpu": "stale", "memory": "ok"},
            "rollups": "backend",
        },
        "n2": {"quality": "ok", "rollups": "backend"},
        "n3": {
            "quality": "stale",
            "detail": {"cpu": "stale", "memory": "stale"},
            "rollups": "backend",
        },
    }
    assert report.nodes(Quality.STALE) == ("n1", "n3")
    assert report.nodes(Quality.OK) == ("n0", "n2")
    # The values are served all the same, as the raw snapshot serves a stale node's.
    assert snap.windows["15m"].values[Operator.AVG].tolist() == [10, 20, 30, 40, 50, 60, 70]


def test_the_fresh_flags_go_with_the_keys() -> None:
    with pytest.raises(ValueError, match="fresh"):
        make([10.0, 20.0], [1.0, 2.0], fresh=[True])


def _vector(items: list[dict[str, object]], result_type: str = "vector") -> bytes:
    return orjson.dumps({"status": "success", "data": {"resultType": result_type, "result": items}})


def test_a_vector_answer_reads_nodes_values_and_counts() -> None:
    body = _vector(
        [
            {"metric": {"instance": "a:9100"}, "value": [1, "0.5"]},
            {"metric": {"job": "x"}, "value": [1, "7"]},
            {"metric": {"instance": "b:9100"}, "value": [1, "NaN"]},
        ]
    )
    got = parse_vector(body, ParseMemo(), "q")
    assert got.nodes == ["a", "b"]
    assert got.values[0] == 0.5 and np.isnan(got.values[1])
    assert got.items == 3
    assert got.count() == -1  # three items are not a count
    count = parse_vector(_vector([{"metric": {}, "value": [1, "5000"]}]), ParseMemo(), "q")
    assert count.count() == 5000
    assert parse_vector(_vector([]), ParseMemo(), "q").count() == 0
    odd = parse_vector(_vector([{"metric": {}, "value": [1, "2.5"]}]), ParseMemo(), "q")
    assert odd.count() == -1


@pytest.mark.parametrize(
    "body",
    [
        _vector([], "matrix"),
        _vector([{"metric": {"instance": "a"}}]),
        _vector([{"metric": "a", "value": [1, "2"]}]),
        _vector([{"metric": {"instance": "a"}, "value": [1]}]),
        orjson.dumps({"status": "error", "error": "boom"}),
    ],
)
def test_a_malformed_vector_answer_is_a_provider_error(body: bytes) -> None:
    with pytest.raises(ProviderError):
        parse_vector(body, ParseMemo(), "q")


def _nodes(*nodes: str, unlabelled: int = 0) -> Vector:
    values = np.ones(len(nodes))
    return Vector(list(nodes), values, len(nodes) + unlabelled, np.ones(unlabelled))


@pytest.mark.parametrize(
    ("count", "last", "fresh"),
    [
        (4, None, [True, True, True]),  # every series fresh: nothing more was asked
        (0, None, [False, False, False]),  # none fresh: nothing more was asked
        (2, _nodes("b", unlabelled=1), [False, True, True]),  # b met twice: merged, fresh
        (1, _nodes("a"), [True, False, False]),
        (2, _nodes("a"), None),  # the fresh series are not the count: they moved
        (1, _nodes("c"), None),  # a fresh series the mean does not have
    ],
)
def test_which_series_are_fresh(count: int, last: Vector | None, fresh: list[bool] | None) -> None:
    avg = _nodes("a", "b", "b", unlabelled=1)
    got = PrometheusProvider._fresh_series(avg, count, last)
    assert (None if got is None else got.tolist()) == fresh
