"""A workload trace: pods with arrival, duration, requests and limits, and their usage.

Times are seconds from the trace's start; CPU in millicores, memory in bytes; a limit of 0
means none. ``usage.at(sources, t)`` gives the CPU each pod *wants* and the memory it holds
at time ``t``, for the pods whose usage row is ``sources`` (a pod killed and re-queued
keeps its usage row): any trace reader provides one, for any set of pods, in any order of
calls with non-decreasing ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np

from loadwatcher._types import FloatArray, IntArray
from loadwatcher.quantity import Quantity
from loadwatcher.scoring.pods import Container, Pod

__all__ = ["Pods", "Trace", "Usage", "scoring_pod"]

KINDS = ("service", "batch", "burst")


class Usage(Protocol):
    """Per-pod usage over time."""

    def at(self, sources: IntArray, t: float) -> tuple[FloatArray, FloatArray]:
        """(CPU wanted in millicores, memory held in bytes) of each source at ``t``."""
        ...


@dataclass(frozen=True, eq=False)
class Pods:
    """The trace's pods as columns, sorted by arrival. ``duration`` +inf: runs to the end."""

    names: tuple[str, ...]
    arrival: FloatArray
    duration: FloatArray
    req_cpu: IntArray
    req_mem: IntArray
    lim_cpu: IntArray
    lim_mem: IntArray
    kind: IntArray  # index into KINDS

    def __len__(self) -> int:
        return len(self.names)

    def check(self) -> None:
        """ValueError naming the first impossible row."""
        n = len(self.names)
        for col in (self.arrival, self.duration, self.req_cpu, self.req_mem):
            if col.shape != (n,):
                raise ValueError("trace columns differ in length")
        bad = np.flatnonzero(
            ~np.isfinite(self.arrival)
            | (self.arrival < 0)
            | ~(self.duration > 0)
            | (self.req_cpu < 0)
            | (self.req_mem < 0)
            | (self.lim_cpu < 0)
            | (self.lim_mem < 0)
        )
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"pod {self.names[i]!r}: arrival must be >= 0, duration > 0 and "
                "requests and limits >= 0"
            )
        if n > 1 and bool((np.diff(self.arrival) < 0).any()):
            raise ValueError("trace pods must be sorted by arrival")


@dataclass(frozen=True, eq=False)
class Trace:
    """A workload over ``hours``: the pods and their usage."""

    pods: Pods
    usage: Usage
    hours: float
    source: str  # "builtin", "jsonl FILE", "alibaba-v2018 DIR"


def scoring_pod(pods: Pods, i: int) -> Pod:
    """Pod ``i`` as the scoring plugins read it: one container listing the requests and
    limits that are above 0 (a request of 0 is a request not made)."""
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    for out, cpu, mem in (
        (requests, pods.req_cpu[i], pods.req_mem[i]),
        (limits, pods.lim_cpu[i], pods.lim_mem[i]),
    ):
        # The quantities parse_quantity gives for "{cpu}m" and "{mem}", made without parsing.
        if cpu > 0:
            out["cpu"] = Quantity(Fraction(int(cpu), 1000), f"{int(cpu)}m")
        if mem > 0:
            out["memory"] = Quantity(Fraction(int(mem)), str(int(mem)))
    return Pod(pods.names[i], (Container(requests, limits),))
