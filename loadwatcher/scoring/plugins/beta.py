"""The Beta distribution LowRiskOverCommitment matches to a node's load (Trimaran ``beta.go``).

For mean m = μ and variance v = (σ² + μ²) − μ² (0 < v < m(1 − m))::

    α = m × t,  β = (1 − m) × t,  t = max(m(1 − m)/v − 1, SmallestNonzeroFloat64)
    P[X ≤ x] = I_x(α, β)          the regularized incomplete beta function

``scipy.special.betainc`` computes I_x (upstream uses gonum, so results may differ in the
last bits). Each function has a scalar form and a numpy form with the same guards.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from loadwatcher._types import BoolArray, FloatArray
from loadwatcher.scoring.gomath import go_fdiv, go_max

__all__ = [
    "SMALLEST_NONZERO",
    "compute_probability",
    "dist_np",
    "distribution_function",
    "max_variance",
    "probability_np",
]

SMALLEST_NONZERO = sys.float_info.min * sys.float_info.epsilon  # Go SmallestNonzeroFloat64


def max_variance(m1: float) -> float:
    """``GetMaxVariance``: the largest variance a Beta distribution with mean m1 can have."""
    return m1 * (1 - m1) if 0 < m1 < 1 else 0.0


def distribution_function(x: float, alpha: float, beta: float) -> float:
    """P[X ≤ x] for Beta(α, β); 0 where upstream's guards give NaN or out-of-range values."""
    if alpha <= 0 or beta <= 0 or x < 0 or x > 1:
        return 0.0
    from scipy.special import betainc  # imported when needed: it is slow to import

    p = 0.0 if x == 0 else 1.0 if x == 1 else float(betainc(alpha, beta, x))
    return 0.0 if math.isnan(p) or p < 0 or p > 1 else p


def compute_probability(
    mu: float, sigma: float, threshold: float
) -> tuple[float, tuple[float, float] | None]:
    """``ComputeProbability``: (P[X ≤ threshold], fitted (α, β) or None)."""
    if mu == 0 or (sigma == 0 and mu <= threshold):
        return 1.0, None
    if sigma == 0 and mu > threshold:
        return 0.0, None
    m1, m2 = mu, (sigma * sigma) + (mu * mu)
    variance = m2 - m1 * m1
    if m1 < 0 or m1 > 1 or variance < 0 or variance >= m1 * (1 - m1):
        return 0.0, None
    temp = go_max(go_fdiv(m1 * (1 - m1), variance) - 1, SMALLEST_NONZERO)
    alpha, beta = m1 * temp, (1 - m1) * temp
    return distribution_function(threshold, alpha, beta), (alpha, beta)


def dist_np(x: FloatArray, alpha: FloatArray, beta: FloatArray, needed: BoolArray) -> FloatArray:
    """Vectorised :func:`distribution_function`, evaluated only where ``needed``."""
    with np.errstate(invalid="ignore"):
        ok = needed & ~((alpha <= 0) | (beta <= 0) | (x < 0) | (x > 1))
        inner = ok & (x != 0) & (x != 1)
        p = np.where(ok & (x == 1), 1.0, 0.0)
        if inner.any():
            from scipy.special import betainc

            p[inner] = betainc(alpha[inner], beta[inner], x[inner])
        return np.where(ok & np.isfinite(p) & (p >= 0) & (p <= 1), p, 0.0)


def probability_np(
    mu: FloatArray, sigma: FloatArray, threshold: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray]:
    """Vectorised :func:`compute_probability`: (P[X ≤ threshold], α, β, where fitted)."""
    one = (mu == 0) | ((sigma == 0) & (mu <= threshold))
    zero = ~one & (sigma == 0) & (mu > threshold)
    m1, m2 = mu, (sigma * sigma) + (mu * mu)
    variance = m2 - m1 * m1
    bad = (m1 < 0) | (m1 > 1) | (variance < 0) | (variance >= m1 * (1 - m1))
    fitted = ~one & ~zero & ~bad
    temp = np.maximum(m1 * (1 - m1) / np.where(fitted, variance, 1.0) - 1, SMALLEST_NONZERO)
    alpha, beta = m1 * temp, (1 - m1) * temp
    below = dist_np(threshold, alpha, beta, fitted)
    prob = np.where(one, 1.0, np.where(fitted, below, 0.0))
    return prob, alpha, beta, fitted
