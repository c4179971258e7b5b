"""Health of the service as one pure judgement over the engine's state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loadwatcher.words import plural


@dataclass
class ProviderStatus:
    """The outcome of the latest fetch."""

    name: str
    ok: bool = False
    last_attempt_at: float | None = None
    last_success_at: float | None = None
    error: str | None = None
    error_kind: str | None = None
    polling: bool = False
    partial_errors: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    # Information that is no reason (a documented fallback in use): shown, never unhealthy.
    notes: list[str] = field(default_factory=list)
    # While the provider asked for a back-off (Retry-After), when the next poll may start.
    backoff_until: float | None = None


@dataclass
class JournalStatus:
    """Whether samples and snapshots are being persisted."""

    path: str | None
    ok: bool = True
    error: str | None = None
    quarantined: str | None = None
    # The journal found held another source's data, moved aside: said until the first good
    # poll is written.
    other_source: str | None = None

    @property
    def enabled(self) -> bool:
        return self.path is not None


class Status(StrEnum):
    """The service's state: ``ok`` and ``degraded`` answer 200, ``unhealthy`` 503."""

    OK = "ok"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"


# Above this share of stale, frozen or missing nodes the fleet's data is no longer mostly
# usable: a tenth keeps one bad node of a ten-node cluster a warning, and a third of a
# three-node cluster an outage.
DEFAULT_MAX_BAD_NODE_SHARE = 0.1


@dataclass(frozen=True)
class Verdict:
    """``healthy`` is what the HTTP code says: true for ``ok`` and ``degraded``."""

    status: Status
    body: dict[str, Any]

    @property
    def healthy(self) -> bool:
        return self.status is not Status.UNHEALTHY


def _listed(nodes: tuple[str, ...], what: str) -> str:
    return f"{plural(len(nodes), 'node')} {what}: {', '.join(nodes[:10])}"


def evaluate(
    now: float,
    provider: ProviderStatus,
    journal: JournalStatus,
    snapshot_taken_at: float | None,
    nodes: int,
    stale_nodes: tuple[str, ...],
    max_snapshot_age_s: float,
    missing_nodes: tuple[str, ...] = (),
    frozen_nodes: tuple[str, ...] = (),
    known_nodes: int | None = None,
    max_bad_node_share: float = DEFAULT_MAX_BAD_NODE_SHARE,
    service_problems: tuple[str, ...] = (),
    gone_nodes: Sequence[Mapping[str, Any]] = (),
    gone_count: int | None = None,
) -> Verdict:
    """Service-level reasons make the service ``unhealthy`` (503); node-level ones only
    ``degraded`` (200) while the bad nodes are at most ``max_bad_node_share`` of
    ``known_nodes`` (the analysed nodes, missing ones included; by default ``nodes`` plus
    the missing). ``service_problems`` are service-level reasons found elsewhere (clock
    skew, once it is measured). ``gone_nodes`` left the snapshot (``engine.gone``, the first
    of ``gone_count``, default all of them): listed, and named in a note, never bad nodes."""
    gone_count = len(gone_nodes) if gone_count is None else gone_count
    service: list[str] = []
    # Until a poll finishes, ``error`` is None and ``ok`` False: that is not an outage.
    first_poll_running = provider.polling and provider.error is None and not provider.ok
    if provider.last_attempt_at is None:
        service.append("provider not polled yet")
    elif first_poll_running:
        started = max(0.0, now - provider.last_attempt_at)
        service.append(f"first poll in progress (started {started:.0f} s ago)")
    elif not provider.ok:
        service.append(f"provider down: {provider.error}")
    if snapshot_taken_at is None and not first_poll_running and provider.error is not None:
        service.append("no snapshot yet: the last poll failed")
    elif snapshot_taken_at is None and not first_poll_running:
        service.append("no snapshot yet: the first poll has not completed")
    age = None if snapshot_taken_at is None else max(0.0, now - snapshot_taken_at)
    if age is not None and age > max_snapshot_age_s:
        service.append(f"snapshot is {age:.0f} s old (limit {max_snapshot_age_s:.0f} s)")
    service.extend(f"query failed: {e}" for e in provider.partial_errors)
    if provider.backoff_until is not None and provider.backoff_until > now:
        service.append(
            "backing off as the provider asked (Retry-After): next poll in "
            f"{provider.backoff_until - now:.0f} s"
        )
    service.extend(provider.notices)
    # Service-level although the data served is right: the next restart starts without
    # history, and only an operator can free the disk or fix the volume.
    if journal.enabled and not journal.ok:
        service.append(f"journal unwritable, running without persistence: {journal.error}")
    if journal.other_source is not None:
        service.append(journal.other_source)
    service.extend(service_problems)
    if snapshot_taken_at is not None and nodes == 0:
        service.append("no node has any sample")

    node: list[str] = []
    if stale_nodes:
        node.append(_listed(stale_nodes, "stale"))
    if frozen_nodes:
        node.append(_listed(frozen_nodes, "frozen"))
    if missing_nodes:
        have = "has" if len(missing_nodes) == 1 else "have"
        node.append(_listed(missing_nodes, f"known to the provider {have} no metrics"))
    bad = len({*stale_nodes, *frozen_nodes, *missing_nodes})
    of = nodes + len(missing_nodes) if known_nodes is None else max(known_nodes, bad)
    share = bad / of if of else 0.0
    if bad and share > max_bad_node_share:
        service.append(
            f"{bad} of {plural(of, 'node')} stale, frozen or missing "
            f"({share:.0%}, limit {max_bad_node_share:.0%})"
        )

    if service:
        status = Status.UNHEALTHY
    elif node:
        status = Status.DEGRADED
    else:
        status = Status.OK
    body: dict[str, Any] = {
        "status": str(status),
        "reasons": service + node,
        "serviceReasons": service,
        "nodeReasons": node,
        "notes": [*provider.notes, *_gone_note(gone_nodes, gone_count)],
        "badNodes": {
            "count": bad,
            "of": of,
            "share": round(share, 4),
            "maxShare": max_bad_node_share,
        },
        "provider": {
            "name": provider.name,
            "ok": provider.ok,
            "lastAttempt": provider.last_attempt_at,
            "lastSuccess": provider.last_success_at,
            "error": provider.error,
            "errorKind": provider.error_kind,
            "backoffUntil": provider.backoff_until,
        },
        "journal": {
            "enabled": journal.enabled,
            "ok": journal.ok,
            "path": journal.path,
            "error": journal.error,
            "quarantined": journal.quarantined,
            "otherSource": journal.other_source,
        },
        "snapshot": {
            "takenAt": snapshot_taken_at,
            "ageSeconds": None if age is None else round(age, 3),
            "nodes": nodes,
            "staleNodes": list(stale_nodes[:50]),
            "frozenNodes": list(frozen_nodes[:50]),
            "missingNodes": list(missing_nodes[:50]),
            "goneNodes": [dict(g) for g in gone_nodes[:50]],
            "goneNodeCount": gone_count,
        },
    }
    return Verdict(status, body)


def _gone_note(gone_nodes: Sequence[Mapping[str, Any]], count: int) -> list[str]:
    if not count:
        return []
    names = ", ".join(str(g["node"]) for g in gone_nodes[:5])
    more = f" and {count - 5} more" if count > 5 else ""
    return [
        f"{plural(count, 'node')} gone (no sample for the retention; not counted "
        f"as bad): {names}{more}; `loadwatcher forget NODE` lets one go"
    ]
