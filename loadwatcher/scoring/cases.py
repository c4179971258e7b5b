"""Self-contained scoring cases: one JSON object in, ``{scores, filtered}`` out.

The format is described in docs/architecture.md, Scoring.

Case file fields: ``plugin``; ``args`` (upstream JSON names); ``nodes`` (``name``,
``capacity``, ``allocatable`` defaulting to ``capacity``, ``metrics`` as on the wire or null,
optional ``pods``, ``recentPods`` with ``ageSeconds``, ``tags``/``lastSample``); ``pod`` (a
PodSpec subset or a manifest); optional ``now`` and ``window`` (``{duration, start, end}``
or a duration string); optional ``fallback`` (default false: a case reproduces upstream
exactly, so nodes without metrics score the minimum); ``id``, ``note`` and ``expect`` are
ignored. Any other key, at any depth, is refused with its path (see ``strict``).

The output has every node's score (what upstream's Score returns, e.g. 0 for expired
metrics) in ``scores`` and the Filter plugin's rejections in ``filtered``.

Times: ``now`` defaults to ``window.end``, else 0; the window end defaults to ``now``; a
recent pod was bound at ``now − ageSeconds``; a node's metrics were last updated at its
``lastSample``, else at the window end.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadwatcher.scoring.cluster import build_cluster
from loadwatcher.scoring.nodes import parse_node
from loadwatcher.scoring.pods import parse_pod
from loadwatcher.scoring.profile import run_plugins
from loadwatcher.scoring.registry import canonical_name, parse_plugin_args
from loadwatcher.scoring.strict import at, check_keys, in_file, located, unique_keys

__all__ = ["load_case", "run_case", "run_case_file"]

_CASE_KEYS = frozenset(
    {"plugin", "args", "nodes", "pod", "now", "window", "fallback", "id", "note", "expect"}
)
_WINDOW_KEYS = frozenset({"duration", "start", "end"})


def load_case(path: str | Path) -> Any:
    """Read a case file (JSON; ``NaN``/``Infinity`` tokens allowed). ValueError if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read case file {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"case file {str(path)!r} is not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise ValueError(f"case file {str(path)!r} is not valid JSON: {exc}") from None
    except ValueError as exc:  # a duplicate key
        raise ValueError(f"case file {str(path)!r}: {exc}") from None


def _time(raw: Any, where: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ValueError(located(where, f"expected a number of Unix seconds, got {raw!r}"))
    return float(raw)


def _window(raw: Any) -> tuple[str, float | None]:
    """(duration, end) of the case window."""
    if raw is None:
        return "", None
    if isinstance(raw, str):
        return raw, None
    if not isinstance(raw, Mapping):
        raise ValueError("window: expected {duration, start, end} or a duration string")
    check_keys(raw, _WINDOW_KEYS, "window")
    duration = raw.get("duration", "")
    if not isinstance(duration, str):
        raise ValueError('window.duration: expected a string such as "15m"')
    _time(raw.get("start"), "window.start")
    return duration, _time(raw.get("end"), "window.end")


def run_case_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read and score one case file; errors name the file and the path inside it."""
    doc = load_case(path)  # its errors name the file already
    return in_file(str(path), lambda: run_case(doc))


def run_case(doc: Any) -> dict[str, dict[str, Any]]:
    """Score one case; ``{"scores": {node: int}, "filtered": {node: reason}}``."""
    if not isinstance(doc, Mapping):
        raise ValueError("expected a JSON object (a case)")
    check_keys(doc, _CASE_KEYS, "")
    plugin = doc.get("plugin")
    if not isinstance(plugin, str):
        raise ValueError('plugin: expected a plugin name such as "TargetLoadPacking"')
    name = canonical_name(plugin)
    args = parse_plugin_args(name, doc.get("args"))
    duration, end = _window(doc.get("window"))
    now = _time(doc.get("now"), "now")
    now = now if now is not None else (end if end is not None else 0.0)
    nodes_raw = doc.get("nodes")
    if not isinstance(nodes_raw, list):
        raise ValueError("nodes: expected a list of nodes")
    nodes = [
        parse_node(n, at("nodes", i), now=now, default_rollup=duration)
        for i, n in enumerate(nodes_raw)
    ]
    if len({n.name for n in nodes}) != len(nodes):
        raise ValueError("nodes: node names must be unique")
    if "pod" not in doc:
        raise ValueError('pod: missing (give a PodSpec subset, e.g. {"containers": []})')
    pod = parse_pod(doc["pod"], "pod")
    fallback = doc.get("fallback", False)
    if not isinstance(fallback, bool):
        raise ValueError("fallback: expected true or false")
    cluster = build_cluster(nodes, now=now, window_end=end)
    (result,) = run_plugins(cluster, pod, {name: args}, fallback_enabled=fallback)
    return {"scores": result.scores, "filtered": result.filtered}
