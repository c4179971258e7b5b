"""Scoring input is strict: an unknown key is refused with its path, at any depth.

A misspelt ``container:`` or a recent pod nested under ``pod:`` used to read as a pod that
requests nothing. Whole Kubernetes manifests keep their other fields; the ones scoring reads
are checked.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.scoring import inputs
from loadwatcher.scoring.cases import run_case, run_case_file
from loadwatcher.scoring.cli import main
from loadwatcher.scoring.pods import SUBSET_KEYS, parse_pod
from loadwatcher.scoring.registry import parse_plugin_args
from tests.support.scoring_support import REPO, reference

NOW = 1_700_000_000
RES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}


def res() -> dict[str, Any]:
    """A fresh copy: a key added to one container must not show up in another."""
    return copy.deepcopy(RES)


def case(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "strict",
        "plugin": "TargetLoadPacking",
        "args": {},
        "now": NOW,
        "window": {"duration": "15m", "start": NOW - 900, "end": NOW},
        "nodes": [
            {
                "name": "a",
                "capacity": {"cpu": "4", "memory": "8Gi"},
                "metrics": [{"name": "x", "type": "CPU", "operator": "AVG", "value": 10}],
            },
            {
                "name": "b",
                "capacity": {"cpu": "4", "memory": "8Gi"},
                "metrics": [{"name": "x", "type": "CPU", "operator": "AVG", "value": 20}],
                "pods": [{"containers": [{"resources": res()}]}],
                "recentPods": [{"containers": [{"resources": res()}], "ageSeconds": 5}],
            },
        ],
        "pod": {"containers": [{"name": "app", "resources": res()}], "initContainers": []},
        "expect": {},
    }
    doc.update(changes)
    return doc


def with_key(doc: dict[str, Any], path: list[str | int], key: str, value: Any = 1) -> Any:
    out = copy.deepcopy(doc)
    target: Any = out
    for step in path:
        target = target[step]
    target[key] = value
    return out


def test_valid_case_scores() -> None:
    assert set(run_case(case())["scores"]) == {"a", "b"}


@pytest.mark.parametrize(
    ("path", "key", "where"),
    [
        ([], "plugn", ""),
        (["window"], "durration", "window"),
        (["nodes", 1], "capcity", "nodes[1]"),
        (["nodes", 0, "metrics", 0], "valu", "nodes[0].metrics[0]"),
        (["nodes", 1, "pods", 0], "container", "nodes[1].pods[0]"),
        (["nodes", 1, "pods", 0, "containers", 0], "resource", "nodes[1].pods[0].containers[0]"),
        (["nodes", 1, "recentPods", 0], "pod", "nodes[1].recentPods[0]"),
        (
            ["nodes", 1, "recentPods", 0, "containers", 0, "resources"],
            "request",
            "nodes[1].recentPods[0].containers[0].resources",
        ),
        (["pod"], "container", "pod"),
        (["pod", "containers", 0], "image", "pod.containers[0]"),
        (["pod", "containers", 0, "resources"], "requestz", "pod.containers[0].resources"),
    ],
)
def test_case_unknown_key_is_refused_with_its_path(
    tmp_path: Path, path: list[str | int], key: str, where: str
) -> None:
    file = tmp_path / "case.json"
    file.write_text(json.dumps(with_key(case(), path, key)))
    with pytest.raises(ValueError) as info:
        run_case_file(file)
    prefix = f"{file}: {where}: " if where else f"{file}: "
    assert str(info.value).startswith(f"{prefix}unknown key {key!r} (known: ")


def test_recent_pod_written_under_pod_is_refused_by_the_cli(tmp_path: Path) -> None:
    """The issue's example, end to end: exit code 2, one line naming the path."""
    doc = case()
    doc["nodes"][1]["recentPods"] = [{"pod": {"containers": [{"resources": RES}]}, "ageSeconds": 5}]
    file = tmp_path / "case.json"
    file.write_text(json.dumps(doc))
    proc = subprocess.run(
        [sys.executable, "-m", "loadwatcher.scoring", "score", "--case", str(file)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{file}: nodes[1].recentPods[0]: unknown key 'pod' (known: " in proc.stderr
    assert "ageSeconds" in proc.stderr and "containers" in proc.stderr


def test_case_manifest_pod_checks_what_scoring_reads() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "app", "image": "nginx", "resources": {"requestz": {}}}],
        },
    }
    with pytest.raises(ValueError, match=r"^pod\.spec\.containers\[0\]\.resources: unknown key"):
        run_case(case(pod=manifest))
    del manifest["spec"]["containers"][0]["resources"]["requestz"]  # type: ignore[index]
    assert set(run_case(case(pod=manifest))["scores"]) == {"a", "b"}


