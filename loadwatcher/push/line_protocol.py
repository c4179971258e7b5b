"""InfluxDB line protocol, as Telegraf's ``outputs.influxdb`` and ``outputs.influxdb_v2`` send it.

One point per line (``\\n`` or ``\\r\\n``)::

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

following the InfluxDB line-protocol reference: fields are floats (``1``, ``-1.5e3``),
integers (``1i``), unsigned integers (``1u``), booleans (``t``, ``true``, ``False``, ...) or
double-quoted strings; a backslash escapes comma and space in a measurement, comma, equals
sign and space in tag keys, tag values and field keys, double quote in a string field, and
a backslash everywhere (``\\\\`` is one backslash; a backslash before anything else is
itself); spaces and tabs before a line are skipped, then blank lines and lines starting
with ``#``; an absent timestamp is the receive time.

``read_points`` reads only what a mapping asks for (``FieldWanted``): a line whose
measurement is not wanted is recognised by its first bytes and skipped unparsed; a wanted
one is checked as a whole (structure) and its wanted field and timestamp are read. A line
that is not valid is counted by reason and skipped, never fatal. Lines without a backslash
or a double quote (Telegraf's ``cpu`` and ``mem``) take a fast path of byte splits; the
others a tokenizer; both accept and refuse the same lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.protocols.line_protocol import PRECISIONS_V1, PRECISIONS_V2

FieldValue = float | int | bool | str

# The timestamps InfluxDB accepts, in nanoseconds.
MIN_NS = -9_223_372_036_854_775_806
MAX_NS = 9_223_372_036_854_775_806

# Reasons a line is refused: counted as "malformed_<reason>".
LINE = "line"  # structure: measurement, tag set, field set
VALUE = "value"  # the wanted field's value is no valid field value
TIMESTAMP = "timestamp"  # not an integer, or out of range at the precision
TEXT = "text"  # a tag value or name that is not UTF-8

_FLOAT = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT = re.compile(rb"[+-]?[0-9]+")
_UINT = re.compile(rb"[0-9]+")
_TRUE = frozenset((b"t", b"T", b"true", b"True", b"TRUE"))
_FALSE = frozenset((b"f", b"F", b"false", b"False", b"FALSE"))
_TIME = re.compile(rb"-?[0-9]+")

# The fast path's whole-section checks (no backslash, no double quote in the line).
_TAG_SECTION = re.compile(rb"[^, ]+(?:,[^,= ]+=[^,= ]+)*")
_FIELD_SECTION = re.compile(rb"[^,= ]+=[^, ]+(?:,[^,= ]+=[^, ]+)*")

# The tokenizer's elements: a backslash takes the next byte with it, or ends the line.
_MEASUREMENT = re.compile(rb"(?:[^, \\]|\\.|\\\Z)+", re.DOTALL)
_KEY = re.compile(rb"(?:[^,= \\]|\\.|\\\Z)+", re.DOTALL)
_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_BARE = re.compile(rb'[^, "]+')
_UNESCAPE_MEASUREMENT = re.compile(rb"\\([, \\])")
_UNESCAPE_KEY = re.compile(rb"\\([,= \\])")
_UNESCAPE_STRING = re.compile(rb'\\(["\\])')
_NOT_NUMBERS = (bool, str)
_SPECIAL = re.compile(rb"[,= \\]")  # may be written escaped in a name


def precision_ns(text: str | None, *, v1: bool) -> int:
    """Nanoseconds per timestamp unit for a write's ``precision`` parameter (absent or empty:
    nanoseconds). v1's ``/write`` also takes ``n``, ``u``, ``m`` and ``h``."""
    if not text:
        return 1
    table = PRECISIONS_V1 if v1 else PRECISIONS_V2
    found = table.get(text)
    if found is None:
        raise PushError(
            PushErrorKind.BAD_PRECISION,
            # The parameter is not repeated: an error echoes nothing the request sent.
            f"precision: expected one of {', '.join(table)}",
        )
    return found


