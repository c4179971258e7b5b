"""Client for ``GET /watcher``: fetch, validate, check age, retry, return typed data.

Both wire formats are read (see docs/architecture.md, Wire formats): the default one
(``data.NodeMetricsMap``, as the Go paypal/load-watcher client decodes it) and the KEP one
(``?format=kep``: ``data`` keyed by node, ``rollup`` holding the operator, lowercase
``type``). Either is returned as the same :class:`Snapshot`, with metric types in wire
spelling (``CPU``, ``Memory``) and the operator in ``operator``.

    async with WatcherClient("http://loadwatcher:2020", max_age_s=300) as client:
        snap = await client.fetch(window="5m")

    snap = fetch_snapshot("http://loadwatcher:2020")          # scripts: sync wrapper

Transient failures (connection errors, timeouts, HTTP 429/5xx) are retried with exponential
backoff; everything else fails at once. All failures are :class:`ClientError` subclasses.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson

from loadwatcher.errors import ClientError
from loadwatcher.words import plural

__all__ = [
    "InvalidSnapshotError",
    "Metric",
    "NodeMetrics",
    "NodeNotFoundError",
    "Snapshot",
    "StaleSnapshotError",
    "WatcherClient",
    "WatcherUnavailableError",
    "check_age",
    "fetch_snapshot",
    "load_snapshot",
    "parse_metric",
    "parse_snapshot",
]

OPERATORS = frozenset({"AVG", "STD", "Latest", "P50", "P90", "P95", "P99", "MAX", "MIN"})
_TYPES = {
    "cpu": "CPU",
    "memory": "Memory",
    "bandwidth": "Bandwidth",
    "network": "Bandwidth",
    "storage": "Storage",
    "disk": "Storage",
    "energy": "Energy",
}
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class InvalidSnapshotError(ClientError):
    """The answer is not a valid /watcher document (bad JSON, schema violation)."""


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
    if not isinstance(kind, str):
        raise ValueError(f"metric type must be a string, got {kind!r}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"metric value must be a number, got {value!r}")
    rollup = raw.get("rollup", "")
    operator = raw.get("operator")
    if operator is None and isinstance(rollup, str) and rollup.upper() in _KEP_OPERATORS:
        operator, rollup = _KEP_OPERATORS[rollup.upper()], default_rollup
    if not isinstance(operator, str) or not isinstance(rollup, str):
        raise ValueError(f"metric operator and rollup must be strings in {dict(raw)!r}")
    name = raw.get("name", "")
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


def parse_snapshot(doc: Any, *, fmt: str | None = None, validate: bool = True) -> Snapshot:
    """Turn a decoded /watcher document into a :class:`Snapshot` (pure; no I/O).

    ``fmt`` is ``"default"`` or ``"kep"``; None detects it from ``data.NodeMetricsMap``.
    """
    if not isinstance(doc, dict):
        raise InvalidSnapshotError("watcher document is not a JSON object")
    data = doc.get("data")
    if fmt is None:
        fmt = "default" if isinstance(data, dict) and "NodeMetricsMap" in data else "kep"
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
            metrics = tuple(parse_metric(m, duration) for m in raw.get("metrics") or ())
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


def _watcher_url(base_url: str) -> str:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(f"watcher URL must be http(s)://host[:port][/watcher], got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/watcher"):
        path += "/watcher"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class WatcherClient:
    """Async client for one load watcher. Use as an async context manager or call close()."""

    def __init__(
        self,
        base_url: str,
        *,
        max_age_s: float | None = 300.0,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        validate: bool = True,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.url = _watcher_url(base_url)
        self.max_age_s = max_age_s
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.validate = validate
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._own_session = session is None
        self._clock = clock
        self._sleep = sleep

    async def __aenter__(self) -> WatcherClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session if this client created it."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(
        self, *, window: str | None = None, fmt: str = "default", host: str | None = None
    ) -> Snapshot:
        """GET /watcher with ``?window``/``?format``/``?host``; validated, age-checked."""
        params = {k: v for k, v in (("window", window), ("host", host)) if v}
        if fmt == "kep":
            params["format"] = "kep"
        body = await self._get(params)
        snapshot = load_snapshot(body, validate=self.validate)
        check_age(snapshot, self._clock(), self.max_age_s)
        return snapshot

    async def _get(self, params: dict[str, str]) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
            try:
                async with self._session.get(
                    self.url, params=params, timeout=self._timeout
                ) as resp:
                    body = await resp.read()
                    if resp.status == 200:
                        return body
                    if resp.status == 404 and "host" in params:
                        raise NodeNotFoundError(f"watcher knows no node {params['host']!r}")
                    if resp.status not in _TRANSIENT_STATUS:
                        raise ClientError(
                            f"watcher answered HTTP {resp.status} for {self.url}: "
                            f"{body[:200].decode(errors='replace')}"
                        )
                    last = f"HTTP {resp.status}"
                    delay = max(delay, _retry_after(resp.headers.get("Retry-After")))
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempt < self.retries:
                await self._sleep(min(delay, self.max_backoff_s))
        raise WatcherUnavailableError(
            f"watcher {self.url} failed after {plural(self.retries + 1, 'attempt')}: {last}"
        )


def _retry_after(header: str | None) -> float:
    try:
        return max(0.0, float(header)) if header else 0.0
    except ValueError:
        return 0.0


def fetch_snapshot(
    base_url: str,
    *,
    window: str | None = None,
    fmt: str = "default",
    host: str | None = None,
    **options: Any,
) -> Snapshot:
    """Blocking wrapper around :meth:`WatcherClient.fetch` for scripts."""

    async def run() -> Snapshot:
        async with WatcherClient(base_url, **options) as client:
            return await client.fetch(window=window, fmt=fmt, host=host)

    return asyncio.run(run())
