"""What counts as a utilisation sample: the value checks every sample passes, fresh or read
back from the journal, the marker of a value text a provider could not read, and
Prometheus's staleness marker (pure)."""

from __future__ import annotations

from typing import Final

import numpy as np

from loadwatcher._types import BoolArray
from loadwatcher.model import FloatArray

# Utilisation above 100 % happens by rounding in exporters; beyond this it is a bad sample.
OVER_100_TOLERANCE = 1.0

# The value of a sample whose text a provider could not read: a NaN with a payload of its
# own, which neither a backend nor arithmetic on values produces, so that the store counts
# it as "unparsable" rather than "non_finite". Providers put it in after any scaling
# (arithmetic need not keep a NaN's payload).
_UNPARSABLE_BITS = 0x7FF8_0000_0BAD_0BAD
UNPARSABLE: Final = float(np.array([_UNPARSABLE_BITS], np.uint64).view(np.float64)[0])


# Prometheus's staleness marker: a NaN with this payload, which a writer sends when a series
# ends (remote write). Held beside the samples, never as one: it only ends a series.
_STALE_BITS = 0x7FF0_0000_0000_0002
STALE: Final = float(np.array([_STALE_BITS], np.uint64).view(np.float64)[0])


def stale(values: FloatArray) -> BoolArray:
    """Which of ``values`` are staleness markers (``STALE``)."""
    marked: BoolArray = np.asarray(values, np.float64).view(np.uint64) == _STALE_BITS
    return marked


def unparsable(values: FloatArray) -> BoolArray:
    """Which of ``values`` are ``UNPARSABLE``."""
    marked: BoolArray = np.asarray(values, np.float64).view(np.uint64) == _UNPARSABLE_BITS
    return marked


def screen(val: FloatArray, dropped: dict[str, int]) -> BoolArray:
    """Which of ``val`` are a utilisation (finite, 0..100 plus the tolerance); the others
    are counted into ``dropped`` by reason (``non_finite``, ``unparsable``, ``negative``,
    ``over_100``)."""
    finite = np.isfinite(val)
    negative = finite & (val < 0)
    over = finite & (val > 100.0 + OVER_100_TOLERANCE)
    unread = int(unparsable(val).sum()) if not finite.all() else 0
    if unread:  # only when some: callers compare the counts with the three above
        dropped["unparsable"] = dropped.get("unparsable", 0) + unread
    dropped["non_finite"] = dropped.get("non_finite", 0) + int((~finite).sum()) - unread
    dropped["negative"] = dropped.get("negative", 0) + int(negative.sum())
    dropped["over_100"] = dropped.get("over_100", 0) + int(over.sum())
    good: BoolArray = finite & ~negative & ~over
    return good
