"""The bytes of ``formats.encode(formats.document(...))``, assembled without the document.

``formats.document`` is the readable definition of the wire formats; this module produces
the same bytes (tested byte for byte) without building a dict per metric object, which is
most of what encoding the document costs (benchmarks/fastpaths.py measures both). Every
metric object is a constant prefix (name, type, operator, rollup: one per resource and
operator) followed by its value, and the body is the concatenation of:

- the values of all rows, in wire order, formatted by one ``orjson.dumps`` of a numpy array
  and split at the commas (so each number is exactly the text orjson writes for a float,
  ``null`` for NaN included);
- before each value, the text that separates it from the previous one (the end of that
  metric object and the prefix), looked up for all rows at once in a table indexed by
  (resource, operator);
- before each node's first value, the text around the node's values instead (the
  envelope, the end of the previous node: its tags and metadata, the node's name). orjson
  writes all of it in one call, from the document with a marker where each node's values
  go.

What is left in Python is a pass over the rows' keys to order them and one small dict per
node; every per-value step is a C-level array or list operation. Needs ``orjson.Fragment``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from loadwatcher.model import Operator, Resource
from loadwatcher.pipeline.rollups import WindowStats
from loadwatcher.pipeline.snapshot import RollupSnapshot
from loadwatcher.wire.formats import Format

_RESOURCES = tuple(Resource)
_RESOURCE_ORDER = {r: i for i, r in enumerate(_RESOURCES)}
_NO_TAGS: dict[str, Any] = {}
_NO_INFO = {"dataCenter": ""}

# Where a node's values go in the text around them. orjson escapes control characters inside strings
# (as \u0000), so a raw NUL in its output can only come from a Fragment we put there.
_MARK = b"\x00"


def _prefixes(
    snap: RollupSnapshot, resource: Resource, window: str, fmt: Format, ops: tuple[Operator, ...]
) -> list[bytes]:
    """``{"name":...,"value":`` for each of ``ops`` of one resource, as orjson writes it."""
    name = snap.metric_names.get(resource, str(resource))
    out = []
    for op in ops:
        fields: dict[str, str]
        if fmt is Format.DEFAULT:
            fields = {"name": name, "type": resource.wire_type, "operator": str(op)}
            fields["rollup"] = window
        else:
            fields = {"name": name, "type": str(resource), "rollup": str(op)}
        out.append(orjson.dumps(fields)[:-1] + b',"value":')
    return out


def _separator_table(prefixes: list[list[bytes]]) -> np.ndarray:
    """Object array [resource, operator]: what precedes a value that is not its node's first
    (the end of the previous metric object, then the prefix)."""
    table = np.empty((len(prefixes), len(prefixes[0])), object)
    for r, row in enumerate(prefixes):
        table[r] = [b"}," + p for p in row]
    return table


def _ordered_rows(
    snap: RollupSnapshot, sids: np.ndarray, only: str | None
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The window's rows in wire order (by node name, then resource order), as
    (row indices, their resource codes, the nodes in order, each node's first position)."""
    keys = snap.keys
    row_keys = [keys[s] for s in sids.tolist()]
    rows = np.arange(len(row_keys))
    if only is not None:
        rows = np.flatnonzero(np.fromiter((k[0] == only for k in row_keys), bool, len(row_keys)))
        row_keys = [row_keys[i] for i in rows.tolist()]
    names = list(map(itemgetter(0), row_keys))
    # dict.fromkeys keeps first-seen order, which is close to sorted in a store filled
    # node by node: sorting it is cheaper than sorting a set.
    nodes = sorted(dict.fromkeys(names))
    rank = dict(zip(nodes, range(len(nodes)), strict=True))
    node_rank = np.fromiter(map(rank.__getitem__, names), np.int64, len(names))
    codes = np.fromiter(
        map(_RESOURCE_ORDER.__getitem__, map(itemgetter(1), row_keys)), np.int64, len(row_keys)
    )
    order = np.argsort(node_rank * len(_RESOURCES) + codes, kind="stable")
    ranked = node_rank[order]
    first = np.flatnonzero(np.diff(ranked, prepend=-1))
    return rows[order], codes[order], nodes, first


def _value_columns(stats: WindowStats) -> np.ndarray:
    """The window's values, one row per series row and one column per operator."""
    return np.column_stack([stats.values[op] for op in stats.operators])


def _numbers(columns: np.ndarray, rows: np.ndarray) -> list[bytes]:
    """Each value of ``rows`` (row by row, operator by operator) as orjson writes a float.

    A JSON number never holds a comma. orjson writes a float64 array element exactly as the
    Python float (checked on random bit patterns), without a list of Python floats.
    """
    flat = np.ascontiguousarray(columns[rows].astype(np.float64, copy=False).ravel())
    numbers = orjson.dumps(flat, option=orjson.OPT_SERIALIZE_NUMPY).split(b",")
    # Strip the array's brackets here rather than copy the whole text to drop them.
    numbers[0] = numbers[0][1:]
    numbers[-1] = numbers[-1][:-1]
    return numbers


def _text_around_nodes(
    snap: RollupSnapshot,
    window: str,
    fmt: Format,
    nodes: list[str],
    openings: list[orjson.Fragment],
) -> list[bytes]:
    """The body's text around the nodes' values, split at each node's values:
    ``len(nodes) + 1`` pieces, the first ending with the first node's first prefix."""
    stats = snap.windows[window]
    tags, info = snap.tags, snap.node_info
    entries = {
        node: {
            "metrics": opening,
            "tags": tags.get(node, _NO_TAGS),
            "metadata": {"dataCenter": "", **extra} if (extra := info.get(node)) else _NO_INFO,
        }
        for node, opening in zip(nodes, openings, strict=True)
    }
    doc = {
        "timestamp": int(snap.taken_at),
        "window": {"duration": window, "start": stats.start, "end": stats.end},
        "source": snap.source,
        "data": {"NodeMetricsMap": entries} if fmt is Format.DEFAULT else entries,
    }
    around = orjson.dumps(doc).split(_MARK)
    assert len(around) == len(nodes) + 1
    return around


def encode_runs(
    snap: RollupSnapshot, window: str, fmt: Format, only: str | None = None
) -> Iterator[list[bytes]] | None:
    """``encode``'s body as the pieces that make it, in order, in runs of
    ``NODES_AT_A_TIME`` nodes made as they are taken: a compressor taking a run at a time
    holds neither the whole text nor all its pieces (37 MB at 20,000 nodes)."""
    stats = snap.windows[window]
    rows, codes, nodes, first = _ordered_rows(snap, stats.sids, only)
    if only is not None and not nodes:
        return None
    if not nodes:
        return iter([[_text_around_nodes(snap, window, fmt, [], [])[0]]])
    prefixes = [_prefixes(snap, r, window, fmt, stats.operators) for r in _RESOURCES]
    # A node's metrics array holds its values (at the mark), the last one's object closed.
    by_first = [orjson.Fragment(b"[" + ps[0] + _MARK + b"}]") for ps in prefixes]
    openings = [by_first[c] for c in codes[first].tolist()]
    around = _text_around_nodes(snap, window, fmt, nodes, openings)
    del openings
    table = _separator_table(prefixes)
    return _node_runs(_value_columns(stats), rows, codes, first, around, table)


NODES_AT_A_TIME = 1024


def _node_runs(
    columns: np.ndarray,
    rows: np.ndarray,
    codes: np.ndarray,
    first: np.ndarray,
    around: list[bytes],
    table: np.ndarray,
) -> Iterator[list[bytes]]:
    """The body's pieces, ``NODES_AT_A_TIME`` nodes at a time: before each value its
    separator (or, before a node's first, the text around the nodes), then the value."""
    n_nodes = first.shape[0]
    ends = np.append(first, rows.shape[0]).tolist()
    for a in range(0, n_nodes, NODES_AT_A_TIME):
        b = min(a + NODES_AT_A_TIME, n_nodes)
        lo, hi = ends[a], ends[b]
        before_value = table[codes[lo:hi]]
        before_value[first[a:b] - lo, 0] = np.fromiter(around[a:b], object, b - a)
        numbers = _numbers(columns, rows[lo:hi])
        parts: list[bytes] = [b""] * (2 * len(numbers))
        parts[0::2] = before_value.ravel().tolist()
        parts[1::2] = numbers
        del before_value, numbers
        if b == n_nodes:
            parts.append(around[-1])
        yield parts


def encode(snap: RollupSnapshot, window: str, fmt: Format, only: str | None = None) -> bytes | None:
    """The body of ``window`` in ``fmt``, all nodes or only ``only`` (None if it has no rows)."""
    runs = encode_runs(snap, window, fmt, only)
    if runs is None:
        return None
    # Not b"".join: it allocates a buffer descriptor per part beside the body. BytesIO
    # grows one buffer in place and hands it over: faster, and half the fresh memory.
    out = io.BytesIO()
    for run in runs:
        out.writelines(run)
    return out.getvalue()
