"""The built-in trace: a seeded mix of long-running services, batch jobs and bursts.

- **services** (half the pods): arrive over the first hour (a cluster's steady state), run
  to the end; CPU follows a daily cycle, usage(t) = base × (1 + a·sin(2πt/day + φ) + s·z_t)
  with z_t standard normal, new every step; memory follows the cycle at a fifth of a.
- **batch jobs** (a third): arrive uniformly over the horizon, run a log-normal time
  (median 30 min), use about their requests.
- **bursts** (the rest): arrive in four waves of two minutes, run about ten minutes and
  want more CPU than they request (up to their limit).

Usage as a fraction of the request: log-normal, median 0.35 for services' CPU and 0.6 for
their memory, about 0.9 / 0.7 for batch. The shape follows what the public traces report:
most containers use a small share of what they request, with a long tail (Google's 2019
Borg trace, Tirmazi et al., "Borg: the Next Generation", EuroSys 2020; Alibaba's 2018
trace, Guo et al., "Who limits the resource efficiency of my datacenter", IWQoS 2019). The
parameters are this generator's own choice, not fitted to either trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.simulate.trace import Pods, Trace

__all__ = ["Parametric", "generate"]

DAY_S = 86_400.0
GIB = 1024**3
_CPU_CHOICES = np.array([100, 250, 500, 1000, 2000, 4000], dtype=np.int64)
_CPU_WEIGHTS = np.array([0.15, 0.25, 0.25, 0.2, 0.1, 0.05])


@dataclass(frozen=True, eq=False)
class Parametric:
    """Usage of every source as a function of time (see the module docstring)."""

    seed: int
    cpu_base: FloatArray  # millicores at the cycle's mean
    cpu_amp: FloatArray
    cpu_noise: FloatArray
    phase: FloatArray
    mem_base: FloatArray  # bytes
    mem_amp: FloatArray
    cpu_cap: FloatArray  # the most a source can want (its limit; +inf without one)
    _z: dict[float, FloatArray] = field(default_factory=dict, repr=False)

    def at(self, sources: IntArray, t: float) -> tuple[FloatArray, FloatArray]:
        """(CPU millicores wanted, memory bytes held) of each source at ``t``."""
        z = self._z.get(t)
        if z is None:  # one draw per time for every source: the same for every profile
            self._z.clear()
            z = np.random.default_rng([self.seed, int(t)]).standard_normal(self.cpu_base.size)
            self._z[t] = z
        wave = np.sin(2 * np.pi * t / DAY_S + self.phase[sources])
        level = 1 + self.cpu_amp[sources] * wave + self.cpu_noise[sources] * z[sources]
        cpu = np.minimum(self.cpu_base[sources] * np.maximum(level, 0.0), self.cpu_cap[sources])
        mem = self.mem_base[sources] * (1 + self.mem_amp[sources] * wave)
        return cpu, mem


def generate(n_pods: int, hours: float, seed: int = 1) -> Trace:
    """A trace of ``n_pods`` pods over ``hours``."""
    if n_pods < 1:
        raise ValueError(f"--pods: expected at least 1, got {n_pods}")
    rng = np.random.default_rng(seed)
    horizon = hours * 3600.0
    n_service = n_pods // 2
    n_batch = n_pods // 3
    n_burst = n_pods - n_service - n_batch
    kind = np.concatenate(
        [np.zeros(n_service, np.int64), np.ones(n_batch, np.int64), np.full(n_burst, 2, np.int64)]
    )
    arrival = np.concatenate(
        [
            rng.uniform(0, min(3600.0, horizon / 4), n_service),
            rng.uniform(0, horizon, n_batch),
            (rng.integers(0, 4, n_burst) + 0.5) * horizon / 4 + rng.uniform(0, 120, n_burst),
        ]
    )
    duration = np.concatenate(
        [
            np.full(n_service, np.inf),
            np.clip(rng.lognormal(np.log(1800), 0.8, n_batch), 120, 6 * 3600),
            np.clip(rng.lognormal(np.log(600), 0.4, n_burst), 60, 3600),
        ]
    )
    req_cpu = rng.choice(_CPU_CHOICES, n_pods, p=_CPU_WEIGHTS)
    gib_per_core = rng.choice([1.0, 2.0, 4.0], n_pods, p=[0.3, 0.5, 0.2])
    req_mem = np.maximum(req_cpu / 1000 * gib_per_core * GIB, 128 * 1024**2).astype(np.int64)
    service, batch, burst = kind == 0, kind == 1, kind == 2
    lim_cpu = np.where(service & (rng.random(n_pods) < 0.5), 2 * req_cpu, 0)
    lim_cpu = np.where(batch, req_cpu, np.where(burst, 3 * req_cpu, lim_cpu)).astype(np.int64)
    lim_mem = np.where(batch, req_mem, (req_mem * 1.5).astype(np.int64)).astype(np.int64)
    cpu_frac = np.where(
        service,
        rng.lognormal(np.log(0.35), 0.6, n_pods),
        np.where(batch, rng.lognormal(np.log(0.9), 0.2, n_pods), rng.uniform(1.0, 2.5, n_pods)),
    )
    mem_frac = np.where(
        service,
        rng.lognormal(np.log(0.6), 0.3, n_pods),
        np.where(batch, rng.lognormal(np.log(0.7), 0.2, n_pods), rng.uniform(0.3, 0.6, n_pods)),
    )
    order = np.argsort(arrival, kind="stable")
    usage = Parametric(
        seed,
        (req_cpu * np.clip(cpu_frac, 0.02, 3.0)).astype(np.float64)[order],
        np.where(service, rng.uniform(0.2, 0.6, n_pods), 0.05)[order],
        np.where(service, 0.1, 0.05)[order],
        rng.uniform(-0.5, 0.5, n_pods)[order],  # services peak within an hour or two
        (req_mem * np.clip(mem_frac, 0.05, 1.6)).astype(np.float64)[order],
        np.where(service, rng.uniform(0.04, 0.12, n_pods), 0.0)[order],
        np.where(lim_cpu > 0, lim_cpu, np.inf).astype(np.float64)[order],
    )
    width = len(str(n_pods))
    names = tuple(f"{('svc', 'job', 'burst')[k]}-{i:0{width}d}" for i, k in enumerate(kind[order]))
    pods = Pods(
        names,
        arrival[order],
        duration[order],
        req_cpu[order].astype(np.int64),
        req_mem[order],
        lim_cpu[order],
        lim_mem[order],
        kind[order],
    )
    pods.check()
    return Trace(pods, usage, hours, f"builtin (seed {seed})")
