"""The embedded default provider: this machine's own CPU, memory, disk and network
(``provider.py``, ``io.py``)."""

from __future__ import annotations

from loadwatcher.config import Settings
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider
from loadwatcher.providers.registry import Declaration

METRIC_NAMES = {
    Resource.CPU: "host.cpu.utilisation",
    Resource.MEMORY: "host.memory.utilisation",
    Resource.DISK: "host.disk.utilisation",
    Resource.NETWORK: "host.network.utilisation",
}


def _build(settings: Settings, section: None) -> Provider:
    from loadwatcher.providers.host.provider import HostProvider

    return HostProvider()


PROVIDER = Declaration[None](
    name="host",
    build=_build,
    metric_names=lambda _: METRIC_NAMES,
    needs_address=False,
    rank=0,
)
