"""The engine: runs the poll cycle, keeps the published snapshot and its bodies, counts.

``cycle`` holds ``Engine`` (the state, one poll cycle, the loop) and its collaborators sit
beside it: ``restore`` (at start), ``persistence`` (journal writes, catch-up, the WAL fold),
``corroborating`` (the second provider), ``transitions`` (each change logged once).
``published`` is the snapshot rendered to response bodies, ``selfmetrics`` the service's own
Prometheus metrics.
"""

from loadwatcher.engine.cycle import Engine
from loadwatcher.engine.options import EngineOptions

__all__ = ["Engine", "EngineOptions"]
