"""Node sizes from any backend or writer become quantities the client can read, or nothing:
one rule for Prometheus, InfluxDB/Telegraf and push."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.providers.influxdb.telegraf import capacity_info
from loadwatcher.quantity import capacity_facts, node_quantity, parse_quantity

ANY = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@given(ANY, ANY)
def test_every_size_shown_parses_back_near_what_was_sent(
    cpus: float | None, memory: float | None
) -> None:
    facts = capacity_facts(cpus, memory)
    for resource, value in (("cpu", cpus), ("memory", memory)):
        shown = facts.get(f"capacity.{resource}")
        if shown is None:
            continue
        assert value is not None and math.isfinite(value) and 0 < value < 2**63
        assert len(shown) <= 20  # never a 300-digit string from a hostile 1e300
        parsed = parse_quantity(shown)
        if resource == "cpu":
            assert abs(parsed.milli_value() - value * 1000) <= 0.5 + value * 1e-12
        else:
            assert abs(parsed.value() - value) <= 0.5 + value * 1e-12


def test_telegraf_sizes_follow_the_same_rule() -> None:
    found = {
        "a": {"cpu": 4.0, "memory": 8e9},
        "huge": {"cpu": 1e300, "memory": 1e300},
        "neg": {"cpu": -1.0, "memory": math.nan},
    }
    assert capacity_info(found) == {"a": {"capacity.cpu": "4", "capacity.memory": "8000000000"}}
    assert node_quantity("cpu", 3.92) == "3920m"
