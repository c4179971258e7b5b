"""Reading Prometheus's rules API and a rule's selectors (``providers/prometheus/rules``).

The answers are Prometheus's JSON shapes written here; what a real Prometheus answers is
in tests/integration/test_prometheus_rules.py. ``Diagnosis`` is given an ``ask`` that
fails, as a backend without a rules API (or one that went away mid-way) does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.prometheus import rules

pytestmark = pytest.mark.unit

KUBE_PROMETHEUS_MEMORY = """1 - (
  (node_memory_MemAvailable_bytes{job="node-exporter"}
   or (node_memory_Buffers_bytes{job="node-exporter"}
       + node_memory_Slab_bytes{job="node-exporter"}))
  / node_memory_MemTotal_bytes{job="node-exporter"}
)"""


@pytest.mark.parametrize(
    ("expr", "metric"),
    [
        ("instance:node_cpu:ratio", "instance:node_cpu:ratio"),
        (' instance:node_cpu:ratio{job="node"} ', "instance:node_cpu:ratio"),
        ("1 - avg(rate(node_cpu_seconds_total[1m]))", None),
        ("up == 1", None),
    ],
)
def test_only_a_plain_selector_names_a_metric(expr, metric) -> None:
    assert rules.metric_of(expr) == metric


def test_the_selectors_of_the_shipped_cpu_rule() -> None:
    query = """sum(rate(node_cpu_seconds_total{mode!="idle",mode!="iowait"}[5m]))
    WITHOUT (cpu, mode) / ON(instance) GROUP_LEFT()
    count(sum(node_cpu_seconds_total) BY (instance, cpu)) BY (instance)
    + 0 * label_replace(up{job="node"}, "dst", "$1", "src", "(.*)") offset 1m"""
    assert rules.selectors(query) == [
        rules.Selector("node_cpu_seconds_total", ()),
        rules.Selector("up", (("job", "node"),)),
    ]
    assert rules.selectors(query)[0].text() == "node_cpu_seconds_total"


def test_the_selectors_of_kube_prometheus_memory_rule() -> None:
    found = rules.selectors(KUBE_PROMETHEUS_MEMORY)
    assert [s.metric for s in found] == [
        "node_memory_MemAvailable_bytes",
        "node_memory_Buffers_bytes",
        "node_memory_Slab_bytes",
        "node_memory_MemTotal_bytes",
    ]
    assert all(s.matchers == (("job", "node-exporter"),) for s in found)
    assert found[0].text() == 'node_memory_MemAvailable_bytes{job="node-exporter"}'


NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True)
VALUES = st.from_regex(r"[a-zA-Z0-9_.:/ -]{0,12}", fullmatch=True)


@given(
    metrics=st.lists(
        st.tuples(
            NAMES,
            st.lists(st.tuples(NAMES, st.sampled_from(["=", "!=", "=~"]), VALUES), max_size=3),
        ),
        max_size=4,
    )
)
def test_selectors_come_back_as_written_whatever_the_expression(metrics) -> None:
    """Each selector, in order, once, with its equality matchers (other operators left out);
    the labels of ``by (...)`` and the range are not metrics."""
    parts = []
    for metric, matchers in metrics:
        inside = ", ".join(f'{label}{op}"{value}"' for label, op, value in matchers)
        parts.append(f"sum by (instance) (rate({metric}{{{inside}}}[5m]))")
    found = rules.selectors(" / ON(instance) GROUP_LEFT() ".join(parts) or "vector(1)")
    expected: list[rules.Selector] = []
    for metric, matchers in metrics:
        equal = tuple((label, value) for label, op, value in matchers if op == "=")
        equal = tuple((label, value) for label, value in equal if label != "__name__")
        selector = rules.Selector(metric, equal)
        keyword = metric.lower() in rules._KEYWORDS
        if not keyword and selector not in expected:
            expected.append(selector)
    assert found == expected


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [],
        {"data": None},
        {"data": {"groups": "x"}},
        {"data": {"groups": [None, {"rules": [None, 3]}]}},
        {"data": {"groups": [{"name": "g", "rules": [{"type": "alerting", "name": "r"}]}]}},
        {"data": {"groups": [{"name": "g", "rules": [{"type": "recording", "name": "other"}]}]}},
    ],
)
def test_an_answer_without_the_rule_finds_none(answer) -> None:
    assert rules.find_rule(answer, "r") is None


def test_the_rule_is_found_with_its_group_health_and_error() -> None:
    answer = {
        "status": "success",
        "data": {
            "groups": [
                {
                    "name": "node-exporter.rules",
                    "rules": [
                        {
                            "type": "recording",
                            "name": "r",
                            "query": "1 - x",
                            "health": "err",
                            "lastError": "many-to-many matching not allowed",
                        }
                    ],
                }
            ]
        },
    }
    rule = rules.find_rule(answer, "r")
    error = "many-to-many matching not allowed"
    assert rule == rules.Rule("r", "node-exporter.rules", "1 - x", "err", error)
    assert rules.rule_failing(rule).endswith("fails: many-to-many matching not allowed")


def test_label_values_are_listed_and_cut_short() -> None:
    rule = rules.Rule("r", "g", "", "ok", "")
    selector = rules.Selector("m", (("job", "node-exporter"),))
    values = [f"j{i}" for i in range(8)]
    text = rules.selector_empty(rule, selector, "job", values)
    assert 'its selector job="node-exporter" matches nothing: m exists with job="j0"' in text
    assert text.count('job="j') == 5 and "and 3 more" in text
    assert "exists without a job label" in rules.selector_empty(rule, selector, "job", [])


async def test_a_backend_that_cannot_say_is_answered_plainly() -> None:
    async def ask(path: str, params: Mapping[str, str]) -> Any:
        raise ProviderError(ProviderErrorKind.NOT_FOUND, "HTTP 404 from /api/v1/rules")

    why = await rules.Diagnosis(ask).explain(
        "instance:node_cpu:ratio", "instance:node_cpu:ratio", "instance"
    )
    assert not why.rule_loaded
    assert why.text == (
        "the series instance:node_cpu:ratio does not exist (Prometheus did not say whether a "
        "rule of that name is loaded: HTTP 404 from /api/v1/rules)"
    )
