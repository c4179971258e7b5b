"""A snapshot's windows: the longest computed with the snapshot, the others on first read.

The schedulers read the longest window (the default body, the ageing, the node list); a
shorter one is read only when someone asks for it (``?window=5m``, LoadAware's 5m, the
status page, the PromQL API). Computing every window at every poll cost a small cluster's
poll more than its parsing (benchmarks/RESULTS.md); now a shorter window costs nothing
until read, and is computed once per snapshot, in whichever thread reads it first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from loadwatcher.model import Window
from loadwatcher.pipeline import rollups
from loadwatcher.pipeline.rollups import WindowStats


class Windows(Mapping[str, WindowStats]):
    """Every window's statistics by name, in ``windows`` order, from ``layout``; the
    longest is computed at once. The layout (which holds the samples' values) is let go
    once every window is computed."""

    def __init__(self, layout: rollups.Layout, windows: tuple[Window, ...]) -> None:
        self._by_name = {w.name: w for w in windows}
        longest = max(windows, key=lambda w: w.seconds)
        self._done = {longest.name: rollups.window_stats(layout, longest)}
        self._layout = layout if len(windows) > 1 else None
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> WindowStats:
        stats = self._done.get(name)
        if stats is not None:
            return stats
        window = self._by_name[name]  # KeyError for a window not computed here
        with self._lock:  # concurrent first readers compute it once
            stats = self._done.get(name)
            if stats is None:
                assert self._layout is not None  # held until every window is done
                stats = self._done[name] = rollups.window_stats(self._layout, window)
                if len(self._done) == len(self._by_name):
                    self._layout = None
        return stats

    def __contains__(self, name: object) -> bool:
        return name in self._by_name  # without computing it (Mapping's would)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def computed(self) -> frozenset[str]:
        """The windows computed so far."""
        return frozenset(self._done)
