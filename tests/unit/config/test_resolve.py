"""Configuration: precedence, Go load-watcher variables, validation, masking, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from loadwatcher import config
from loadwatcher.config import Settings
from loadwatcher.errors import ConfigError
from loadwatcher.providers import registry


def resolve(
    yaml_text: str | None, env: dict[str, str], flags: dict[str, str] | None = None
) -> Settings:
    """``config.resolve`` knowing every provider's names and settings."""
    return config.resolve(yaml_text, env, flags, catalogue=registry.catalogue())


def test_defaults_run_the_host_provider_on_2020() -> None:
    s = resolve(None, {})
    assert s.provider.name == "host"
    assert s.server.port == 2020
    assert s.journal.path == "loadwatcher.db"


def test_go_load_watcher_variables() -> None:
    s = resolve(
        None,
        {
            "METRICS_PROVIDER_NAME": "Prometheus",
            "METRICS_PROVIDER_ADDRESS": "http://prometheus:9090/",
            "METRICS_PROVIDER_TOKEN": "s3cret",
            "INSECURE_SKIP_VERIFY": "true",
        },
    )
    assert s.provider.name == "prometheus"
    assert s.provider.address == "http://prometheus:9090"
    assert s.provider.token == "s3cret"
    assert s.provider.insecure_skip_verify is True


def test_yaml_then_env_then_flags() -> None:
    text = "server:\n  port: 3000\npoll:\n  interval_s: 30\n"
    assert resolve(text, {}).server.port == 3000
    assert resolve(text, {"LOADWATCHER_SERVER_PORT": "4000"}).server.port == 4000
    s = resolve(text, {"LOADWATCHER_SERVER_PORT": "4000"}, {"port": "5000"})
    assert s.server.port == 5000 and s.poll.interval_s == 30.0


def test_our_variable_wins_over_the_go_alias() -> None:
    s = resolve(None, {"METRICS_PROVIDER_NAME": "Prometheus", "LOADWATCHER_PROVIDER_NAME": "host"})
    assert s.provider.name == "host"


@pytest.mark.parametrize(
    ("yaml_text", "env", "setting"),
    [
        (None, {"LOADWATCHER_SERVER_PORT": "http"}, "server.port"),
        (None, {"LOADWATCHER_POLL_INTERVAL_S": "-5"}, "poll.interval_s"),
        (None, {"LOADWATCHER_POLL_INTERVAL_S": "nan"}, "poll.interval_s"),
        (None, {"LOADWATCHER_POLL_INTERVAL_S": "0.0001"}, "poll.interval_s"),
        (None, {"METRICS_PROVIDER_NAME": "Consul"}, "provider.name"),
        (None, {"METRICS_PROVIDER_NAME": "SignalFx"}, "provider.token"),
        (
            None,
            {"METRICS_PROVIDER_NAME": "Datadog", "METRICS_PROVIDER_APP_KEY": "a"},
            "provider.token",
        ),
        (
            None,
            {"METRICS_PROVIDER_NAME": "Datadog", "METRICS_PROVIDER_TOKEN": "k"},
            "datadog.app_key",
        ),
        (
            None,
            {"METRICS_PROVIDER_NAME": "Datadog", "METRICS_PROVIDER_ADDRESS": "not a host"},
            "provider.address",
        ),
        (None, {"LOADWATCHER_SIGNALFX_REALM": "mars"}, "signalfx.realm"),
        (None, {"DATADOG_CLUSTER_NAME": "a} OR {b"}, "datadog.cluster_name"),
        (None, {"SIGNALFX_HOST_NAME_SUFFIX": '.x" OR host:*'}, "signalfx.host_name_suffix"),
        (None, {"METRICS_PROVIDER_NAME": "Prometheus"}, "provider.address"),
        (None, {"INSECURE_SKIP_VERIFY": "maybe"}, "provider.insecure_skip_verify"),
        (None, {"LOADWATCHER_PROVIDER_ADDRESS": "prometheus:9090"}, "provider.address"),
        (None, {"LOADWATCHER_PROMETHEUS_NODE_LABEL": "not a label"}, "prometheus.node_label"),
        (None, {"LOADWATCHER_PROVIDER_CA_FILE": "/no/such/ca.pem"}, "provider.ca_file"),
        (None, {"LOADWATCHER_JOURNAL_RETENTION_S": "60"}, "journal.retention_s"),
        ("server:\n  prot: 1\n", {}, "server.prot"),
        ("serve:\n  port: 1\n", {}, "serve"),
        ("server: [1, 2]\n", {}, "server"),
        ("server:\n  port: [1]\n", {}, "server.port"),
        ("server: {port: 1\n", {}, "config"),
    ],
)
def test_bad_values_name_the_setting(yaml_text, env, setting) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(yaml_text, env)
    assert info.value.setting.split(" ")[0] == setting


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LOADWATCHER_", "METRICS_PROVIDER", "INSECURE_SKIP"))
    }
    return subprocess.run(
        [sys.executable, "-m", "loadwatcher", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=60,
        check=False,
    )


def test_cli_bad_config_is_one_line_and_exit_2(tmp_path) -> None:
    done = run_cli("serve", "--port", "70000")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "server.port" in done.stderr and "Traceback" not in done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("provider:\n  name: [\n")
    done = run_cli("config", "check", "--config", str(bad))
    assert done.returncode == 2 and "not valid YAML" in done.stderr
    done = run_cli("config", "check", "--config", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_config_check_masks_the_datadog_keys(tmp_path) -> None:
    """The Go peer's Datadog environment: both keys masked, the key file's content unread."""
    app_key_file = tmp_path / "app-key"
    app_key_file.write_text("file-app-secret\n")
    done = run_cli(
        "config",
        "check",
        env={
            "METRICS_PROVIDER_NAME": "Datadog",
            "METRICS_PROVIDER_ADDRESS": "datadoghq.eu",
            "METRICS_PROVIDER_TOKEN": "inline-api-secret",
            "METRICS_PROVIDER_APP_KEY": "inline-app-secret",
            "LOADWATCHER_DATADOG_APP_KEY_FILE": str(app_key_file),
            "DATADOG_CLUSTER_NAME": "prod",
        },
    )
    assert done.returncode == 0, done.stderr
    assert "secret" not in done.stdout
    assert "token: '***'" in done.stdout and "app_key: '***'" in done.stdout
    assert "address: https://api.datadoghq.eu" in done.stdout
    assert "cluster_name: prod" in done.stdout


def test_config_check_masks_the_token(tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("file-secret\n")
    done = run_cli(
        "config",
        "check",
        env={
            "METRICS_PROVIDER_NAME": "Prometheus",
            "METRICS_PROVIDER_ADDRESS": "https://prom.example:9090",
            "METRICS_PROVIDER_TOKEN": "inline-secret-value",
            "LOADWATCHER_PROVIDER_TOKEN_FILE": str(token_file),
        },
    )
    assert done.returncode == 0, done.stderr
    assert "inline-secret-value" not in done.stdout and "file-secret" not in done.stdout
    assert "token: '***'" in done.stdout
    assert "name: prometheus" in done.stdout
