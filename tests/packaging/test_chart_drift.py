"""The chart and deploy/ (kustomize) render the same thing for the same settings.

For the base and every overlay, the chart is given the overlay's configuration and the
values that mirror its patches; then every object deploy/ renders (the Namespace aside: Helm
installs into one with ``--create-namespace``) must come out of the chart the same, after
taking away what is Helm's by construction: its extra labels (instance, version, chart,
managed-by; the ConfigMap's labels), the config checksum annotation, the ConfigMap's name
(kustomize adds a hash) and the cluster-scoped names (the chart prefixes the release's
namespace). The configuration the chart renders must resolve to the same settings as the
overlay's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadwatcher import config
from loadwatcher.providers import registry
from tests.support import helm
from tests.support.manifests import find, kustomize, one

DEPLOY = helm.ROOT / "deploy"
HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}
CONFIG_NAME = "<config>"
MONITORED = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
# What each target's patches say, as chart values.
MIRROR: dict[str, dict[str, Any]] = {
    "base": {},
    "overlays/prometheus": {"metrics": {**MONITORED, "recordingRules": {"enabled": True}}},
    "overlays/metrics-server": {"metrics": MONITORED},
    "overlays/influxdb": {
        "metrics": MONITORED,
        "providerToken": {"secretName": "loadwatcher-influxdb", "key": "token", "optional": True},
    },
    "overlays/push": {
        "metrics": MONITORED,
        "push": {"writerTokens": {"existingSecret": "loadwatcher-push-tokens"}},
    },
}


def chart_defaults() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((helm.CHART / "values.yaml").read_text("utf-8"))
    return values


def replacing(default: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """Values that turn ``default`` into ``wanted`` under Helm's merge (null deletes a key)."""
    out: dict[str, Any] = {k: None for k in default if k not in wanted}
    for k, v in wanted.items():
        base = default.get(k)
        out[k] = replacing(base, v) if isinstance(v, dict) and isinstance(base, dict) else v
    return out


def overlay_config(target: str) -> str:
    text = (DEPLOY / target / "config.yaml").read_text(encoding="utf-8")
    return text


def chart_values(target: str) -> dict[str, Any]:
    wanted = yaml.safe_load(overlay_config(target))
    # journal.path is the chart's to set (on its journal volume); the overlays use the same.
    assert wanted["journal"]["path"] == "/var/lib/loadwatcher/loadwatcher.db"
    # So is the writers' token file (from push.writerTokens): the push overlay's is the same.
    if "push" in wanted:
        assert wanted["push"].pop("token_file") == "/etc/loadwatcher/push-tokens/tokens"
    values = {"config": replacing(chart_defaults()["config"], wanted)}
    values.update(copy.deepcopy(MIRROR[target]))
    return values


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            # A Service's selector is a plain label map too.
            plain = isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
            if k in ("labels", "matchLabels") or (k == "selector" and plain):
                v = {lk: lv for lk, lv in v.items() if lk not in HELM_LABELS}
            out[k] = _strip(v)
        return out
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def normalise(obj: dict[str, Any]) -> dict[str, Any]:
    obj = _strip(copy.deepcopy(obj))
    meta = obj["metadata"]
    if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
        meta["name"] = "<cluster-scoped>"
    if obj["kind"] == "ClusterRoleBinding":
        obj["roleRef"]["name"] = "<cluster-scoped>"
    if obj["kind"] == "ConfigMap":
        meta["name"] = CONFIG_NAME
        meta.pop("labels", None)  # kustomize's generator labels nothing; the chart labels all
        obj["data"] = {"config.yaml": "<compared as settings>"}
    template = obj.get("spec", {}).get("template")
    if template:
        annotations = template["metadata"].pop("annotations", {})
        annotations.pop("checksum/config", None)
        if annotations:
            template["metadata"]["annotations"] = annotations
        for volume in template["spec"].get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = CONFIG_NAME
    return obj


def _identity(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


TARGETS = list(MIRROR)


@pytest.fixture(scope="module")
def both() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    return {
        target: (kustomize(DEPLOY / target), helm.template(chart_values(target)))
        for target in TARGETS
    }


@pytest.mark.parametrize("target", TARGETS)
def test_the_chart_renders_the_same_deployment(target: str, both) -> None:
    ours, theirs = both[target]
    assert normalise(one(theirs, "Deployment")) == normalise(one(ours, "Deployment"))


@pytest.mark.parametrize("target", TARGETS)
def test_the_chart_renders_every_object_deploy_renders(target: str, both) -> None:
    kustomized, charted = both[target]
    expected = sorted((normalise(o) for o in kustomized if o["kind"] != "Namespace"), key=_identity)
    got = sorted((normalise(o) for o in charted), key=_identity)
    assert [_identity(o) for o in got] == [_identity(o) for o in expected]
    assert got == expected


@pytest.mark.parametrize("target", TARGETS)
def test_the_chart_config_resolves_to_the_overlays_settings(target: str, both, tmp_path) -> None:
    kustomized, charted = both[target]
    env = {"LOADWATCHER_PUSH_TOKEN_FILE": str(tmp_path / "tokens")}
    (tmp_path / "tokens").write_text("a-writer-token\n")

    def settings(objs: list[dict[str, Any]]) -> Any:
        (cm,) = find(objs, "ConfigMap")
        return config.resolve(cm["data"]["config.yaml"], env, catalogue=registry.catalogue())

    assert settings(charted) == settings(kustomized)


def test_the_normalisation_keeps_what_matters(both) -> None:
    """A changed probe, resource or volume still tells the two apart."""
    ours, theirs = both["base"]
    for path, value in (
        (("containers", 0, "livenessProbe", "httpGet", "path"), "/livez"),
        (("containers", 0, "resources", "limits", "memory"), "1Gi"),
        (("volumes", 1, "emptyDir", "sizeLimit"), "1Gi"),
        (("automountServiceAccountToken",), True),
    ):
        changed = copy.deepcopy(one(theirs, "Deployment"))
        node: Any = changed["spec"]["template"]["spec"]
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        assert normalise(changed) != normalise(one(ours, "Deployment")), path


def test_replacing_deletes_the_defaults_the_overlay_lacks() -> None:
    values = replacing({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 5}})
    assert values == {"a": {"b": 5, "c": None}, "d": None}


def test_chart_files_are_the_deploy_files() -> None:
    """The rules and the dashboard the chart ships are deploy/'s and dashboards/' own."""
    pairs = {
        "files/prometheusrule-alerts.yaml": (
            "deploy/components/monitoring/prometheusrule-alerts.yaml"
        ),
        "files/prometheusrule-recording-rules.yaml": (
            "deploy/components/recording-rules/prometheusrule.yaml"
        ),
        "files/loadwatcher.json": "dashboards/loadwatcher.json",
    }
    for ours, theirs in pairs.items():
        assert (helm.CHART / ours).read_bytes() == Path(helm.ROOT / theirs).read_bytes(), ours
