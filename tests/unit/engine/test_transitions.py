"""A fleet's change is logged as a few lines, however many nodes change at once."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.engine import transitions
from loadwatcher.engine.transitions import LOGGED_NODES, TransitionLog
from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.analysis import Quality
from tests.support.fuzzing import examples

pytestmark = pytest.mark.unit


def _report(tags: dict[str, str]) -> analysis.Report:
    by: dict[Quality, list[str]] = {}
    for node, quality in sorted(tags.items()):
        by.setdefault(Quality(quality), []).append(node)
    return analysis.Report(
        {n: {"quality": q} for n, q in tags.items()}, {q: tuple(ns) for q, ns in by.items()}
    )


def test_a_whole_fleet_turning_stale_is_twenty_lines_and_a_count(caplog) -> None:
    nodes = [f"node-{k:05d}" for k in range(65_000)]
    log = TransitionLog()
    caplog.set_level(logging.INFO, logger="loadwatcher.engine")
    log.quality(_report(dict.fromkeys(nodes, "ok")))
    caplog.clear()
    log.quality(
        _report({**dict.fromkeys(nodes[:100], "frozen"), **dict.fromkeys(nodes[100:], "stale")})
    )
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == LOGGED_NODES + 1
    assert lines[0] == "node node-00000 is frozen"
    assert lines[-1] == "and 64980 more nodes: 80 frozen, 64900 stale"
    caplog.clear()
    log.quality(_report(dict.fromkeys(nodes[:10], "ok")))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:10] == [f"node {n} recovered (was frozen)" for n in nodes[:10]]
    assert lines[-1] == "and 64980 more nodes: 64980 left the snapshot"


@given(st.lists(st.sampled_from(["", "ok", "stale", "frozen"]), max_size=60))
@settings(max_examples=examples(200), deadline=None)
def test_the_overflow_counts_every_change_past_the_shown(ends: list[str]) -> None:
    changes = [(f"n{k}", logging.INFO, end, "ok") for k, end in enumerate(ends)]
    rest = transitions.overflow(changes)
    assert sum(rest.values()) == max(0, len(ends) - LOGGED_NODES)
    assert all(rest[q] == ends[LOGGED_NODES:].count(q) for q in rest)
