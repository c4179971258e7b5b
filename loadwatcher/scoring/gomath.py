"""Go arithmetic, reproduced: rounding, integer division, int64 wrap-around, NaN handling.

- ``math.Round`` rounds halves away from zero (Python's ``round`` rounds halves to even).
- ``a / b`` on Go integers truncates toward zero (Python's ``//`` floors).
- int64 arithmetic wraps around on overflow (two's complement).
- ``math.Min``/``math.Max`` and the Go 1.21 ``min``/``max`` builtins return NaN when any
  argument is NaN (Python's ``min``/``max`` depend on argument order).
- Float division by zero gives ±Inf or NaN (Python raises).

Every helper has a scalar form and, where the batch scorers need it, a numpy form that gives
bit-identical results on float64/int64 arrays.
"""

from __future__ import annotations

import math

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray

MIN_NODE_SCORE = 0
MAX_NODE_SCORE = 100
_INT64_MOD = 1 << 64
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def go_round(x: float) -> float:
    """Go ``math.Round``: nearest integer, halves away from zero; NaN/Inf unchanged."""
    if not math.isfinite(x):
        return x
    t = float(math.trunc(x))
    if abs(x - t) >= 0.5:
        t += math.copysign(1.0, x)
    return t


def go_round_np(x: FloatArray) -> FloatArray:
    """Vectorised :func:`go_round`."""
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x - t) >= 0.5, t + np.copysign(1.0, x), t)


def wrap_int64(x: int) -> int:
    """Wrap a Python int to int64 as Go's arithmetic does on overflow."""
    x = (x - _INT64_MIN) % _INT64_MOD + _INT64_MIN
    return x


def go_idiv(a: int, b: int) -> int:
    """Go integer division ``a / b`` (truncates toward zero); ZeroDivisionError like Go's panic."""
    q = abs(a) // abs(b)
    return wrap_int64(q if (a < 0) == (b < 0) else -q)


def go_idiv_np(a: IntArray, b: IntArray) -> IntArray:
    """Vectorised :func:`go_idiv`; the caller guarantees ``b != 0``."""
    q = np.floor_divide(a, b)
    fix = ((a < 0) != (b < 0)) & (q * b != a)
    return np.where(fix, q + 1, q)


def go_fdiv(a: float, b: float) -> float:
    """IEEE float division as Go does it: ``x/0`` is ±Inf, ``0/0`` is NaN."""
    if b != 0.0:
        return a / b
    if a == 0.0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def go_min(*xs: float) -> float:
    """Go ``math.Min`` / builtin ``min`` for floats: NaN if any argument is NaN."""
    if any(math.isnan(x) for x in xs):
        return math.nan
    return min(xs)


def go_max(*xs: float) -> float:
    """Go ``math.Max`` / builtin ``max`` for floats: NaN if any argument is NaN."""
    if any(math.isnan(x) for x in xs):
        return math.nan
    return max(xs)


def clamp01(x: float) -> float:
    """``math.Max(math.Min(x, 1), 0)`` with Go's NaN propagation."""
    return go_max(go_min(x, 1.0), 0.0)


def go_pow(x: float, y: float) -> float:
    """Go ``math.Pow`` for the arguments the plugins use (IEEE special cases, no exceptions).

    Finite results come from the C library's ``pow``, which may differ from Go's own
    implementation in the last bit for exponents other than 0.5, 1, 2 and ±Inf.
    """
    try:
        return math.pow(x, y)
    except ZeroDivisionError:  # pow(±0, negative)
        return math.inf
    except (OverflowError, ValueError):
        return math.inf if x > 0 else math.nan


def to_int64(x: float) -> int:
    """Go ``int64(x)`` for a finite float: truncation toward zero."""
    return int(x)


def score_or_min(x: float) -> tuple[int, bool]:
    """``int64(math.Round(x))`` for a score; (MinNodeScore, False) when x is not finite.

    Go converts NaN/Inf to int64 with an implementation-defined result (MinInt64 on amd64),
    which the framework then rejects as an out-of-range score, failing the scheduling cycle.
    Here the node gets the minimum score instead and the caller flags it as invalid.
    """
    if not math.isfinite(x):
        return MIN_NODE_SCORE, False
    return to_int64(go_round(x)), True


def scores_or_min_np(x: FloatArray) -> tuple[IntArray, BoolArray]:
    """Vectorised :func:`score_or_min`: (scores, valid mask)."""
    valid = np.isfinite(x)
    rounded = go_round_np(np.where(valid, x, 0.0))
    return rounded.astype(np.int64), valid