class LineError(ValueError):
    """A line that is not valid line protocol; ``reason`` is one of the reasons above."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Line:
    """One line, its names unescaped; field values still as written."""

    measurement: bytes
    tags: list[tuple[bytes, bytes]]
    fields: list[tuple[bytes, bytes]]
    timestamp: int | None  # in the line's unit


def _stamp(text: bytes) -> int | None:
    if text.isdigit():  # the usual case, in C: ASCII digits only
        return int(text)
    text = text.strip(b" ")
    if not text:
        return None
    if not _TIME.fullmatch(text):
        raise LineError(TIMESTAMP)
    return int(text)


def _split_escaped(line: bytes) -> Line:
    m = _MEASUREMENT.match(line)
    if m is None:
        raise LineError(LINE)
    measurement = _UNESCAPE_MEASUREMENT.sub(rb"\1", m.group())
    pos = m.end()
    size = len(line)
    tags = []
    while pos < size and line[pos] == 0x2C:  # ","
        k = _KEY.match(line, pos + 1)
        if k is None or k.end() >= size or line[k.end()] != 0x3D:  # "="
            raise LineError(LINE)
        v = _KEY.match(line, k.end() + 1)
        if v is None:
            raise LineError(LINE)
        tags.append((_unescape_key(k.group()), _unescape_key(v.group())))
        pos = v.end()
    if pos >= size or line[pos] != 0x20:  # " ": no field set
        raise LineError(LINE)
    fields = []
    while True:
        k = _KEY.match(line, pos + 1)
        if k is None or k.end() >= size or line[k.end()] != 0x3D:
            raise LineError(LINE)
        start = k.end() + 1
        v = (_STRING if start < size and line[start] == 0x22 else _BARE).match(line, start)
        if v is None:
            raise LineError(LINE)
        fields.append((_unescape_key(k.group()), v.group()))
        pos = v.end()
        if pos < size and line[pos] == 0x2C:
            continue
        break
    if pos < size and line[pos] != 0x20:
        raise LineError(LINE)
    return Line(measurement, tags, fields, _stamp(line[pos + 1 :]))


def _unescape_key(raw: bytes) -> bytes:
    return _UNESCAPE_KEY.sub(rb"\1", raw) if b"\\" in raw else raw


def field_value(raw: bytes) -> FieldValue:
    """A field value as written -> float, int (``i`` and ``u``), bool or str; raises
    LineError(VALUE)."""
    if raw[:1] == b'"':
        m = _STRING.fullmatch(raw)
        if m is None:
            raise LineError(VALUE)
        try:
            return _UNESCAPE_STRING.sub(rb"\1", m.group(1)).decode()
        except UnicodeDecodeError:
            raise LineError(TEXT) from None
    last = raw[-1:]
    if last == b"i" and _INT.fullmatch(raw, 0, len(raw) - 1):
        number = int(raw[:-1])
        if -(2**63) <= number < 2**63:
            return number
    elif last == b"u" and _UINT.fullmatch(raw, 0, len(raw) - 1):
        number = int(raw[:-1])
        if number < 2**64:
            return number
    elif _FLOAT.fullmatch(raw):
        return float(raw)
    elif raw in _TRUE:
        return True
    elif raw in _FALSE:
        return False
    raise LineError(VALUE)


@dataclass(frozen=True)
class FieldWanted:
    """A field to read from lines of ``measurement`` that carry all of ``tags``."""

    measurement: str
    field: str
    tags: tuple[tuple[str, str], ...] = ()


@dataclass
class Points:
    """Values of one wanted field: per line, the key tag's value, time (ns), value."""

    keys: list[str] = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class _Want:
    index: int
    field: bytes
    tags: tuple[tuple[bytes, bytes], ...]
    # Tags as ``key=value`` where neither needs escaping: a line without these bytes cannot
    # carry the tags, and is skipped unparsed.
    needles: tuple[bytes, ...]


def read_points(
    body: bytes,
    wanted: Sequence[FieldWanted],
    key_tag: str,
    *,
    unit_ns: int,
    now_ns: int,
) -> tuple[list[Points], dict[str, int]]:
    """Per wanted field, the points of ``body`` that have it, keyed by tag ``key_tag``; and
    counts by reason: ``lines`` (points in the body), ``unmatched`` (no wanted field),
    ``no_key`` (a wanted field without the key tag), ``not_numeric`` (a string or boolean
    where a number is wanted), ``malformed_<reason>``. Timestamps are multiplied by
    ``unit_ns``; a line without one is at ``now_ns``."""
    points = [Points() for _ in wanted]
    counts: dict[str, int] = {"lines": 0, "unmatched": 0}
    wants: dict[bytes, list[_Want]] = {}
    for i, w in enumerate(wanted):
        tags = tuple((k.encode(), v.encode()) for k, v in w.tags)
        needles = tuple(k + b"=" + v for k, v in tags if not _SPECIAL.search(k + v))
        wants.setdefault(w.measurement.encode(), []).append(
            _Want(i, w.field.encode(), tags, needles)
        )
    # Per measurement: what its lines start with, and per wanted field the tag bytes a line
    # must hold (a line without them is skipped unparsed: Telegraf's per-core CPU lines).
    starts = [(_prefixes(m), [w.needles for w in ws]) for m, ws in wants.items()]
    prefixes = tuple(p for each, _ in starts for p in each)
    key = key_tag.encode()
    for raw in body.split(b"\n"):
        line = (raw[:-1] if raw[-1:] == b"\r" else raw).lstrip(b" \t")
        if not line or line[:1] == b"#":
            continue
        counts["lines"] += 1
        if line.startswith(prefixes) and _may_match(line, starts):
            try:
                reason = _read_line(line, wants, key, unit_ns, now_ns, points)
            except LineError as exc:
                reason = f"malformed_{exc.reason}"
        else:
            reason = "unmatched"
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
    return points, counts


