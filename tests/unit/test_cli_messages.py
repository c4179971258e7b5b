"""Every configuration or command-line mistake gets one line a person can act on.

Exact stderr lines for bad numbers and names (with the setting and where its value came
from), suggestions for misspelt settings and for a watcher URL without its scheme, the
subcommand's own usage for an unknown flag, the advice outside a cluster, the help of
``predict`` and ``score``, and counts that agree with their nouns in logs and messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, cast

import pytest

import loadwatcher.engine as engine
from loadwatcher import commandline, config
from loadwatcher.cli import build_parser
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.pipeline import analysis
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.providers import registry
from loadwatcher.providers.kube.access import KubeAccess, NotInClusterError, open_client
from loadwatcher.providers.kube.metrics_server import MetricsServerOptions, MetricsServerProvider
from loadwatcher.words import plural
from tests.support.backends import free_port

REPO = Path(__file__).resolve().parents[2]
BAD = "loadwatcher: bad configuration: "
NOT_IN_CLUSTER = (
    "not running in a cluster (no service account); set KUBE_CONFIG or kube.config to a "
    "kubeconfig file"
)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any setting, kubeconfig or in-cluster variable."""
    prefixes = ("LOADWATCHER_", "METRICS_PROVIDER", "INSECURE_SKIP", "KUBE", "KUBERNETES_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    return {**env, **extra}


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO, module: str = "loadwatcher"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        cwd=cwd,
        timeout=60,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The single stderr line of a run that failed with ``code``."""
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def config_error(yaml_text: str | None = None, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        config.resolve(yaml_text, env or {}, catalogue=registry.catalogue())
    return str(info.value)


# ------------------------------------------------------------------------ 1. numbers


PORT_ABC = "server.port{}: expected an integer port 0-65535, got 'abc'"


@pytest.mark.parametrize(
    ("args", "env", "source"),
    [
        (("serve", "--port", "abc"), {}, " (from --port)"),
        (("config", "check", "--port", "abc"), {}, " (from --port)"),
        (
            ("config", "check"),
            {"LOADWATCHER_SERVER_PORT": "abc"},
            " (from LOADWATCHER_SERVER_PORT)",
        ),
        (("config", "check", "--config", "{yaml}"), {}, ""),
    ],
)
def test_a_bad_port_says_what_a_port_is(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], source: str
) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("server: {port: abc}\n")
    argv = [a.replace("{yaml}", str(yaml_file)) for a in args]
    assert one_line(run(*argv, env=env)) == BAD + PORT_ABC.format(source)


def test_a_bad_interval_asks_for_seconds() -> None:
    line = one_line(run("config", "check", "--poll-interval-s", "fast"))
    assert line == (
        BAD + "poll.interval_s (from --poll-interval-s): "
        "expected a number of seconds >= 0.1, got 'fast'"
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LOADWATCHER_SERVER_PORT", "70000", "expected an integer port 0-65535, got '70000'"),
        ("LOADWATCHER_SERVER_PORT", "20.5", "expected an integer port 0-65535, got '20.5'"),
        ("LOADWATCHER_JOURNAL_RETENTION_S", "x", "expected a positive number of seconds, got 'x'"),
        ("LOADWATCHER_POLL_INTERVAL_S", "nan", "expected a number of seconds >= 0.1, got 'nan'"),
        (
            "LOADWATCHER_POLL_INTERVAL_S",
            "0.0001",
            "expected a number of seconds >= 0.1, got '0.0001'",
        ),
        ("LOADWATCHER_POLL_OVERLAP_S", "-1", "expected a number of seconds >= 0, got '-1'"),
        ("LOADWATCHER_PROVIDER_TIMEOUT_S", "9s", "expected a positive number of seconds, got '9s'"),
        ("LOADWATCHER_PROMETHEUS_SCALE", "x", "expected a positive number, got 'x'"),
        ("LOADWATCHER_PROMETHEUS_STEP_S", "0", "expected a positive number of seconds, got '0'"),
        ("LOADWATCHER_INFLUXDB_SCALE", "inf", "expected a positive number, got 'inf'"),
        ("LOADWATCHER_KUBE_PAGE_SIZE", "1.5", "expected an integer >= 0, got '1.5'"),
        ("LOADWATCHER_KUBE_PAGE_SIZE", "-1", "expected an integer >= 0, got '-1'"),
        ("LOADWATCHER_KUBE_NODE_LIST_INTERVAL_S", "", "expected a number of seconds >= 0, got ''"),
        ("LOADWATCHER_ANALYSIS_STALE_AFTER_S", "", "expected a positive number of seconds, got ''"),
        ("LOADWATCHER_ANALYSIS_FROZEN_AFTER_S", "x", "expected a number of seconds >= 0, got 'x'"),
        ("LOADWATCHER_ANALYSIS_MIN_COVERAGE", "x", "expected a fraction between 0 and 1, got 'x'"),
        (
            "LOADWATCHER_CORROBORATE_THRESHOLD_PCT",
            "x",
            "expected a positive number of percentage points, got 'x'",
        ),
    ],
)
def test_every_number_says_its_kind_and_echoes_the_value(
    variable: str, value: str, message: str
) -> None:
    key = next(s.key for s in registry.catalogue().specs if s.env_name == variable)
    assert config_error(env={variable: value}) == f"{key} (from {variable}): {message}"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "METRICS_PROVIDER_NAME",
            "Consul",
            "expected one of host, prometheus, influxdb, metrics-server, push, datadog, "
            "signalfx, got 'Consul'",
        ),
        (
            "INSECURE_SKIP_VERIFY",
            "maybe",
            "expected true or false (or yes/no, on/off, 1/0), got 'maybe'",
        ),
        ("LOADWATCHER_INFLUXDB_QUERY_LANGUAGE", "sql", "expected influxql or flux, got 'sql'"),
        ("LOADWATCHER_INFLUXDB_AUTH_SCHEME", "Basic", "expected Token or Bearer, got 'Basic'"),
        ("LOADWATCHER_KUBE_PERCENT_OF", "all", "expected capacity or allocatable, got 'all'"),
        (
            "LOADWATCHER_PROVIDER_ADDRESS",
            "prometheus:9090",
            "expected an http:// or https:// URL, got 'prometheus:9090'; "
            "did you mean http://prometheus:9090?",
        ),
        (
            "LOADWATCHER_PROVIDER_ADDRESS",
            "http://[::1",
            "expected a URL, got 'http://[::1' (Invalid IPv6 URL)",
        ),
        (
            "LOADWATCHER_PROVIDER_ADDRESS",
            "http://prometheus:99999",
            "expected a URL, got 'http://prometheus:99999' (Port out of range 0-65535)",
        ),
        (
            "LOADWATCHER_PROVIDER_ADDRESS",
            "http://:9090",
            "expected a URL with a host and no spaces, got 'http://:9090'",
        ),
    ],
)
def test_names_and_booleans_list_what_is_accepted(variable: str, value: str, message: str) -> None:
    key = next(s.key for s in registry.catalogue().specs if variable in (s.env_name, *s.env))
    assert config_error(env={variable: value}) == f"{key} (from {variable}): {message}"


def test_a_huge_value_is_cut_short() -> None:
    message = config_error(env={"LOADWATCHER_SERVER_PORT": "9" * 5000})
    assert message.endswith("got '" + "9" * 100 + "'...")


# ------------------------------------------------------------------ 2. unknown settings


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "provider: {adress: x}",
            "provider.adress: unknown setting; did you mean provider.address?",
        ),
        ("provder: {address: x}", "provder: unknown section; did you mean provider?"),
        ("Provider: {name: host}", "Provider: unknown section; did you mean provider?"),
        ("port: 2020", "port: unknown section; did you mean server.port?"),
        (
            "scale: 1",
            "scale: unknown section; did you mean prometheus.scale or influxdb.scale or "
            "datadog.scale or signalfx.scale?",
        ),
        (
            "provider.address: http://x",
            "provider.address: unknown section; write settings under their section "
            "(provider: {address: ...})",
        ),
        (
            "server: {interval_s: 5}",
            "server.interval_s: unknown setting; did you mean poll.interval_s?",
        ),
        (
            "log: {zzzzzz: 1}",
            "log.zzzzzz: unknown setting; log has level",
        ),
        (
            "qqqqqq: 1",
            "qqqqqq: unknown section; expected one of server, journal, poll, provider, "
            "prometheus, log, analysis, health, corroborate, query, influxdb, kube, push, "
            "datadog, signalfx",
        ),
    ],
)
def test_unknown_settings_suggest_the_closest_name(yaml_text: str, message: str) -> None:
    assert config_error(yaml_text + "\n") == message


def test_an_unknown_setting_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("provider:\n  adress: http://prometheus:9090\n")
    line = one_line(run("config", "check", "--config", str(path)))
    assert line == BAD + "provider.adress: unknown setting; did you mean provider.address?"


# ----------------------------------------------------------------------- 3. log level


def test_a_bad_log_level_lists_the_levels() -> None:
    line = one_line(run("serve", "--log-level", "LOUD"))
    assert line == (
        BAD + "log.level (from --log-level): expected one of DEBUG, INFO, WARNING, ERROR, "
        "got 'LOUD'"
    )


def test_log_levels_in_lower_case_are_accepted() -> None:
    done = run("config", "check", "--log-level", "debug")
    assert done.returncode == 0, done.stderr
    assert "level: DEBUG" in done.stdout
    assert config.resolve("log: {level: Warning}\n", {}).log.level == "WARNING"


# ----------------------------------------------------------------------- 4. usage lines


@pytest.mark.parametrize(
    ("args", "prog"),
    [
        (("serve", "--bogus"), "loadwatcher serve"),
        (("config", "check", "--bogus"), "loadwatcher config check"),
        (("config", "table", "--bogus"), "loadwatcher config table"),
        (("score", "--bogus"), "loadwatcher score"),
        (("predict", "--bogus"), "loadwatcher predict"),
        (("serve", "--port", "1", "stray"), "loadwatcher serve"),
    ],
)
def test_an_unknown_flag_shows_the_subcommands_usage(args: tuple[str, ...], prog: str) -> None:
    done = run(*args)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"usage: {prog} [-h]"), done.stderr
    assert lines[-1] == f"{prog}: error: unrecognized arguments: {args[-1]}"


@pytest.mark.parametrize("break_it", ["no class", "another class", "actions renamed"])
def test_argparse_internals_are_checked_and_without_them_the_top_level_reports(
    break_it: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The subcommand's usage line rests on argparse internals (``_actions``,
    ``_SubParsersAction``): checked once, and an argparse without them costs that line only
    (the top level reports the mistake), never a traceback."""
    assert commandline.argparse_mismatch() is None
    if break_it == "no class":
        monkeypatch.setattr(commandline, "_SUBPARSERS", None)
    elif break_it == "another class":
        monkeypatch.setattr(commandline, "_SUBPARSERS", type("Other", (), {}))
    else:
        monkeypatch.setattr(commandline, "_ACTIONS", "_renamed")
    commandline.argparse_mismatch.cache_clear()
    try:
        assert commandline.argparse_mismatch() is not None
        with pytest.raises(SystemExit) as done:
            commandline.parse_args(build_parser(), ["predict", "--bogus"])
    finally:
        commandline.argparse_mismatch.cache_clear()
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "loadwatcher: error: unrecognized arguments: --bogus"
    )


