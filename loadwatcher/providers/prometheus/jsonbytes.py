"""Prometheus ``/api/v1/query`` matrix answers read from bytes, without per-sample objects.

The ``"values"`` arrays are nearly all of a range-vector answer, and a JSON decoder turns
every sample into three Python objects. Instead ``split_samples``:

1. takes every ``"values":[...]`` out of the text (the array runs to the last ``]]``
   before the next one) and puts the string ``PLACEHOLDER`` in its place, leaving the
   answer without its samples (status, labels), which orjson decodes as usual, so every
   check and error message of the ordinary path applies to it unchanged;
2. checks that what it took is exactly ``[t,"v"],[t,"v"],...`` and parses all the numbers
   at once (``decimals``), bit-identical to what the JSON path gives.

Anything it does not recognise (whitespace, escapes, another key order, a count that does
not add up) makes ``split_samples`` return None and the caller decodes the whole body the
ordinary way: unusual answers are slower, never different.

Why taking the arrays out cannot change the document's meaning. A ``"`` inside a JSON
string is always escaped, so the ``"`` right after ``values`` (preceded by ``s``) ends a
string, and the ``:[`` after it makes that string a key whose value is the array we take:
the key is ``values``, or one ending in ``"values`` when the first ``"`` was escaped (had
that ``"`` closed a string instead, the bare word ``values`` would make the body and what
is left of it alike invalid). The replacement keeps the key and swaps the array for a
string. What is taken is verified to be complete ``[number,"string"]`` pairs, so it ends
exactly where the array does, and what is left is valid JSON exactly when the body is,
with the same structure. ``PLACEHOLDER`` holds 64 random bits drawn at start-up, so no
backend can send it; the caller must also find every placeholder as the ``values`` of a
result item, in order, or fall back (a key ending in ``\\"values`` inside ``metric`` would
otherwise turn an array into a string label).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

import numpy as np
import numpy.typing as npt
import orjson

from loadwatcher._types import BoolArray
from loadwatcher.model import FloatArray, IntArray
from loadwatcher.providers.prometheus import decimals
from loadwatcher.providers.values import prometheus_values

ByteArray = npt.NDArray[np.uint8]

PLACEHOLDER: Final = f"values#{secrets.token_hex(8)}"

_KEY = b'"values":['
_PLACEHOLDER_TEXT = b'"values":"' + PLACEHOLDER.encode() + b'"'
_CONTROL = bytes(range(32)) + b"\\"
_COMMA, _MINUS, _DOT, _QUOTE, _OPEN, _CLOSE = b',-."[]'
_ZERO = ord("0")
_MAX_MANTISSA = 10**18
# Text parsed at once (a thousand series' arrays or so): the parse's index arrays are
# several times it, and smaller groups parse no slower (benchmarks/RESULTS.md).
GROUP_BYTES = 1 << 20


@dataclass(frozen=True)
class Samples:
    """The numbers of every ``values`` array taken out: ``lengths[i]`` samples in array ``i``."""

    lengths: IntArray
    ts: FloatArray
    values: FloatArray


@dataclass(frozen=True)
class SplitAnswer:
    """An answer taken apart: its JSON ``without_samples`` (each ``values`` array replaced
    by ``PLACEHOLDER``, in order) and the arrays' ``samples``."""

    without_samples: bytes
    samples: Samples


