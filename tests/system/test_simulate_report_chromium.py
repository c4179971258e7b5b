"""The HTML report of ``loadwatcher simulate`` as headless Chromium renders it: every chart
is an SVG element of the DOM Chromium builds, and the page paints. The screenshot is saved
under ``$ARTIFACTS_DIR`` (else ``<tmp>/artifacts``) as ``simulate-report.png``.

Needs Debian's ``chromium``: skipped without it, failed without it under ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from loadwatcher.simulate import cluster, generator, profiles, replay, report
from tests.support.backends import require_binary


def test_headless_chromium_renders_every_chart(tmp_path: Path) -> None:
    chromium = require_binary("chromium")
    trace = generator.generate(60, 0.5, seed=2)
    spec = cluster.uniform(4)
    results = [
        replay.replay(spec, trace, profiles.parse_profile(name))
        for name in ("LeastAllocated", "TargetLoadPacking")
    ]
    page = tmp_path / "report.html"
    about = {"trace": trace.source, "pods": 60, "nodes": 4, "hours": 0.5}
    report.write(str(page), about, results)
    flags = ["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars"]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # Two heatmaps, one CDF, six outcome bars: parsed by Chromium as SVG elements.
    assert dom.count("<svg") == 2 + 1 + 6
    assert dom.count("<polyline") == 2
    artifacts = Path(os.environ.get("ARTIFACTS_DIR") or tmp_path / "artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "simulate-report.png"
    subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", "--window-size=1100,1400", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000  # a painted page, not a blank one
