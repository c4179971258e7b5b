"""The values an expression evaluates to, over every step of a query at once, and its errors.

A query is evaluated at ``S`` steps (one for an instant query). An instant vector is a set
of rows, one per label set, each with a value and a presence flag at every step: a row
absent at a step is what Prometheus's evaluator leaves out of that step's vector. Label
sets are tuples of ``(name, value)`` pairs sorted by name, without empty values, as
Prometheus's ``labels.Labels``. Times are int64 milliseconds, as Prometheus's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from loadwatcher._types import BoolArray, FloatArray, IntArray
from loadwatcher.config.query import QUERY
from loadwatcher.config.settings import QuerySettings

Labels = tuple[tuple[str, str], ...]
METRIC_NAME = "__name__"


class ErrorType(StrEnum):
    """Prometheus's ``errorType`` values, with the HTTP status it answers each with."""

    BAD_DATA = "bad_data"
    EXECUTION = "execution"
    TIMEOUT = "timeout"

    @property
    def status(self) -> int:
        return {"bad_data": 400, "execution": 422, "timeout": 503}[self.value]


class QueryError(Exception):
    """A query that cannot be answered: ``kind`` says whose fault (Prometheus's error types)."""

    def __init__(self, kind: ErrorType, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def unsupported(construct: str) -> QueryError:
    return QueryError(
        ErrorType.BAD_DATA,
        f"{construct} is not supported by this service's PromQL subset (see docs/promql.md)",
    )


def labels_of(pairs: dict[str, str]) -> Labels:
    """A label set from a mapping: sorted by name, empty values left out."""
    return tuple(sorted((k, v) for k, v in pairs.items() if v != ""))


def get(labels: Labels, name: str) -> str:
    for k, v in labels:
        if k == name:
            return v
    return ""


def without_name(labels: Labels) -> Labels:
    return tuple(p for p in labels if p[0] != METRIC_NAME)


@dataclass(frozen=True)
class Scalar:
    """A scalar at every step."""

    values: FloatArray


@dataclass(frozen=True)
class Text:
    """A string literal (only as a function argument, or a whole query)."""

    value: str


@dataclass(frozen=True)
class Vector:
    """An instant vector at every step: ``values`` and ``present`` are (rows, steps)."""

    labels: list[Labels]
    values: FloatArray
    present: BoolArray

    @staticmethod
    def empty(steps: int) -> Vector:
        return Vector([], np.empty((0, steps)), np.zeros((0, steps), bool))

    def rows(self, keep: IntArray | list[int]) -> Vector:
        idx = np.asarray(keep, np.int64)
        return Vector([self.labels[i] for i in idx.tolist()], self.values[idx], self.present[idx])

    def pruned(self) -> Vector:
        """Without the rows absent at every step (Prometheus never returns them)."""
        alive = self.present.any(axis=1)
        if bool(alive.all()):
            return self
        return self.rows(np.flatnonzero(alive))


@dataclass(frozen=True)
class Points:
    """A range vector's samples, for an instant query's result: series ``i`` is
    ``ts[starts[i]:starts[i + 1]]`` (ms) and the same slice of ``values``."""

    labels: list[Labels]
    starts: IntArray
    ts: IntArray
    values: FloatArray


Value = Scalar | Text | Vector | Points


_DEFAULT = QUERY.defaults()  # the query section's: one place says them


@dataclass(frozen=True)
class Limits:
    """What one query may cost: samples read by its range windows (a sample in several
    windows counts in each), points held (the series × steps of every instant vector it
    builds, summed: what its memory grows with), series in the answer, and seconds."""

    max_samples: int = _DEFAULT.max_samples
    max_points: int = _DEFAULT.max_points
    max_series: int = _DEFAULT.max_series
    timeout_s: float = _DEFAULT.timeout_s
    lookback_ms: int = round(_DEFAULT.lookback_delta_s * 1000)
    # label_replace() can repeat a captured value in its replacement, and nested calls
    # multiply: 60 kB of "$1" twice over would be gigabytes for one series.
    max_label_bytes: int = 64 << 20

    @classmethod
    def of(cls, query: QuerySettings) -> Limits:
        return cls(
            max_samples=query.max_samples,
            max_points=query.max_points,
            max_series=query.max_series,
            timeout_s=query.timeout_s,
            lookback_ms=round(query.lookback_delta_s * 1000),
        )


@dataclass
class Budget:
    """The running cost of one query against its ``Limits``; ``clock`` is monotonic seconds."""

    limits: Limits
    clock: Callable[[], float]
    deadline: float = field(init=False)
    samples: int = 0
    points: int = 0
    label_bytes: int = 0

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.limits.timeout_s

    def spend(self, samples: int) -> None:
        self.samples += samples
        if self.samples > self.limits.max_samples:
            raise QueryError(
                ErrorType.EXECUTION,
                "query processing would load too many samples into memory in query "
                f"execution (more than {self.limits.max_samples})",
            )
        self.check_time()

    def hold(self, points: int) -> None:
        """``points`` more (series × steps) before they are allocated."""
        self.points += points
        if self.points > self.limits.max_points:
            raise QueryError(
                ErrorType.EXECUTION,
                "query processing would load too many samples into memory in query "
                f"execution (more than {self.limits.max_points} series × steps): raise the "
                "step, shorten the range or narrow the selectors",
            )
        self.check_time()

    def write_labels(self, size: int) -> None:
        """``size`` more bytes of label values written, before they are built."""
        self.label_bytes += size
        if self.label_bytes > self.limits.max_label_bytes:
            raise QueryError(
                ErrorType.EXECUTION,
                "label_replace() would write more than "
                f"{self.limits.max_label_bytes >> 20} MiB of label values in this query",
            )

    def check_time(self) -> None:
        if self.clock() > self.deadline:
            raise QueryError(
                ErrorType.TIMEOUT,
                f"query timed out in expression evaluation (after {self.limits.timeout_s:g} s)",
            )

    def check_series(self, count: int) -> None:
        if count > self.limits.max_series:
            raise QueryError(
                ErrorType.EXECUTION,
                f"the answer would hold {count} series, more than this service returns "
                f"({self.limits.max_series}): narrow the selector or aggregate",
            )


def merged(vec: Vector) -> Vector:
    """Rows with the same labels made one; an error where two are present at one step
    (Prometheus: "vector cannot contain metrics with the same labelset")."""
    first: dict[Labels, int] = {}
    dup = False
    for i, lab in enumerate(vec.labels):
        if lab in first:
            dup = True
        else:
            first[lab] = i
    if not dup:
        return vec
    group = np.fromiter((first[lab] for lab in vec.labels), np.int64, len(vec.labels))
    count = np.zeros((len(vec.labels), vec.present.shape[1]), np.int64)
    np.add.at(count, group, vec.present.astype(np.int64))
    if bool((count > 1).any()):
        raise QueryError(
            ErrorType.EXECUTION, "vector cannot contain metrics with the same labelset"
        )
    values = np.zeros_like(vec.values)
    present = np.zeros_like(vec.present)
    rows = np.nonzero(vec.present)
    values[group[rows[0]], rows[1]] = vec.values[rows]
    present[group[rows[0]], rows[1]] = True
    keep = sorted(first.values())
    return Vector([vec.labels[i] for i in keep], values[keep], present[keep])


def no_same_labels(vec: Vector) -> None:
    """The whole-range check of range functions and unary minus: two series may not share
    a label set even at different steps."""
    if len(set(vec.labels)) != len(vec.labels):
        raise QueryError(
            ErrorType.EXECUTION, "vector cannot contain metrics with the same labelset"
        )
