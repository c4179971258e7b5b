"""The HTML report of ``loadwatcher simulate`` as headless Chromium renders it: every chart
is an SVG element of the DOM Chromium builds, nothing is fetched, and the page paints.

Needs the ``chromium`` binary (Debian package ``chromium``); the test says so when absent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from loadwatcher.simulate import cluster, generator, profiles, replay, report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_headless_chromium_renders_every_chart(tmp_path: Path) -> None:
    trace = generator.generate(60, 0.5, seed=2)
    spec = cluster.uniform(4)
    results = [
        replay.replay(spec, trace, profiles.parse_profile(name))
        for name in ("LeastAllocated", "TargetLoadPacking")
    ]
    page = tmp_path / "report.html"
    about = {"trace": trace.source, "pods": 60, "nodes": 4, "hours": 0.5}
    report.write(str(page), about, results)
    assert CHROMIUM is not None
    flags = ["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars"]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # Two heatmaps, one CDF, six outcome bars: parsed by Chromium as SVG elements.
    assert dom.count("<svg") == 2 + 1 + 6
    assert dom.count("<polyline") == 2
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1100,1400", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000  # a painted page, not a blank one
