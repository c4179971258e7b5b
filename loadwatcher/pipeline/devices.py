"""A node's devices as two of its resources: a GPU metric with one series per device (an MTS
per GPU in SignalFx, a Telegraf ``nvidia_smi`` point per GPU index) becomes per node the mean
over the devices with a point at each time (``GPU``) and the busiest of them (``GPU_MAX``).
Pure; the Prometheus and Datadog providers have their backends aggregate instead, and the
line-protocol receiver uses it as the InfluxDB provider does."""

from __future__ import annotations

import numpy as np

from loadwatcher.model import Resource, Series


def devices(series: list[Series]) -> list[Series]:
    """Per node of ``series`` (any number each, any order, times may repeat within one), the
    mean and the maximum over the values at each time."""
    by_node: dict[str, list[Series]] = {}
    for one in series:
        by_node.setdefault(one.node, []).append(one)
    found = []
    for node, parts in by_node.items():
        ts = np.concatenate([p.ts for p in parts])
        values = np.concatenate([p.values for p in parts])
        times, at = np.unique(ts, return_inverse=True)
        total = np.zeros(times.shape[0])
        count = np.zeros(times.shape[0])
        most = np.full(times.shape[0], -np.inf)
        np.add.at(total, at, values)
        np.add.at(count, at, 1.0)
        np.maximum.at(most, at, values)
        found.append(Series(node, Resource.GPU, times, total / count))
        found.append(Series(node, Resource.GPU_MAX, times, most))
    return found
