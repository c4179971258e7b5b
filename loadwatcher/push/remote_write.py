"""Prometheus remote write 1.0: a request body to the series a mapping asks for, in columns.

A body is a snappy-compressed (block format) ``WriteRequest`` (``remote_write.proto``).
``decode_write_request`` checks the snappy header's declared length against the cap
*before* decompressing, and lets protobuf parse the top level (each series stays bytes).
``select`` then reads only the series whose metric name is wanted, the cheapest way that
is exact for each:

1. every series' metric name from its first label, where that label is ``__name__``
   (senders sort labels by name, so it is, unless a label name starts with a capital);
   other metrics are dropped here, unread;
2. a series whose bytes before its one sample are those of a series read before
   (``SeriesIndex``: a sender repeats the same label sets push after push) takes that
   series' labels; only its sample is read;
3. the others are read in bulk (``bulk.py``), every series at once, and remembered;
4. protobuf's own parser reads what the bulk reader leaves (unusual encodings, malformed
   series; a malformed one refuses the request, as protobuf would).

Semantics follow the specification: a label with an empty value is no label; if a name
occurs twice in a series (senders must not do that), the first occurrence counts;
timestamps are int64 milliseconds. Label values that are used must be UTF-8; others are
not read at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import cramjam
import numpy as np
from google.protobuf.message import DecodeError

from loadwatcher.model import FloatArray, IntArray
from loadwatcher.push import bulk, wire
from loadwatcher.push import remote_write_pb2 as pb
from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.series_index import SeriesIndex
from loadwatcher.words import plural

NAME_LABEL = "__name__"

_SERIES = wire.tag(1, wire.WIRE_LEN)  # WriteRequest.timeseries, TimeSeries.labels, Label.name
_LABEL_VALUE = wire.tag(2, wire.WIRE_LEN)  # Label.value
_NAME_WORD = int.from_bytes(NAME_LABEL.encode(), "little")


@dataclass(frozen=True)
class WriteRequestBytes:
    """A parsed request whose series are still bytes: series ``i`` is the TimeSeries message
    at ``buf.data[start[i]:end[i]]``."""

    buf: wire.Buffer
    start: IntArray
    end: IntArray

    def __len__(self) -> int:
        return int(self.start.shape[0])


@dataclass(frozen=True)
class Selection:
    """The series of a request whose metric is wanted, in request order.

    Series ``i`` is metric ``metric[i]`` (an index into the wanted metrics) and owns
    ``lengths[i]`` consecutive samples of ``ts_ms`` (int64 milliseconds) and ``values``.
    Column ``j`` of ``codes`` is wanted label ``j``: series ``i`` has it with the value
    ``label_values[j][codes[i, j]]``, or not at all where the code is -1. ``series`` counts
    every series of the request.
    """

    series: int
    metric: IntArray
    codes: IntArray
    label_values: list[list[str]]
    lengths: IntArray
    ts_ms: IntArray
    values: FloatArray

    def __len__(self) -> int:
        return int(self.metric.shape[0])


def decompress(body: bytes, max_decoded_bytes: int) -> bytes:
    """The snappy block-format ``body`` decompressed; refused when its header declares more
    than ``max_decoded_bytes`` (checked before anything is decompressed)."""
    try:
        declared = cramjam.snappy.decompress_raw_len(body)
        if declared > max_decoded_bytes:
            raise PushError(
                PushErrorKind.TOO_LARGE,
                f"the body decompresses to {plural(declared, 'byte')}, "
                f"more than the {plural(max_decoded_bytes, 'byte')} allowed",
            )
        return bytes(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as exc:
        raise PushError(
            PushErrorKind.NOT_SNAPPY, f"expected a snappy-compressed (block format) body: {exc}"
        ) from None


def parse_write_request(data: bytes) -> WriteRequestBytes:
    """An uncompressed ``WriteRequest``, its series as byte spans; PushError if its top level
    is not one."""
    try:
        series = pb.WriteRequestSeries.FromString(data).timeseries
    except DecodeError as exc:
        raise PushError(
            PushErrorKind.NOT_PROTOBUF, f"expected a remote-write WriteRequest (protobuf): {exc}"
        ) from None
    lengths = np.fromiter(map(len, series), np.int64, len(series))
    start = _spans_in_place(data, lengths)
    if start is None:  # other fields between the series, or padded lengths: copy them out
        data = b"".join(series)
        start = np.cumsum(lengths) - lengths
    return WriteRequestBytes(wire.Buffer(data), start, start + lengths)


def decode_write_request(body: bytes, max_decoded_bytes: int) -> WriteRequestBytes:
    """A remote-write request body (snappy, then protobuf) as byte spans of its series.

    Raises PushError (kind ``not_snappy``, ``too_large`` or ``not_protobuf``).
    """
    return parse_write_request(decompress(body, max_decoded_bytes))


def _spans_in_place(data: bytes, lengths: IntArray) -> IntArray | None:
    """Where each series starts in ``data`` when the request is nothing but its series, each
    behind a one-byte key and a shortest-form length (as every sender writes it). Protobuf
    parsed ``data`` as these series plus whatever else, so equal sizes mean nothing else."""
    size = np.ones_like(lengths)
    for bound in (1 << 7, 1 << 14, 1 << 21, 1 << 28, 1 << 35):
        size += lengths >= bound
    step = 1 + size + lengths
    if int(step.sum()) != len(data):
        return None
    start: IntArray = np.cumsum(step) - lengths
    return start


@dataclass(frozen=True)
class _ReadPart:
    """Some selected series, read one way: request rows (ascending) and their columns."""

    rows: IntArray
    metric: IntArray
    codes: IntArray
    lengths: IntArray
    ts_ms: IntArray
    values: FloatArray


def select(req: WriteRequestBytes, index: SeriesIndex) -> Selection:
    """The series of ``req`` whose ``__name__`` is one of ``index.metrics``, with the values
    of ``index.labels`` and their samples. Raises PushError when a series it must read is
    malformed."""
    if index.full():
        index.clear()
    guess = _metric_from_first_label(req, index.wanted)
    pending = np.flatnonzero(guess != -1)  # -1: not wanted; -2: could not tell
    known, pending = _read_known(req, pending, index)
    parts = [known]
    if pending.size:
        read, unread = _read_bulk(req, pending, index)
        parts.append(read)
        if unread.size:
            parts.append(_read_with_protobuf(req, unread, index))
    return _merge(len(req), parts, index.label_values)


def _metric_from_first_label(req: WriteRequestBytes, wanted: list[bytes]) -> IntArray:
    """Per series: the index of its metric in ``wanted``, -1 for another metric, or -2 where
    the first label is not a plain ``__name__`` label."""
    buf, start, end = req.buf, req.start, req.end
    u8 = buf.u8
    guess = np.full(len(req), -2, np.int64)
    rows = np.flatnonzero((u8[start] == _SERIES) & (start < end))
    if rows.size == 0:
        return guess
    s = start.take(rows)
    length, size = wire.short_varints(buf, s + 1)
    label = s + 1 + size
    # Label{name: key, length 8, "__name__"; value: key, length, bytes (left out if empty)}
    ok = (size > 0) & (label + length <= end.take(rows))
    ok &= (u8[label] == _SERIES) & (u8[label + 1] == len(NAME_LABEL))
    ok &= buf.u64[label + 2] == np.uint64(_NAME_WORD)
    empty = length == 10
    value_len, vsize = wire.short_varints(buf, label + 11)
    value_pos = label + 11 + vsize
    ok &= empty | (
        (u8[label + 10] == _LABEL_VALUE) & (vsize > 0) & (11 + vsize + value_len == length)
    )
    readable = np.flatnonzero(ok)
    value_pos, value_len = value_pos.take(readable), (value_len * ~empty).take(readable)
    metric = np.full(readable.size, -1, np.int64)
    for i, name in enumerate(wanted):
        hit = wire.equal_spans(buf, value_pos, value_len, name)
        metric[hit & (metric == -1)] = i
    guess[rows.take(readable)] = metric
    return guess


def _read_known(
    req: WriteRequestBytes, pending: IntArray, index: SeriesIndex
) -> tuple[_ReadPart, IntArray]:
    """The series of ``pending`` whose labels ``index`` holds, and the rows left."""
    start, end = req.start.take(pending), req.end.take(pending)
    found = np.full(pending.size, -1, np.int64)
    ts = np.zeros(pending.size, np.int64)
    values = np.zeros(pending.size, np.float64)
    if len(index):
        for tail in bulk.read_tails(req.buf, start, end):
            rows = np.flatnonzero(tail.ok & (found < 0))
            ids = index.lookup(req.buf.data, start.take(rows), tail.split.take(rows))
            known = ids >= 0
            rows = rows[known]
            found[rows] = ids[known]
            ts[rows] = tail.ts_ms.take(rows)
            values[rows] = tail.values.take(rows)
    hit = np.flatnonzero(found >= 0)
    part = _ReadPart(
        pending.take(hit),
        *index.attributes(found.take(hit)),
        np.ones(hit.size, np.int64),
        ts.take(hit),
        values.take(hit),
    )
    return part, pending[found < 0]


def _read_bulk(
    req: WriteRequestBytes, pending: IntArray, index: SeriesIndex
) -> tuple[_ReadPart, IntArray]:
    """The series of ``pending`` read in bulk (and remembered in ``index``), and the rows left
    to protobuf."""
    buf = req.buf
    m = pending.shape[0]
    start, end = req.start.take(pending), req.end.take(pending)
    read = bulk.read_series(buf, start, end)

    def first_label(name: bytes) -> tuple[IntArray, IntArray]:
        """Per series: the value span of its first label ``name`` (length 0: none)."""
        rows = np.flatnonzero(wire.equal_spans(buf, read.name_pos, read.name_len, name))
        first = wire.first_per_message(read.label_msg.take(rows), m)
        found = np.flatnonzero(first >= 0)
        label = rows.take(first.take(found))
        pos = np.zeros(m, np.int64)
        length = np.zeros(m, np.int64)
        pos[found] = read.value_pos.take(label)
        length[found] = read.value_len.take(label)
        return pos, length

    unread = read.irregular.copy()
    npos, nlen = first_label(NAME_LABEL.encode())
    metric = np.full(m, -1, np.int64)
    for i, name in enumerate(index.wanted):
        hit = wire.equal_spans(buf, npos, nlen, name)
        metric[hit & (metric == -1)] = i
    metric[unread] = -1
    # Samples of the wanted series only.
    keep = np.flatnonzero(metric.take(read.sample_msg) >= 0)
    sample_msg = read.sample_msg.take(keep)
    ts_ms, values, ok = bulk.read_samples(
        buf, read.sample_pos.take(keep), read.sample_len.take(keep)
    )
    if not ok.all():
        unread[sample_msg[~ok]] = True
        metric[unread] = -1
        keep = np.flatnonzero(~unread.take(sample_msg))
        sample_msg, ts_ms, values = sample_msg.take(keep), ts_ms.take(keep), values.take(keep)
    chosen = np.flatnonzero(metric >= 0)
    codes = np.empty((chosen.size, len(index.labels)), np.int64)
    for j, name in enumerate(index.names):
        pos, length = first_label(name)
        codes[:, j] = _codes(buf, pos.take(chosen), length.take(chosen), index, j)
    lengths = np.bincount(sample_msg, minlength=m).take(chosen).astype(np.int64)
    # Remember the series that are their labels and one sample, under their labels' bytes.
    plain = np.flatnonzero(read.plain.take(chosen))
    if plain.size:
        rows = chosen.take(plain)
        where = np.zeros(m, np.int64)
        where[read.sample_msg] = read.sample_field
        data = buf.data
        spans = zip(start.take(rows).tolist(), where.take(rows).tolist(), strict=True)
        index.remember([data[s:e] for s, e in spans], metric.take(rows), codes[plain])
    part = _ReadPart(pending.take(chosen), metric.take(chosen), codes, lengths, ts_ms, values)
    return part, pending[unread]


def _codes(
    buf: wire.Buffer, pos: IntArray, length: IntArray, index: SeriesIndex, label: int
) -> IntArray:
    """The index's numbers of label values (-1: absent or empty)."""
    codes = np.full(pos.shape[0], -1, np.int64)
    present = np.flatnonzero(length > 0)
    found, spans = wire.unique_spans(buf, pos.take(present), length.take(present))
    numbers = np.fromiter((index.code(label, _text(span)) for span in spans), np.int64, len(spans))
    codes[present] = numbers.take(found)
    return codes


