"""``config check`` refuses exactly what ``serve`` refuses, with the same line, over one
table of bad settings and every configuration file in deploy/.

Both commands run as real processes. A refusal is exit 2 and one ``bad configuration``
line on stderr before anything listens; an acceptance is exit 0 for ``config check`` and,
for ``serve``, a service that listens (then stops cleanly on SIGTERM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.backends import free_port
from tests.support.tls import make_pki

ROOT = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "loadwatcher", "serve"]
DEPLOY_CONFIGS = sorted(ROOT.glob("deploy/**/config.yaml"))


def _env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    base.pop("KUBE_CONFIG", None)
    return {**base, **extra}


def _check(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "loadwatcher", "config", "check", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    return proc.returncode, proc.stderr


def _serve(argv: list[str], env: dict[str, str], tmp: Path) -> tuple[int, str]:
    """(exit code, stderr) of a refused start; (0, log) of a start that listened."""
    port = free_port()
    log = tmp / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*SERVE, "--host", "127.0.0.1", "--port", str(port), *argv],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    try:
        while proc.poll() is None:
            if "listening on" in log.read_text():
                os.killpg(proc.pid, signal.SIGTERM)
                assert proc.wait(20) == 0, log.read_text()
                return 0, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, log.read_text()


def _same_verdict(argv: list[str], extra: dict[str, str], tmp: Path) -> tuple[int, str]:
    env = _env(extra)
    check_code, check_err = _check(argv, env)
    serve_code, serve_err = _serve(argv, env, tmp)
    if check_code == 0:
        assert serve_code == 0 and "Traceback" not in serve_err, (check_err, serve_err)
        return 0, ""
    assert (check_code, serve_code) == (2, 2), (check_err, serve_err)
    lines = serve_err.strip().splitlines()
    assert lines == [check_err.strip()], (check_err, serve_err)
    assert lines[0].startswith("loadwatcher: bad configuration: ")
    return 2, lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("parity-files")
    pki = make_pki(tmp / "pki")
    (tmp / "garbage").write_text("not a certificate, not a key\n")
    (tmp / "empty").write_text("# a comment, no token\n\n")
    (tmp / "tokens").write_text("a-token\n")
    (tmp / "dir").mkdir()
    (tmp / "unknown.yaml").write_text("servr:\n  port: 2020\n")
    return {
        "missing": str(tmp / "absent"),
        "garbage": str(tmp / "garbage"),
        "empty": str(tmp / "empty"),
        "tokens": str(tmp / "tokens"),
        "dir": str(tmp / "dir"),
        "cert": str(pki.cert_file),
        "key": str(pki.key_file),
        "other_key": str(pki.client_key_file),
        "ca": str(pki.ca_file),
        "unknown_yaml": str(tmp / "unknown.yaml"),
    }


PROM = {"LOADWATCHER_PROVIDER_NAME": "prometheus", "METRICS_PROVIDER_ADDRESS": "http://127.0.0.1:1"}
# (environment with {file} placeholders, a fragment of the expected line)
BAD = [
    ({"LOADWATCHER_SERVER_AUTH_TOKEN_FILE": "{missing}"}, "server.auth_token_file: no such file"),
    ({"LOADWATCHER_SERVER_AUTH_TOKEN_FILE": "{empty}"}, "holds no token"),
    ({"LOADWATCHER_SERVER_AUTH_TOKEN_FILE": "{dir}"}, "is a directory"),
    (
        {"LOADWATCHER_PROVIDER_NAME": "push", "LOADWATCHER_PUSH_TOKEN_FILE": "{missing}"},
        "push.token_file: no such file",
    ),
    (
        {"LOADWATCHER_PUSH_RECEIVE": "true", "LOADWATCHER_PUSH_TOKEN_FILE": "{empty}"},
        "push.token_file: {empty} holds no token",
    ),
    (
        {
            "LOADWATCHER_SERVER_TLS_CERT_FILE": "{garbage}",
            "LOADWATCHER_SERVER_TLS_KEY_FILE": "{key}",
        },
        "server.tls_cert_file: {garbage} and its key do not load",
    ),
    (
        {
            "LOADWATCHER_SERVER_TLS_CERT_FILE": "{cert}",
            "LOADWATCHER_SERVER_TLS_KEY_FILE": "{other_key}",
        },
        "server.tls_cert_file:",
    ),
    ({"LOADWATCHER_SERVER_TLS_CERT_FILE": "{cert}"}, "set both TLS files, or neither"),
    ({**PROM, "LOADWATCHER_PROVIDER_CA_FILE": "{garbage}"}, "is not a PEM CA bundle"),
    ({**PROM, "LOADWATCHER_PROVIDER_TOKEN_FILE": "{missing}"}, "provider.token_file: no such file"),
    (
        {"LOADWATCHER_PROVIDER_NAME": "metrics-server", "KUBE_CONFIG": "{missing}"},
        "kube.config: no such file",
    ),
    (
        {"METRICS_PROVIDER_NAME": "Datadog", "METRICS_PROVIDER_APP_KEY": "k"},
        "provider.token: required for provider 'datadog' (METRICS_PROVIDER_TOKEN)",
    ),
    (
        {"METRICS_PROVIDER_NAME": "Datadog", "METRICS_PROVIDER_TOKEN": "k"},
        "datadog.app_key: required for provider 'datadog' (METRICS_PROVIDER_APP_KEY)",
    ),
    (
        {
            "METRICS_PROVIDER_NAME": "Datadog",
            "METRICS_PROVIDER_TOKEN": "k",
            "LOADWATCHER_DATADOG_APP_KEY_FILE": "{missing}",
        },
        "datadog.app_key_file: no such file",
    ),
    (
        {"METRICS_PROVIDER_NAME": "SignalFx"},
        "provider.token: required for provider 'signalfx' (METRICS_PROVIDER_TOKEN)",
    ),
    ({"LOADWATCHER_POLL_INTERVAL_S": "soon"}, "poll.interval_s"),
    (
        {
            "LOADWATCHER_PROVIDER_NAME": "influxdb",
            "METRICS_PROVIDER_ADDRESS": "http://x:8086",
            "LOADWATCHER_INFLUXDB_QUERY_LANGUAGE": "flux",
        },
        "influxdb.",
    ),
]


@pytest.mark.parametrize(("env", "expected"), BAD, ids=[e for _, e in BAD])
def test_both_refuse_a_bad_setting_with_one_line(
    env: dict[str, str], expected: str, files: dict[str, str], tmp_path: Path
) -> None:
    filled = {k: v.format(**files) for k, v in env.items()}
    code, line = _same_verdict(["--db", str(tmp_path / "lw.db")], filled, tmp_path)
    assert code == 2 and expected.format(**files) in line, line


def test_both_refuse_an_unknown_section(files: dict[str, str], tmp_path: Path) -> None:
    argv = ["--config", files["unknown_yaml"], "--db", str(tmp_path / "lw.db")]
    code, line = _same_verdict(argv, {}, tmp_path)
    assert code == 2 and "did you mean server?" in line


def test_every_deploy_config_is_judged_alike(files: dict[str, str], tmp_path: Path) -> None:
    assert len(DEPLOY_CONFIGS) >= 5, DEPLOY_CONFIGS
    verdicts = {}
    for path in DEPLOY_CONFIGS:
        name = str(path.relative_to(ROOT))
        argv = ["--config", str(path), "--db", str(tmp_path / f"{path.parent.name}.db")]
        # As shipped, outside the cluster: the files the pod mounts are not here.
        verdicts[name] = _same_verdict(argv, {}, tmp_path)
        # With the push token at a missing file (the case) and at a good one.
        missing = {"LOADWATCHER_PUSH_TOKEN_FILE": files["missing"]}
        code, line = _same_verdict(argv, missing, tmp_path)
        assert code == 2 and f"push.token_file: no such file: {files['missing']}" in line
        good = {"LOADWATCHER_PUSH_TOKEN_FILE": files["tokens"]}
        assert _same_verdict(argv, good, tmp_path) == (0, ""), name
    push = verdicts["deploy/overlays/push/config.yaml"]
    assert push[0] == 2 and "push.token_file: no such file: /etc/loadwatcher" in push[1]
    assert verdicts["deploy/base/config.yaml"] == (0, "")


def test_both_refuse_a_db_that_is_not_a_journal(files: dict[str, str], tmp_path: Path) -> None:
    before = Path(files["garbage"]).read_bytes()
    code, line = _same_verdict(["--db", files["garbage"]], {}, tmp_path)
    assert code == 2 and f"journal.path: {files['garbage']} is a text file" in line, line
    assert Path(files["garbage"]).read_bytes() == before
    assert not Path(files["garbage"] + ".lock").exists()
