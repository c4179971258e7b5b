"""Health of the service as one pure judgement over the engine's state."""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass
class JournalStatus:
    """Whether samples and snapshots are being persisted."""

    path: str | None
    ok: bool = True
    error: str | None = None
    quarantined: str | None = None

    @property
    def enabled(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    body: dict[str, Any]


def evaluate(
    now: float,
    provider: ProviderStatus,
    journal: JournalStatus,
    snapshot_taken_at: float | None,
    nodes: int,
    stale_nodes: tuple[str, ...],
    max_snapshot_age_s: float,
    missing_nodes: tuple[str, ...] = (),
) -> Verdict:
    """200 only when the provider answered, the snapshot is fresh and the journal writes."""
    reasons: list[str] = []
    # Until a poll finishes, ``error`` is None and ``ok`` False: that is not an outage.
    first_poll_running = provider.polling and provider.error is None and not provider.ok
    if provider.last_attempt_at is None:
        reasons.append("provider not polled yet")
    elif first_poll_running:
        started = max(0.0, now - provider.last_attempt_at)
        reasons.append(f"first poll in progress (started {started:.0f} s ago)")
    elif not provider.ok:
        reasons.append(f"provider down: {provider.error}")
    if snapshot_taken_at is None and not first_poll_running and provider.error is not None:
        reasons.append("no snapshot yet: the last poll failed")
    elif snapshot_taken_at is None and not first_poll_running:
        reasons.append("no snapshot yet: the first poll has not completed")
    age = None if snapshot_taken_at is None else max(0.0, now - snapshot_taken_at)
    if age is not None and age > max_snapshot_age_s:
        reasons.append(f"snapshot is {age:.0f} s old (limit {max_snapshot_age_s:.0f} s)")
    reasons.extend(f"query failed: {e}" for e in provider.partial_errors)
    reasons.extend(provider.notices)
    if journal.enabled and not journal.ok:
        reasons.append(f"journal unwritable, running without persistence: {journal.error}")
    if snapshot_taken_at is not None and nodes == 0:
        reasons.append("no node has any sample")
    if stale_nodes:
        reasons.append(f"{plural(len(stale_nodes), 'node')} stale: {', '.join(stale_nodes[:10])}")
    if missing_nodes:
        have = "has" if len(missing_nodes) == 1 else "have"
        reasons.append(
            f"{plural(len(missing_nodes), 'node')} known to the provider {have} no metrics: "
            f"{', '.join(missing_nodes[:10])}"
        )
    body: dict[str, Any] = {
        "status": "ok" if not reasons else "unhealthy",
        "reasons": reasons,
        "provider": {
            "name": provider.name,
            "ok": provider.ok,
            "lastAttempt": provider.last_attempt_at,
            "lastSuccess": provider.last_success_at,
            "error": provider.error,
            "errorKind": provider.error_kind,
        },
        "journal": {
            "enabled": journal.enabled,
            "ok": journal.ok,
            "path": journal.path,
            "error": journal.error,
            "quarantined": journal.quarantined,
        },
        "snapshot": {
            "takenAt": snapshot_taken_at,
            "ageSeconds": None if age is None else round(age, 3),
            "nodes": nodes,
            "staleNodes": list(stale_nodes[:50]),
            "missingNodes": list(missing_nodes[:50]),
        },
    }
    return Verdict(not reasons, body)
