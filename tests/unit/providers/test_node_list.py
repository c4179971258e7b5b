"""kube_node_info as the node list: a failed ask keeps the last list (a node does not
leave the cluster because a query failed); an empty answer is no list."""

from __future__ import annotations

import orjson
import pytest

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.prometheus.nodelist import QUERY, NodeList


def _answer(nodes: list[str]) -> bytes:
    result = [{"metric": {"node": n}, "value": [0, "1"]} for n in nodes]
    return orjson.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


async def test_a_failed_ask_keeps_the_last_list_and_says_so() -> None:
    nodes = NodeList("instance", True)
    asked: list[str] = []

    async def answers(promql: str) -> bytes:
        asked.append(promql)
        return _answer(["a", "b:9100"])

    await nodes.refresh(answers)
    assert asked == [QUERY]
    assert nodes.members(frozenset({"a", "b"})) == (frozenset({"a", "b"}), None)

    async def down(promql: str) -> bytes:
        raise ProviderError(ProviderErrorKind.CONNECT, "connection refused", query=promql)

    await nodes.refresh(down)
    listed, note = nodes.members(frozenset({"a"}))
    assert listed == frozenset({"a", "b"})
    assert note is not None and "the last list kept" in note


@pytest.mark.parametrize("body", [_answer([]), _answer([""])])
async def test_no_series_is_no_list(body: bytes) -> None:
    nodes = NodeList("instance", True)

    async def empty(promql: str) -> bytes:
        return body

    await nodes.refresh(empty)
    assert nodes.members(frozenset({"a"})) == (None, None)


def test_half_the_sampled_nodes_must_be_listed() -> None:
    nodes = NodeList("instance", True, listed=frozenset({"a", "b", "x", "y"}))
    assert nodes.members(frozenset({"a", "b", "c", "d"}))[0] is not None
    listed, note = nodes.members(frozenset({"a", "c", "d", "e"}))
    assert listed is None and note is not None and "'instance' label" in note
