"""Command-line inputs: pod, nodes, plugin args and the watcher snapshot, with clear errors.

Every reader raises ValueError (bad input: exit code 2) or ClientError (the watcher or the
API server failed: exit code 1) with a one-line message.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml

from loadwatcher.client import (
    InvalidSnapshotError,
    NodeMetrics,
    Snapshot,
    check_age,
    fetch_snapshot,
    load_snapshot,
)
from loadwatcher.scoring import kube, registry
from loadwatcher.scoring.nodes import NodeInput, parse_nodes
from loadwatcher.scoring.pods import Pod, parse_pod
from loadwatcher.scoring.registry import canonical_name, parse_plugin_args
from loadwatcher.scoring.strict import in_file

__all__ = [
    "extra_windows",
    "read_document",
    "read_nodes",
    "read_plugin_args",
    "read_pod",
    "read_raw_plugin_args",
    "read_snapshot",
    "with_windows",
]


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a mapping key given twice (the last would win silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<:`` may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the safe loader refuses it with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_bytes(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _label(path: str) -> str:
    """How messages name the file ``path``."""
    return "stdin" if path == "-" else path


def read_document(path: str) -> Any:
    """The first document of a YAML or JSON file (``-`` for stdin)."""
    raw = _read_bytes(path)
    try:
        docs = [
            d for d in yaml.load_all(raw.decode("utf-8"), Loader=_UniqueKeyLoader) if d is not None
        ]
    except UnicodeDecodeError:
        raise ValueError(f"{path!r} is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{path!r} is not valid YAML/JSON: {problem}{where}") from None
    if not docs:
        raise ValueError(f"{path!r} is empty")
    return docs[0]


def read_pod(path: str) -> Pod:
    """The pod to place from a PodSpec subset or a manifest (YAML or JSON)."""
    doc = read_document(path)
    return in_file(_label(path), lambda: parse_pod(doc))


def read_nodes(
    path: str | None,
    kubeconfig: str | None,
    context: str | None,
    now: float,
    timeout_s: float = 15.0,
) -> list[NodeInput] | None:
    """Candidate nodes from ``--nodes`` or ``--kubeconfig``; None when neither is given.

    ``timeout_s`` bounds each request to the API server."""
    if path is not None:
        doc = read_document(path)
        if isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
            items = doc["items"]  # kubectl get nodes,pods -A -o json
            return in_file(_label(path), lambda: kube.nodes_from_items(items, now=now))
        return in_file(_label(path), lambda: parse_nodes(doc, now=now))
    if kubeconfig is not None:
        return asyncio.run(kube.fetch_nodes(kubeconfig, context, now=now, timeout_s=timeout_s))
    return None


def read_raw_plugin_args(args_path: str | None) -> dict[str, Any]:
    """The args file's mapping of plugin name (canonical) to upstream-style args, not yet
    parsed; empty without a file."""
    if args_path is None:
        return {}
    doc = read_document(args_path)
    if not isinstance(doc, Mapping):
        raise ValueError(f"args file {args_path!r}: expected a mapping of plugin name to args")
    return {canonical_name(str(k)): v for k, v in doc.items()}


def read_plugin_args(names: list[str] | None, args_path: str | None) -> dict[str, Any]:
    """Typed args for the chosen plugins (all when none chosen) from an optional file.

    The file maps plugin names (any accepted spelling) to upstream-style args.
    """
    chosen = [canonical_name(n) for n in names] if names else list(registry.default_names())
    given = read_raw_plugin_args(args_path)
    return {name: parse_plugin_args(name, given.get(name)) for name in dict.fromkeys(chosen)}


def read_snapshot(
    source: str,
    *,
    now: float,
    window: str | None,
    fmt: str,
    max_age_s: float | None,
    timeout_s: float,
    retries: int,
    token: str | None = None,
    token_file: str | None = None,
    ca_file: str | None = None,
) -> Snapshot:
    """A snapshot from a watcher URL (fetched, age-checked) or a saved document.

    ``token``/``token_file`` and ``ca_file`` reach a protected or HTTPS watcher."""
    if source.startswith(("http://", "https://")):
        return fetch_snapshot(
            source,
            window=window,
            fmt=fmt,
            max_age_s=max_age_s,
            timeout_s=timeout_s,
            retries=retries,
            clock=lambda: now,
            token=token,
            token_file=token_file,
            ca_file=ca_file,
        )
    try:
        snapshot = load_snapshot(_read_bytes(source))
    except InvalidSnapshotError as exc:
        raise InvalidSnapshotError(f"{_label(source)}: {exc}") from None
    if max_age_s is not None:
        check_age(snapshot, now, max_age_s)
    return snapshot


def extra_windows(plugin_args: Mapping[str, Any]) -> set[str]:
    """The rollup windows the chosen plugins read (``Plugin.windows``), e.g. LoadAware's 5m."""
    out: set[str] = set()
    for name, args in plugin_args.items():
        windows = registry.get(name).windows
        if windows is not None:
            out |= windows(args)
    return out


def with_windows(snapshot: Snapshot, extra: list[Snapshot]) -> Snapshot:
    """``snapshot`` with the metrics of other windows placed *before* its own.

    The Trimaran plugins read the last AVG/Latest/STD of a type, so metrics placed first
    never change what they see; LoadAware and ``predict`` select windows by ``rollup``.
    """
    nodes: dict[str, NodeMetrics] = {}
    for name, node in snapshot.nodes.items():
        before = tuple(m for s in extra if name in s.nodes for m in s.nodes[name].metrics)
        nodes[name] = NodeMetrics(name, before + node.metrics, node.tags, node.metadata)
    return Snapshot(
        snapshot.timestamp,
        snapshot.duration,
        snapshot.start,
        snapshot.end,
        snapshot.source,
        nodes,
        snapshot.format,
    )
