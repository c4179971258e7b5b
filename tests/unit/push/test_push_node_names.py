"""Pushed samples of node names no route could serve (``a b``, ``<img>``, a quote: no
Kubernetes node is named so) are dropped and counted as ``bad_node_name``; every other
sample of the push is kept as it was (hypothesis, against a plain filter), and an IPv6
node name (``::1``, from ``[::1]:9100``) is served by ``/watcher/{hostname}`` too."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Resource, SeriesBatch
from loadwatcher.push.samples import Decoded, servable_only
from tests.support.fuzzing import examples
from tests.unit.push.test_push_http import Service, T, node, start, telegraf

GOOD = ["n1", "ip-10-0-0-1.ec2.internal", "Node_2", "10.0.0.3", "::1", "fd00::7"]
BAD = ["a b", "<img>", 'x"y', "", "-lead", "trail.", "é", "a" * 254, "tab\tx"]


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(GOOD + BAD),
            st.sampled_from(list(Resource)),
            st.lists(st.floats(0, 100), min_size=1, max_size=3),
        ),
        max_size=8,
    )
)
def test_only_the_samples_of_unservable_names_go(
    series: list[tuple[str, Resource, list[float]]],
) -> None:
    keys = [(n, r) for n, r, _ in series]
    lengths = np.array([len(v) for _, _, v in series], np.int64)
    values = np.array([x for _, _, v in series for x in v], np.float64)
    ts = np.arange(values.shape[0], dtype=np.float64)
    batch = SeriesBatch(keys, lengths, ts, values)
    accepted = int(values.shape[0])
    names = frozenset(n for n, _, _ in series)
    info = {n: {"capacity.cpu": "4"} for n in names}
    got = servable_only(Decoded(batch, {"accepted": accepted}, names, info))
    kept = [(n, r, v) for n, r, v in series if n in GOOD]
    assert got.batch.keys == [(n, r) for n, r, _ in kept]
    assert got.batch.values.tolist() == [x for _, _, v in kept for x in v]
    assert got.batch.lengths.tolist() == [len(v) for _, _, v in kept]
    dropped = accepted - len(got.batch.values)
    assert got.counts.get("bad_node_name", 0) == dropped
    assert got.counts["accepted"] == accepted - dropped
    assert got.nodes == names & set(GOOD) and set(got.node_info) == names & set(GOOD)


async def test_a_push_of_unservable_names_keeps_the_others(aiohttp_client: Any) -> None:
    svc: Service = await start(aiohttp_client)
    body = telegraf("good-1", 75.0, 40.0) + telegraf("a\\ b", 75.0, 40.0)
    body += telegraf("<img>", 75.0, 40.0)
    status, _, _ = await svc.post("/write", body, precision="s")
    assert status == 204
    assert svc.pushed("bad_node_name") == 4  # cpu and memory of two hosts
    assert await svc.rw(*node("[::1]", 0.5, 0.25)) == 204
    await svc.engine.cycle(T + 1)
    assert set(await svc.watcher()) == {"good-1", "::1"}
    resp = await svc.client.get("/watcher/::1")
    assert resp.status == 200, await resp.text()
