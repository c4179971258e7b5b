"""The simulated cluster: nodes with capacity, allocatable and the system's own usage.

CPU is in millicores and memory in bytes throughout the simulation. ``overhead`` is what the
node uses outside the pods (kubelet, runtime, daemons): node usage = Σ pod usage + overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadwatcher._types import IntArray
from loadwatcher.quantity import parse_quantity
from loadwatcher.scoring.nodes import NodeInput

__all__ = ["ClusterSpec", "uniform"]


@dataclass(frozen=True, eq=False)
class ClusterSpec:
    """Row i of every array is node ``names[i]``."""

    names: tuple[str, ...]
    cap_cpu: IntArray
    cap_mem: IntArray
    alloc_cpu: IntArray
    alloc_mem: IntArray
    overhead_cpu: IntArray
    overhead_mem: IntArray

    def __len__(self) -> int:
        return len(self.names)

    def node_inputs(self) -> list[NodeInput]:
        """The nodes as ``score`` reads them from a ``--nodes`` file (no pods, no metrics)."""
        out = []
        for i, name in enumerate(self.names):
            cap = {
                "cpu": parse_quantity(f"{int(self.cap_cpu[i])}m"),
                "memory": parse_quantity(str(int(self.cap_mem[i]))),
            }
            alloc = {
                "cpu": parse_quantity(f"{int(self.alloc_cpu[i])}m"),
                "memory": parse_quantity(str(int(self.alloc_mem[i]))),
            }
            out.append(NodeInput(name, cap, alloc))
        return out


def _units(text: str, milli: bool) -> int:
    q = parse_quantity(text)
    return q.milli_value() if milli else q.value()


def uniform(
    n: int,
    cpu: str = "16",
    memory: str = "64Gi",
    reserved_cpu: str = "500m",
    reserved_memory: str = "2Gi",
    overhead_cpu: str = "250m",
    overhead_memory: str = "1Gi",
) -> ClusterSpec:
    """``n`` nodes of one shape; allocatable = capacity − reserved."""
    if n < 1:
        raise ValueError(f"--nodes: expected at least 1 node, got {n}")
    if n > 100_000:
        raise ValueError(f"--nodes: at most 100000 nodes are simulated, got {n}")
    cap_c, cap_m = _units(cpu, True), _units(memory, False)
    res_c, res_m = _units(reserved_cpu, True), _units(reserved_memory, False)
    if res_c >= cap_c or res_m >= cap_m:
        raise ValueError("the reserved resources must be smaller than the node's capacity")

    def full(v: int) -> IntArray:
        return np.full(n, v, dtype=np.int64)

    width = len(str(n))
    return ClusterSpec(
        tuple(f"node-{i:0{width}d}" for i in range(n)),
        full(cap_c),
        full(cap_m),
        full(cap_c - res_c),
        full(cap_m - res_m),
        full(_units(overhead_cpu, True)),
        full(_units(overhead_memory, False)),
    )
