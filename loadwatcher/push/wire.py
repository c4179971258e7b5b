"""Protocol-buffer wire format read with array operations: many messages at once.

The helpers of the bulk reader (``bulk.py``): a ``Buffer`` that reads a byte, a
little-endian word or a double at any offset of the body; varints at many offsets at
once; byte spans compared with a constant, or numbered by content, without a Python
object per span (only the distinct contents become ``bytes``).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import FloatArray, IntArray

UIntArray = np.ndarray[tuple[int, ...], np.dtype[np.uint64]]

# Reads a little past a span's end (a varint's 10 bytes, a header checked before its length
# is) stay inside the padding.
_PAD: Final = bytes(64)

WIRE_VARINT: Final = 0
WIRE_I64: Final = 1
WIRE_LEN: Final = 2

# _MASKS[n]: the low n bytes of a little-endian word.
_MASKS: Final = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def tag(field: int, wire_type: int) -> int:
    """The one-byte key of ``field`` (1..15) with ``wire_type``."""
    return field << 3 | wire_type


class Buffer:
    """Bytes with views that read a byte, a little-endian word or a double at any offset."""

    def __init__(self, data: bytes) -> None:
        self.data = data + _PAD
        self.u8: np.ndarray[tuple[int], np.dtype[np.uint8]] = np.frombuffer(self.data, np.uint8)
        words = len(self.data) - 7
        self.u64: UIntArray = np.ndarray((words,), "<u8", self.data, 0, (1,))
        self.f64: FloatArray = np.ndarray((words,), "<f8", self.data, 0, (1,))


def short_varints(buf: Buffer, pos: IntArray) -> tuple[IntArray, IntArray]:
    """The varints of one or two bytes starting at ``pos`` (lengths below 16 KiB): values and
    sizes; size 0 where the varint is longer."""
    # Arithmetic on masks rather than np.where: several times faster on these sizes.
    b0 = buf.u8[pos].astype(np.int64)
    b1 = buf.u8[pos + 1].astype(np.int64)
    two = b0 >= 0x80
    value = (b0 & 0x7F) | ((b1 << 7) * two)
    size = (1 + two) * ((b1 < 0x80) | ~two)
    return value, size


def varints(buf: Buffer, pos: IntArray) -> tuple[UIntArray, IntArray]:
    """The varints starting at ``pos``: values (uint64, wrapped as protobuf does) and sizes
    in bytes; size 0 where no varint ends within 10 bytes."""
    n = pos.shape[0]
    value = np.zeros(n, np.uint64)
    size = np.zeros(n, np.int64)
    open_ = np.ones(n, bool)
    for k in range(10):
        rows = np.flatnonzero(open_)
        if rows.size == 0:
            break
        byte = buf.u8[pos[rows] + k].astype(np.uint64)
        value[rows] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
        ended = rows[byte < 0x80]
        size[ended] = k + 1
        open_[ended] = False
    return value, size


def first_per_message(msg: IntArray, n: int) -> IntArray:
    """For each message ``0..n-1``, the index of its first entry in ``msg`` (which is sorted
    by message), or -1 where it has none."""
    out = np.full(n, -1, np.int64)
    if msg.shape[0]:
        firsts = np.flatnonzero(np.concatenate(([True], msg[1:] != msg[:-1])))
        out[msg[firsts]] = firsts
    return out


def _target_words(target: bytes) -> list[tuple[int, int]]:
    """``target`` as (word, mask) pairs, 8 bytes each, the last one masked."""
    out = []
    for k in range(0, len(target), 8):
        chunk = target[k : k + 8]
        out.append((int.from_bytes(chunk, "little"), (1 << (8 * len(chunk))) - 1))
    return out


def equal_spans(buf: Buffer, pos: IntArray, length: IntArray, target: bytes) -> BoolArray:
    """Which spans ``[pos, pos + length)`` hold exactly ``target``."""
    out: BoolArray = length == len(target)
    rows = np.flatnonzero(out)
    for k, (word, mask) in enumerate(_target_words(target)):
        if rows.size == 0:
            break
        got = buf.u64[pos[rows] + 8 * k] & np.uint64(mask)
        rows = rows[got == np.uint64(word)]
    out[:] = False
    out[rows] = True
    return out


def unique_spans(buf: Buffer, pos: IntArray, length: IntArray) -> tuple[IntArray, list[bytes]]:
    """Codes of the spans' contents and the distinct contents: span ``i`` holds
    ``values[codes[i]]``. Only the distinct contents become Python objects."""
    n = pos.shape[0]
    if n == 0:
        return np.empty(0, np.int64), []
    longest = int(length.max())
    words = max(1, -(-longest // 8))
    if words > 32:  # rare long values: hash them in Python
        index: dict[bytes, int] = {}
        values: list[bytes] = []
        codes = np.empty(n, np.int64)
        data = buf.data
        for i, (p, ln) in enumerate(zip(pos.tolist(), length.tolist(), strict=True)):
            span = data[p : p + ln]
            code = index.get(span)
            if code is None:
                code = index[span] = len(values)
                values.append(span)
            codes[i] = code
        return codes, values
    rows = np.empty((n, words + 1), np.uint64)
    rows[:, 0] = length
    last = buf.u64.shape[0] - 1
    for k in range(words):
        valid = np.clip(length - 8 * k, 0, 8)
        # Past a short span's end the word is masked to 0; keep the read inside the data.
        rows[:, k + 1] = buf.u64[np.minimum(pos + 8 * k, last)] & _MASKS[valid]
    keys = rows.view(np.dtype((np.void, 8 * (words + 1)))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    data = buf.data
    spans = [
        data[p : p + ln] for p, ln in zip(pos[first].tolist(), length[first].tolist(), strict=True)
    ]
    return inverse.astype(np.int64, copy=False).ravel(), spans