def test_the_scoring_module_also_shows_the_subcommands_usage() -> None:
    done = run("predict", "--bogus", module="loadwatcher.scoring")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith("usage: loadwatcher predict [-h]")
    assert lines[-1] == "loadwatcher predict: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("predict", "--n-sigma", "abc"), "argument --n-sigma: expected a number, got 'abc'"),
        (
            ("score", "--timeout", "0"),
            "argument --timeout: expected a positive number of seconds, got '0'",
        ),
        (("score", "--retries", "x"), "argument --retries: expected an integer >= 0, got 'x'"),
        (
            ("predict", "--max-age", "-1"),
            "argument --max-age: expected a number of seconds >= 0, got '-1'",
        ),
    ],
)
def test_bad_numbers_of_the_scoring_flags(args: tuple[str, ...], message: str) -> None:
    done = run(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == f"loadwatcher {args[0]}: error: {message}"


# ----------------------------------------------------------------- 5. --watcher host:port


@pytest.mark.parametrize("command", ["score", "predict"])
@pytest.mark.parametrize("watcher", ["127.0.0.1:2020", "loadwatcher.kube-system:2020/watcher"])
def test_a_watcher_without_scheme_gets_the_url_suggested(
    tmp_path: Path, command: str, watcher: str
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("containers: []\n")
    extra = ["--pod", str(pod)] if command == "score" else []
    done = run(command, "--watcher", watcher, *extra)
    assert one_line(done) == (
        f"loadwatcher {command}: error: --watcher {watcher!r} is neither a file nor a URL; "
        f"did you mean --watcher http://{watcher}?"
    )


def test_a_saved_file_named_like_host_port_is_read(tmp_path: Path) -> None:
    (tmp_path / "127.0.0.1:2020").write_text("{not json")
    line = one_line(run("predict", "--watcher", "127.0.0.1:2020", cwd=tmp_path))
    assert "did you mean" not in line and "JSON" in line


# ---------------------------------------------------------------- 6. outside a cluster


async def test_no_kubeconfig_outside_a_cluster_says_so(tmp_path: Path) -> None:
    access = KubeAccess(environ={}, token_file=str(tmp_path / "no-token"))
    with pytest.raises(NotInClusterError) as info:
        await open_client(access)
    assert str(info.value) == f"kube.config: {NOT_IN_CLUSTER}"


async def test_a_partial_service_account_keeps_the_librarys_reason(tmp_path: Path) -> None:
    access = KubeAccess(
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
        token_file=str(tmp_path / "no-token"),
    )
    with pytest.raises(ConfigError) as info:
        await open_client(access)
    assert not isinstance(info.value, NotInClusterError)
    assert "token" in str(info.value).lower()


# The service as `python -m loadwatcher`, but where the service account's token file does
# not exist: these tests are about a process outside a cluster, and CI may run inside one.
OUTSIDE_A_CLUSTER = (
    "import dataclasses, sys\n"
    "import loadwatcher.providers.kube.access as access\n"
    "from loadwatcher import cli\n"
    "real = access._require_cluster\n"
    "def require_cluster(a, environ):\n"
    "    return real(dataclasses.replace(a, token_file='/nonexistent/token'), environ)\n"
    "access._require_cluster = require_cluster\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503 while unhealthy: the body is still JSON
        return json.loads(exc.read())


def test_metrics_server_outside_a_cluster_in_health_and_log(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-c", OUTSIDE_A_CLUSTER, "serve", "--provider", "metrics-server"),
            *("--db", "", "--port", str(port), "--host", "127.0.0.1"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
    )
    try:
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # not listening yet
                error = get_json(f"http://127.0.0.1:{port}/watcher/health")["provider"]["error"]
            time.sleep(0.2)
        assert error == f"auth: {NOT_IN_CLUSTER}"
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=30)
    assert f"WARNING loadwatcher.engine: provider down: auth: {NOT_IN_CLUSTER}\n" in log
    assert "Traceback" not in log


def test_score_with_an_empty_kubeconfig_outside_a_cluster(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("containers: []\n")
    argv = ("score", "--kubeconfig", "", "--watcher", "http://127.0.0.1:9", "--pod", str(pod))
    done = subprocess.run(
        [sys.executable, "-c", OUTSIDE_A_CLUSTER, *argv],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert one_line(done) == (
        "loadwatcher score: error: not running in a cluster (no service account); "
        "give --kubeconfig a kubeconfig file"
    )


# ---------------------------------------------------------------------------- 7. help


def subcommand(name: str) -> Any:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return cast(dict[str, Any], sub.choices)[name]


@pytest.mark.parametrize("name", ["predict", "score"])
def test_every_option_says_what_it_means_and_its_default(name: str) -> None:
    for action in subcommand(name)._actions:
        if action.dest == "help":
            continue
        text = action.help or ""
        assert len(text) > 10, action.option_strings
        assert "default" in text or "required" in text, (action.option_strings, text)


def test_predict_help_shows_the_defaults() -> None:
    done = run("predict", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for expected in (
        "mean + N × std (default: 2)",
        "percentile peak (default: P95)",
        "in percent (default: 10)",
        "reclaimRatio × Allocated[Prod] − peak (default: 1)",
        "share of allocatable (default: 1)",
        "per attempt (default: 10)",
        "transient failures (default: 3)",
    ):
        assert expected in text, expected


# --------------------------------------------------------------------------- 8. words


def test_plural() -> None:
    assert plural(0, "node") == "0 nodes"
    assert plural(1, "node") == "1 node"
    assert plural(2, "sample") == "2 samples"
    assert plural(1, "series", "series") == "1 series"
    assert plural(3, "query", "queries") == "3 queries"


class _NoProvider:
    source = "Prometheus"

    async def fetch(self, now: float, since: float | None) -> Any:
        raise AssertionError("not polled here")

    async def close(self) -> None:
        pass


def test_quality_log_lines_read_as_sentences(caplog: pytest.LogCaptureFixture) -> None:
    eng = engine.Engine(
        _NoProvider(),
        None,
        engine.EngineOptions(poll_interval_s=15.0, retention_s=1020.0),
        {Resource.CPU: "cpu", Resource.MEMORY: "memory"},
    )
    detail = {"cpu": "disagrees", "memory": "ok"}
    eng.report = analysis.Report(
        {
            "a": {"quality": "disagrees", "lastSample": 1, "detail": detail},
            "b": {"quality": "low_coverage", "lastSample": 1, "detail": {"cpu": "low_coverage"}},
        },
        {Quality.DISAGREES: ("a",), Quality.LOW_COVERAGE: ("b",), Quality.MISSING: ("c",)},
    )
    with caplog.at_level(logging.INFO, logger="loadwatcher.engine"):
        eng.log_quality()
        ok = {"a": {"quality": "ok", "lastSample": 2}}
        eng.report = analysis.Report(ok, {Quality.OK: ("a",)})
        eng.log_quality()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "node a disagrees with the corroborating provider (cpu disagrees, memory ok)",
        "node b has low coverage (cpu low coverage)",
        "node c is missing",
        "node a recovered (was disagrees)",
        "node b left the snapshot (was low coverage)",
        "node c left the snapshot (was missing)",
    ]
    assert all(line == line.rstrip() for line in lines)


class _EmptyMetrics:
    """A KubeClient whose cluster has one node and metrics-server lists nothing."""

    async def close_retired(self) -> None:
        pass

    async def list_all(self, path: str, params: Any = None) -> list[dict[str, Any]]:
        if path.startswith("/api/v1/nodes"):
            return [{"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1"}}}]
        return []

    async def close(self) -> None:
        pass


async def test_one_node_is_one_node() -> None:
    provider = MetricsServerProvider(_EmptyMetrics(), MetricsServerOptions())  # type: ignore[arg-type]
    with pytest.raises(Exception) as info:
        await provider.fetch(1000.0, None)
    assert "although the cluster has 1 node:" in str(info.value)
