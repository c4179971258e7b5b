"""Every provider with every subset of TLS, readers' tokens, a PVC journal and the
scheduler (80 combinations), rendered by the real helm and validated against the newest
Kubernetes schemas; the scheduler with TLS or tokens is refused. The deeper checks of each
kind of combination are in test_chart.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import helm
from tests.support.manifests import K8S_VERSIONS, find, validate

TOKENS = ["reader-one"]
WRITERS = {"writerTokens": {"tokens": ["writer-one"]}}

PROVIDERS: dict[str, dict[str, Any]] = {
    "host": {"config": {"provider": {"name": "host", "address": None}}},
    "prometheus": {},
    "influxdb": {"config": {"provider": {"name": "influxdb"}}},
    "metrics-server": {"config": {"provider": {"name": "metrics-server", "address": None}}},
    "push": {"config": {"provider": {"name": "push", "address": None}}, "push": WRITERS},
}
SWITCHES: dict[str, dict[str, Any]] = {
    "tls": {"tls": {"secretName": "loadwatcher-tls"}},
    "auth": {"auth": {"readerTokens": {"tokens": TOKENS}}},
    "pvc": {"journal": {"persistence": {"enabled": True}}},
    "scheduler": {"scheduler": {"enabled": True}},
}
PRODUCT = [
    (name, tuple(s for i, s in enumerate(SWITCHES) if bits >> i & 1))
    for name in PROVIDERS
    for bits in range(2 ** len(SWITCHES))
]


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = (
                merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
            )
    return out


@pytest.mark.parametrize(
    ("name", "switches"), PRODUCT, ids=[f"{n}-{'-'.join(s) or 'plain'}" for n, s in PRODUCT]
)
def test_every_combination_renders_validates_or_is_refused(name: str, switches) -> None:
    """Every provider with every subset of TLS, auth, PVC and scheduler: the scheduler with
    TLS or readers' tokens is refused (its plugins could not read the watcher); every other
    combination renders objects that validate, with one replica where pushes arrive or one
    claim holds the journal."""
    values = merged(PROVIDERS[name], *(SWITCHES[s] for s in switches))
    if "scheduler" in switches and {"tls", "auth"} & set(switches):
        assert "scheduler.enabled" in helm.template_error(values)
        return
    objs = helm.template(values)
    for obj in objs:
        validate(obj, K8S_VERSIONS[-1])
    replicas = helm.service_deployment(objs)["spec"]["replicas"]
    assert replicas == (1 if name == "push" or "pvc" in switches else 2)
    assert bool(find(objs, "ClusterRole")) is (name == "metrics-server")
    schedulers = [o for o in find(objs, "ConfigMap") if "scheduler-config.yaml" in o["data"]]
    assert len(schedulers) == ("scheduler" in switches)
