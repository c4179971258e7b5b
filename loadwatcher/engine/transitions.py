"""Log each change once: a node's quality when it changes, a health problem when it appears
and when it clears. The comparisons are pure; ``TransitionLog`` remembers the last state."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.words import plural

log = logging.getLogger("loadwatcher.engine")

# (node, log level, quality now -- "ok" when it recovered, "" when it left --, quality before)
QualityChange = tuple[str, int, str, str]

# Nodes whose change gets a line of its own in one cycle; the rest are counted in one line.
# A whole fleet turning stale at once (the backend gone) is one event, not 65,000 lines.
LOGGED_NODES = 20


@dataclass(frozen=True)
class NodeStates:
    """What a report says of the nodes, in a form cheap to compare however many there are:
    the nodes not ok (few, normally) with their quality, and the set of every node."""

    not_ok: dict[str, str] = field(default_factory=dict)
    present: frozenset[str] = frozenset()


def node_states(report: analysis.Report) -> NodeStates:
    not_ok = {n: str(q) for q in report.by_quality if q != Quality.OK for n in report.nodes(q)}
    return NodeStates(not_ok, frozenset(report.tags).union(report.nodes(Quality.MISSING)))


def quality_changes(before: NodeStates, after: NodeStates) -> list[QualityChange]:
    """Every node whose quality changed, in node order (pure)."""
    changes: list[QualityChange] = []
    for node, quality in after.not_ok.items():
        if before.not_ok.get(node) != quality:
            changes.append((node, logging.WARNING, quality, ""))
    for node, quality in before.not_ok.items():
        if node not in after.not_ok and node in after.present:
            changes.append((node, logging.INFO, "ok", quality))
    for node in before.present - after.present:
        changes.append((node, logging.INFO, "", before.not_ok.get(node, str(Quality.OK))))
    return sorted(changes)


def overflow(changes: list[QualityChange], shown: int = LOGGED_NODES) -> dict[str, int]:
    """How many of the changes past the first ``shown`` end in each state ("ok" recovered,
    "" left, else the quality), in the order first met (pure)."""
    counts: dict[str, int] = {}
    for _, _, quality, _ in changes[shown:]:
        counts[quality] = counts.get(quality, 0) + 1
    return counts


def health_changes(before: frozenset[str], after: frozenset[str]) -> tuple[list[str], list[str]]:
    """The problems that appeared and those that cleared, each sorted (pure)."""
    return sorted(after - before), sorted(before - after)


class TransitionLog:
    """What was logged last, so that each change is logged once."""

    def __init__(self) -> None:
        self._nodes = NodeStates()
        self._reasons: frozenset[str] = frozenset()

    def quality(self, report: analysis.Report) -> None:
        states = node_states(report)
        changes = quality_changes(self._nodes, states)
        for node, level, quality, was in changes[:LOGGED_NODES]:
            if level == logging.WARNING:
                detail = report.tags.get(node, {}).get("detail", {})
                parts = ", ".join(f"{r} {analysis.quality_words(q)}" for r, q in detail.items())
                state = analysis.state_of(quality)
                log.warning("node %s %s%s", node, state, f" ({parts})" if parts else "")
            elif quality:
                log.info("node %s recovered (was %s)", node, analysis.quality_words(was))
            else:
                log.info("node %s left the snapshot (was %s)", node, analysis.quality_words(was))
        if rest := overflow(changes):
            words = {"ok": "recovered", "": "left the snapshot"}
            counted = ", ".join(
                f"{count} {words.get(q) or analysis.quality_words(q)}" for q, count in rest.items()
            )
            log.warning("and %s: %s", plural(sum(rest.values()), "more node"), counted)
        self._nodes = states

    def health(self, reasons: Iterable[str]) -> None:
        current = frozenset(reasons)
        appeared, cleared = health_changes(self._reasons, current)
        for reason in appeared:
            log.warning("%s", reason)
        for reason in cleared:
            log.info("recovered: %s", reason)
        self._reasons = current
