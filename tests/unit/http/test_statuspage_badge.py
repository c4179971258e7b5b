"""The status page's summary badge follows /watcher/health's three states."""

from __future__ import annotations

import pytest

from loadwatcher.http import statuspage


@pytest.mark.parametrize(
    ("status", "badge"),
    [
        ("ok", '<div class="status good" id="health">healthy</div>'),
        ("degraded", '<div class="status warn" id="health">degraded</div>'),
        ("unhealthy", '<div class="status bad" id="health">unhealthy</div>'),
        ("<b>", '<div class="status bad" id="health">unhealthy</div>'),  # unknown: the worst
    ],
)
def test_badge(status: str, badge: str) -> None:
    page = statuspage.render(None, {"status": status, "reasons": []}, now=0.0, refresh_s=15)
    assert badge in page
    assert ".status.warn{" in page  # the colour of degraded is in the page's CSS