def test_reference_cases_still_pass_strict_reading() -> None:
    for doc in reference("scoring-cases.json"):
        run_case(doc)  # the values are checked by test_scoring_reference_cases


# --- pod files ------------------------------------------------------------------------


def write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith(".yaml") else json.dumps(doc))
    return str(path)


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app: web, tier: front}
  annotations: {deployment.kubernetes.io/revision: "3"}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {disk: ssd}
      tolerations: [{key: dedicated, operator: Equal, value: web, effect: NoSchedule}]
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector: {matchLabels: {app: web}}
      priorityClassName: high
      serviceAccountName: web
      volumes: [{name: cache, emptyDir: {}}]
      initContainers:
        - name: migrate
          image: web:1.2
          command: [./migrate]
          resources: {requests: {cpu: "1"}}
      containers:
        - name: app
          image: web:1.2
          ports: [{containerPort: 8080}]
          env: [{name: MODE, value: prod}]
          readinessProbe: {httpGet: {path: /healthz, port: 8080}}
          volumeMounts: [{name: cache, mountPath: /cache}]
          resources:
            requests: {cpu: 250m, memory: 256Mi}
            limits: {cpu: 500m, memory: 512Mi}
            claims: [{name: gpu}]
        - name: sidecar
          image: envoy:1.30
          resources: {requests: {cpu: 100m, memory: 64Mi}}
