"""This machine's disk and network utilisation between two readings of the kernel's counters
(``/proc/diskstats``, ``/proc/net/dev`` and the links' speeds, through psutil).

Disk: the busiest disk's share of the interval spent doing I/O (``iostat``'s ``%util``), the
disk a pod waiting on I/O would wait on. Network: bytes in and out over the NICs whose link
speed the kernel knows, over twice that speed (a full-duplex link is full at the speed each
way); a machine whose NICs report no speed (most virtual ones) has no network sample, since
a utilisation without a capacity would be made up. A counter that went backwards (a device
replaced, a wrap) gives nothing for that device this once. The math is pure (``disk_percent``,
``network_percent``); ``read`` is the only I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psutil

# Devices that are no disk of the machine's: loop mounts, RAM disks.
_NOT_DISKS = ("loop", "ram", "zram")


@dataclass(frozen=True)
class Counters:
    """One reading: per disk its busy milliseconds, per NIC its bytes in and out and its
    link speed in bytes per second (0: unknown)."""

    disk_busy_ms: Mapping[str, float]
    net_bytes: Mapping[str, float]
    net_speed: Mapping[str, float]


def read() -> Counters:
    disks = psutil.disk_io_counters(perdisk=True) or {}
    nics = psutil.net_io_counters(pernic=True) or {}
    stats = psutil.net_if_stats()
    return Counters(
        {
            name: float(getattr(c, "busy_time", 0.0))
            for name, c in disks.items()
            if not name.startswith(_NOT_DISKS)
        },
        {name: float(c.bytes_sent + c.bytes_recv) for name, c in nics.items() if name != "lo"},
        {
            name: float(s.speed) * 1e6 / 8 if s.isup and s.speed > 0 else 0.0
            for name, s in stats.items()
        },
    )


def disk_percent(before: Counters, after: Counters, seconds: float) -> float | None:
    """The busiest disk's busy share of ``seconds``, in percent; None without a disk seen
    both times or without time between the readings."""
    if seconds <= 0:
        return None
    busy = [
        after.disk_busy_ms[name] - was
        for name, was in before.disk_busy_ms.items()
        if name in after.disk_busy_ms and after.disk_busy_ms[name] >= was
    ]
    if not busy:
        return None
    return min(100.0, max(busy) / (seconds * 1000.0) * 100.0)


def network_percent(before: Counters, after: Counters, seconds: float) -> float | None:
    """Bytes in and out of the NICs with a known speed over twice their speeds, in percent;
    None without such a NIC seen both times or without time between the readings."""
    if seconds <= 0:
        return None
    moved = capacity = 0.0
    for name, was in before.net_bytes.items():
        speed = after.net_speed.get(name, 0.0)
        now = after.net_bytes.get(name)
        if speed <= 0 or now is None or now < was:
            continue
        moved += now - was
        capacity += 2 * speed * seconds
    if capacity <= 0:
        return None
    return min(100.0, moved / capacity * 100.0)
