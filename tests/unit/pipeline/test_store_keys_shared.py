"""After a load, the store holds the first add's key tuples, not the journal's.

A provider's parser keeps the tuples of its keys from one poll to the next; a store loaded
from the journal held a second, equal set (4 MB at 20,000 nodes). These tests draw what
was loaded, which batches come and in which order, and whether they come through ``add``
or ``add_in_turn``, and check that every series the first add names is held under that
add's own tuple, that nothing else changes, and that a later add replaces nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.model import Columns, Resource, SeriesBatch
from loadwatcher.pipeline.snapshot import shared
from loadwatcher.pipeline.store import SampleStore

Key = tuple[str, Resource]


def _fresh(key: Key) -> Key:
    """An equal key made of new objects, as another parse of the same answer gives."""
    node, resource = key
    return ("".join(list(node)), resource)


def _batch(keys: list[Key], t: float) -> SeriesBatch:
    n = len(keys)
    return SeriesBatch(keys, np.ones(n, np.int64), np.full(n, t), np.full(n, 0.5))


def _loaded(keys: list[Key]) -> SampleStore:
    store = SampleStore()
    n = len(keys)
    one = Columns(np.arange(n, dtype=np.int32), np.full(n, 100.0), np.full(n, 0.25))
    none = Columns(np.empty(0, np.int32), np.empty(0), np.empty(0))
    store.load([_fresh(k) for k in keys], one, none)
    return store


NODES = [f"node-{i}" for i in range(12)]
keys_drawn = st.lists(
    st.tuples(st.sampled_from(NODES), st.sampled_from([Resource.CPU, Resource.MEMORY])),
    unique=True,
    max_size=16,
)


@settings(max_examples=150, deadline=None)
@given(
    loaded=keys_drawn,
    batches=st.lists(keys_drawn, min_size=1, max_size=3),
    in_turn=st.booleans(),
)
def test_the_first_add_after_a_load_is_held_under_its_own_tuples(
    loaded: list[Key], batches: list[list[Key]], in_turn: bool
) -> None:
    store = _loaded(loaded)
    given_keys = [[_fresh(k) for k in batch] for batch in batches]
    parts = [_batch(keys, 200.0 + i) for i, keys in enumerate(given_keys)]
    if in_turn:
        store.add_in_turn(parts, keep_from=0.0)
    else:
        store.add(parts, keep_from=0.0)
    # The series, their order and their ids are what they would be without sharing.
    expected = list(loaded)
    for batch in batches:
        expected += [k for k in batch if k not in expected]
    assert store.keys == expected
    # Every series the add names is held under one of the tuples it gave for it (a key may
    # come in several batches), none under the journal's.
    given_ids: dict[Key, set[int]] = {}
    for k in (k for keys in given_keys for k in keys):
        given_ids.setdefault(k, set()).add(id(k))
    for key in store.keys:
        if key in given_ids:
            assert id(key) in given_ids[key]
    for sid, key in enumerate(store.keys):
        assert store.holds(_fresh(key))
        assert store.newest_of([_fresh(key)], 1e9)[0] == store.newest_by_series()[sid]
    # Loaded series the add did not name keep the loaded tuple; a later add changes none.
    before = list(map(id, store.keys))
    store.add([_batch([_fresh(k) for k in expected], 300.0)], keep_from=0.0)
    assert list(map(id, store.keys)) == before


def test_a_store_never_loaded_keeps_the_tuples_it_first_saw() -> None:
    store = SampleStore()
    first = [("a", Resource.CPU), ("b", Resource.CPU)]
    store.add([_batch(first, 1.0)])
    store.add([_batch([_fresh(k) for k in first], 2.0)])
    assert [id(k) for k in store.keys] == [id(k) for k in first]


def test_shared_gives_the_held_tuple_where_there_is_one() -> None:
    store = _loaded([("a", Resource.CPU), ("b", Resource.MEMORY)])
    asked = [("a", Resource.CPU), ("z", Resource.CPU)]
    shared = store.shared(asked)
    assert shared == tuple(asked)
    assert shared[0] is store.keys[0]
    assert shared[1] is asked[1]


def test_shared_per_node_entries_are_keyed_by_the_given_names_and_equal_ones_one_dict() -> None:
    name = "".join(["node", "-1"])  # not the literal's object
    per_node: dict[str, Any] = {
        "node-1": {"quality": "ok", "lastSample": 5},
        "node-2": {"quality": "ok", "lastSample": 5},
        "node-3": {"quality": "stale", "lastSample": 5, "detail": {"cpu": "stale"}},
        "node-4": {"quality": "stale", "lastSample": 5, "detail": {"cpu": "stale"}},
        "node-5": {"quality": "stale", "lastSample": 5, "detail": {"memory": "stale"}},
        "node-6": ["not", "a", "dict"],  # a damaged journal: kept as it is
        "node-7": {"quality": "ok", "lastSample": [5]},
    }
    out = shared(per_node, {"node-1": name})
    assert out == per_node
    assert next(iter(out)) is name
    assert out["node-1"] is out["node-2"]
    assert out["node-3"] is out["node-4"] and out["node-5"] is per_node["node-5"]
    assert out["node-6"] is per_node["node-6"] and out["node-7"] is per_node["node-7"]
