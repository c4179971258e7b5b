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
never read here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FAILOVER_TIMEOUT_S = 30.0


@dataclass
class _Election:
    replica: str
    last_seen: float  # receive time of the elected replica's newest push


class HATracker:
    """Which replica is elected per cluster; a pure state machine driven by ``now``."""

    def __init__(self, failover_timeout_s: float = DEFAULT_FAILOVER_TIMEOUT_S) -> None:
        self.failover_timeout_s = failover_timeout_s
        self._elected: dict[str, _Election] = {}

    def accept(self, cluster: str, replica: str | None, now: float) -> bool:
        """Whether a push from ``replica`` of ``cluster`` received at ``now`` is accepted.

        A push without a replica label is not part of an HA pair: always accepted.
        """
        if not replica:
            return True
        election = self._elected.get(cluster)
        if election is None or (
            election.replica != replica and now - election.last_seen > self.failover_timeout_s
        ):
            self._elected[cluster] = _Election(replica, now)
            return True
        if election.replica != replica:
            return False
        election.last_seen = max(election.last_seen, now)  # a clock step back keeps the newer
        return True

    def elected(self) -> dict[str, str]:
        """The elected replica of each cluster seen."""
        return {cluster: e.replica for cluster, e in self._elected.items()}
