"""The ``/watcher`` document read into typed data: both wire formats, validated.

Both wire formats are read (see docs/architecture.md, Wire formats): the default one
(``data.NodeMetricsMap``, as the Go paypal/load-watcher client decodes it) and the KEP one
(``?format=kep``: ``data`` keyed by node, ``rollup`` holding the operator, lowercase
``type``). Either is returned as the same :class:`Snapshot`, with metric types in wire
spelling (``CPU``, ``Memory``) and the operator in ``operator``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import orjson

from loadwatcher.errors import ClientError
from loadwatcher.model import Operator

OPERATORS = frozenset(str(op) for op in Operator)
_TYPES = {
    "cpu": "CPU",
    "memory": "Memory",
    "bandwidth": "Bandwidth",
    "network": "Bandwidth",
    "storage": "Storage",
    "disk": "Storage",
    "energy": "Energy",
    "gpu": "GPU",
    "gpu_max": "GPUMax",
}


class InvalidSnapshotError(ClientError):
    """The answer is not a valid /watcher document (bad JSON, schema violation)."""


class NotAWatcherDocumentError(InvalidSnapshotError):
    """JSON, but without the envelope of either wire format (``timestamp``, ``window``,
    ``data``): some other server's or program's document."""


class StaleSnapshotError(ClientError):
    """The snapshot is older than the accepted age."""


class NodeNotFoundError(ClientError):
    """``?host=NAME`` named a node the watcher does not know (HTTP 404)."""


class WatcherUnavailableError(ClientError):
    """The watcher could not be reached or kept failing after the retries."""


@dataclass(frozen=True, slots=True)
class Metric:
    """One rollup value: ``value`` percent of node capacity for ``type`` over ``rollup``."""

    type: str
    operator: str
    value: float
    name: str = ""
    rollup: str = ""


def tag_quality(tags: Mapping[str, Any]) -> str | None:
    """A node's data-quality tag (``ok``, ``stale``, ...), if the watcher gave one."""
    value = tags.get("quality")
    return value if isinstance(value, str) else None


def tag_last_sample(tags: Mapping[str, Any]) -> float | None:
    """Unix seconds of a node's newest sample (tag ``lastSample``), if the watcher gave it."""
    value = tags.get("lastSample")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    """A node's metrics in wire order, its ``tags`` and its ``metadata``."""

    name: str
    metrics: tuple[Metric, ...]
    tags: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def quality(self) -> str | None:
        """The watcher's data-quality tag (``ok``, ``stale``, ...), if any."""
        return tag_quality(self.tags)

    @property
    def last_sample(self) -> float | None:
        """Unix seconds of the node's newest sample, if the watcher said."""
        return tag_last_sample(self.tags)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A parsed /watcher document. Times are Unix seconds."""

    timestamp: int
    duration: str
    start: int
    end: int
    source: str
    nodes: Mapping[str, NodeMetrics]
    format: str = "default"


def parse_metric(raw: Mapping[str, Any], default_rollup: str = "") -> Metric:
    """A metric from either format (KEP: ``rollup`` is the operator); ValueError if unusable."""
    kind = raw.get("type")
    value = raw.get("value")
    operator = raw.get("operator")
    rollup = raw.get("rollup", "")
    name = raw.get("name", "")
    if (
        type(value) is float
        and type(kind) is str
        and type(operator) is str
        and type(rollup) is str
        and type(name) is str
    ):  # a default-format metric as a loadwatcher writes it: none of the checks below fails
        kind = _TYPES.get(kind.lower(), kind)
        return Metric(kind, operator, value, name, rollup or default_rollup)
    if not isinstance(kind, str):
        raise ValueError(f"metric type must be a string, got {kind!r}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"metric value must be a number, got {value!r}")
    if operator is None and isinstance(rollup, str) and rollup.upper() in _KEP_OPERATORS:
        operator, rollup = _KEP_OPERATORS[rollup.upper()], default_rollup
    if not isinstance(operator, str) or not isinstance(rollup, str):
        raise ValueError(f"metric operator and rollup must be strings in {dict(raw)!r}")
    return Metric(
        _TYPES.get(kind.lower(), kind),
        operator,
        float(value),
        name if isinstance(name, str) else "",
        rollup or default_rollup,
    )


_KEP_OPERATORS = {op.upper(): op for op in OPERATORS}


@lru_cache(maxsize=2)
def _validator(fmt: str) -> Any:
    import jsonschema  # imported when needed: it is slow to import

    name = "kep.schema.json" if fmt == "kep" else "watcher.schema.json"
    schema = json.loads(resources.files("loadwatcher.wire").joinpath("schema", name).read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def _one_line(error: Any) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "(document)"
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{where}: {message}"


# What both wire formats have. A document with none of ``data.NodeMetricsMap`` (the default
# format's mark) and not all of these is some other program's.
_ENVELOPE = ("timestamp", "window", "data")


def parse_snapshot(doc: Any, *, fmt: str | None = None, validate: bool = True) -> Snapshot:
    """Turn a decoded /watcher document into a :class:`Snapshot` (pure; no I/O).

    ``fmt`` is ``"default"`` or ``"kep"``; None detects it from ``data.NodeMetricsMap``.
    """
    if not isinstance(doc, dict):
        raise NotAWatcherDocumentError("not a /watcher document: not a JSON object")
    data = doc.get("data")
    default = isinstance(data, dict) and "NodeMetricsMap" in data
    lacks = [key for key in _ENVELOPE if key not in doc]
    if not default and lacks:  # neither format's: guessing one for it would mislead
        raise NotAWatcherDocumentError(f"not a /watcher document: it has no {', '.join(lacks)}")
    if fmt is None:
        fmt = "default" if default else "kep"
    if validate:
        from jsonschema.exceptions import best_match

        error = best_match(_validator(fmt).iter_errors(doc))
        if error is not None:
            raise InvalidSnapshotError(f"invalid watcher document ({fmt}): {_one_line(error)}")
    try:
        window = doc["window"]
        duration = str(window["duration"])
        raw_nodes: Any = data["NodeMetricsMap"] if fmt == "default" else data  # type: ignore[index]
        nodes: dict[str, NodeMetrics] = {}
        for name, raw in (raw_nodes or {}).items():
            metrics = tuple([parse_metric(m, duration) for m in raw.get("metrics") or ()])
            nodes[name] = NodeMetrics(
                name, metrics, dict(raw.get("tags") or {}), dict(raw.get("metadata") or {})
            )
        return Snapshot(
            int(doc["timestamp"]),
            duration,
            int(window["start"]),
            int(window["end"]),
            str(doc.get("source", "")),
            nodes,
            fmt,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidSnapshotError(f"invalid watcher document ({fmt}): {exc}") from exc


def load_snapshot(source: bytes | str, *, validate: bool = True) -> Snapshot:
    """Parse a saved /watcher document given as bytes or text."""
    try:
        doc = orjson.loads(source)
    except orjson.JSONDecodeError as exc:
        raise InvalidSnapshotError(f"watcher answer is not valid JSON: {exc}") from exc
    return parse_snapshot(doc, validate=validate)


def check_age(snapshot: Snapshot, now: float, max_age_s: float | None) -> None:
    """Raise StaleSnapshotError when the snapshot is older than ``max_age_s`` seconds."""
    age = now - snapshot.timestamp
    if max_age_s is not None and age > max_age_s:
        raise StaleSnapshotError(
            f"watcher snapshot is {age:.0f} s old (timestamp {snapshot.timestamp}); "
            f"the limit is {max_age_s:g} s"
        )
