"""What the cycle does for pushed samples alone: they were answered 204 already.

``FetchResult.pushed`` says which of a fetch's batches are pushed; the cycle merges them on
their own (kept by time, every one counted) and never refuses them with a cap of its own.
Here: health's notice naming the nodes whose pushed samples are ahead of the clock.
"""

from __future__ import annotations

import numpy as np

from loadwatcher.model import FetchResult
from loadwatcher.words import plural

# A pushed sample this far ahead of the service's clock says its writer's clock runs
# ahead: its node is named in health (within the future tolerance it is kept, by time;
# beyond, dropped as future).
AHEAD_NOTICE_S = 2.0


def ahead_notice(result: FetchResult, now: float) -> list[str]:
    """Health's notice naming the nodes whose pushed samples are ahead of ``now``."""
    if not result.pushed:
        return []
    lead: dict[str, float] = {}
    for batch in result.batches[len(result.batches) - result.pushed :]:
        ahead = batch.ts > now + AHEAD_NOTICE_S
        if not ahead.any():
            continue
        starts = np.cumsum(batch.lengths) - batch.lengths
        for (node, _), a, n in zip(
            batch.keys, starts.tolist(), batch.lengths.tolist(), strict=True
        ):
            most = float(batch.ts[a : a + n].max(initial=-np.inf)) - now
            if most > AHEAD_NOTICE_S:
                lead[node] = max(lead.get(node, 0.0), most)
    if not lead:
        return []
    named = sorted(lead, key=lambda n: -lead[n])
    shown = ", ".join(f"{n} by {lead[n]:.0f} s" for n in named[:5])
    more = f" and {plural(len(named) - 5, 'node')} more" if len(named) > 5 else ""
    return [
        f"pushed samples ahead of this service's clock (a writer's clock runs ahead; kept "
        f"by time within analysis.future_tolerance_s, dropped as future beyond): "
        f"{shown}{more}"
    ]
