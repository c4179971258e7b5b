"""Float texts as Go (and so Prometheus) writes them, for the parser tests."""

from __future__ import annotations

import math

import numpy as np


def go_f(x: float) -> str:
    """Go's ``strconv.FormatFloat(x, 'f', -1, 64)`` with Prometheus's words for NaN, ±Inf."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return np.format_float_positional(x, unique=True, trim="-")


def go_e(x: float) -> str:
    """Go's ``strconv.FormatFloat(x, 'e', -1, 64)``: ``1e-07``, ``-1.5e+21``."""
    if not math.isfinite(x):
        return go_f(x)
    return np.format_float_scientific(x, unique=True, trim="-", exp_digits=2)


def prom_format(x: float) -> str:
    """Prometheus's ``jsonutil.MarshalFloat``: Go's ``'f'`` format, but ``'e'`` (``1e-07``,
    ``1.5e+21``) for magnitudes below 1e-6 or from 1e21 on."""
    if math.isfinite(x) and x != 0 and not 1e-6 <= abs(x) < 1e21:
        return go_e(x)
    return go_f(x)
