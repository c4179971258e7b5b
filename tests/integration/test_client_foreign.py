"""``--watcher`` at a real Prometheus (a common slip: its URL instead of loadwatcher's) is
named as not a loadwatcher, without echoing what Prometheus answered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend
ROOT = Path(__file__).resolve().parents[2]


def test_prometheus_url_is_named_as_not_a_loadwatcher(prometheus_factory) -> None:
    prom = prometheus_factory()
    for command in ("score", "predict"):
        argv = [sys.executable, "-m", "loadwatcher", command, "--watcher", prom.url]
        if command == "score":
            argv += ["--pod", str(ROOT / "examples" / "pod.yaml")]
        proc = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert f"{prom.url}/watcher is not a loadwatcher: it answered HTTP 404" in proc.stderr
        assert "page not found" not in proc.stderr  # Prometheus's own body is not echoed
