"""LowRiskOverCommitment (Trimaran): avoid nodes where over-committed limits may bite.

Formula (scheduler-plugins ``pkg/trimaran/lowriskovercommitment``). Pod requests R_p and
limits L_p are summed as in Trimaran, with L_p raised to at least R_p; for the pods already
on the node plus the pod, per resource (CPU millicores, memory bytes, C = *allocatable*)::

    request = min(Σ R, C)      limit = Σ L      (each pod's L raised to its R)
    reqMinusPod = min(Σ R without the pod, C)   limMinusPod = Σ L without the pod

    riskLimit = (limit − C) / (limit − request)              if limit > C, else 0
    riskLoad  = 0 without a metric of the type, else
        μ, σ  = GetMuSigma(avg, std, req = 0)                (fractions of C, in [0, 1])
        σ     = min(σ × sqrt(smoothingWindowSize), sqrt(0.99 × μ(1 − μ)))
        p     = P[X ≤ clip(reqMinusPod / C, 0, 1)], X ~ Beta matched to (μ, σ)
                 (p = 1 if μ = 0 or (σ = 0 and μ ≤ t); p = 0 if σ = 0 and μ > t or no match)
        if limMinusPod < C and reqMinusPod ≤ limMinusPod:
            p = 1                                  if limMinusPod / C = 0
            p = clip(p / P[X ≤ limMinusPod / C])   elif a Beta was fitted and that is > 0
        riskLoad = 1 − p
    risk_r = clip(w_r × riskLimit + (1 − w_r) × riskLoad, 0, 1)    (w_r: riskLimitWeights)

    score = Round((1 − max(risk_cpu, risk_mem)) × 100)

Beta matching (``beta``): α = m(m(1 − m)/v − 1), β = (1 − m)(m(1 − m)/v − 1) for mean
m = μ and variance v = (σ² + μ²) − μ²; P[X ≤ x] is the regularized incomplete beta
function I_x(α, β) (``scipy.special.betainc``; upstream uses gonum, so results may differ
in the last bits). A best-effort pod (no requests or limits at all) and a node without metrics
score 0. Defaults: smoothingWindowSize = 5, riskLimitWeights cpu = memory = 0.5.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, FloatArray
from loadwatcher.client import Metric
from loadwatcher.scoring.cluster import Cluster, resource_data
from loadwatcher.scoring.common import MEGA_FACTOR, BatchScores, arg_float, arg_int, arg_map
from loadwatcher.scoring.gomath import (
    clamp01,
    go_fdiv,
    go_max,
    go_min,
    go_pow,
    score_or_min,
    scores_or_min_np,
)
from loadwatcher.scoring.plugins.beta import (
    compute_probability,
    dist_np,
    distribution_function,
    max_variance,
    probability_np,
)
from loadwatcher.scoring.pods import Pod, Resources
from loadwatcher.scoring.registry import TRIMARAN_DATA_SOURCE_ARGS, Plugin

NAME = "LowRiskOverCommitment"
MAX_VARIANCE_ALLOWANCE = 0.99


@dataclass(frozen=True)
class Args:
    """LowRiskOverCommitmentArgs."""

    smoothing_window_size: int = 5
    risk_limit_weights: tuple[tuple[str, float], ...] = (("cpu", 0.5), ("memory", 0.5))

    def weight(self, resource: str) -> float:
        """The risk-limit weight of ``resource``."""
        return dict(self.risk_limit_weights).get(resource, 0.5)


def parse_args(raw: Mapping[str, Any]) -> Args:
    """``smoothingWindowSize``, ``riskLimitWeights`` {cpu, memory}."""
    weights = dict(Args.risk_limit_weights)
    for name, value in (arg_map(raw, "riskLimitWeights", NAME) or {}).items():
        weights[str(name)] = arg_float({"w": value}, "w", 0.5, f"{NAME} riskLimitWeights.{name}")
    return Args(
        arg_int(raw, "smoothingWindowSize", Args.smoothing_window_size, NAME),
        tuple(weights.items()),
    )


# ------------------------------------------------------------------------------ the math


def best_effort(pod: Pod) -> bool:
    """No requests and no limits at all: every node scores the minimum."""
    req, lim = pod.requests_and_limits
    return req == Resources() and lim == Resources()


@dataclass(frozen=True)
class RequestsAndLimits:
    """One resource of Trimaran ``NodeRequestsAndLimits`` (CPU millicores or bytes)."""

    request: int
    limit: int
    request_minus_pod: int
    limit_minus_pod: int
    capacity: int


def node_requests_and_limits(
    pods_on_node: Sequence[Pod], pod: Pod, alloc_cpu_milli: int, alloc_mem: int
) -> dict[str, RequestsAndLimits]:
    """Trimaran ``GetNodeRequestsAndLimits`` for cpu and memory."""
    out = {}
    req_p, lim_p = pod.requests_and_limits
    for resource, cap in (("cpu", alloc_cpu_milli), ("memory", alloc_mem)):

        def get(r: Resources, res: str = resource) -> int:
            return r.milli_cpu if res == "cpu" else r.memory

        reqs = sum(get(p.requests_and_limits[0]) for p in pods_on_node)
        lims = sum(get(p.requests_and_limits[1]) for p in pods_on_node)
        out[resource] = RequestsAndLimits(
            min(reqs + get(req_p), cap), lims + get(lim_p), min(reqs, cap), lims, cap
        )
    return out


def compute_risk(
    metrics: Sequence[Metric], resource: str, nrl: RequestsAndLimits, args: Args
) -> float:
    """``computeRisk`` for one resource."""
    cap = nrl.capacity
    risk_limit = 0.0
    if nrl.limit > cap:
        risk_limit = go_fdiv(float(nrl.limit - cap), float(nrl.limit - nrl.request))
    risk_load = 0.0
    avg, std, valid = resource_data(metrics, "CPU" if resource == "cpu" else "Memory")
    if valid:
        c = float(cap) if resource == "cpu" else float(cap) * MEGA_FACTOR
        mu, sigma = (
            (0.0, 0.0) if c <= 0 else (clamp01((avg * c / 100) / c), clamp01((std * c / 100) / c))
        )
        sigma *= go_pow(float(args.smoothing_window_size), 0.5)
        sigma = go_min(sigma, math.sqrt(max_variance(mu) * MAX_VARIANCE_ALLOWANCE))
        threshold = go_min(go_max(go_fdiv(float(nrl.request_minus_pod), float(cap)), 0.0), 1.0)
        prob, fitted = compute_probability(mu, sigma, threshold)
        if nrl.limit_minus_pod < cap and nrl.request_minus_pod <= nrl.limit_minus_pod:
            limit_threshold = go_fdiv(float(nrl.limit_minus_pod), float(cap))
            if limit_threshold == 0:
                prob = 1.0
            elif fitted is not None:
                limit_prob = distribution_function(limit_threshold, *fitted)
                if limit_prob > 0:
                    prob = go_min(go_max(prob / limit_prob, 0.0), 1.0)
        risk_load = 1 - prob
    w = args.weight(resource)
    return go_min(go_max(w * risk_limit + (1 - w) * risk_load, 0.0), 1.0)


def score(
    metrics: Sequence[Metric] | None,
    pods_on_node: Sequence[Pod],
    pod: Pod,
    alloc_cpu_milli: int,
    alloc_mem: int,
    args: Args,
) -> tuple[int, bool]:
    """Score of one node: (score, valid)."""
    if best_effort(pod) or not metrics:
        return 0, True
    nrl = node_requests_and_limits(pods_on_node, pod, alloc_cpu_milli, alloc_mem)
    risks = [compute_risk(metrics, r, nrl[r], args) for r in ("cpu", "memory")]
    return score_or_min((1 - go_max(*risks)) * 100)


def _clip01(v: FloatArray) -> FloatArray:
    return np.maximum(np.minimum(v, 1.0), 0.0)


def _risk_np(cluster: Cluster, resource: str, pod_req: int, pod_lim: int, args: Args) -> FloatArray:
    if resource == "cpu":
        cap, reqs, lims, kind = cluster.alloc_cpu, cluster.pods_req_cpu, cluster.pods_lim_cpu, "CPU"
        c = cap.astype(np.float64)
    else:
        cap, reqs, lims = cluster.alloc_mem, cluster.pods_req_mem, cluster.pods_lim_mem
        kind, c = "Memory", cap.astype(np.float64) * MEGA_FACTOR
    request, limit = np.minimum(reqs + pod_req, cap), lims + pod_lim
    req_mp, lim_mp = np.minimum(reqs, cap), lims
    d = cluster.data[kind]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        risk_limit = np.where(
            limit > cap,
            (limit - cap).astype(np.float64) / (limit - request).astype(np.float64),
            0.0,
        )
        safe = np.where(c > 0, c, 1.0)
        mu = np.where(c > 0, _clip01((d.avg * c / 100) / safe), 0.0)
        sigma = np.where(c > 0, _clip01((d.std * c / 100) / safe), 0.0)
        sigma = sigma * go_pow(float(args.smoothing_window_size), 0.5)
        maxvar = np.where((mu > 0) & (mu < 1), mu * (1 - mu), 0.0)
        sigma = np.minimum(sigma, np.sqrt(maxvar * MAX_VARIANCE_ALLOWANCE))
        capf = cap.astype(np.float64)
        threshold = np.minimum(np.maximum(req_mp.astype(np.float64) / capf, 0.0), 1.0)
        prob, alpha, beta, fitted = probability_np(mu, sigma, threshold)
        cond = (lim_mp < cap) & (req_mp <= lim_mp)
        lthr = lim_mp.astype(np.float64) / capf
        # p / P[X <= lthr] clipped to [0, 1] is p itself when p is 0 or 1, whatever the
        # divisor, and P[X <= lthr] is p when lthr is the first threshold (limits equal to
        # requests): evaluate the second incomplete beta only where it is something new.
        same = lthr == threshold
        lprob = dist_np(
            lthr, alpha, beta, cond & fitted & (lthr != 0) & (prob > 0) & (prob < 1) & ~same
        )
        lprob = np.where(same & fitted, prob, lprob)
        divided = np.minimum(np.maximum(prob / np.where(lprob > 0, lprob, 1.0), 0.0), 1.0)
        prob = np.where(
            cond & (lthr == 0),
            1.0,
            np.where(cond & fitted & (lprob > 0) & (prob > 0) & (prob < 1), divided, prob),
        )
        risk_load = np.where(d.valid, 1 - prob, 0.0)
        w = args.weight(resource)
        return np.minimum(np.maximum(w * risk_limit + (1 - w) * risk_load, 0.0), 1.0)


# ------------------------------------------------------------------------------- the glue


def score_batch(cluster: Cluster, pod: Pod, args: Args) -> BatchScores:
    """Score every node of ``cluster`` for ``pod``."""
    if best_effort(pod):
        return BatchScores.zeros(len(cluster))
    req, lim = pod.requests_and_limits
    cpu = _risk_np(cluster, "cpu", req.milli_cpu, lim.milli_cpu, args)
    mem = _risk_np(cluster, "memory", req.memory, lim.memory, args)
    scores, valid = scores_or_min_np((1 - np.maximum(cpu, mem)) * 100)
    has = cluster.has_metrics
    return BatchScores(np.where(has, scores, 0), valid | ~has)


def _score(cluster: Cluster, pod: Pod, args: Args, keep: BoolArray) -> BatchScores:
    return score_batch(cluster, pod, args)


def _fallback(pod: Pod) -> bool:
    # Upstream scores a best-effort pod the minimum everywhere; allocation scores on stale
    # nodes alone would turn that tie into a preference for them.
    return not best_effort(pod)


PLUGIN = Plugin(
    name=NAME,
    inert_args=TRIMARAN_DATA_SOURCE_ARGS,
    short="LROC",
    order=30,
    parse_args=parse_args,
    score=_score,
    reads="AVG and STD, CPU and memory",
    divides_by="allocatable",
    fallback=_fallback,
)
