"""The series of the nodes a backend lists as members of the cluster.

A backend that knows the cluster's node list (Prometheus's ``kube_node_info`` from
kube-state-metrics) says which nodes exist: a node that left the list (drained and
deleted, scaled in) leaves ``/watcher`` at once, rather than being served with its last
samples until they age out, and it is no bad node. Its samples stay in the store: a list
that loses a node for a moment (a kube-state-metrics shard restarting) costs nothing once
the node is back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadwatcher.model import Columns, FloatArray, Resource
from loadwatcher.pipeline import merge

__all__ = ["View", "listed_only"]


@dataclass(frozen=True)
class View:
    """The store's series (index = series id), their samples and each one's newest sample
    time, seen through a node list; ``left`` names the nodes left out."""

    keys: list[tuple[str, Resource]]
    columns: Columns
    newest: FloatArray
    left: tuple[str, ...] = ()


def listed_only(
    keys: list[tuple[str, Resource]],
    columns: Columns,
    newest: FloatArray,
    members: frozenset[str] | None,
) -> View:
    """Only the series of ``members``' nodes, renumbered in order (all of them when
    ``members`` is None: the backend gives no list)."""
    if members is None:
        return View(keys, columns, newest)
    keep = np.fromiter((node in members for node, _ in keys), bool, len(keys))
    if bool(keep.all()):
        return View(keys, columns, newest)
    renumber = np.where(keep, np.cumsum(keep) - 1, -1).astype(np.int64)
    flags = keep.tolist()
    left = tuple(sorted({node for (node, _), kept in zip(keys, flags, strict=True) if not kept}))
    return View(
        [k for k, kept in zip(keys, flags, strict=True) if kept],
        merge.renumbered(columns, renumber),
        newest[: len(keys)][keep],
        left,
    )
