"""The engine: runs the poll cycle, keeps the published snapshot and its bodies, counts.

``cycle`` holds ``Engine`` (restore at start, one poll cycle, persistence, health),
``published`` the snapshot rendered to response bodies, ``selfmetrics`` the service's own
Prometheus metrics.
"""

from loadwatcher.engine.cycle import Engine, EngineOptions

__all__ = ["Engine", "EngineOptions"]
