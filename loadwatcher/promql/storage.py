"""The series a query reads: label sets with their samples, indexed by label, and the
selection of Prometheus's selectors (matchers, lookback, range windows) over them.

A ``SeriesSet`` holds series ``i`` as ``ts[starts[i]:starts[i + 1]]`` (int64 ms,
ascending) and the same slice of ``values``, and the staleness markers of its series: a
marker newer than a series' newest sample at or before t ends the series at t, as in
Prometheus (it is no sample to a range). Selection is vectorised over series and steps:
each sample has a key ``row · 2⁴² + t`` (ascending along the columns, since rows are), so
"the newest sample at or before t" and "the samples in [a, b]" of every (series, step) pair
are each one ``searchsorted``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import promql_parser
import re2

from loadwatcher._types import BoolArray, FloatArray, IntArray
from loadwatcher.promql.values import METRIC_NAME, ErrorType, Labels, QueryError

# Sample times are milliseconds since the epoch: 2⁴² ms runs to the year 2109.
_KEY_SHIFT = 1 << 42


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a client's bad pattern is its error, not the log's
    return options


_RE2_OPTIONS = _options()


@lru_cache(maxsize=256)
def compiled(pattern: str) -> Any:
    """A label matcher's regular expression, matched whole as Prometheus anchors them.

    RE2, as Go's ``regexp`` that Prometheus uses: the same syntax, and time linear in the
    text whatever the pattern (a client's pattern cannot stall a worker thread).
    """
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args else ""
        raise QueryError(
            ErrorType.BAD_DATA, f"invalid regular expression {pattern!r}: {reason}"
        ) from None


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``op`` is ``=``, ``!=``, ``=~`` or ``!~``."""

    name: str
    op: str
    value: str

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = _pattern(self.value)(value)
        return hit if self.op == "=~" else not hit


# A literal as a pattern may write it: word characters, '-', ':', '/', escaped dots.
_LITERAL = re.compile(r"(?:[\w\-:/]|\\\.)*")


def _unescaped(text: str) -> str | None:
    return text.replace("\\.", ".") if _LITERAL.fullmatch(text) else None


@lru_cache(maxsize=256)
def _pattern(pattern: str) -> Callable[[str], bool]:
    """Whether a whole value matches: the regular expression, or for the shapes dashboards
    write most (``a|b|c``, ``prefix.*``) the same test by set or prefix, without RE2."""
    compiled(pattern)  # a bad pattern is a bad_data error whatever its shape
    alternatives = pattern.split("|")
    literals = [_unescaped(a) for a in alternatives]
    if all(lit is not None for lit in literals):
        choices = frozenset(lit for lit in literals if lit is not None)
        return choices.__contains__
    if pattern.endswith(".*") and "|" not in pattern:
        prefix = _unescaped(pattern[:-2])
        if prefix is not None:
            # RE2's '.' stops at a newline, as Go's.
            return lambda value: value.startswith(prefix) and "\n" not in value[len(prefix) :]
    regex = compiled(pattern)
    return lambda value: regex.fullmatch(value) is not None


# The parser's enums are not hashable: compared one by one.
_OPS = (
    (promql_parser.MatchOp.Equal, "="),
    (promql_parser.MatchOp.NotEqual, "!="),
    (promql_parser.MatchOp.Re, "=~"),
    (promql_parser.MatchOp.NotRe, "!~"),
)


def _op(op: promql_parser.MatchOp) -> str:
    for known, text in _OPS:
        if op == known:
            return text
    raise QueryError(ErrorType.BAD_DATA, f"unknown label matcher {op}")


def matchers_of(selector: promql_parser.VectorSelector) -> list[Matcher]:
    """The selector's matchers, its metric name as a ``__name__`` matcher."""
    if selector.matchers.or_matchers:
        raise QueryError(
            ErrorType.BAD_DATA, "'or' inside a selector's braces is not PromQL of Prometheus 2"
        )
    out = [Matcher(m.name, _op(m.op), m.value) for m in selector.matchers.matchers]
    if selector.name is not None:
        out.append(Matcher(METRIC_NAME, "=", selector.name))
    return out


# Per label name, per value, the rows that have it.
Index = dict[str, dict[str, "IntArray | list[int]"]]


@dataclass(frozen=True)
class SeriesSet:
    """Series ``i``: labels ``labels[i]`` (any sequence: a large set may build each tuple
    when asked), samples ``ts[starts[i]:starts[i + 1]]``. ``index`` is built from the
    labels unless given."""

    labels: Sequence[Labels]
    starts: IntArray
    ts: IntArray
    values: FloatArray
    index: Index | None = field(default=None, compare=False)
    # The staleness markers' keys (``row · 2⁴² + t``), ascending.
    ends: IntArray = field(default_factory=lambda: np.empty(0, np.int64), compare=False)

    def __post_init__(self) -> None:
        if self.index is not None:
            return
        index: Index = {}
        for row, lab in enumerate(self.labels):
            for name, value in lab:
                rows = index.setdefault(name, {}).setdefault(value, [])
                assert isinstance(rows, list)
                rows.append(row)
        object.__setattr__(self, "index", index)

    @property
    def _index(self) -> Index:
        assert self.index is not None
        return self.index

    @cached_property
    def keys(self) -> IntArray:
        rows = np.repeat(np.arange(len(self.labels), dtype=np.int64), np.diff(self.starts))
        return rows * _KEY_SHIFT + self.ts

    def select(self, matchers: Sequence[Matcher]) -> IntArray:
        """Rows whose labels satisfy every matcher (a missing label is the empty value)."""
        n = len(self.labels)
        mask = np.ones(n, bool)
        # Equality first: it narrows at the cost of a lookup, and an empty set ends the search.
        for m in sorted(matchers, key=lambda m: m.op != "="):
            if not mask.any():
                break
            values = self._index.get(m.name, {})
            if m.op == "=" and m.value != "":
                hit = np.zeros(n, bool)
                hit[values.get(m.value, [])] = True
                mask &= hit
                continue
            hit = np.zeros(n, bool)
            for value, rows in values.items():
                if m.matches(value):
                    hit[rows] = True
            if m.matches(""):
                has = np.zeros(n, bool)
                for rows in values.values():
                    has[rows] = True
                hit |= ~has
            mask &= hit
        return np.flatnonzero(mask)

    def with_samples_in(self, rows: IntArray, start: int, end: int) -> IntArray:
        """The rows of ``rows`` with a sample in ``[start, end]`` (ms)."""
        lo, hi = self.window(rows, np.array([end], np.int64), end - start)
        return rows[(hi > lo)[:, 0]]

    def latest(self, rows: IntArray, ref: IntArray, lookback_ms: int) -> tuple[IntArray, BoolArray]:
        """Per row and reference time, the index of the newest sample at or before it and
        no older than ``lookback_ms`` (Prometheus 2's closed interval), and whether there is one."""
        q = rows[:, None] * _KEY_SHIFT + np.clip(ref, 0, _KEY_SHIFT - 1)[None, :]
        idx = np.searchsorted(self.keys, q, side="right") - 1
        ok = (idx >= self.starts[rows][:, None]) & (ref >= 0)[None, :]
        safe = np.where(ok, idx, 0)
        if self.ts.shape[0]:
            ok &= self.ts[safe] >= (ref - lookback_ms)[None, :]
            if self.ends.shape[0]:
                # The newest marker at or before t: if it is this row's and newer than the
                # sample, the series has ended.
                end = np.searchsorted(self.ends, q, side="right") - 1
                marker = self.ends[np.maximum(end, 0)] - rows[:, None] * _KEY_SHIFT
                ok &= ~((end >= 0) & (marker >= 0) & (marker > self.ts[safe]))
        return safe, ok

    def window(self, rows: IntArray, ref: IntArray, range_ms: int) -> tuple[IntArray, IntArray]:
        """Per row and reference time, ``[lo, hi)``: the samples in ``[ref - range, ref]``."""
        base = rows[:, None] * _KEY_SHIFT
        top = np.clip(ref, -1, _KEY_SHIFT - 1)[None, :]
        bottom = np.clip(ref - range_ms, 0, _KEY_SHIFT - 1)[None, :]
        lo = np.searchsorted(self.keys, base + bottom, side="left")
        hi = np.searchsorted(self.keys, base + top, side="right")
        return lo, np.maximum(hi, lo)


def series_set(
    labels: Sequence[Labels],
    lengths: IntArray,
    ts: IntArray,
    values: FloatArray,
    index: Index | None = None,
    ends: tuple[IntArray, IntArray] | None = None,
) -> SeriesSet:
    """A set from flat columns: series ``i`` owns ``lengths[i]`` samples, ascending in time;
    ``ends``: the staleness markers as (row, time in ms), in that order."""
    starts = np.zeros(len(labels) + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    keys = np.empty(0, np.int64) if ends is None else ends[0] * _KEY_SHIFT + ends[1]
    return SeriesSet(labels, starts, ts.astype(np.int64, copy=False), values, index, keys)


class Storage:
    """The series sets a query may read, each built when a selector that may match it first
    asks (the raw samples cost nothing to a query of the rollups only).

    A part is ``(names, build)``: the metric names its series can have (None: any), and
    what builds it; a built set is kept for the rest of the query.
    """

    def __init__(
        self, parts: Sequence[tuple[frozenset[str] | None, Callable[[], SeriesSet]]]
    ) -> None:
        self._parts = list(parts)
        self._built: dict[int, SeriesSet] = {}

    def _get(self, i: int) -> SeriesSet:
        built = self._built.get(i)
        if built is None:
            built = self._built[i] = self._parts[i][1]()
        return built

    def matching(self, matchers: Sequence[Matcher]) -> Iterator[SeriesSet]:
        """The sets that may hold a series ``matchers`` select."""
        on_name = [m for m in matchers if m.name == METRIC_NAME]
        for i, (names, _) in enumerate(self._parts):
            if names is None or any(all(m.matches(n) for m in on_name) for n in names):
                yield self._get(i)

    def all(self) -> list[SeriesSet]:
        return [self._get(i) for i in range(len(self._parts))]
