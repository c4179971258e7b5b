"""``label_replace`` pays for the label values it writes before it builds them: a
replacement repeating a capture, nested, is an ``execution`` error at once rather than
gigabytes (60 kB of ``$1`` twice over would be 2 GB for one series); and the expansion is
Go's ``regexp.Expand`` as before (hypothesis, against the substitution it replaced)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.promql import functions
from loadwatcher.promql.values import Budget, ErrorType, Limits, QueryError
from tests.support.fuzzing import examples
from tests.unit.promql.test_evaluate import instant


def test_a_capture_repeated_in_nested_replacements_is_refused_before_it_is_built() -> None:
    refs = "$1" * 15_000
    query = (
        f'label_replace(label_replace(cpu, "a", "{refs}", "instance", "(.*)"),'
        f' "b", "{refs}", "a", "(.*)")'
    )
    began = time.monotonic()
    with pytest.raises(QueryError) as err:
        instant(query)
    assert err.value.kind is ErrorType.EXECUTION
    assert "MiB of label values" in err.value.message
    assert time.monotonic() - began < 1.0


def test_label_values_up_to_the_cap_are_written() -> None:
    out = instant(f'label_replace(cpu, "a", "{"x" * 1000}$1", "instance", "(.*)")')
    assert sorted(r["metric"]["a"] for r in out["result"]) == ["x" * 1000 + n for n in "abc"]


def _reference(m: re.Match[str], template: str) -> str:
    """The substitution ``_expand`` replaced (one ``re.sub`` over the template)."""

    def one(t: re.Match[str]) -> str:
        if t.group(1):
            return "$"
        name = t.group(2) or t.group(3)
        try:
            value = m.group(int(name) if name.isdigit() else name)
        except IndexError:
            return ""
        return value or ""

    return functions._TEMPLATE.sub(one, template)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.text(st.sampled_from(list("$ab{}1209_x-")), max_size=30),
    st.text(st.sampled_from(list("abxy")), max_size=8),
)
def test_the_expansion_is_the_substitution_it_replaced(template: str, source: str) -> None:
    m = re.fullmatch(r"(?P<first>a*)(b?)(.*)", source)
    assert m is not None
    budget = Budget(Limits(), time.monotonic)
    assert functions._expand(m, template, budget) == _reference(m, template)
    assert budget.label_bytes == len(_reference(m, template))