status: {replicas: 3, readyReplicas: 3}
"""


def test_real_deployment_with_extra_fields_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(DEPLOYMENT)
    pod = inputs.read_pod(str(path))
    assert pod.owner_kind == "Deployment" and pod.name == "web"
    assert (pod.requested.milli_cpu, pod.requested.memory) == (1000, 320 << 20)


def test_example_pod_is_accepted() -> None:
    pod = inputs.read_pod(str(REPO / "examples" / "pod.yaml"))
    assert (pod.requested.milli_cpu, pod.requested.memory) == (600, 320 << 20)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["resources"].update(
                requestz={}
            ),
            "spec.template.spec.containers[0].resources: unknown key 'requestz' "
            "(known: claims, limits, requests)",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["initContainers"][0]["resources"].update(
                limit={}
            ),
            "spec.template.spec.initContainers[0].resources: unknown key 'limit'",
        ),
        (
            lambda d: d["spec"]["template"]["spec"].update(
                container=d["spec"]["template"]["spec"].pop("containers")
            ),
            "spec.template.spec.containers: missing",
        ),
    ],
)
def test_deployment_fields_scoring_reads_are_checked(
    tmp_path: Path, edit: Any, message: str
) -> None:
    doc = yaml.safe_load(DEPLOYMENT)
    edit(doc)
    path = write(tmp_path, "deploy.yaml", doc)
    with pytest.raises(ValueError) as info:
        inputs.read_pod(path)
    assert str(info.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"container": [{"resources": RES}]}, "unknown key 'container' (known: containers, "),
        ({"containers": [{"resources": {"request": {}}}]}, "containers[0].resources: unknown key"),
        ({"containers": [], "initContainers": [{"image": "x"}]}, "initContainers[0]: unknown key"),
        ({"pod": {"containers": []}}, "unknown key 'pod'"),
        ({"kind": "Pod", "spec": {"container": []}}, "spec.containers: missing"),
        ({"kind": "Pod", "metadata": {"name": "x"}}, "spec: expected the pod spec"),
    ],
)
def test_pod_file_unknown_key(tmp_path: Path, doc: Any, message: str) -> None:
    path = write(tmp_path, "pod.yaml", doc)
    with pytest.raises(ValueError) as info:
        inputs.read_pod(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_pod_file_typo_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = write(tmp_path, "pod.yaml", {"containers": [{"resources": {"requestz": {"cpu": 1}}}]})
    watcher = tmp_path / "watcher.json"
    watcher.write_text("{}")
    code = main(["score", "--pod", pod, "--watcher", str(watcher), "--now", str(NOW)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err
    assert (
        f"{pod}: containers[0].resources: unknown key 'requestz' (known: limits, requests)" in err
    )


# --- nodes files ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"node": []}, "unknown key 'node' (known: nodes)"),
        ([{"name": "a", "capacty": {}}], "[0]: unknown key 'capacty'"),
        (
            {"nodes": [{"name": "a", "pods": [{"containers": [{"resources": {"limts": {}}}]}]}]},
            "nodes[0].pods[0].containers[0].resources: unknown key 'limts'",
        ),
        (
            {"nodes": [{"name": "a", "recentPods": [{"containers": [], "age": 5}]}]},
            "nodes[0].recentPods[0]: unknown key 'age'",
        ),
        (
            {"nodes": [{"name": "a", "metrics": [{"type": "CPU", "op": "AVG", "value": 1}]}]},
            "nodes[0].metrics[0]: unknown key 'op'",
        ),
    ],
)
def test_nodes_file_unknown_key(tmp_path: Path, doc: Any, message: str) -> None:
    path = write(tmp_path, "nodes.json", doc)
    with pytest.raises(ValueError) as info:
        inputs.read_nodes(path, None, None, NOW)
    assert str(info.value).startswith(f"{path}: {message}")


def kubectl_list(resources: dict[str, Any]) -> dict[str, Any]:
    """What ``kubectl get nodes,pods -A -o json`` prints, fields scoring ignores included."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "labels": {"zone": "a"}},
                "spec": {"podCIDR": "10.0.0.0/24"},
                "status": {
                    "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "7500m", "memory": "15Gi", "pods": "110"},
                    "nodeInfo": {"kubeletVersion": "v1.31.0"},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
                "spec": {
                    "nodeName": "n1",
                    "dnsPolicy": "ClusterFirst",
                    "containers": [{"name": "app", "image": "web", "resources": resources}],
                },
                "status": {"phase": "Running", "podIP": "10.0.0.7", "conditions": []},
            },
        ],
    }


def test_kubectl_list_with_extra_fields_is_accepted_and_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.json", kubectl_list({"requests": {"cpu": "250m"}}))
    (node,) = inputs.read_nodes(path, None, None, NOW) or []
    assert node.pods[0].requested.milli_cpu == 250
    path = write(tmp_path, "bad.json", kubectl_list({"requets": {"cpu": "250m"}}))
    with pytest.raises(ValueError) as info:
        inputs.read_nodes(path, None, None, NOW)
    assert str(info.value).startswith(
        f"{path}: items[1].spec.containers[0].resources: unknown key 'requets'"
    )


# --- property: any unknown key anywhere in a PodSpec subset --------------------------

_KEY = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)


