"""What an add to the sample store took and refused (``AddResult``), and an add's samples
screened before they are merged (``Screened``)."""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.model import Columns, FloatArray, IntArray
from loadwatcher.pipeline import merge


@dataclass(frozen=True)
class AddResult:
    """What ``SampleStore.add`` kept and what it refused, by reason.

    ``offered`` counts the samples given with a finite time; ``ahead_s`` is the median
    lead over ``latest``'s clock of those dropped as ``future`` (0 when none), and
    ``future_nodes`` the nodes they belong to: what a clock skew is judged on.
    """

    added: Columns
    dropped: dict[str, int]
    offered: int = 0
    ahead_s: float = 0.0
    future_nodes: frozenset[str] = frozenset()
    # Not in ``dropped``: a poll's overlap with the last one repeats samples on purpose.
    # ``repeated``: not taken for its time: held already, given twice, or (without
    # ``keep_older``) older than its series' newest. A push's accounting: duplicate.
    repeated: int = 0


@dataclass(frozen=True)
class Screened:
    """One add's samples screened, before they are merged into the columns: the result
    (``result.added`` the samples to merge), the staleness markers given (series ids and
    times), and whether some samples go before their series' newest."""

    result: AddResult
    marks: tuple[IntArray, FloatArray] | None = None
    inserted: bool = False

    @property
    def added(self) -> Columns:
        return self.result.added


def combined(results: list[AddResult]) -> AddResult:
    """One ``AddResult`` for several adds in a row; the lead of the future samples is the
    one of the add that refused the most of them."""
    dropped: dict[str, int] = {}
    for r in results:
        for reason, n in r.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    most_future = max(results, key=lambda r: r.dropped.get("future", 0))
    return AddResult(
        merge.joined([r.added for r in results]),
        dropped,
        sum(r.offered for r in results),
        most_future.ahead_s,
        frozenset().union(*(r.future_nodes for r in results)),
        sum(r.repeated for r in results),
    )
