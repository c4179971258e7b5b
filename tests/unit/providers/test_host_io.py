"""The host provider's disk and network utilisation: the pure math on two readings of the
kernel's counters (hypothesis for its bounds), and the provider over readings it is given."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource
from loadwatcher.providers.host import io
from loadwatcher.providers.host.provider import HostProvider
from tests.support.fuzzing import examples

GIGABIT = 1e9 / 8  # bytes per second


def counters(disks: dict[str, float], nics: dict[str, float], speed: float = GIGABIT):
    return io.Counters(disks, nics, {name: speed for name in nics})


def test_the_busiest_disk_and_both_directions_of_the_links() -> None:
    before = counters({"sda": 1000.0, "sdb": 0.0}, {"eth0": 0.0, "eth1": 0.0})
    after = counters({"sda": 1250.0, "sdb": 500.0}, {"eth0": GIGABIT, "eth1": 0.0})
    assert io.disk_percent(before, after, 1.0) == 50.0
    # One link moved one second's worth of its speed; two links, both ways: a quarter.
    assert io.network_percent(before, after, 1.0) == 25.0


def test_what_cannot_be_measured_is_none() -> None:
    before = counters({"sda": 1000.0}, {"eth0": 5.0})
    assert io.disk_percent(before, before, 0.0) is None  # no time between
    went_back = counters({"sda": 10.0}, {"eth0": 1.0})  # a device replaced, a wrap
    assert io.disk_percent(before, went_back, 1.0) is None
    assert io.network_percent(before, went_back, 1.0) is None
    no_speed = counters({}, {"eth0": 100.0}, speed=0.0)  # a virtual NIC: no capacity
    assert io.network_percent(before, no_speed, 1.0) is None
    assert io.disk_percent(counters({}, {}), counters({}, {}), 1.0) is None


readings = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.floats(0, 1e12, allow_nan=False), max_size=3
)


@settings(max_examples=examples(300), deadline=None)
@given(readings, readings, readings, readings, st.floats(-5, 1e4, allow_nan=False))
def test_a_utilisation_is_a_percent_or_none(d0, d1, n0, n1, seconds: float) -> None:
    before, after = counters(d0, n0), counters(d1, n1)
    for got in (
        io.disk_percent(before, after, seconds),
        io.network_percent(before, after, seconds),
    ):
        assert got is None or 0.0 <= got <= 100.0


async def test_the_provider_serves_them_from_the_second_poll(monkeypatch) -> None:
    seen = iter(
        [
            counters({"sda": 0.0}, {"eth0": 0.0}),
            counters({"sda": 3000.0}, {"eth0": 15 * GIGABIT}),
        ]
    )
    monkeypatch.setattr(io, "read", lambda: next(seen))
    host = HostProvider("h")
    first = await host.fetch(1000.0, None)
    assert {s.resource for s in first.series} == {Resource.CPU, Resource.MEMORY}
    second = await host.fetch(1015.0, 1000.0)
    got = {s.resource: float(s.values[0]) for s in second.series}
    assert got[Resource.DISK] == pytest.approx(20.0)
    assert got[Resource.NETWORK] == pytest.approx(50.0)


async def test_no_counters_leaves_cpu_and_memory(monkeypatch) -> None:
    def refused() -> io.Counters:
        raise OSError("no /proc/diskstats")

    monkeypatch.setattr(io, "read", refused)
    host = HostProvider("h")
    for now in (1000.0, 1015.0):
        result = await host.fetch(now, None)
        assert {s.resource for s in result.series} == {Resource.CPU, Resource.MEMORY}
