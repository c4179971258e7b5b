"""The plain reference reader of one line-protocol line: the tokenizer of
``loadwatcher.push.line_protocol`` must find what it finds (the service itself reads lines
with that tokenizer, and escaped lines with ``_split_escaped``, as here)."""

from __future__ import annotations

from loadwatcher.push.line_protocol import (
    _FIELD_SECTION,
    _TAG_SECTION,
    LINE,
    Line,
    LineError,
    _split_escaped,
    _stamp,
)


def split_line(line: bytes) -> Line:
    """The parts of one line (no newline, no comment); raises LineError."""
    if b"\\" not in line and b'"' not in line:
        return split_plain(line)
    return _split_escaped(line)


def split_plain(line: bytes) -> Line:
    key, _, rest = line.partition(b" ")
    fields, _, stamp = rest.partition(b" ")
    if not _TAG_SECTION.fullmatch(key) or not _FIELD_SECTION.fullmatch(fields):
        raise LineError(LINE)
    measurement, *tag_parts = key.split(b",")
    tags = [pair(part) for part in tag_parts]
    return Line(measurement, tags, [pair(part) for part in fields.split(b",")], _stamp(stamp))


def pair(part: bytes) -> tuple[bytes, bytes]:
    """``key=value`` split at its first equals sign."""
    key, _, value = part.partition(b"=")
    return key, value
