"""deploy/ (kustomize), dashboards/ and the Prometheus rules: rendered, validated, exercised.

* Rendering: ``manifests.kustomize`` implements the subset of kustomize the manifests use
  and refuses anything else. Where ``kubectl`` is installed, its built-in kustomize renders
  every target too and the two outputs must be identical.
* Validation (``manifests.validate``): built-in kinds against the Kubernetes JSON schemas
  shipped by PyPI ``kubernetes-validate`` (strict: unknown fields fail), at the oldest and
  newest versions it knows; ServiceMonitor and PrometheusRule against a strict subset of
  the Prometheus Operator CRD schemas.
* Meaning: the configs are valid loadwatcher configurations for the overlay's provider,
  the Deployment's args parse with the real CLI, probes, ports and selectors line up, RBAC
  is read-only and only where needed, the recording rules compute what kube-prometheus
  does (``promtool test rules``), and every metric the dashboard and alerts use is one the
  service exports on ``/metrics`` or one the recording rules produce.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from loadwatcher import __version__, app, cli, config
from loadwatcher.http import api
from tests.support.backends import require_binary
from tests.support.manifests import (
    CLUSTER_SCOPED,
    K8S_VERSIONS,
    config_map_hash,
    find,
    key,
    kustomize,
    one,
    validate,
)
from tests.support.service import settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = ROOT / "dashboards" / "loadwatcher.json"
OVERLAYS = {
    "prometheus": "prometheus",
    "metrics-server": "metrics-server",
    "influxdb": "influxdb",
    "push": "push",
}
TARGETS = ["base", *(f"overlays/{name}" for name in OVERLAYS)]
NAMESPACE = "loadwatcher"
RECORDED = {"instance:node_cpu:ratio", "instance:node_memory_utilisation:ratio"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {target: kustomize(DEPLOY / target) for target in TARGETS}


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("target", TARGETS)
def test_rendering_matches_kubectl_kustomize(target: str, rendered) -> None:
    kubectl = require_binary("kubectl")
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    theirs = sorted((d for d in yaml.safe_load_all(out) if d), key=key)
    ours = sorted(rendered[target], key=key)
    assert [key(o) for o in ours] == [key(o) for o in theirs]
    assert ours == theirs


def test_the_subset_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(AssertionError, match="commonLabels"):
        kustomize(tmp_path)


def test_config_map_hash_is_kustomizes() -> None:
    # kubectl kustomize (kustomize v5.5): literals a=b -> "<name>-4h2mbtbbt6", whatever the name.
    assert config_map_hash({"data": {"a": "b"}}) == "4h2mbtbbt6"
    assert config_map_hash({"data": {"a": "c"}}) != "4h2mbtbbt6"


@pytest.mark.parametrize("target", TARGETS)
def test_everything_is_namespaced_into_loadwatcher(target: str, rendered) -> None:
    for obj in rendered[target]:
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], key(obj)
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, key(obj)
    assert one(rendered[target], "Namespace")["metadata"]["name"] == NAMESPACE


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("target", TARGETS)
def test_every_manifest_validates(target: str, version: str, rendered) -> None:
    for obj in rendered[target]:
        try:
            validate(obj, version)
        except Exception as exc:  # name the object, not just the schema path
            pytest.fail(f"{target}: {key(obj)} against Kubernetes {version}: {exc}")


def test_the_validators_do_reject_mistakes(rendered) -> None:
    deployment = copy.deepcopy(one(rendered["overlays/prometheus"], "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)
    monitor = copy.deepcopy(one(rendered["overlays/prometheus"], "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor, K8S_VERSIONS[-1])
    rule = copy.deepcopy(find(rendered["overlays/prometheus"], "PrometheusRule")[0])
    rule["spec"]["groups"][0]["rules"][0]["recrod"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        validate(rule, K8S_VERSIONS[-1])


# --------------------------------------------------------------------------- meaning


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec = one(objs, "Deployment", "loadwatcher")["spec"]["template"]["spec"]
    (main,) = spec["containers"]
    return dict(main)


def config_text(objs: list[dict[str, Any]]) -> tuple[str, str]:
    """(the mounted config file's path in the container, its text)."""
    spec = one(objs, "Deployment", "loadwatcher")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    cm = one(objs, "ConfigMap", volume["configMap"]["name"])
    mount = next(m for m in container(objs)["volumeMounts"] if m["name"] == volume["name"])
    (filename,) = cm["data"]
    return f"{mount['mountPath']}/{filename}", cm["data"][filename]


@pytest.mark.parametrize("target", TARGETS)
def test_config_is_a_valid_loadwatcher_config_for_the_overlay(
    target: str, rendered, tmp_path: Path
) -> None:
    objs = rendered[target]
    path, text = config_text(objs)
    args = cli.build_parser().parse_args(container(objs)["args"])
    assert args.command == "serve" and args.config == path
    env = {e["name"]: "x" for e in container(objs).get("env", []) if "valueFrom" in e}
    # The push writers' token file is a mounted Secret in the pod; here, a stand-in with a
    # token (the service checks it exists and holds one).
    tokens = tmp_path / "push-tokens"
    tokens.write_text("a-writer-token\n")
    env["LOADWATCHER_PUSH_TOKEN_FILE"] = str(tokens)
    parsed = config.resolve(text, env)
    overlay = target.removeprefix("overlays/")
    assert parsed.provider.name == OVERLAYS.get(overlay, "host")
    # The journal sits on the journal volume; the port is the container's and the Service's.
    journal_mount = next(m for m in container(objs)["volumeMounts"] if m["name"] == "journal")
    assert Path(parsed.journal.path).parent == Path(journal_mount["mountPath"])
    (port,) = container(objs)["ports"]
    assert port["containerPort"] == parsed.server.port == 2020
    (svc_port,) = one(objs, "Service", "loadwatcher")["spec"]["ports"]
    assert svc_port["port"] == 2020 and svc_port["targetPort"] == port["name"]


@pytest.mark.parametrize("target", TARGETS)
def test_env_vars_are_settings_the_service_knows(target: str, rendered) -> None:
    known = {name for spec in config.SPECS for name in (spec.env_name, *spec.env)}
    for env in container(rendered[target]).get("env", []):
        assert env["name"] in known, env["name"]


async def test_probe_and_scrape_paths_are_routes_of_the_app(rendered) -> None:
    engine = app.build_engine(settings({}))
    routes = {r.resource.canonical for r in api.make_app(engine).router.routes() if r.resource}
    await engine.close()
    main = container(rendered["overlays/prometheus"])
    paths = {main[p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe")}
    paths.add(
        one(rendered["overlays/prometheus"], "ServiceMonitor")["spec"]["endpoints"][0]["path"]
    )
    assert paths == {"/healthz", "/readyz", "/metrics"}
    assert paths | {"/"} <= routes


@pytest.mark.parametrize("target", TARGETS)
def test_deployment_probes_resources_and_security(target: str, rendered) -> None:
    objs = rendered[target]
    deployment = one(objs, "Deployment", "loadwatcher")
    pod = deployment["spec"]["template"]
    main = container(objs)
    port_names = {p["name"] for p in main["ports"]}
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"]["port"] in port_names
    for section in ("requests", "limits"):
        assert set(main["resources"][section]) == {"cpu", "memory"}
    ctx = main["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"]["drop"] == ["ALL"]
    pod_ctx = pod["spec"]["securityContext"]
    assert pod_ctx["runAsNonRoot"] is True and pod_ctx["runAsUser"] >= 1000
    assert pod_ctx["seccompProfile"]["type"] == "RuntimeDefault"
    assert any(v["name"] == "journal" and "emptyDir" in v for v in pod["spec"]["volumes"])
    if target == "overlays/push":
        # A Service spreads pushes over its pods: one replica holds every node's samples.
        assert deployment["spec"]["replicas"] == 1
        budget = one(rendered[target], "PodDisruptionBudget")
        assert budget["spec"]["minAvailable"] == 0  # never blocks a node drain
    else:
        assert deployment["spec"]["replicas"] >= 2  # HA: several replicas behind the Service
    assert main["image"] == f"loadwatcher:{__version__}"
    labels = pod["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        one(objs, "Service", "loadwatcher")["spec"]["selector"],
        one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= labels.items()


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_service_monitor_scrapes_the_metrics_route(overlay: str, rendered) -> None:
    objs = rendered[f"overlays/{overlay}"]
    monitor = one(objs, "ServiceMonitor")
    service = one(objs, "Service", "loadwatcher")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # jobLabel names the Service label whose value becomes `job`, used by the alerts.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "loadwatcher"


def test_rbac_only_for_metrics_server_and_read_only(rendered) -> None:
    for target, objs in rendered.items():
        rbac = [o for o in objs if o["apiVersion"].startswith("rbac.authorization.k8s.io/")]
        token = one(objs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"]
        if target != "overlays/metrics-server":
            assert rbac == [] and token is False, target
            continue
        assert token is True
        role = one(objs, "ClusterRole")
        granted = {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
        assert granted == {
            (group, "nodes", verb) for group in ("", "metrics.k8s.io") for verb in ("get", "list")
        }
        binding = one(objs, "ClusterRoleBinding")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "loadwatcher", "namespace": NAMESPACE}
        ]
        account = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        assert one(objs, "ServiceAccount", account)


def test_recording_rules_only_in_the_prometheus_overlay(rendered) -> None:
    for target, objs in rendered.items():
        records = {
            r["record"]
            for rule in find(objs, "PrometheusRule")
            for g in rule["spec"]["groups"]
            for r in g["rules"]
            if "record" in r
        }
        assert records == (RECORDED if target == "overlays/prometheus" else set()), target


def test_the_prometheus_overlay_queries_what_the_rules_record(rendered) -> None:
    _, text = config_text(rendered["overlays/prometheus"])
    prom = config.resolve(text, {}).prometheus
    assert {prom.cpu_query, prom.memory_query} == RECORDED
    defaults = config.resolve(None, {}).prometheus
    assert {defaults.cpu_query, defaults.memory_query} == RECORDED


# --------------------------------------------------------------------------- Prometheus rules


def rule_files(rendered, tmp_path: Path) -> dict[str, Path]:
    """Each PrometheusRule's spec as a Prometheus rule file, as the Operator writes it."""
    out = {}
    for rule in find(rendered["overlays/prometheus"], "PrometheusRule"):
        path = tmp_path / f"{rule['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(rule["spec"]))
        out[rule["metadata"]["name"]] = path
    return out


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = require_binary("promtool")
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False
    )


def test_rule_files_pass_promtool_check(rendered, tmp_path: Path) -> None:
    files = rule_files(rendered, tmp_path)
    assert set(files) == {"loadwatcher-node-recording-rules", "loadwatcher-alerts"}
    result = promtool("check", "rules", *map(str, files.values()), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _series(name: str, instance: str, values: str, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {
        "series": f'{name}{{instance="{instance}",job="node-exporter"{extra}}}',
        "values": values,
    }


def _expect(record: str, instance: str, value: float) -> dict[str, Any]:
    return {"labels": f'{record}{{instance="{instance}",job="node-exporter"}}', "value": value}


CPU, MEM = "node_cpu_seconds_total", "node_memory_{}_bytes"
RULE_TEST = {
    "rule_files": ["loadwatcher-node-recording-rules.yaml"],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                # node-a: 2 CPUs; busy = user + system (idle, iowait and steal are not busy):
                # (0.3 + 0.1 + 0.1) / 2 = 0.25.
                _series(CPU, "node-a", "0+18x20", cpu="0", mode="user"),
                _series(CPU, "node-a", "0+6x20", cpu="0", mode="system"),
                _series(CPU, "node-a", "0+6x20", cpu="0", mode="iowait"),
                _series(CPU, "node-a", "0+30x20", cpu="0", mode="idle"),
                _series(CPU, "node-a", "0+6x20", cpu="1", mode="user"),
                _series(CPU, "node-a", "0+6x20", cpu="1", mode="steal"),
                _series(CPU, "node-a", "0+48x20", cpu="1", mode="idle"),
                # node-b: 1 CPU, 90 % busy.
                _series(CPU, "node-b", "0+54x20", cpu="0", mode="user"),
                _series(CPU, "node-b", "0+6x20", cpu="0", mode="idle"),
                # node-a has MemAvailable: 1 - 25/100. node-b (an old kernel) does not:
                # 1 - (buffers + cached + free + slab) / total = 1 - 40/80.
                _series(MEM.format("MemAvailable"), "node-a", "25x20"),
                _series(MEM.format("MemTotal"), "node-a", "100x20"),
                _series(MEM.format("Buffers"), "node-b", "10x20"),
                _series(MEM.format("Cached"), "node-b", "20x20"),
                _series(MEM.format("MemFree"), "node-b", "5x20"),
                _series(MEM.format("Slab"), "node-b", "5x20"),
                _series(MEM.format("MemTotal"), "node-b", "80x20"),
            ],
            "promql_expr_test": [
                {
                    "expr": "instance:node_cpu:ratio",
                    "eval_time": "10m",
                    "exp_samples": [
                        _expect("instance:node_cpu:ratio", "node-a", 0.25),
                        _expect("instance:node_cpu:ratio", "node-b", 0.9),
                    ],
                },
                {
                    "expr": "instance:node_memory_utilisation:ratio",
                    "eval_time": "10m",
                    "exp_samples": [
                        _expect("instance:node_memory_utilisation:ratio", "node-a", 0.75),
                        _expect("instance:node_memory_utilisation:ratio", "node-b", 0.5),
                    ],
                },
            ],
        }
    ],
}


def test_recording_rules_compute_node_utilisation(rendered, tmp_path: Path) -> None:
    rule_files(rendered, tmp_path)
    (tmp_path / "rules_test.yaml").write_text(yaml.safe_dump(RULE_TEST))
    result = promtool("test", "rules", "rules_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def _health(pod: str, status: str, values: str) -> dict[str, str]:
    series = f'loadwatcher_health_status{{namespace="lw",pod="{pod}",status="{status}"}}'
    return {"series": series, "values": values}


def _alerts(rule: dict[str, Any], name: str, *pods: str) -> list[dict[str, Any]]:
    """The alerts ``name`` raises for ``pods``, annotations expanded as Prometheus does."""
    (spec,) = (r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == name)
    return [
        {
            "exp_labels": {**spec["labels"], "namespace": "lw", "pod": pod},
            "exp_annotations": {
                k: v.replace("{{ $labels.pod }}", pod) for k, v in spec["annotations"].items()
            },
        }
        for pod in pods
    ]


def test_health_alerts_follow_the_health_state(rendered, tmp_path: Path) -> None:
    """Pod a is degraded, b unhealthy, c ok: a warning for a after 15 minutes, a critical
    alert for b after 5, nothing for c."""
    rule_files(rendered, tmp_path)
    (rule,) = (
        r
        for r in find(rendered["overlays/prometheus"], "PrometheusRule")
        if r["metadata"]["name"] == "loadwatcher-alerts"
    )
    states = {"a": "degraded", "b": "unhealthy", "c": "ok"}
    series = [
        _health(pod, status, "1x40" if status == state else "0x40")
        for pod, state in states.items()
        for status in ("ok", "degraded", "unhealthy")
    ]
    test = {
        "rule_files": ["loadwatcher-alerts.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": "LoadwatcherUnhealthy", "exp_alerts": []},
                    {
                        "eval_time": "6m",
                        "alertname": "LoadwatcherUnhealthy",
                        "exp_alerts": _alerts(rule, "LoadwatcherUnhealthy", "b"),
                    },
                    {"eval_time": "14m", "alertname": "LoadwatcherDegraded", "exp_alerts": []},
                    {
                        "eval_time": "16m",
                        "alertname": "LoadwatcherDegraded",
                        "exp_alerts": _alerts(rule, "LoadwatcherDegraded", "a"),
                    },
                ],
            }
        ],
    }
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


