"""The table of /watcher/health states: service-level reasons make the service unhealthy
(503), node-level ones only degraded (200) while the bad nodes stay within the share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.errors import ConfigError
from loadwatcher.pipeline import health
from loadwatcher.pipeline.health import Status
from tests.support.service import settings

NOW = 1000.0
MAX_AGE = 55.0


def names(n: int, prefix: str = "n") -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(n))


@dataclass(frozen=True)
class Case:
    """A healthy engine state of ``nodes`` nodes, with one thing changed."""

    nodes: int = 40
    stale: int = 0
    frozen: int = 0
    missing: int = 0
    provider_ok: bool = True
    error: str | None = None
    partial_errors: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()
    snapshot_at: float | None = NOW - 10
    journal_ok: bool = True
    share: float = 0.1
    service_problems: tuple[str, ...] = field(default=())

    def verdict(self) -> health.Verdict:
        provider = health.ProviderStatus(
            "prometheus",
            ok=self.provider_ok,
            last_attempt_at=NOW - 5,
            last_success_at=NOW - 5 if self.provider_ok else NOW - 100,
            error=self.error,
            partial_errors=list(self.partial_errors),
            notices=list(self.notices),
        )
        error = None if self.journal_ok else "disk full"
        journal = health.JournalStatus("lw.db", ok=self.journal_ok, error=error)
        # Stale and frozen nodes are in the snapshot; missing ones are not.
        return health.evaluate(
            NOW,
            provider,
            journal,
            self.snapshot_at,
            self.nodes,
            names(self.stale, "s"),
            MAX_AGE,
            missing_nodes=names(self.missing, "m"),
            frozen_nodes=names(self.frozen, "f"),
            known_nodes=self.nodes + self.missing,
            max_bad_node_share=self.share,
            service_problems=self.service_problems,
        )


# (case, status, HTTP code, a service-level reason starts with, a node-level one does)
TABLE = [
    pytest.param(Case(), Status.OK, 200, None, None, id="nothing wrong"),
    pytest.param(Case(stale=1), Status.DEGRADED, 200, None, "1 node stale: s0", id="1 stale"),
    pytest.param(Case(frozen=1), Status.DEGRADED, 200, None, "1 node frozen: f0", id="1 frozen"),
    pytest.param(
        Case(nodes=39, missing=1),
        Status.DEGRADED,
        200,
        None,
        "1 node known to the provider has no metrics: m0",
        id="1 missing",
    ),
    pytest.param(Case(stale=3), Status.DEGRADED, 200, None, "3 nodes stale", id="3 of 40"),
    pytest.param(
        Case(stale=2, frozen=1, nodes=39, missing=1),
        Status.DEGRADED,
        200,
        None,
        "2 nodes stale",
        id="4 of 40: at the limit",
    ),
    pytest.param(
        Case(stale=5),
        Status.UNHEALTHY,
        503,
        "5 of 40 nodes stale, frozen or missing (12%, limit 10%)",
        "5 nodes stale",
        id="5 of 40: past the limit",
    ),
    pytest.param(
        Case(nodes=5000, stale=1), Status.DEGRADED, 200, None, "1 node stale", id="1 of 5000"
    ),
    pytest.param(
        Case(nodes=3, stale=1), Status.UNHEALTHY, 503, "1 of 3 nodes", "1 node", id="1 of 3"
    ),
    pytest.param(
        Case(stale=1, share=0.0), Status.UNHEALTHY, 503, "1 of 40 nodes", "1 node", id="share 0"
    ),
    pytest.param(
        Case(nodes=4, stale=4, share=1.0), Status.DEGRADED, 200, None, "4 nodes", id="share 1"
    ),
    pytest.param(
        Case(provider_ok=False, error="connect: refused"),
        Status.UNHEALTHY,
        503,
        "provider down: connect",
        None,
        id="provider down",
    ),
    pytest.param(
        Case(snapshot_at=NOW - 120), Status.UNHEALTHY, 503, "snapshot is 120 s old", None, id="old"
    ),
    pytest.param(
        Case(snapshot_at=None, nodes=0),
        Status.UNHEALTHY,
        503,
        "no snapshot yet",
        None,
        id="no snapshot",
    ),
    pytest.param(
        Case(journal_ok=False), Status.UNHEALTHY, 503, "journal unwritable", None, id="journal"
    ),
    pytest.param(Case(nodes=0), Status.UNHEALTHY, 503, "no node has any sample", None, id="empty"),
    pytest.param(
        Case(partial_errors=("bad_query: cpu",)),
        Status.UNHEALTHY,
        503,
        "query failed: bad_query",
        None,
        id="a query failed",
    ),
    pytest.param(
        Case(notices=("add the recording rules",)),
        Status.UNHEALTHY,
        503,
        "add the recording rules",
        None,
        id="provider notice",
    ),
    pytest.param(
        Case(service_problems=("clock skew: 40 s",)),
        Status.UNHEALTHY,
        503,
        "clock skew",
        None,
        id="a service problem found elsewhere",
    ),
    pytest.param(
        Case(stale=1, provider_ok=False, error="timeout"),
        Status.UNHEALTHY,
        503,
        "provider down: timeout",
        "1 node stale",
        id="both levels",
    ),
]


@pytest.mark.parametrize(("case", "status", "code", "service", "node"), TABLE)
def test_health_states(
    case: Case, status: Status, code: int, service: str | None, node: str | None
) -> None:
    verdict = case.verdict()
    body = verdict.body
    assert verdict.status is status and body["status"] == str(status)
    assert (200 if verdict.healthy else 503) == code
    # A curl reader sees every reason once, and each in the list of its level.
    assert body["reasons"] == body["serviceReasons"] + body["nodeReasons"]
    if service is None:
        assert body["serviceReasons"] == []
    else:
        assert any(r.startswith(service) for r in body["serviceReasons"]), body
    if node is None:
        assert body["nodeReasons"] == []
    else:
        assert any(r.startswith(node) for r in body["nodeReasons"]), body
    bad = body["badNodes"]
    assert bad["count"] == case.stale + case.frozen + case.missing
    assert bad["of"] == case.nodes + case.missing and bad["maxShare"] == case.share
    assert len(body["snapshot"]["frozenNodes"]) == case.frozen


@given(
    total=st.integers(1, 10_000),
    data=st.data(),
    share=st.sampled_from([0.0, 0.01, 0.1, 0.25, 0.5, 1.0]),
)
def test_the_share_rule(total: int, data: st.DataObject, share: float) -> None:
    """Only service-level reasons and a share of bad nodes above the limit answer 503."""
    stale = data.draw(st.integers(0, total))
    frozen = data.draw(st.integers(0, total - stale))
    verdict = Case(nodes=total, stale=stale, frozen=frozen, share=share).verdict()
    bad = stale + frozen
    if bad * 1.0 / total > share:
        assert verdict.status is Status.UNHEALTHY
    elif bad:
        assert verdict.status is Status.DEGRADED and verdict.healthy
    else:
        assert verdict.status is Status.OK


def test_max_bad_node_share_setting() -> None:
    assert settings({}).health.max_bad_node_share == 0.1
    env = {"LOADWATCHER_HEALTH_MAX_BAD_NODE_SHARE": "0.25"}
    assert settings(env).health.max_bad_node_share == 0.25
    with pytest.raises(
        ConfigError, match=re.escape("expected a fraction between 0 and 1, got '1.5'")
    ):
        settings({"LOADWATCHER_HEALTH_MAX_BAD_NODE_SHARE": "1.5"})
