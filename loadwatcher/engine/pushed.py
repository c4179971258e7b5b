"""What the cycle does for pushed samples alone: they were answered 204 already.

``FetchResult.pushed`` says which of a fetch's batches are pushed; the cycle merges them on
their own (kept by time, every one counted) and never refuses them with a cap of its own.
Here: health's notice naming the nodes whose pushed samples are ahead of the clock, and
in mixed mode the one source per node (``SourceSplit``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from loadwatcher.model import WINDOWS, FetchResult, Resource, Series, SeriesBatch
from loadwatcher.pipeline import corroboration, rollups
from loadwatcher.pipeline.store import SampleStore
from loadwatcher.words import plural

# A pushed sample this far ahead of the service's clock says its writer's clock runs
# ahead: its node is named in health (within the future tolerance it is kept, by time;
# beyond, dropped as future).
AHEAD_NOTICE_S = 2.0


def ahead_notice(result: FetchResult, now: float) -> list[str]:
    """Health's notice naming the nodes whose pushed samples are ahead of ``now``."""
    if not result.pushed:
        return []
    lead: dict[str, float] = {}
    for batch in result.batches[len(result.batches) - result.pushed :]:
        ahead = batch.ts > now + AHEAD_NOTICE_S
        if not ahead.any():
            continue
        starts = np.cumsum(batch.lengths) - batch.lengths
        for (node, _), a, n in zip(
            batch.keys, starts.tolist(), batch.lengths.tolist(), strict=True
        ):
            most = float(batch.ts[a : a + n].max(initial=-np.inf)) - now
            if most > AHEAD_NOTICE_S:
                lead[node] = max(lead.get(node, 0.0), most)
    if not lead:
        return []
    named = sorted(lead, key=lambda n: -lead[n])
    shown = ", ".join(f"{n} by {lead[n]:.0f} s" for n in named[:5])
    more = f" and {plural(len(named) - 5, 'node')} more" if len(named) > 5 else ""
    return [
        f"pushed samples ahead of this service's clock (a writer's clock runs ahead; kept "
        f"by time within analysis.future_tolerance_s, dropped as future beyond): "
        f"{shown}{more}"
    ]


class SourceSplit:
    """Mixed mode (``push.receive`` beside a poller): one source per node, never a blend.

    The rule: pushes win. A node is the pushers' from the cycle that first takes a pushed
    sample of it, for as long as it keeps being pushed (a cycle with pushed samples of it
    within ``hold_s``, the stale threshold). The poller's samples of such a node newer
    than what the store held of it then (the cold start's history stays) are diverted:
    counted as dropped (``other_source``) and kept apart in ``other``, where they are
    compared with the pushed ones as a corroborating provider's are (``disagreeing``).
    Nodes nobody pushes are the poller's; a node no longer pushed goes back to it.
    """

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self._first: dict[str, float] = {}  # node -> polled samples after this time go
        self._seen: dict[str, float] = {}  # node -> the last cycle that pushed it
        self.other = SampleStore()

    @property
    def pushed_nodes(self) -> frozenset[str]:
        return frozenset(self._first)

    def claim(
        self, pushed: list[SeriesBatch], now: float, held: Callable[[str], float | None]
    ) -> None:
        """Take the nodes of this cycle's pushed samples (``held``: the newest time the
        store holds of a node); release those pushed no more."""
        first, seen = self._first, self._seen
        for batch in pushed:
            for node, _ in batch.keys:
                if node not in first:
                    newest = held(node)
                    first[node] = -np.inf if newest is None else newest
                seen[node] = now
        for node in [n for n, at in seen.items() if now - at > self.hold_s]:
            del first[node], seen[node]

    def release(self, nodes: Iterable[str]) -> None:
        """Forget that pushes took ``nodes`` (an operator let them go)."""
        for node in nodes:
            self._first.pop(node, None)
            self._seen.pop(node, None)

    def divert(
        self, series: list[Series], batches: list[SeriesBatch], keep_from: float, latest: float
    ) -> tuple[list[Series], list[SeriesBatch], int]:
        """The poll's samples without those of pushed nodes newer than what the store held
        of them when pushes took them, and how many those were (kept in ``other``)."""
        first = self._first
        if not first:
            return series, batches, 0
        kept_series: list[Series] = []
        apart: list[Series | SeriesBatch] = []
        for s in series:
            since = first.get(s.node)
            taken = s.ts > since if since is not None else None
            if taken is None or not taken.any():
                kept_series.append(s)
                continue
            kept_series.append(Series(s.node, s.resource, s.ts[~taken], s.values[~taken]))
            apart.append(Series(s.node, s.resource, s.ts[taken], s.values[taken]))
        kept_batches: list[SeriesBatch] = []
        for b in batches:
            since_of = np.array([first.get(node, np.inf) for node, _ in b.keys], np.float64)
            taken = b.ts > np.repeat(since_of, b.lengths)
            if not taken.any():
                kept_batches.append(b)
                continue
            # Samples left out as parsed stay with the poll's: the main store held them.
            kept_batches.append(b.where(~taken, b.held_back))
            apart.append(b.where(taken))
        diverted = sum(
            int(p.ts.shape[0]) for p in apart
        )  # every sample set apart, whatever the store makes of it
        self.other.add(apart, keep_from=keep_from, latest=latest)
        return kept_series, kept_batches, diverted

    def trim(self, keep_from: float) -> None:
        self.other.trim(keep_from)
        if self.other.idle_series(keep_from):
            self.other.forget_idle(keep_from)

    def disagreeing(
        self, main: SampleStore, now: float, threshold_pct: float
    ) -> dict[str, set[Resource]]:
        """Per pushed node, the resources whose shortest-window averages from the two
        sources differ by more than ``threshold_pct``."""
        if not len(self.other.keys):
            return {}
        _, end = rollups.window_bounds(now, WINDOWS[0])
        found = corroboration.disagreeing(
            corroboration.averages(main.columns, list(main.keys), end),
            corroboration.averages(self.other.columns, list(self.other.keys), end),
            threshold_pct,
        )
        return {node: r for node, r in found.items() if node in self._first}