def _text(span: bytes) -> str:
    try:
        return span.decode()
    except UnicodeDecodeError:
        raise PushError(
            PushErrorKind.NOT_PROTOBUF, f"expected UTF-8 label values, got {span[:60]!r}"
        ) from None


def _read_with_protobuf(req: WriteRequestBytes, rows: IntArray, index: SeriesIndex) -> _ReadPart:
    """The series the bulk reader left, through the generated classes."""
    metric_of = {name: i for i, name in reversed(list(enumerate(index.metrics)))}
    chosen: list[int] = []
    metrics: list[int] = []
    codes: list[list[int]] = []
    ts_ms: list[list[int]] = []
    values: list[list[float]] = []
    for row in rows.tolist():
        data = req.buf.data[int(req.start[row]) : int(req.end[row])]
        try:
            series = pb.TimeSeries.FromString(data)
        except DecodeError as exc:
            raise PushError(
                PushErrorKind.NOT_PROTOBUF,
                f"expected a remote-write WriteRequest (protobuf): series {row + 1}: {exc}",
            ) from None
        found: dict[str, str] = {}
        for label in series.labels:
            found.setdefault(label.name, label.value)
        metric = metric_of.get(found.get(NAME_LABEL, ""))
        if metric is None:
            continue
        chosen.append(row)
        metrics.append(metric)
        codes.append([index.code(j, found.get(name)) for j, name in enumerate(index.labels)])
        ts_ms.append([s.timestamp for s in series.samples])
        values.append([s.value for s in series.samples])
    return _ReadPart(
        np.asarray(chosen, np.int64),
        np.asarray(metrics, np.int64),
        np.asarray(codes, np.int64).reshape(len(chosen), len(index.labels)),
        np.fromiter(map(len, ts_ms), np.int64, len(ts_ms)),
        np.asarray([t for ts in ts_ms for t in ts], np.int64),
        np.asarray([v for vs in values for v in vs], np.float64),
    )


def _merge(n: int, parts: list[_ReadPart], label_values: list[list[str]]) -> Selection:
    """The parts' series in request order."""
    parts = [p for p in parts if p.rows.size] or parts[:1]
    if len(parts) == 1:
        p = parts[0]
        return Selection(n, p.metric, p.codes, label_values, p.lengths, p.ts_ms, p.values)
    rows = np.concatenate([p.rows for p in parts])
    order = np.argsort(rows, kind="stable")
    lengths = np.concatenate([p.lengths for p in parts])
    first = np.cumsum(lengths) - lengths
    take = _segments(first.take(order), lengths.take(order))
    return Selection(
        n,
        np.concatenate([p.metric for p in parts]).take(order),
        np.concatenate([p.codes for p in parts]).take(order, axis=0),
        label_values,
        lengths.take(order),
        np.concatenate([p.ts_ms for p in parts]).take(take),
        np.concatenate([p.values for p in parts]).take(take),
    )


def _segments(first: IntArray, lengths: IntArray) -> IntArray:
    """Indices of the segments ``[first[i], first[i] + lengths[i])``, one after the other."""
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(first - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
