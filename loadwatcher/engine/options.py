"""The engine's settings, as the app builds them from the configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadwatcher.config.spec import DEFAULT_MAX_NEW_SERIES
from loadwatcher.pipeline import analysis, corroboration, health

# A backend's clock a little ahead of ours is normal (NTP keeps them within milliseconds,
# a minute covers a VM paused for a while); beyond it a timestamp cannot be trusted.
DEFAULT_FUTURE_TOLERANCE_S = 60.0


@dataclass(frozen=True)
class EngineOptions:
    poll_interval_s: float
    retention_s: float
    thresholds: analysis.Thresholds = field(default_factory=analysis.Thresholds)
    provider_timeout_s: float = 10.0
    corroborate_threshold_pct: float = corroboration.DEFAULT_THRESHOLD_PCT
    # push.receive beside a poller: a node's samples come from one source (SourceSplit).
    one_source_per_node: bool = False
    max_bad_node_share: float = health.DEFAULT_MAX_BAD_NODE_SHARE
    future_tolerance_s: float = DEFAULT_FUTURE_TOLERANCE_S
    max_new_series: int = DEFAULT_MAX_NEW_SERIES
    # Cycles run this often when set (push: publish what arrived every few seconds), and a
    # cycle that brought nothing new skips publishing until a poll interval has passed.
    cycle_interval_s: float | None = None
    # How long a node that left /watcher stays listed as gone (engine.gone).
    gone_visible_s: float = 3600.0

    @property
    def max_snapshot_age_s(self) -> float:
        """A snapshot older than this means polling is stuck or failing."""
        return 3 * self.poll_interval_s + self.provider_timeout_s
