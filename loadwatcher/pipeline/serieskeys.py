"""Series ids by (node, resource) key: numbered in the order first seen, one tuple a key."""

from __future__ import annotations

from collections.abc import Iterable

from loadwatcher.model import Resource, SeriesKey


class SeriesKeys:
    """``keys[sid]`` is series ``sid``'s key, ``index`` the way back.

    Loaded from the journal, the keys are the journal's tuples; while ``loaded`` (the store
    clears it after its next add), ``ids`` holds the tuples it is given instead. After a
    load the provider's parser keeps tuples of its own from the first poll on, and holding
    the journal's beside them would keep two of every key (benchmarks/RESULTS.md, "Scale").
    """

    def __init__(
        self, keys: list[SeriesKey], index: dict[SeriesKey, int], loaded: bool = False
    ) -> None:
        self.keys = keys
        self.index = index
        self.loaded = loaded

    @classmethod
    def of(cls, keys: Iterable[SeriesKey], loaded: bool = False) -> SeriesKeys:
        held = list(keys)
        return cls(held, {key: i for i, key in enumerate(held)}, loaded and bool(held))

    def ids(self, keys: list[SeriesKey]) -> list[int | None]:
        """The series id of each key, None for one not held (one dict lookup each)."""
        ids = list(map(self.index.get, keys))
        if self.loaded:
            held = self.keys
            for key, sid in zip(keys, ids, strict=True):
                if sid is not None:
                    held[sid] = key
            # A dict keeps the key object it was first given: a new one holds the new.
            self.index = {key: i for i, key in enumerate(held)}
        return ids

    def add(self, key: SeriesKey) -> int:
        """``key``'s series id, numbering it if new."""
        sid = self.index.get(key)
        if sid is None:
            sid = len(self.keys)
            self.keys.append(key)
            self.index[key] = sid
        return sid

    def shared(self, keys: Iterable[SeriesKey]) -> tuple[SeriesKey, ...]:
        """``keys``, each as the tuple held where that series is held."""
        index, held = self.index, self.keys
        return tuple(held[sid] if (sid := index.get(key)) is not None else key for key in keys)

    def of_node(self, node: str) -> list[int]:
        """The series ids of ``node``."""
        return [sid for r in Resource if (sid := self.index.get((node, r))) is not None]

    def count_new(self, keys: Iterable[SeriesKey]) -> int:
        """How many distinct ``keys`` are not held yet."""
        index = self.index
        return len({key for key in keys if key not in index})