def split_samples(body: bytes) -> SplitAnswer | None:
    """The answer without its samples and every array's samples, or None to decode ``body``
    fully. What is left is valid JSON exactly when ``body`` is.

    The pieces are views of ``body``, not copies: only a group's arrays at a time, and what
    is left without them, are copied.
    """
    found = _keys(body)
    if not found:  # no series, or a layout this does not know: nothing to save
        return None
    view = memoryview(body)
    heads: list[memoryview] = []
    rests: list[memoryview] = [view[: found[0] - len(_KEY)]]
    for start, end in zip(found, [*[k - len(_KEY) for k in found[1:]], len(body)], strict=True):
        # An array's samples end at the last "]]" before the next array (a label cannot
        # hold "]]" in a layout that passes the checks below).
        close = body.rfind(b"]]", start, end)
        if close < 0:
            return None
        heads.append(view[start:close])
        rests.append(view[close + 2 : end])
    without_samples = _PLACEHOLDER_TEXT.join(rests)
    del rests
    # Parsed a group of arrays at a time: the parse's index arrays are several times the
    # text they index, so one group's stay small whatever the answer's size.
    groups: list[Samples] = []
    sizes = np.fromiter(map(len, heads), np.int64, len(heads))
    ends = np.searchsorted(
        np.cumsum(sizes), np.arange(1, 1 + sizes.sum() // GROUP_BYTES) * GROUP_BYTES
    )
    for a, b in pairwise([0, *np.unique(ends + 1).tolist(), len(heads)]):
        if a >= b:
            continue
        group = _samples(b"],".join(heads[a:b]), sizes[a:b])
        if group is None:
            return None
        groups.append(group)
    return SplitAnswer(without_samples, _joined(groups))


def _keys(body: bytes) -> list[int]:
    """Where each array's text starts, just after its ``"values":[`` (as ``split`` finds
    them: left to right, not overlapping)."""
    found: list[int] = []
    at = body.find(_KEY)
    while at >= 0:
        found.append(at + len(_KEY))
        at = body.find(_KEY, at + len(_KEY))
    return found


def _joined(groups: list[Samples]) -> Samples:
    if len(groups) == 1:
        return groups[0]
    return Samples(
        np.concatenate([g.lengths for g in groups]),
        np.concatenate([g.ts for g in groups]),
        np.concatenate([g.values for g in groups]),
    )


def _samples(text: bytes, sizes: IntArray) -> Samples | None:
    """Parse ``[t,"v"],[t,"v"],...,[t,"v"`` (arrays joined by ``],``, the last ``]`` left
    out), ``sizes`` the length of each array's part; None if it is not exactly that."""
    a = np.frombuffer(text, np.uint8)
    marks = np.flatnonzero((a == _QUOTE) | (a == _DOT))
    is_dot = a[marks] == _DOT
    at = np.flatnonzero(is_dot)
    dots = marks[at]
    quotes = marks[~is_dot]
    tokens = _tokens(a, quotes)
    if tokens is None:
        return None
    starts, ends = tokens
    n = starts.shape[0]
    digits = text.translate(None, b'[]".')
    if len(text) - len(digits) != n + (n - 1) + dots.shape[0]:
        return None  # '[' or ']' inside a number (n quotes, n - 1 brackets, the dots)
    neg, bad = np.zeros(n, bool), np.zeros(n, bool)
    minus = 0
    if b"-" in text:
        where = np.flatnonzero(a == _MINUS)
        signed = np.searchsorted(quotes, where)  # token k has k quotes before it
        first = where == starts[signed]
        neg[signed[first]] = True
        bad[signed[~first | (ends[signed] == where + 1)]] = True  # "1-2", "-"
        minus = where.shape[0]
    owner = at - np.arange(at.shape[0])  # the quotes before each point
    after = ends[owner] - dots - 1
    frac = np.zeros(n, np.int64)
    frac[owner] = after
    # One point per number, neither first (".5", "-.5") nor last ("5.").
    odd = (after == 0) | (dots == starts[owner] + neg[owner])
    odd[1:] |= owner[1:] == owner[:-1]
    bad[owner[odd]] = True
    d = np.frombuffer(digits, np.uint8)
    if np.count_nonzero(np.subtract(d, 48, dtype=np.uint8) > 9) != n - 1 + minus:
        # Letters, '+', spaces...: NaN, +Inf, exponents or worse.
        other = ((a - 48) > 9) & (a != _MINUS) & (a != _DOT) & (a != _COMMA)
        other &= (a != _QUOTE) & (a != _OPEN) & (a != _CLOSE)
        bad[np.searchsorted(quotes, np.flatnonzero(other))] = True
    # Values with a leading zero ("007", "-01.5"): digits the fast parse reads, but not
    # Prometheus's syntax; parsed one by one below, they become unparsable.
    lead_at = starts[1::2] + neg[1::2]
    after_lead = np.subtract(a.take(lead_at + 1, mode="clip"), 48, dtype=np.uint8)  # "-" last
    bad[1::2] |= (a[lead_at] == _ZERO) & (after_lead <= 9)
    if bad.any():
        digits = _zeroed(digits, starts, ends, owner, bad)
    ints = _integers(digits)
    if ints is None or ints.shape[0] != n:
        return None
    # fromstring saturates at ±(2^63 - 1): from 10^18 on the digits may be lost.
    wide = (ints >= _MAX_MANTISSA) | (ints <= -_MAX_MANTISSA)
    # Timestamps are JSON numbers: no sign and no leading zero on the fast path.
    lead = a[starts[0::2]]
    json_only = np.zeros(n, bool)
    json_only[0::2] = (lead < ord("1")) | (lead > ord("9"))
    out, exact = decimals.to_float(np.abs(ints), frac)
    np.negative(out, out=out, where=neg)
    slow = np.flatnonzero(bad | json_only | wide | ~exact)
    if slow.shape[0] and not _exactly(text, starts, ends, slow, out):
        return None
    bounds = np.searchsorted(quotes, np.cumsum(sizes + 2) - 2)
    lengths = np.diff(bounds, prepend=0) // 2
    return Samples(lengths, out[0::2].copy(), out[1::2].copy())


def _tokens(a: ByteArray, quotes: IntArray) -> tuple[IntArray, IntArray] | None:
    """Where each timestamp and value text starts and ends, if every ``"`` of ``a`` has
    the neighbours of ``[t,"v"],[t,"v"],...,[t,"v"`` (the caller checks that no other
    ``[`` or ``]`` is left, and the number parser counts the commas)."""
    groups = quotes.shape[0] // 2
    if groups == 0 or quotes.shape[0] % 2:
        return None
    opens, closes = quotes[0::2], quotes[1::2]
    inner = closes[:-1]
    if not (
        a[0] == _OPEN
        and closes[-1] + 1 == a.shape[0]
        and np.all(a[opens - 1] == _COMMA)
        and np.all(a[inner + 1] == _CLOSE)
        and np.all(a[inner + 2] == _COMMA)
        and np.all(a[inner + 3] == _OPEN)
    ):
        return None
    starts = np.empty(2 * groups, np.int64)
    ends = np.empty_like(starts)
    starts[0] = 1
    starts[2::2] = inner + 4
    ends[0::2] = opens - 1
    starts[1::2] = opens + 1
    ends[1::2] = closes
    if np.any(ends == starts):
        return None  # an empty number is never valid
    return starts, ends


def _zeroed(
    digits: bytes, starts: IntArray, ends: IntArray, owner: IntArray, rows: BoolArray
) -> bytes:
    """``digits`` with the tokens in ``rows`` overwritten by zeros, so that the number
    parser still reads one integer per token (those rows are parsed one by one later).
    ``owner`` is the token of each point, deleted from ``digits`` like ``[``, ``"``, ``]``."""
    token = np.arange(starts.shape[0])
    points = np.bincount(owner, minlength=token.shape[0])
    # Before token t: 2t + 1 - (t odd) of '[', '"' and ']', and the points of tokens < t.
    removed = 2 * token + 1 - token % 2 + np.cumsum(points) - points
    picked = np.flatnonzero(rows)
    length = (ends - starts - points)[picked]
    at = np.repeat(starts[picked] - removed[picked] - np.cumsum(length) + length, length)
    buf = bytearray(digits)
    np.frombuffer(buf, np.uint8)[at + np.arange(at.shape[0])] = ord("0")
    return bytes(buf)


def _integers(digits: bytes) -> IntArray | None:
    """Each comma-separated token of ``digits`` as an int64, or None if one is not.

    numpy raises for a token it cannot read (older versions warned and stopped early, so
    the caller also checks the count).
    """
    try:
        return np.fromstring(digits, np.int64, sep=",")
    except ValueError:
        return None


def _exactly(
    text: bytes, starts: IntArray, ends: IntArray, rows: IntArray, out: FloatArray
) -> bool:
    """Parse ``rows`` one by one exactly as the JSON path would; False if the JSON path
    must decide (a timestamp that is not a JSON number, a string that is not plain JSON).

    A timestamp is a JSON number (orjson); a value is a JSON string read in Prometheus's
    syntax (``values``), which is the same only without escapes or control characters
    (invalid JSON) and in valid UTF-8. A value out of that syntax is ``UNPARSABLE``.
    """
    times, strings = rows[rows % 2 == 0], rows[rows % 2 == 1]
    try:
        parsed = [orjson.loads(text[s:e]) for s, e in zip(starts[times], ends[times], strict=True)]
        raw = [text[s:e] for s, e in zip(starts[strings], ends[strings], strict=True)]
        if any(len(r.translate(None, _CONTROL)) != len(r) for r in raw):
            return False
        out[times] = np.array(parsed, dtype=np.float64)
        out[strings] = prometheus_values([r.decode() for r in raw])
    except (ValueError, TypeError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return False
    return True
