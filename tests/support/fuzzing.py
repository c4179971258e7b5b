"""How many examples a hypothesis test draws: every one in CI and the full command, a tenth
(at least 10) in the fast loop (``scripts/test -m unit`` sets ``LOADWATCHER_FAST_LOOP=1``).

The fast loop is for a developer's edit-run cycle; CI still draws every example, so what a
property finds it finds there. Tests that give no count get hypothesis's own default (100),
and the ``fast-loop`` profile below scales that too.
"""

from __future__ import annotations

import os

from hypothesis import settings

FAST = os.environ.get("LOADWATCHER_FAST_LOOP") == "1"
SHARE = 10

settings.register_profile("fast-loop", max_examples=10)
if FAST:
    settings.load_profile("fast-loop")


def examples(n: int) -> int:
    """``n``, or a tenth of it (at least 10) in the fast loop."""
    return max(10, n // SHARE) if FAST else n
