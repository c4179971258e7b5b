"""The load watcher in the loop: node samples in, the ``/watcher`` document the plugins read out.

Every ``scrape_interval_s`` each node reports its CPU and memory utilisation (percent of
capacity); a sample becomes visible ``lag_s`` later (the metrics pipeline's reporting lag).
Every ``poll_interval_s`` the watcher takes what is visible into this project's own
``SampleStore``, runs its analysis and rollups (``pipeline``), renders the default wire
document (``wire``: the longest window with data, and before its metrics those of the other
windows the profile's plugins read, as ``score`` reads a watcher for LoadAware's 5m) and
reads it as the client does: the plugins read what a scheduler would read from a running
loadwatcher. ``exact_wire`` takes the long way (JSON bytes, ``client.load_snapshot`` with
its schema check); the default builds the client's objects from the same document
directly, and a test holds the two equal.

Bad metrics: from ``bad_from_s`` on, a ``stale_share`` of nodes stops reporting and a
``frozen_share`` keeps reporting the value it had then (a stuck agent); the nodes are drawn
with the seed. The analysis marks them stale or frozen as it would in production.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadwatcher._types import BoolArray, FloatArray
from loadwatcher.client import Snapshot, load_snapshot, parse_snapshot
from loadwatcher.model import LONGEST_WINDOW_S, WINDOWS, Resource, SeriesBatch
from loadwatcher.pipeline import analysis, snapshot
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.scoring.inputs import with_windows
from loadwatcher.wire import formats

__all__ = ["EPOCH", "Watcher", "WatcherOptions", "read_window"]

# Simulated time 0 as Unix seconds: the wire's times are integers of Unix time.
EPOCH = 1_700_000_000.0
SOURCE = "simulate"
METRIC_NAMES = {
    Resource.CPU: "instance:node_cpu:ratio",
    Resource.MEMORY: "instance:node_memory_utilisation:ratio",
}


@dataclass(frozen=True)
class WatcherOptions:
    """How the metrics reach the scheduler (seconds) and which nodes report badly."""

    scrape_interval_s: float = 15.0
    poll_interval_s: float = 60.0
    lag_s: float = 30.0
    stale_share: float = 0.0
    frozen_share: float = 0.0
    bad_from_s: float = 3600.0
    seed: int = 1
    exact_wire: bool = False

    def __post_init__(self) -> None:
        """ValueError naming the first bad option: options are checked once, when made."""
        for name in ("scrape_interval_s", "poll_interval_s"):
            value = getattr(self, name)
            if not 1 <= value <= 3600:
                raise ValueError(f"--{name.replace('_s', '').replace('_', '-')}: 1..3600 s")
        if not 0 <= self.lag_s <= 3600:
            raise ValueError("--lag: expected 0..3600 s")
        for name in ("stale_share", "frozen_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"--{name.replace('_', '-')}: expected a share in 0..1")
        if self.stale_share + self.frozen_share > 1:
            raise ValueError("--stale-share plus --frozen-share must not exceed 1")


def read_window(snap: snapshot.RollupSnapshot, window: str, exact: bool) -> Snapshot:
    """The ``/watcher`` document of one window as the client reads it. ``exact``: through
    its JSON bytes and ``load_snapshot`` (schema-checked), as ``score`` reads a saved
    document; otherwise the client's own reader on the document without the round trip
    and the schema (the JSON encoding of floats round-trips exactly)."""
    doc = formats.document(snap, window, formats.Format.DEFAULT)
    if exact:
        return load_snapshot(formats.encode(doc))
    return parse_snapshot(doc, fmt="default", validate=False)


class Watcher:
    """One simulated loadwatcher for the nodes ``names``."""

    def __init__(
        self, names: tuple[str, ...], options: WatcherOptions, windows: frozenset[str] = frozenset()
    ) -> None:
        self.names = names
        self.windows = windows  # rollup windows read besides the main one (LoadAware: 5m)
        self.options = options
        self.store = SampleStore()
        n = len(names)
        self._keys = [(name, Resource.CPU) for name in names] + [
            (name, Resource.MEMORY) for name in names
        ]
        rng = np.random.default_rng([options.seed, 7])
        order = rng.permutation(n)
        n_stale = round(options.stale_share * n)
        n_frozen = round(options.frozen_share * n)
        self.stale = np.zeros(n, dtype=np.bool_)
        self.stale[order[:n_stale]] = True
        self.frozen = np.zeros(n, dtype=np.bool_)
        self.frozen[order[n_stale : n_stale + n_frozen]] = True
        self._frozen_at: tuple[FloatArray, FloatArray] | None = None
        # Scrapes not yet taken by a poll: (time, cpu %, memory %, reporting mask).
        self._queue: list[tuple[float, FloatArray, FloatArray, BoolArray]] = []
        self.retention_s = LONGEST_WINDOW_S + 2 * options.poll_interval_s + options.lag_s

    def scrape(self, t: float, cpu_pct: FloatArray, mem_pct: FloatArray) -> None:
        """Every node's utilisation at simulated time ``t`` (seconds from the start)."""
        reporting = np.ones(len(self.names), dtype=np.bool_)
        cpu, mem = cpu_pct.copy(), mem_pct.copy()
        if t >= self.options.bad_from_s:
            reporting &= ~self.stale
            if self._frozen_at is None:
                self._frozen_at = (cpu.copy(), mem.copy())
            cpu = np.where(self.frozen, self._frozen_at[0], cpu)
            mem = np.where(self.frozen, self._frozen_at[1], mem)
        self._queue.append((t, cpu, mem, reporting))

    def poll(self, t: float) -> Snapshot:
        """The ``/watcher`` document the plugins read at ``t``, parsed by the client."""
        now = EPOCH + t
        visible = [s for s in self._queue if s[0] + self.options.lag_s <= t]
        self._queue = [s for s in self._queue if s[0] + self.options.lag_s > t]
        if visible:
            self.store.add([self._batch(visible)], keep_from=now - self.retention_s)
        else:
            self.store.trim(now - self.retention_s)
        keys = list(self.store.keys)
        report = analysis.analyse(keys, self.store.columns, self.store.newest_by_series(), now)
        snap = snapshot.build(self.store.columns, keys, now, SOURCE, METRIC_NAMES, report.tags, {})
        main = formats.pick_window(snap, None)
        exact = self.options.exact_wire
        parsed = read_window(snap, main, exact)
        extra = [
            read_window(snap, w.name, exact)
            for w in WINDOWS
            if w.name in self.windows and w.name != main
        ]
        return with_windows(parsed, extra) if extra else parsed

    def _batch(self, scrapes: list[tuple[float, FloatArray, FloatArray, BoolArray]]) -> SeriesBatch:
        times = np.array([s[0] for s in scrapes]) + EPOCH
        mask = np.stack([s[3] for s in scrapes], axis=1)  # node × scrape
        lengths = mask.sum(axis=1).astype(np.int64)
        ts = np.broadcast_to(times, mask.shape)[mask]
        cpu = np.stack([s[1] for s in scrapes], axis=1)[mask]
        mem = np.stack([s[2] for s in scrapes], axis=1)[mask]
        return SeriesBatch(
            self._keys,
            np.concatenate([lengths, lengths]),
            np.concatenate([ts, ts]),
            np.concatenate([cpu, mem]),
        )