@st.composite
def subset_with_stray_key(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """A valid PodSpec subset, one mapping in it given a key it does not know, that path."""
    n = draw(st.integers(1, 3))
    pod: dict[str, Any] = {"containers": [{"resources": copy.deepcopy(RES)} for _ in range(n)]}
    if draw(st.booleans()):
        pod["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "1"}}}]
    spots: list[tuple[dict[str, Any], str, frozenset[str]]] = [(pod, "", SUBSET_KEYS)]
    for key in ("containers", "initContainers"):
        for i, c in enumerate(pod.get(key, [])):
            spots.append((c, f"{key}[{i}]", frozenset({"name", "resources"})))
            spots.append((c["resources"], f"{key}[{i}].resources", frozenset(RES)))
    target, where, known = draw(st.sampled_from(spots))
    stray = draw(_KEY.filter(lambda k: k not in known))
    target[stray] = draw(st.sampled_from([None, 0, "x", [], {}]))
    return pod, where, stray


@given(subset_with_stray_key())
def test_any_stray_key_in_a_subset_is_refused_with_its_path(
    drawn: tuple[dict[str, Any], str, str],
) -> None:
    pod, where, stray = drawn
    with pytest.raises(ValueError) as info:
        parse_pod(pod)
    prefix = f"{where}: " if where else ""
    assert str(info.value).startswith(f"{prefix}unknown key {stray!r} (known: ")


# --- a key given twice: the last one would win without a word -------------------------


def test_duplicate_key_in_a_case_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "case.json"
    text = json.dumps(case())
    file.write_text(text.replace('"pod": {', '"pod": {"containers": [], ', 1))
    with pytest.raises(ValueError, match="duplicate key 'containers'"):
        run_case_file(file)


def test_duplicate_key_in_a_yaml_file_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text("containers: []\ncontainers: [{resources: {requests: {cpu: 1}}}]\n")
    with pytest.raises(ValueError, match="duplicate key 'containers' at line 2, column 1"):
        inputs.read_pod(str(path))
    path.write_text("base: &b {cpu: 1}\ncontainers: [{resources: {requests: {<<: *b, cpu: 2}}}]\n")
    with pytest.raises(ValueError, match="unknown key 'base'"):  # a merge key may be overridden
        inputs.read_pod(str(path))


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"phase": "Running", "conditions": {}}, "items[1].status.conditions: expected a list"),
        (
            {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "soon"}
                ],
            },
            "items[1].status.conditions[0].lastTransitionTime: not an RFC 3339 time",
        ),
    ],
)
def test_kubectl_list_bad_pod_status(tmp_path: Path, status: Any, message: str) -> None:
    doc = kubectl_list({})
    doc["items"][1]["status"] = status
    path = write(tmp_path, "nodes.json", doc)
    with pytest.raises(ValueError) as info:
        inputs.read_nodes(path, None, None, NOW)
    assert str(info.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize(
    ("plugin", "args", "message"),
    [
        (
            "TargetLoadPacking",
            {"targetUtilisation": 40},
            "TargetLoadPacking args.targetUtilisation: unknown key (known: defaultRequests, "
            "defaultRequestsMultiplier, metricProvider, targetUtilization, watcherAddress)",
        ),
        (
            "NodeResourcesAllocatable",
            {"mode": "Least", "resource": []},
            "NodeResourcesAllocatable args.resource: unknown key (known: mode, resources)",
        ),
        (
            "LoadAwareScheduling",
            {"scoreAccordingProdUsage": True},
            "LoadAwareScheduling args.scoreAccordingProdUsage: not supported by this scorer "
            "(only unset), got True",
        ),
    ],
)
def test_plugin_args_are_strict(plugin: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_plugin_args(plugin, args)
    assert str(refused.value) == message


def test_plugin_args_as_upstream_configuration_writes_them_are_accepted() -> None:
    """A pluginConfig entry's args with their type and the Trimaran data-source fields."""
    args = parse_plugin_args(
        "TargetLoadPacking",
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "TargetLoadPackingArgs",
            "watcherAddress": "http://load-watcher:2020",
            "metricProvider": {"type": "Prometheus"},
            "targetUtilization": 70,
        },
    )
    assert args.target_utilization == 70
    aware = parse_plugin_args(
        "LoadAwareScheduling", {"scoreAccordingProdUsage": False, "prodUsageThresholds": {}}
    )
    assert dict(aware.usage_thresholds) == {"cpu": 65, "memory": 95}
