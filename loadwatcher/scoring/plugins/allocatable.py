"""NodeResourcesAllocatable: prefer nodes by their absolute allocatable resources.

Formula (scheduler-plugins ``pkg/noderesources/allocatable.go``), with A_r the node's
*allocatable* (CPU millicores, memory and other resources in units) and w_r the weight::

    raw   = Σ_r (−A_r if mode = Least else A_r) × w_r  /  Σ_r w_r     (int64, truncating)
    score = (raw − lowest) × 100 / (highest − lowest)                  (int64, truncating)
            or 0 for every node when highest = lowest

``lowest``/``highest`` are over the nodes being scored (NormalizeScore); int64 arithmetic
wraps as in Go. Metrics play no part. Defaults: mode Least, weights cpu 1<<20, memory 1
(a millicore weighs as much as a MiB). Resources other than cpu, memory,
ephemeral-storage, hugepages-* and extended (``domain/name``) resources count as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, IntArray
from loadwatcher.quantity import Quantity
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.gomath import go_idiv, go_idiv_np, wrap_int64
from loadwatcher.scoring.pods import Pod
from loadwatcher.scoring.registry import Plugin

NAME = "NodeResourcesAllocatable"


@dataclass(frozen=True)
class Args:
    """NodeResourcesAllocatableArgs."""

    mode: str = "Least"
    resources: tuple[tuple[str, int], ...] = (("cpu", 1 << 20), ("memory", 1))


def parse_args(raw: Mapping[str, Any]) -> Args:
    """``mode`` (Least|Most), ``resources`` [{name, weight}] (weights must be positive)."""
    mode = raw.get("mode") or "Least"
    if mode not in ("Least", "Most"):
        raise ValueError(f"{NAME} args.mode: invalid mode {mode!r}; expected Least or Most")
    items = raw.get("resources")
    if not items:
        return Args(mode)
    if not isinstance(items, list):
        raise ValueError(f"{NAME} args.resources: expected a list of {{name, weight}}")
    resources: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ValueError(f"{NAME} args.resources[{i}]: expected {{name, weight}}")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
            raise ValueError(
                f"{NAME} args.resources[{i}].weight: resource Weight of "
                f"{item['name']} should be a positive integer, got {weight!r}"
            )
        resources[item["name"]] = weight
    return Args(mode, tuple(resources.items()))


# ------------------------------------------------------------------------------ the math


def allocatable_value(allocatable: Mapping[str, Quantity], name: str) -> int:
    """The node's allocatable ``name`` as the scheduler counts it (CPU in millicores)."""
    q = allocatable.get(name)
    if q is None:
        return 0
    if name == "cpu":
        return q.milli_value()
    scalar = "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))
    return q.value() if name in ("memory", "ephemeral-storage") or scalar else 0


def raw_score(allocatable: Mapping[str, int], args: Args) -> int:
    """The un-normalised score of one node (negative in Least mode)."""
    node_score = weight_sum = 0
    for name, weight in args.resources:
        value = allocatable.get(name, 0)
        node_score = wrap_int64(
            node_score + wrap_int64((-value if args.mode == "Least" else value) * weight)
        )
        weight_sum = wrap_int64(weight_sum + weight)
    return go_idiv(node_score, weight_sum)


def normalize(scores: Sequence[int]) -> list[int]:
    """NormalizeScore: min–max to 0–100 with Go int64 arithmetic."""
    if not scores:
        return []
    highest, lowest = max(scores), min(scores)
    old_range = wrap_int64(highest - lowest)
    if old_range == 0:
        return [0 for _ in scores]
    return [go_idiv(wrap_int64(wrap_int64(s - lowest) * 100), old_range) for s in scores]


def normalize_np(scores: IntArray) -> IntArray:
    """Vectorised :func:`normalize`."""
    if scores.size == 0:
        return scores
    highest, lowest = int(scores.max()), int(scores.min())
    old_range = wrap_int64(highest - lowest)
    if old_range == 0:
        return np.zeros_like(scores)
    with np.errstate(over="ignore"):
        shifted = (scores - np.int64(lowest)) * np.int64(100)
    return go_idiv_np(shifted, np.full_like(scores, old_range))


# ------------------------------------------------------------------------------- the glue


def _column(cluster: Cluster, name: str) -> IntArray:
    if name == "cpu":
        return cluster.alloc_cpu
    if name == "memory":
        return cluster.alloc_mem
    return np.array([allocatable_value(n.allocatable, name) for n in cluster.nodes], dtype=np.int64)


def raw_scores(cluster: Cluster, args: Args) -> IntArray:
    """Vectorised :func:`raw_score` for every node."""
    node_score = np.zeros(len(cluster), dtype=np.int64)
    weight_sum = 0
    with np.errstate(over="ignore"):
        for name, weight in args.resources:
            value = _column(cluster, name)
            node_score += (-value if args.mode == "Least" else value) * np.int64(weight)
            weight_sum = wrap_int64(weight_sum + weight)
    return go_idiv_np(node_score, np.full_like(node_score, weight_sum))


def score_batch(cluster: Cluster, args: Args, keep: BoolArray | None = None) -> BatchScores:
    """Scores of every node; normalisation over the rows in ``keep`` (default all)."""
    raw = raw_scores(cluster, args)
    rows = np.ones(len(cluster), dtype=np.bool_) if keep is None else keep
    out = np.zeros(len(cluster), dtype=np.int64)
    out[rows] = normalize_np(raw[rows])
    return BatchScores(out, np.ones(len(cluster), dtype=np.bool_))


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, args, keep)


PLUGIN = Plugin(
    name=NAME,
    short="Alloc",
    order=50,
    parse_args=parse_args,
    score=_score,
    reads="no metrics",
    divides_by="allocatable",
    aliases=("Allocatable",),
)
