"""Which file series id each store series has: the journal's in-memory map.

Series ids in the file are normally the store's (both are assigned in first-seen order and
the store is loaded from the file at start). The map is still kept explicitly, so that a
journal opened late -- the disk was read-only or full at start and came back -- can write
into a file that already holds series of an earlier run without mixing them up.

File ids are never reused, even across restarts (``meta`` remembers the next one): an old
chunk may still hold a forgotten id. Nothing here touches the file: ``planned`` says what a
write would add, ``written`` records it once the write has committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loadwatcher.model import Resource, SeriesKey


@dataclass(frozen=True)
class Plan:
    """What one write adds: the file id of every store series, the series the file does not
    hold yet with the ids they get, and the next free id after them."""

    file_ids: np.ndarray
    fresh: list[tuple[SeriesKey, int]]
    next_id: int


@dataclass
class FileIds:
    # File id of each store id (index = store id); every series the file holds, by key
    # (the store's own key tuples where it has them: 10,000 series are 0.9 MB of tuples
    # and ints held twice otherwise); the next free id; file ids of forgotten series,
    # deleted from the file by the next write.
    file_ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    by_key: dict[SeriesKey, int] = field(default_factory=dict)
    next_id: int = 0
    doomed: list[int] = field(default_factory=list)
    # Set by ``loaded``: the next write's keys may be the store's own tuples (``share``).
    loaded_keys: bool = False

    def read(self, rows: list[tuple[int, str, Resource]], remembered: int) -> None:
        """Start from the series the file holds (id, node, resource) and the next id it
        remembers; no store series is mapped yet."""
        self.by_key = {(node, resource): fid for fid, node, resource in rows}
        self.next_id = max(max((fid for fid, _, _ in rows), default=-1) + 1, remembered)
        self.doomed = []
        self.file_ids = np.empty(0, np.int64)

    def held(self) -> tuple[list[SeriesKey], np.ndarray]:
        """Every series the file holds (forgotten ones aside) and its file id, in file id
        order."""
        pairs = sorted(self.by_key.items(), key=lambda kv: kv[1])
        ids = np.fromiter((fid for _, fid in pairs), np.int64, len(pairs))
        return [key for key, _ in pairs], ids

    def loaded(self, keys: list[SeriesKey], ids: np.ndarray) -> None:
        """The store was loaded from the file: store id i is file id ``ids[i]``."""
        self.file_ids = ids
        doomed = set(self.doomed)
        self.by_key = {
            key: fid for key, fid in zip(keys, ids.tolist(), strict=True) if fid not in doomed
        }
        self.loaded_keys = True

    def share(self, keys: list[SeriesKey]) -> None:
        """Once after ``loaded``: map the store's key tuples (``keys``, index = store id),
        which replace the file's as the first poll brings its own, if they name the same
        series; otherwise both would be held."""
        if not self.loaded_keys:
            return
        self.loaded_keys = False
        shared = dict(zip(keys, self.file_ids.tolist(), strict=False))
        if shared == self.by_key:
            self.by_key = shared

    def forget(self, renumber: np.ndarray) -> None:
        """The store forgot the series whose ``renumber`` entry is -1 and numbered the
        others afresh (entry = new store id): follow it, and doom the forgotten ones."""
        kept = renumber[: len(self.file_ids)] >= 0
        gone: list[int] = self.file_ids[~kept].tolist()
        if not gone:
            return
        by_id = {fid: key for key, fid in self.by_key.items()}
        for fid in gone:
            key = by_id.get(fid)
            if key is not None:
                del self.by_key[key]
        self.doomed.extend(gone)
        self.file_ids = self.file_ids[kept]

    def plan(self, keys: list[SeriesKey]) -> Plan:
        """File ids for every store series (``keys``, index = store id)."""
        mapped = len(self.file_ids)
        if len(keys) <= mapped:
            return Plan(self.file_ids, [], self.next_id)
        more: list[int] = []
        fresh: list[tuple[SeriesKey, int]] = []
        next_id = self.next_id
        for key in keys[mapped:]:
            fid = self.by_key.get(key)
            if fid is None:
                fid, next_id = next_id, next_id + 1
                fresh.append((key, fid))
            more.append(fid)
        return Plan(np.concatenate([self.file_ids, np.asarray(more, np.int64)]), fresh, next_id)

    def written(self, plan: Plan, doomed_deleted: int) -> None:
        """The write of ``plan`` committed, deleting the first ``doomed_deleted`` doomed."""
        self.by_key.update(plan.fresh)
        self.next_id = plan.next_id
        del self.doomed[:doomed_deleted]
        self.file_ids = plan.file_ids
