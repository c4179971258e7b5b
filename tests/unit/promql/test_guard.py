"""``promql.guard``: a query's operators, parentheses and brackets bound the depth of its tree, and
a query over the bound is refused before the parser, whose memory grows with the square of
the depth (3,000 nested ``sum(`` took over a gigabyte)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.promql import evaluate, guard
from loadwatcher.promql.values import ErrorType, QueryError
from tests.support.fuzzing import examples
from tests.unit.promql.test_evaluate import instant

LEAVES = ["cpu", 'cpu{instance=~"(a|b)+", job!="x(y"}', "1.5", "cpu offset 5m", "-2e-3"]
FUNCTIONS = ["abs({})", "sum by (instance) ({})", "max_over_time(({})[5m:])", "({})",
             'label_replace({}, "a", "$1", "instance", "(.*)")', "-{}", "topk(2, {})"]  # fmt: skip
OPERATORS = ["+", "-", "*", "/", "%", "^", "==", "!=", "<=", ">=", "<", ">", "and", "or",
             "unless", "atan2", "> bool", "+ on (instance)",
             "* ignoring (job) group_left"]  # fmt: skip

expressions = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.one_of(
        st.builds(str.format, st.sampled_from(FUNCTIONS), inner),
        st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(OPERATORS), inner),
    ),
    max_leaves=12,
)


def _children(node: Any) -> Iterator[Any]:
    for name in ("expr", "lhs", "rhs", "param", "vector_selector"):
        child = getattr(node, name, None)
        if child is not None and not isinstance(child, str | int | float):
            yield child
    yield from getattr(node, "args", None) or ()


def depth(node: Any) -> int:
    return 1 + max((depth(c) for c in _children(node)), default=0)


@settings(max_examples=examples(400), deadline=None)
@given(expressions)
def test_terms_bound_the_depth_of_any_tree(text: str) -> None:
    try:
        tree = promql_parser.parse(text)
    except BaseException:  # a panic in the Rust parser is not an Exception
        return  # drawn text the grammar refuses: not this property's
    assert depth(tree) <= guard.terms(text) + 1, text


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ('cpu{instance=~"((((", job="+-*/"}', 0),
        ('"((((" + cpu', 1),
        ("`((` + '))(('", 1),
        ("sum(cpu) # (((( and or\n+ 1", 2),
        ("max_over_time(cpu[5m]) + max_over_time((cpu)[5m:1m])", 6),
        ("node:and:cpu + sandbox_ratio", 1),
        ("cpu AND cpu or cpu", 2),
        ('cpu{a="}"} + 1', 1),
    ],
)
def test_strings_matchers_comments_and_names_are_not_terms(text: str, count: int) -> None:
    assert guard.terms(text) == count


SHAPES = {
    "parentheses": lambda n: "(" * n + "cpu" + ")" * n,
    "aggregations": lambda n: "sum(" * n + "cpu" + ")" * n,
    "functions": lambda n: "abs(" * n + "cpu" + ")" * n,
    "a chain": lambda n: " + ".join(["cpu"] * (n + 1)),
    "set operators": lambda n: " and ".join(["cpu"] * (n + 1)),
    "unary minus": lambda n: "-" * n + "cpu",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_deepest_shapes_answer_at_the_bound_and_are_refused_past_it(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert instant(SHAPES[shape](guard.MAX_TERMS))["resultType"] == "vector"
    parsed: list[str] = []
    monkeypatch.setattr(promql_parser, "parse", lambda text: parsed.append(text))
    with pytest.raises(QueryError) as err:
        instant(SHAPES[shape](guard.MAX_TERMS + 1))
    assert err.value.kind is ErrorType.BAD_DATA
    assert f"at most {guard.MAX_TERMS}" in err.value.message
    assert parsed == []  # refused before the parser


def test_a_body_of_the_size_the_api_accepts_is_refused_at_once() -> None:
    """60 kB of ``cpu+cpu+...``: 15,000 terms, which the parser would need tens of
    gigabytes for."""
    with pytest.raises(QueryError, match="15,000 operators"):
        evaluate.parse("+".join(["cpu"] * 15_001))


def test_recursion_past_the_interpreters_limit_is_a_bad_query_not_an_internal_error() -> None:
    """The bound keeps the evaluator well inside Python's recursion limit; were it ever
    reached, the client hears that its query nests too deeply (400), not a 500."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(_frames()) + 150)
    try:
        with pytest.raises(QueryError, match="nests too deeply") as err:
            instant("abs(" * 100 + "cpu" + ")" * 100)
    finally:
        sys.setrecursionlimit(old)
    assert err.value.kind is ErrorType.BAD_DATA


def _frames() -> list[object]:
    frames, frame = [], sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back  # type: ignore[assignment]
    return frames