def _may_match(
    line: bytes, starts: list[tuple[tuple[bytes, ...], list[tuple[bytes, ...]]]]
) -> bool:
    for prefixes, needle_sets in starts:
        if line.startswith(prefixes):
            for needles in needle_sets:
                for needle in needles:
                    if needle not in line:
                        break
                else:
                    return True
    return False


def _read_line(
    line: bytes,
    wants: dict[bytes, list[_Want]],
    key: bytes,
    unit_ns: int,
    now_ns: int,
    points: list[Points],
) -> str:
    """Add the wanted values of one line to ``points``; "" or the reason it adds none."""
    measurement, tags, fields, stamp = _parse(line)
    found = []
    for w in wants.get(measurement, ()):
        for k, v in w.tags:
            if _get(tags, k) != v:
                break
        else:
            raw = _get(fields, w.field)
            if raw is not None:
                found.append((w.index, raw))
    if not found:
        return "unmatched"
    node_raw = _get(tags, key)
    if node_raw is None:
        return "no_key"
    try:
        node = node_raw.decode()
    except UnicodeDecodeError:
        raise LineError(TEXT) from None
    ts = now_ns if stamp is None else stamp * unit_ns
    if not MIN_NS <= ts <= MAX_NS:
        raise LineError(TIMESTAMP)
    values = [(index, field_value(raw)) for index, raw in found]
    reason = ""
    for index, value in values:
        if isinstance(value, _NOT_NUMBERS):
            reason = "not_numeric"
            continue
        p = points[index]
        p.keys.append(node)
        p.ts_ns.append(ts)
        p.values.append(float(value))
    return reason


# A line's tags or fields: a dict when the line has escapes or strings, else the section as
# written, searched by ``field_in`` (cheaper than splitting it for the one or two asked for).
_Section = bytes | dict[bytes, bytes]


def _parse(line: bytes) -> tuple[bytes, _Section, _Section, int | None]:
    """Measurement, tags, fields and timestamp; raises LineError."""
    if b"\\" in line or b'"' in line:
        parsed = _split_escaped(line)
        return parsed.measurement, dict(parsed.tags), dict(parsed.fields), parsed.timestamp
    # Without escapes or strings, commas and equals signs split the sections exactly: check
    # the line's shape, then read only the tags and fields asked for.
    head, _, rest = line.partition(b" ")
    section, _, stamp = rest.partition(b" ")
    if not _TAG_SECTION.fullmatch(head) or not _FIELD_SECTION.fullmatch(section):
        raise LineError(LINE)
    measurement, _, tags = head.partition(b",")
    return measurement, tags, section, _stamp(stamp)


def _get(section: _Section, name: bytes) -> bytes | None:
    """A tag's or field's value as written; of one written twice, the last (InfluxDB keeps
    the last field, and so the last tag)."""
    if isinstance(section, dict):
        return section.get(name)
    return field_in(section, name)


def field_in(section: bytes, name: bytes) -> bytes | None:
    """The value of the last ``name=`` of a tag or field section (``a=1,b=2``) without
    escapes or strings."""
    named = name + b"="
    at = section.rfind(b"," + named)
    if at >= 0:
        start = at + len(named) + 1
    elif section.startswith(named):
        start = len(named)
    else:
        return None
    end = section.find(b",", start)
    return section[start:] if end < 0 else section[start:end]


def _prefixes(measurement: bytes) -> tuple[bytes, ...]:
    """What a line of ``measurement`` starts with: the name and a comma or a space; a name
    with characters that may be written escaped or not, only its part before them."""
    plain = _SPECIAL.split(measurement, maxsplit=1)[0]
    if plain != measurement:
        return (plain,)
    return (measurement + b",", measurement + b" ")
