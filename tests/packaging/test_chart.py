"""charts/loadwatcher, rendered by the real helm for every provider, push, TLS, auth, PVC and
scheduler combination: lint, schemas, the configuration and the objects' meaning.

Every rendered object is validated as deploy/'s are (``manifests.validate``: the Kubernetes
schemas of ``kubernetes-validate``, strict, at the oldest and newest versions it knows, and
the Prometheus Operator CRD subsets), and every rendered configuration passes the service's
own ``loadwatcher config check`` with the files it names where the pod mounts them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadwatcher import __version__, config
from tests.support import helm
from tests.support.manifests import CLUSTER_SCOPED, K8S_VERSIONS, find, key, one, validate
from tests.support.tls import make_pki

TOKENS = ["reader-one", "reader-two"]
MONITORING = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "recordingRules": {"enabled": True},
}
WRITERS = {"writerTokens": {"tokens": ["writer-one"]}}
COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "prometheus-monitored": {"metrics": MONITORING, "grafanaDashboard": {"enabled": True}},
    "host": {"config": {"provider": {"name": "host", "address": None, "timeout_s": None}}},
    "metrics-server": {
        "config": {
            "provider": {"name": "metrics-server", "address": None},
            "kube": {"percent_of": "capacity", "page_size": 500},
        }
    },
    "influxdb": {
        "config": {
            "provider": {"name": "influxdb", "address": "http://influxdb.monitoring:8086"},
            "influxdb": {"database": "telegraf", "query_language": "influxql"},
        },
        "providerToken": {"secretName": "influx", "key": "token", "optional": True},
    },
    "push": {"config": {"provider": {"name": "push", "address": None}}, "push": WRITERS},
    "push-existing-secret": {
        "config": {"provider": {"name": "push", "address": None}},
        "push": {"writerTokens": {"existingSecret": "writers", "key": "list"}},
    },
    "receive-beside-prometheus": {"config": {"push": {"receive": True}}, "push": WRITERS},
    "tls": {"tls": {"secretName": "loadwatcher-tls"}, "metrics": MONITORING},
    "auth-created": {"auth": {"readerTokens": {"tokens": TOKENS}}},
    "auth-existing-secret": {"auth": {"readerTokens": {"existingSecret": "readers"}}},
    "tls-auth-metrics": {
        "tls": {"secretName": "loadwatcher-tls"},
        "auth": {"readerTokens": {"tokens": TOKENS}},
        "config": {"server": {"auth_metrics": True}},
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "tlsConfig": {"insecureSkipVerify": True},
                "authorization": {"credentials": {"name": "scrape", "key": "token"}},
            }
        },
    },
    "pvc": {"journal": {"persistence": {"enabled": True, "storageClassName": "fast"}}},
    "pvc-existing-claim": {"journal": {"persistence": {"enabled": True, "existingClaim": "j"}}},
    "pvc-metrics-server": {
        "config": {"provider": {"name": "metrics-server", "address": None}},
        "journal": {"persistence": {"enabled": True}},
    },
    "scheduler": {"scheduler": {"enabled": True}},
    "scheduler-overcommit-push": {
        "config": {"provider": {"name": "push", "address": None}},
        "push": WRITERS,
        "scheduler": {"enabled": True, "lowRiskOverCommitment": {"enabled": True}},
    },
    "scheduler-metrics-server-pvc": {
        "config": {"provider": {"name": "metrics-server", "address": None}},
        "journal": {"persistence": {"enabled": True}},
        "scheduler": {"enabled": True, "name": "load-aware"},
    },
    "everything-else-on": {
        "fullnameOverride": "lw",
        "commonLabels": {"team": "sched"},
        "commonAnnotations": {"owner": "sched"},
        "podLabels": {"extra": "yes"},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "infra", "operator": "Exists"}]}
                    ]
                }
            }
        },
        "extraEnv": [{"name": "LOADWATCHER_LOG_LEVEL", "value": "DEBUG"}],
        "metrics": MONITORING,
        "grafanaDashboard": {"enabled": True},
        "imagePullSecrets": [{"name": "regcred"}],
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: helm.template(values) for name, values in COMBINATIONS.items()}


deployment = helm.service_deployment


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (main,) = deployment(objs)["spec"]["template"]["spec"]["containers"]
    return dict(main)


def provider(name: str) -> str:
    cfg = COMBINATIONS[name].get("config", {})
    return str(cfg.get("provider", {}).get("name", "prometheus"))


@pytest.mark.parametrize("name", COMBINATIONS)
def test_helm_lint_strict(name: str) -> None:
    done = helm.lint(COMBINATIONS[name])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", COMBINATIONS)
def test_every_object_validates(name: str, version: str, rendered) -> None:
    for obj in rendered[name]:
        try:
            validate(obj, version)
        except Exception as exc:  # name the object, not just the schema path
            pytest.fail(f"{name}: {key(obj)} against Kubernetes {version}: {exc}")
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] in {helm.NAMESPACE, "kube-system"}, key(obj)


def _stand_ins(objs: list[dict[str, Any]], root: Path) -> None:
    """What the pod mounts, under ``root``: token files from the Secrets (created or a
    stand-in for an existing one) and a TLS pair; empty directories for the rest."""
    spec = deployment(objs)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    pki = make_pki(root / "pki")
    for mount in container(objs)["volumeMounts"]:
        where = root / mount["mountPath"].lstrip("/")
        where.mkdir(parents=True, exist_ok=True)
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        created = find(objs, "Secret", secret["secretName"])
        if created:
            for file, text in created[0]["stringData"].items():
                (where / file).write_text(text)
        elif mount["name"] == "tls":
            (where / "tls.crt").write_bytes(pki.cert_file.read_bytes())
            (where / "tls.key").write_bytes(pki.key_file.read_bytes())
        else:  # an existing Secret: the key the chart's values name
            (where / "tokens").write_text("a-token\n")
            (where / "list").write_text("a-token\n")


def config_file(objs: list[dict[str, Any]]) -> tuple[str, str]:
    """(the config file's path in the container, its text)."""
    spec = deployment(objs)["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    cm = one(objs, "ConfigMap", volume["configMap"]["name"])
    mount = next(m for m in container(objs)["volumeMounts"] if m["name"] == volume["name"])
    (filename,) = cm["data"]
    return f"{mount['mountPath']}/{filename}", cm["data"][filename]


@pytest.mark.parametrize("name", COMBINATIONS)
def test_config_passes_loadwatcher_config_check(name: str, rendered, tmp_path: Path) -> None:
    """The real ``loadwatcher config check`` (a process, as an operator runs it), with every
    absolute path of the file moved under a stand-in of the pod's file system."""
    objs = rendered[name]
    path, text = config_file(objs)
    assert container(objs)["args"] == ["serve", "--config", path]
    _stand_ins(objs, tmp_path)
    moved = tmp_path / "config.yaml"
    moved.write_text(text.replace(": /", f": {tmp_path}/"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    done = subprocess.run(
        [sys.executable, "-m", "loadwatcher", "config", "check", "--config", str(moved)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    effective = yaml.safe_load(done.stdout)
    assert effective["provider"]["name"] == provider(name)
    port = container(objs)["ports"][0]["containerPort"]
    assert effective["server"]["port"] == port
    assert Path(effective["journal"]["path"]).parent == tmp_path / "var/lib/loadwatcher"
    for token in [*TOKENS, "writer-one"]:
        assert token not in done.stdout  # secrets never reach config check's output


@pytest.mark.parametrize("name", COMBINATIONS)
def test_deployment_is_safe_and_probed(name: str, rendered) -> None:
    objs = rendered[name]
    pod = deployment(objs)["spec"]["template"]
    main = container(objs)
    tls = "tls" in COMBINATIONS[name] or "tls-" in name
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = main[probe]["httpGet"]
        assert get["path"] == path and get["port"] == "http"
        assert get.get("scheme", "HTTP") == ("HTTPS" if tls else "HTTP")
    ctx = main["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"]["drop"] == ["ALL"]
    pod_ctx = pod["spec"]["securityContext"]
    assert pod_ctx["runAsNonRoot"] is True and pod_ctx["runAsUser"] >= 1000
    assert main["image"] == f"loadwatcher:{__version__}"
    assert pod["spec"]["automountServiceAccountToken"] is (provider(name) == "metrics-server")
    known = {n for spec in config.SPECS for n in (spec.env_name, *spec.env)}
    assert {e["name"] for e in main.get("env", [])} <= known


@pytest.mark.parametrize("name", COMBINATIONS)
def test_selectors_pick_only_the_services_pods(name: str, rendered) -> None:
    """The Service, the PDB and the ServiceMonitor select loadwatcher's pods and never the
    scheduler's (which share the release's instance label)."""
    objs = rendered[name]
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in find(objs, "Deployment")
    }
    service = one(objs, "Service")
    selectors = [service["spec"]["selector"]]
    selectors += [b["spec"]["selector"]["matchLabels"] for b in find(objs, "PodDisruptionBudget")]
    ours = deployment(objs)["metadata"]["name"]
    for selector in selectors:
        chosen = {n for n, labels in pods.items() if selector.items() <= labels.items()}
        assert chosen == {ours}
    for monitor in find(objs, "ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"].items() <= (
            service["metadata"]["labels"].items()
        )
        assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


@pytest.mark.parametrize("name", COMBINATIONS)
def test_volumes_name_what_exists(name: str, rendered) -> None:
    """Every Secret, ConfigMap and claim the pods mount is rendered, or is one the values
    name as existing."""
    objs = rendered[name]
    values = COMBINATIONS[name]
    existing = {
        values.get("tls", {}).get("secretName"),
        values.get("auth", {}).get("readerTokens", {}).get("existingSecret"),
        values.get("push", {}).get("writerTokens", {}).get("existingSecret"),
        values.get("journal", {}).get("persistence", {}).get("existingClaim"),
    }
    for dep in find(objs, "Deployment"):
        for volume in dep["spec"]["template"]["spec"]["volumes"]:
            if "secret" in volume:
                name_ = volume["secret"]["secretName"]
                assert find(objs, "Secret", name_) or name_ in existing, name_
            if "configMap" in volume:
                assert find(objs, "ConfigMap", volume["configMap"]["name"])
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert find(objs, "PersistentVolumeClaim", claim) or claim in existing


@pytest.mark.parametrize("name", COMBINATIONS)
def test_replicas_budget_and_journal(name: str, rendered) -> None:
    objs = rendered[name]
    dep = deployment(objs)
    receives = provider(name) == "push" or name.startswith("receive")
    persistent = "pvc" in name
    replicas = dep["spec"]["replicas"]
    assert replicas == (1 if receives or persistent else 2)
    (budget,) = find(objs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == (1 if replicas > 1 else 0)
    (journal,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "journal"]
    if persistent:
        assert "persistentVolumeClaim" in journal
        assert dep["spec"]["strategy"] == {"type": "Recreate"}
    else:
        assert journal["emptyDir"] == {"sizeLimit": "256Mi"}
        assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_rbac_only_for_metrics_server_and_read_only(rendered) -> None:
    for name, objs in rendered.items():
        roles = find(objs, "ClusterRole")
        if provider(name) != "metrics-server":
            assert roles == [], name
            continue
        (role,) = roles
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
        (binding,) = [
            b
            for b in find(objs, "ClusterRoleBinding")
            if b["roleRef"]["kind"] == "ClusterRole"
            and b["roleRef"]["name"] == role["metadata"]["name"]
        ]
        account = deployment(objs)["spec"]["template"]["spec"]["serviceAccountName"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": helm.NAMESPACE}
        ]


def test_extra_labels_annotations_and_placement(rendered) -> None:
    objs = rendered["everything-else-on"]
    for obj in objs:
        assert obj["metadata"]["labels"]["team"] == "sched", key(obj)
        assert obj["metadata"]["annotations"]["owner"] == "sched", key(obj)
        assert obj["metadata"]["name"].startswith("lw"), key(obj)
    pod = deployment(objs)["spec"]["template"]
    values = COMBINATIONS["everything-else-on"]
    assert pod["metadata"]["labels"]["extra"] == "yes"
    for field in ("priorityClassName", "nodeSelector", "tolerations", "affinity"):
        assert pod["spec"][field] == values[field], field
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    dashboard = one(objs, "ConfigMap", "lw-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (helm.ROOT / "dashboards" / "loadwatcher.json").read_text(encoding="utf-8")
    assert yaml.safe_load(dashboard["data"]["loadwatcher.json"]) == yaml.safe_load(shipped)


def test_tokens_that_look_like_yaml_stay_tokens() -> None:
    """Each token is one line of the file, byte for byte, whatever YAML would make of it."""
    odd = ["#not-a-comment", "a:b", "---", "'quoted'", "*alias", "{x}", "|", "-1", "null"]
    objs = helm.template({"auth": {"readerTokens": {"tokens": odd}}})
    (readers,) = find(objs, "Secret")
    assert readers["stringData"]["tokens"].splitlines() == odd


def test_names_stay_distinct_and_valid_at_the_longest_release_name() -> None:
    longest = "a" * 63
    objs = helm.template({"fullnameOverride": longest, "scheduler": {"enabled": True}})
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), names
    for kind, name in names:
        limit = 63 if kind in ("Service", "Deployment") else 253
        assert len(name) <= limit and re.fullmatch(r"[a-z0-9]([-a-z0-9.:]*[a-z0-9])?", name)


def test_created_token_secrets_hold_one_token_per_line(rendered) -> None:
    (readers,) = find(rendered["auth-created"], "Secret")
    assert readers["stringData"]["tokens"].splitlines() == TOKENS
    (writers,) = find(rendered["push"], "Secret")
    assert writers["stringData"]["tokens"].splitlines() == ["writer-one"]
    # Not receiving: no writers' Secret, mount or token file, whatever the values hold.
    objs = helm.template({"push": WRITERS})
    assert find(objs, "Secret") == []
    _, text = config_file(objs)
    assert "push" not in yaml.safe_load(text)
