"""A restart holds one tuple per series key, as a cold start does.

The journal's keys, the restored snapshot's and the first poll's are equal and were three
sets of objects: the snapshot's freed at the first publication, between objects that stay,
left the heap partly used, and the journal's were held beside the poll's for good (at
20,000 nodes, 4 MB of tuples and 5 MB of partly used heap). A scripted provider stands in
for the backend; the journal is the real one.
"""

from __future__ import annotations

from pathlib import Path

from loadwatcher.journal.sqlite import Journal
from loadwatcher.pipeline import snapshot
from loadwatcher.pipeline.snapshot import RollupSnapshot
from tests.support.restarts import NODES, engine_over, journal_of


async def test_the_restored_snapshot_and_then_the_journal_share_the_stores_keys(
    tmp_path: Path,
) -> None:
    last = 1_700_000_000.0
    db = tmp_path / "lw.db"
    await journal_of(db, last)  # a clean stop: the whole snapshot, windows and keys
    journal = Journal(str(db))
    await journal.open()
    body = await journal.load_snapshot()
    await journal.close()
    assert body is not None
    saved = snapshot.decode(body)
    assert isinstance(saved, RollupSnapshot)

    second = engine_over(db, lambda: last + 30)
    await second.recover()
    assert second.current is not None and second.journal is not None
    served = second.current.snapshot
    held = {id(k) for k in second.store.keys}
    assert served.keys == saved.keys and {id(k) for k in served.keys} <= held
    assert served.windows.keys() == saved.windows.keys()
    for name, window in saved.windows.items():
        assert served.windows[name].sids.tolist() == window.sids.tolist()

    loaded = list(second.store.keys)
    await second.cycle(last + 30)
    polled = {id(k) for k in second.store.keys}
    assert polled.isdisjoint(map(id, loaded))  # the poll's own tuples, every one
    assert {id(k) for k in second.journal.ids.by_key} == polled
    samples = len(second.store.columns)
    await second.close()

    third = engine_over(db, lambda: last + 45)
    await third.recover()
    assert third.store.keys == loaded
    assert len(third.store.columns) == samples
    await third.close()


async def test_the_restored_tags_are_keyed_by_the_stores_names_and_equal_ones_shared(
    tmp_path: Path,
) -> None:
    """After a clean stop (the whole snapshot) and after a crash (the snapshot without its
    windows, rebuilt from the samples) alike."""
    last = 1_700_000_000.0
    for clean in (True, False):
        db = tmp_path / f"lw-{clean}.db"
        await journal_of(db, last, clean=clean)
        second = engine_over(db, lambda: last + 30)
        await second.recover()
        assert second.current is not None
        served = second.current.snapshot
        names = {id(node) for node, _ in second.store.keys}
        assert served.tags.keys() == set(NODES)
        assert {id(node) for node in served.tags} <= names, clean
        # Every node was judged alike: one dict for all of them.
        assert len({id(tag) for tag in served.tags.values()}) == 1, clean
        assert {tag["quality"] for tag in served.tags.values()} == {"low_coverage"}
        await second.close()
