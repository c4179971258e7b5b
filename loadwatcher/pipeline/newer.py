"""What of a batch a store would take, decided as the batch is parsed (pure).

A backfill after a restore asks for the whole retention while the store holds the
journal's samples: kept until the fetch ends, the slices would hold a second copy of the
retention beside the store. Samples at or before their series' newest held time are
refused by the store as repeats, so they can go as each slice is parsed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loadwatcher.model import FloatArray, Resource, SeriesBatch
from loadwatcher.pipeline import plausible

NewestOf = Callable[[list[tuple[str, Resource]]], FloatArray]
"""The time up to which the store holds each series (-inf: none), as far as a sample at or
before it would be refused as a repeat."""


def newer(batch: SeriesBatch, newest: FloatArray) -> SeriesBatch:
    """``batch`` without the samples at or before ``newest[i]``, series ``i``'s: the store
    would refuse them as repeats. Samples with a time that is not finite and staleness
    markers stay, for the store to count and judge; those left out are counted in
    ``held_back``."""
    if batch.ts.shape[0] == 0:
        return batch
    keep = batch.ts > np.repeat(newest, batch.lengths)
    keep |= ~np.isfinite(batch.ts)
    keep |= plausible.stale(batch.values)
    kept = int(np.count_nonzero(keep))
    if kept == batch.ts.shape[0]:
        return batch
    return batch.where(keep, batch.held_back + batch.ts.shape[0] - kept)