# --------------------------------------------------------------------------- dashboard


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def panel_exprs(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def concrete(expr: str) -> str:
    """A Grafana expression with its variables replaced, as Grafana sends it."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


_METRIC = re.compile(r"\b(loadwatcher_[a-z_]+|instance:[a-z_]+:[a-z_]+)\b")


def test_dashboard_layout() -> None:
    doc = dashboard()
    assert doc["uid"] == "loadwatcher" and doc["schemaVersion"] >= 36
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in doc["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
    names = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "namespace", "job", "node"} <= names


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:query_{i}:check", "expr": concrete(expr)}
        for i, (_, expr) in enumerate(panel_exprs(dashboard()))
    ]
    variables = [v for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    for v in variables:  # label_values(<selector>, label): the selector must parse
        inner = re.fullmatch(r"label_values\((.*), *\w+\)", v["query"]["query"])
        assert inner, v["query"]
        rules.append(
            {"record": f"dashboard:var_{v['name']}:check", "expr": concrete(inner.group(1))}
        )
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported_names(exposition: str) -> set[str]:
    """Series names of every family ``/metrics`` declares, with or without samples yet."""
    names = set()
    for family, kind in re.findall(r"^# TYPE (loadwatcher_\w+) (\w+)$", exposition, re.M):
        base = family.removesuffix("_total") if kind == "counter" else family
        names |= {base + suffix for suffix in _SUFFIXES.get(kind, ("",))}
    return names


async def test_dashboard_and_alerts_use_metrics_that_exist(aiohttp_client, rendered) -> None:
    engine = app.build_engine(settings({}))
    await engine.cycle()
    client = await aiohttp_client(api.make_app(engine))
    resp = await client.get("/metrics")
    assert resp.status == 200
    exposition = await resp.text()
    await engine.close()
    exported = exported_names(exposition)
    used = {m for _, expr in panel_exprs(dashboard()) for m in _METRIC.findall(expr)}
    for rule in find(rendered["overlays/prometheus"], "PrometheusRule"):
        for group in rule["spec"]["groups"]:
            for r in group["rules"]:
                used |= set(_METRIC.findall(str(r["expr"])))
    for var in dashboard()["templating"]["list"]:
        used |= set(_METRIC.findall(json.dumps(var.get("query", ""))))
    service_metrics = {m for m in used if m.startswith("loadwatcher_")}
    assert service_metrics, "the dashboard shows none of the service's metrics"
    assert service_metrics <= exported, sorted(service_metrics - exported)
    assert used - service_metrics == RECORDED
    # Every metric named in the issue is on the dashboard.
    for name in (
        "loadwatcher_poll_duration_seconds_bucket",
        "loadwatcher_samples_ingested_total",
        "loadwatcher_samples_dropped_total",
        "loadwatcher_nodes",
        "loadwatcher_provider_errors_total",
        "loadwatcher_snapshot_age_seconds",
        "loadwatcher_journal_write_duration_seconds_bucket",
        "loadwatcher_http_request_duration_seconds_bucket",
        "loadwatcher_health_status",
    ):
        assert name in used, name


def test_promtool_is_not_fooled_by_a_bad_dashboard_query(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    rule = {"record": "bad:query:check", "expr": concrete("sum by (le (rate(x[$__rate_interval]))")}
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [rule]}]}))
    assert promtool("check", "rules", str(path), cwd=tmp_path).returncode != 0
