"""Correctly rounded float64 from decimal digits, for a whole column at once.

A decimal ``m · 10^-f`` (``m`` the digits without the point, ``f`` the digits after it)
becomes the float64 nearest to it, ties to even — bit for bit what ``float(text)`` gives —
in a few numpy operations instead of one Python call per number:

* Clinger's fast path: when ``m ≤ 2^53`` and ``f ≤ 22`` both ``m`` and ``10^f`` are exact
  doubles, so the single IEEE division ``m / 10^f`` is the correctly rounded quotient.
* Extended precision (x87 80-bit or IEEE quad ``longdouble``, 64+ significant bits):
  ``m < 2^63`` and ``10^f`` (``f ≤ 27``, 5^27 < 2^64) are exact there, the division is
  rounded once to 64 bits and then again to 53. Rounding twice gives the wrong double
  only when the first result lies exactly halfway between two doubles (any other 64-bit
  result is on the same side of every halfway point as the exact quotient); those rare
  rows are reported as not exact.

Rows that fit neither (17+ digit mantissas where ``longdouble`` is just ``double``,
longer mantissas, more fractional digits) are reported as not exact; the caller parses
them some slower exact way.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from loadwatcher._types import BoolArray
from loadwatcher.model import FloatArray, IntArray

# Clinger: 2^53 is the largest integer range a double holds exactly; 10^22 = 2^22 · 5^22
# with 5^22 < 2^53 is the largest exact power of ten.
_EXACT_MANTISSA = 2**53
_EXACT_FRAC = 22
_POW10 = np.array([10.0**k for k in range(_EXACT_FRAC + 1)])

_WIDE = np.longdouble if np.finfo(np.longdouble).nmant >= 63 else None
_WIDE_FRAC = 27  # 5^27 < 2^64: 10^27 is exact in a 64-bit significand


def _wide_powers() -> npt.NDArray[np.longdouble]:
    # Built by exact multiplications, not from Python ints (which may pass through double).
    powers = np.ones(_WIDE_FRAC + 1, np.longdouble)
    for k in range(1, _WIDE_FRAC + 1):
        powers[k] = powers[k - 1] * np.longdouble(10)
    return powers


_WIDE_POW10 = _wide_powers()


def to_float(mantissa: IntArray, frac_digits: IntArray) -> tuple[FloatArray, BoolArray]:
    """``mantissa / 10**frac_digits`` rounded to nearest float64, and which rows are exact.

    ``mantissa`` must be ≥ 0 (an int64, so below 2^63) and ``frac_digits`` ≥ 0. Rows where
    the second array is False hold an approximation that must not be used.
    """
    out = mantissa.astype(np.float64) / _POW10.take(frac_digits, mode="clip")
    exact = (mantissa <= _EXACT_MANTISSA) & (frac_digits <= _EXACT_FRAC)
    if _WIDE is None:
        return out, exact
    rows = np.flatnonzero(~exact & (frac_digits <= _WIDE_FRAC))
    if rows.size:
        wide = mantissa[rows].astype(np.longdouble) / _WIDE_POW10[frac_digits[rows]]
        near = wide.astype(np.float64)
        ok = ~_halfway(wide, near)
        out[rows] = near
        exact[rows[ok]] = True
    return out, exact


def _halfway(wide: npt.NDArray[np.longdouble], near: FloatArray) -> BoolArray:
    """Rows where ``wide`` (≥ 0) is exactly halfway between ``near`` and a neighbour double."""
    if _X87:
        # The low word is the whole 64-bit significand; rounding to a double drops its low
        # 11 bits, and the result is a tie exactly when they read 100 0000 0000 (every
        # quotient here, 0 or at least 10^-27, is zero or a normal double).
        low = wide.view(np.uint64)[::2]
        tie: BoolArray = (low & 0x7FF) == 0x400
        return tie
    # Portable (IEEE quad): ``wide - near`` is exact, both lying within one double ulp.
    diff = wide - near.astype(np.longdouble)
    up = (np.nextafter(near, np.inf) - near).astype(np.longdouble)
    down = (near - np.nextafter(near, -np.inf)).astype(np.longdouble)
    halfway: BoolArray = ((diff > 0) & (2 * diff == up)) | ((diff < 0) & (-2 * diff == down))
    return halfway


def _is_x87() -> bool:
    """Whether ``longdouble`` is the x87 80-bit format stored in 16 little-endian bytes."""
    if np.finfo(np.longdouble).nmant != 63 or np.dtype(np.longdouble).itemsize != 16:
        return False
    probe = np.array([1.0, 1.5], np.longdouble).view(np.uint64)[::2]
    return bool(probe.tolist() == [2**63, 3 * 2**62])


_X87 = _is_x87()
