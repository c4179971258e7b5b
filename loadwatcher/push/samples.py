"""What every push protocol's mapping hands on: samples of (node, resource) in percent,
one ``SeriesBatch`` per request, with counts by reason (``Decoded``).

A protocol's mapping turns its points into ``Part``s (one per kind of sample) and ``to_batch``
merges them: one entry per (node, resource), ascending in time, one value per time (the
last pushed wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from loadwatcher.model import FloatArray, IntArray, Resource, SeriesBatch, servable_name

# A part's resource is its index here; a node's keys are one per resource, in this order.
RESOURCES = tuple(Resource)
_WIDTH = len(RESOURCES)


@dataclass(frozen=True)
class Decoded:
    """One push mapped: samples, counts by reason (series, samples, lines, unmatched_...,
    stale_marker, ha_non_elected, no_node, malformed_..., accepted), the nodes seen and the
    sizes the push told (``{node: {"capacity.cpu": ..., "capacity.memory": ...}}``)."""

    batch: SeriesBatch
    counts: dict[str, int]
    nodes: frozenset[str]
    node_info: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Part:
    """Samples of one kind: node ``names[node[i]]``, resource index, time (s), percent."""

    names: list[str]
    node: IntArray
    resource: IntArray
    ts: FloatArray
    values: FloatArray


def count(counts: dict[str, int], reason: str, n: int) -> None:
    if n:
        counts[reason] = counts.get(reason, 0) + n


def ms_to_seconds(ms: IntArray) -> FloatArray:
    """Integer milliseconds -> float seconds, whole seconds exact."""
    whole = ms // 1000
    seconds: FloatArray = whole.astype(np.float64) + (ms - whole * 1000).astype(np.float64) / 1e3
    return seconds


def ns_to_seconds(ns: IntArray) -> FloatArray:
    """Integer nanoseconds -> float seconds, whole seconds exact."""
    whole = ns // 1_000_000_000
    frac = (ns - whole * 1_000_000_000).astype(np.float64) / 1e9
    seconds: FloatArray = whole.astype(np.float64) + frac
    return seconds


def to_batch(
    parts: Sequence[Part],
    keys_of: list[tuple[str, Resource]] | None = None,
    names_of_keys: list[str] | None = None,
) -> SeriesBatch:
    """One entry per (node, resource), ascending in time, the last value pushed for a time.

    ``keys_of``: the keys ``[(name, CPU), (name, MEMORY), ...]`` (every resource of
    ``RESOURCES`` in turn) of the list of names
    ``names_of_keys``, made once rather than per push; used when every part names its
    nodes from that very list.
    """
    parts = [p for p in parts if p.node.shape[0]]
    if not parts:
        return SeriesBatch.of([])
    shared = all(p.names is parts[0].names for p in parts)
    if not (shared and names_of_keys is not None and parts[0].names is names_of_keys):
        keys_of = None
    if shared:
        nodes = parts[0].names
        key = np.concatenate([p.node * _WIDTH + p.resource for p in parts])
    else:
        keys_of = None
        index: dict[str, int] = {}
        keys = []
        for p in parts:
            codes = np.array([index.setdefault(n, len(index)) for n in p.names], np.int64)
            keys.append(codes.take(p.node) * _WIDTH + p.resource)
        nodes = list(index)
        key = np.concatenate(keys)
    ts = np.concatenate([p.ts for p in parts])
    values = np.concatenate([p.values for p in parts])
    step, later = np.diff(key), np.diff(ts)
    if not ((step > 0) | ((step == 0) & (later >= 0))).all():
        order = np.lexsort((ts, key))  # stable: of equal (key, time), the last pushed is last
        key, ts, values = key.take(order), ts.take(order), values.take(order)
        step, later = np.diff(key), np.diff(ts)
    if not ((step != 0) | (later != 0)).all():
        last = np.concatenate([(step != 0) | (later != 0), [True]])
        key, ts, values = key[last], ts[last], values[last]
    starts = np.concatenate([[0], np.flatnonzero(key[1:] != key[:-1]) + 1])
    lengths = np.diff(np.append(starts, key.shape[0]))
    distinct = key.take(starts).tolist()
    if keys_of is None:
        keys_of = [(name, resource) for name in nodes for resource in RESOURCES]
    keys_out = list(map(keys_of.__getitem__, distinct))
    return SeriesBatch(keys_out, lengths.astype(np.int64), ts, values)


def servable_only(decoded: Decoded) -> Decoded:
    """``decoded`` without the samples of nodes no route could serve (``a b``, ``<img>``:
    no Kubernetes node is named so), counted as ``bad_node_name``."""
    batch = decoded.batch
    keep = [servable_name(node) for node, _ in batch.keys]
    if all(keep):
        return decoded
    kept = np.array(keep, bool)
    samples = np.repeat(kept, batch.lengths)
    dropped = int(batch.lengths[~kept].sum())
    counts = dict(decoded.counts)
    count(counts, "bad_node_name", dropped)
    counts["accepted"] = counts.get("accepted", 0) - dropped
    out = SeriesBatch(
        [key for key, ok in zip(batch.keys, keep, strict=True) if ok],
        batch.lengths[kept],
        batch.ts[samples],
        batch.values[samples],
        batch.held_back,
    )
    nodes = frozenset(n for n in decoded.nodes if servable_name(n))
    info = {n: facts for n, facts in decoded.node_info.items() if servable_name(n)}
    return Decoded(out, counts, nodes, info)
