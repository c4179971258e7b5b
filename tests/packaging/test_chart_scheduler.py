"""The chart's optional second scheduler (``scheduler.enabled``): its Trimaran profile reads
this release's Service, its arguments are the upstream plugins' (checked by the strict
parser of ``loadwatcher score --args``), and its RBAC is the built-in scheduler's plus its
own lease.

No cluster runs here: that a pod with the profile's ``schedulerName`` is placed by load
is not exercised, only that every piece the scheduler reads is wired to the release.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from loadwatcher.scoring.registry import parse_plugin_args
from tests.support import helm
from tests.support.manifests import find, one

ENABLED = {"scheduler": {"enabled": True}}
PLACES = [
    # (release, namespace, values)
    ("loadwatcher", "loadwatcher", {}),
    ("prod", "scheduling", {"config": {"server": {"port": 8080}}}),
    ("x", "kube-system", {"fullnameOverride": "watcher", "clusterDomain": "corp.internal"}),
]


def scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(objs, "Deployment", next(iter(_scheduler_names(objs))))
    (arg,) = [
        a
        for a in deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        if a.startswith("--config=")
    ]
    path = arg.removeprefix("--config=")
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"][:1]
    (mount,) = [
        m
        for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == volume["name"]
    ]
    cm = one(objs, "ConfigMap", volume["configMap"]["name"])
    doc: dict[str, Any] = yaml.safe_load(cm["data"][path.removeprefix(mount["mountPath"] + "/")])
    return doc


def _scheduler_names(objs: list[dict[str, Any]]) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in find(objs, "Deployment")
        if o["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"
    }


def render(values: dict[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
    merged = {
        **(values or {}),
        "scheduler": {**ENABLED["scheduler"], **(values or {}).get("scheduler", {})},
    }
    return helm.template(merged, **kw)


def test_no_scheduler_unless_enabled() -> None:
    objs = helm.template()
    assert not any(o["metadata"]["name"].endswith("scheduler") for o in objs)
    assert not any("scheduler" in o["metadata"]["name"] for o in find(objs, "ConfigMap"))


@pytest.mark.parametrize(("release", "namespace", "values"), PLACES)
def test_every_plugin_reads_this_releases_service(release, namespace, values) -> None:
    objs = render(values, release=release, namespace=namespace)
    service = one(objs, "Service")
    (port,) = service["spec"]["ports"]
    domain = values.get("clusterDomain", "cluster.local")
    address = f"http://{service['metadata']['name']}.{namespace}.svc.{domain}:{port['port']}"
    cfg = scheduler_config(objs)
    addresses = [c["args"]["watcherAddress"] for p in cfg["profiles"] for c in p["pluginConfig"]]
    assert addresses and set(addresses) == {address}
    # The Service's port is the container's, and the service listens there.
    container = next(
        o for o in find(objs, "Deployment") if o["metadata"]["name"] not in _scheduler_names(objs)
    )["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == port["port"]


def test_the_profile_scores_by_load_and_keeps_the_fit_filter() -> None:
    cfg = scheduler_config(render())
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    (profile,) = cfg["profiles"]
    assert profile["schedulerName"] == "trimaran"
    enabled = {p["name"]: p["weight"] for p in profile["plugins"]["multiPoint"]["enabled"]}
    assert enabled == {"TargetLoadPacking": 3, "LoadVariationRiskBalancing": 1}
    disabled = {p["name"] for p in profile["plugins"]["score"]["disabled"]}
    assert disabled == {"NodeResourcesBalancedAllocation", "NodeResourcesFit"}
    assert "filter" not in profile["plugins"]  # NodeResourcesFit's filter stays on
    args = {c["name"]: c["args"] for c in profile["pluginConfig"]}
    assert args["TargetLoadPacking"]["targetUtilization"] == 40
    assert args["TargetLoadPacking"]["defaultRequestsMultiplier"] == "1.5"


def test_plugin_arguments_are_the_upstream_plugins_own() -> None:
    values = {
        "scheduler": {
            "lowRiskOverCommitment": {"enabled": True},
            "targetLoadPacking": {"args": {"targetUtilization": 60}},
            "loadVariationRiskBalancing": {"weight": 2, "args": {"safeVarianceMargin": 1.5}},
        }
    }
    cfg = scheduler_config(render(values))
    by_name = {p["schedulerName"]: p for p in cfg["profiles"]}
    assert set(by_name) == {"trimaran", "trimaran-overcommit"}
    overcommit = by_name["trimaran-overcommit"]
    assert [p["name"] for p in overcommit["plugins"]["multiPoint"]["enabled"]] == [
        "LowRiskOverCommitment"
    ]
    for profile in cfg["profiles"]:
        for plugin in profile["pluginConfig"]:
            parse_plugin_args(plugin["name"], plugin["args"])  # strict: unknown keys fail
    args = {c["name"]: c["args"] for p in cfg["profiles"] for c in p["pluginConfig"]}
    assert (
        parse_plugin_args("TargetLoadPacking", args["TargetLoadPacking"]).target_utilization == 60
    )
    lvrb = by_name["trimaran"]["plugins"]["multiPoint"]["enabled"][1]
    assert lvrb == {"name": "LoadVariationRiskBalancing", "weight": 2}


def test_a_disabled_plugin_leaves_the_profile() -> None:
    cfg = scheduler_config(render({"scheduler": {"targetLoadPacking": {"enabled": False}}}))
    (profile,) = cfg["profiles"]
    assert [p["name"] for p in profile["pluginConfig"]] == ["LoadVariationRiskBalancing"]


def test_rbac_is_the_built_in_schedulers_and_its_own_lease() -> None:
    objs = render(release="prod", namespace="scheduling")
    (name,) = _scheduler_names(objs)
    account = one(objs, "ServiceAccount", name)
    subject = {"kind": "ServiceAccount", "name": name, "namespace": "scheduling"}
    assert account["metadata"]["namespace"] == "scheduling"
    bound = {
        b["roleRef"]["name"] for b in find(objs, "ClusterRoleBinding") if b["subjects"] == [subject]
    }
    assert bound == {"system:kube-scheduler", "system:volume-scheduler"}
    assert find(objs, "ClusterRole") == []  # nothing beyond the cluster's own roles
    election = scheduler_config(objs)["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceNamespace"] == "scheduling"
    role = one(objs, "Role", f"{name}-leader-election")
    (named,) = [r for r in role["rules"] if r.get("resourceNames")]
    assert named["resourceNames"] == [election["resourceName"]]
    assert set(named["verbs"]) == {"get", "update"}
    reader = [b for b in find(objs, "RoleBinding") if b["metadata"]["namespace"] == "kube-system"]
    assert [b["roleRef"]["name"] for b in reader] == ["extension-apiserver-authentication-reader"]
    assert reader[0]["subjects"] == [subject]
    deployment = one(objs, "Deployment", name)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == name


def test_the_scheduler_runs_the_documented_scheduler_plugins_image() -> None:
    objs = render()
    (name,) = _scheduler_names(objs)
    container = one(objs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
    image = container["image"]
    assert image.startswith("registry.k8s.io/scheduler-plugins/kube-scheduler:v0.")
    tag = image.rsplit(":", 1)[1]
    readme = (helm.CHART / "README.md").read_text(encoding="utf-8")
    assert f"kube-scheduler:{tag}" in readme
    assert "kubescheduler.config.k8s.io/v1" in readme
    assert re.fullmatch(r"v0\.\d+\.\d+", tag)
    ctx = container["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
