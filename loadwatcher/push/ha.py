"""HA pair deduplication: of the replicas of one Prometheus, one is accepted at a time.

Like Mimir's HA tracker. Two Prometheus servers scraping the same targets push the same
series, told apart by a replica label (``prometheus_replica`` from their external labels)
and grouped by an optional cluster label. Per cluster, the first replica that pushes is
elected and its pushes are accepted; the others' are refused (the caller counts them as
``ha_non_elected``). When the elected replica has pushed nothing for
``failover_timeout_s`` (Mimir's default, 30 s), the next replica that pushes is elected.

Differences from Mimir, on purpose: a push without the cluster label belongs to the
cluster ``""`` (Mimir accepts it undeduplicated; loadwatcher serves one cluster, and
counting both replicas would be worse); the clock is the receive time the caller passes,
never read here; at most ``max_clusters`` elections are kept, the least recently seen
forgotten first (a writer that sends a new cluster value each push cannot grow it; a
forgotten pair elects afresh at its next push).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_FAILOVER_TIMEOUT_S = 30.0
DEFAULT_MAX_CLUSTERS = 10_000


@dataclass
class _Election:
    replica: str
    last_seen: float  # receive time of the elected replica's newest push


class HATracker:
    """Which replica is elected per cluster; a pure state machine driven by ``now``."""

    def __init__(
        self,
        failover_timeout_s: float = DEFAULT_FAILOVER_TIMEOUT_S,
        max_clusters: int = DEFAULT_MAX_CLUSTERS,
    ) -> None:
        self.failover_timeout_s = failover_timeout_s
        self.max_clusters = max_clusters
        # Least recently seen first: a push moves its cluster to the end.
        self._elected: OrderedDict[str, _Election] = OrderedDict()

    def __len__(self) -> int:
        return len(self._elected)

    def accept(self, cluster: str, replica: str | None, now: float) -> bool:
        """Whether a push from ``replica`` of ``cluster`` received at ``now`` is accepted.

        A push without a replica label is not part of an HA pair: always accepted.
        """
        if not replica:
            return True
        election = self._elected.get(cluster)
        if election is not None:
            self._elected.move_to_end(cluster)
        if election is None or (
            election.replica != replica and now - election.last_seen > self.failover_timeout_s
        ):
            self._elected[cluster] = _Election(replica, now)
            while len(self._elected) > self.max_clusters:
                self._elected.popitem(last=False)
            return True
        if election.replica != replica:
            return False
        election.last_seen = max(election.last_seen, now)  # a clock step back keeps the newer
        return True

    def elected(self) -> dict[str, str]:
        """The elected replica of each cluster seen."""
        return {cluster: e.replica for cluster, e in self._elected.items()}
