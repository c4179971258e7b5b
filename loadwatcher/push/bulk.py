"""Many remote-write TimeSeries messages read at once, in the layout every sender writes.

Step ``k`` of ``read_series`` reads the ``k``-th field of every series still unread, with
array operations over all of them: a request costs a few operations per field position
(about as many as a series has labels), not per label. It expects what protobuf encoders
write: fields as one-byte keys, a Label as its name then its value (an empty value left
out), lengths below 16 KiB, a Sample as its value then its timestamp (either left out
when zero), exemplars and histograms skipped. A series written any other way, or
malformed, is marked ``irregular`` and the caller hands it to protobuf's parser.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import FloatArray, IntArray
from loadwatcher.push import wire

_LABEL = wire.tag(1, wire.WIRE_LEN)  # TimeSeries.labels, and Label.name inside a label
_SAMPLE = wire.tag(2, wire.WIRE_LEN)  # TimeSeries.samples, and Label.value inside a label
_EXEMPLAR = wire.tag(3, wire.WIRE_LEN)
_HISTOGRAM = wire.tag(4, wire.WIRE_LEN)
_VALUE = wire.tag(1, wire.WIRE_I64)  # Sample.value
_TIME = wire.tag(2, wire.WIRE_VARINT)  # Sample.timestamp


@dataclass(frozen=True)
class SeriesFields:
    """Labels and sample spans of many series, each in the order of its series.

    Label ``i`` of series ``label_msg[i]`` has its name at ``[name_pos, +name_len)`` and its
    value at ``[value_pos, +value_len)``; sample message ``j`` of series ``sample_msg[j]`` is
    at ``[sample_pos, +sample_len)``, its field (key and length first) at ``sample_field``.
    ``irregular`` marks the series left to protobuf; their entries are not in the columns.
    ``plain`` marks the series that are their labels and then one sample, nothing else (the
    layout ``read_tails`` recognises).
    """

    irregular: BoolArray
    plain: BoolArray
    label_msg: IntArray
    name_pos: IntArray
    name_len: IntArray
    value_pos: IntArray
    value_len: IntArray
    sample_msg: IntArray
    sample_pos: IntArray
    sample_len: IntArray
    sample_field: IntArray


def read_series(buf: wire.Buffer, start: IntArray, end: IntArray) -> SeriesFields:
    """The labels and sample spans of the TimeSeries messages ``[start[m], end[m])``."""
    n = start.shape[0]
    irregular = np.zeros(n, bool)
    other = np.zeros(n, np.int64)  # fields that are not labels, the last one excepted
    labels: list[tuple[IntArray, ...]] = []
    samples: list[tuple[IntArray, ...]] = []
    u8 = buf.u8
    pos = start.astype(np.int64, copy=True)
    pending = np.flatnonzero(pos < end)
    while pending.size:
        p = pos[pending]
        key = u8[p]
        length, size = wire.short_varints(buf, p + 1)
        payload = p + 1 + size
        after = payload + length
        stop = end[pending]
        is_label = key == _LABEL
        is_sample = key == _SAMPLE
        bad = (size == 0) | (after > stop)
        bad |= ~(is_label | is_sample | (key == _EXEMPLAR) | (key == _HISTOGRAM))
        rows = np.flatnonzero(is_label & ~bad)
        if rows.size:
            found, ok = _labels(buf, payload.take(rows), length.take(rows))
            bad[rows] |= ~ok
            labels.append((pending.take(rows), *found))
        rows = np.flatnonzero(is_sample & ~bad)
        samples.append((pending.take(rows), payload.take(rows), length.take(rows), p.take(rows)))
        if bad.any():
            irregular[pending[bad]] = True
        last = after >= stop
        other[pending] += ~is_label & ~(is_sample & last)
        more = np.flatnonzero(~bad & ~last)
        pending = pending.take(more)
        pos[pending] = after.take(more)
    # Entries of a series found irregular are dropped here, whatever step found them.
    label_cols = _columns(labels, 5, irregular)
    sample_cols = _columns(samples, 4, irregular)
    # No field but labels, and one sample that is the last field.
    plain = ~irregular & (other == 0) & (np.bincount(sample_cols[0], minlength=n) == 1)
    return SeriesFields(irregular, plain, *label_cols, *sample_cols)


def _labels(
    buf: wire.Buffer, pos: IntArray, length: IntArray
) -> tuple[tuple[IntArray, IntArray, IntArray, IntArray], BoolArray]:
    """Name and value spans of Label messages, and which are in the usual layout."""
    u8 = buf.u8
    name_len = u8[pos + 1].astype(np.int64)
    name_pos = pos + 2
    rest = name_pos + name_len
    end = pos + length
    ok = (u8[pos] == _LABEL) & (name_len < 0x80) & (rest <= end)
    has_value = rest < end
    rest = np.minimum(rest, end)  # a name running past the label: read nothing beyond
    value_len, size = wire.short_varints(buf, rest + 1)
    value_pos = rest + 1 + size
    ok &= ~has_value | ((u8[rest] == _SAMPLE) & (size > 0) & (value_pos + value_len == end))
    return (name_pos, name_len, value_pos, value_len * has_value), ok


def _columns(
    parts: list[tuple[IntArray, ...]], width: int, irregular: BoolArray
) -> tuple[IntArray, ...]:
    """The steps' entries (``width`` columns, the series first) in series order (field order
    within a series), without those of irregular series."""
    if not parts:
        return tuple(np.empty(0, np.int64) for _ in range(width))
    columns = [np.concatenate(column) for column in zip(*parts, strict=True)]
    msg = columns[0]
    # Each step is in series order, so a stable sort by series merges sorted runs.
    order = np.argsort(msg, kind="stable")
    if irregular.any():
        order = order.take(np.flatnonzero(~irregular.take(msg.take(order))))
    return tuple(column.take(order) for column in columns)


def read_samples(
    buf: wire.Buffer, pos: IntArray, length: IntArray
) -> tuple[IntArray, FloatArray, BoolArray]:
    """Timestamps (int64 ms), values and which Sample messages are in the usual layout
    (value, then timestamp; a zero one left out)."""
    u8 = buf.u8
    end = pos + length
    has_value = (length >= 9) & (u8[pos] == _VALUE)
    values: FloatArray = np.where(has_value, buf.f64[pos + 1], 0.0)
    rest = pos + np.where(has_value, 9, 0)
    has_time = rest < end
    raw, size = wire.varints(buf, rest + 1)
    ok: BoolArray = ~has_time | ((u8[rest] == _TIME) & (size > 0) & (rest + 1 + size == end))
    ts: IntArray = np.where(has_time, raw.view(np.int64), 0)
    return ts, values, ok


@dataclass(frozen=True)
class Tails:
    """Series that end in one Sample field: where that field starts (``split``: the labels
    are ``[start, split)``) and the sample; ``ok`` marks the series where it fits."""

    ok: BoolArray
    split: IntArray
    ts_ms: IntArray
    values: FloatArray


def read_tails(buf: wire.Buffer, start: IntArray, end: IntArray) -> tuple[Tails, Tails]:
    """Read each series from its end as labels then one sample, in both layouts a sender
    writes: value and timestamp (first result), or the timestamp alone (a value of 0.0,
    left out; second result). The same bytes can fit both by chance; only a match of the
    part before ``split`` with labels read before tells which is right (``SeriesIndex``).
    """
    u8 = buf.u8
    last = end - 1
    room = end - start
    # The timestamp varint: a last byte below 0x80, the bytes before it 0x80 or more.
    size = np.ones(start.shape[0], np.int64)
    going = np.ones(start.shape[0], bool)
    for back in range(1, 10):
        going &= (u8[np.maximum(last - back, 0)] >= 0x80) & (back < room)
        size += going
    key = last - size
    has_time = (room >= 3) & (u8[np.maximum(last, 0)] < 0x80) & (key >= start)
    has_time &= u8[np.maximum(key, 0)] == _TIME
    raw, _ = wire.varints(buf, np.maximum(key + 1, 0))
    ts = raw.view(np.int64)
    full = np.maximum(key - 11, 0)  # 12 L 09 <8 bytes> 10 <varint>
    ok_full = has_time & (key - 11 >= start) & (u8[full] == _SAMPLE)
    ok_full &= (u8[full + 1] == 10 + size) & (u8[full + 2] == _VALUE)
    bare = np.maximum(key - 2, 0)  # 12 L 10 <varint>
    ok_bare = has_time & (key - 2 >= start) & (u8[bare] == _SAMPLE) & (u8[bare + 1] == 1 + size)
    values = buf.f64[np.maximum(key - 8, 0)]
    zeros = np.zeros(start.shape[0], np.float64)
    return Tails(ok_full, full, ts, values), Tails(ok_bare, bare, ts, zeros)
