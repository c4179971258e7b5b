"""The label sets of remote-write series read before, by their bytes (``remote_write.select``).

A sender repeats the same label sets push after push: a series whose bytes before its one
sample are those of a series read before has the same labels, and only its sample need be
read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadwatcher.model import IntArray

# What the index may hold, accounted as below: whatever label sets writers invent (unique
# 15 KB ones, a new node name each push), it starts afresh past this.
MAX_INDEX_BYTES = 64 * 1024 * 1024
# Accounted per remembered label set beside its bytes (the dict entry, the bytes object's
# header, the two array rows) and per label value beside its characters (the str header,
# the list slot and the dict entry): CPython's sizes on 64-bit, rounded up.
_SET_OVERHEAD = 160
_VALUE_OVERHEAD = 160


class SeriesIndex:
    """The label sets of series read before, by their bytes, for one mapping.

    A series that is its labels then one sample is remembered under the bytes of its
    labels: the metric and the wanted labels' values. A later series whose bytes before its
    last field are the same has the same labels, and only its sample is read. Label values
    are numbered (``label_values``) for as long as the index lives. Past ``limit`` label
    sets or ``max_bytes`` accounted (``accounted_bytes``: the label sets' bytes and the
    values' characters, each with its objects' overhead) it starts afresh at the next
    request (nodes come and go for months; a hostile writer sends sets that never repeat).
    """

    def __init__(
        self,
        metrics: Sequence[str],
        labels: Sequence[str],
        limit: int = 200_000,
        max_bytes: int = MAX_INDEX_BYTES,
    ):
        self.metrics = tuple(metrics)
        self.labels = tuple(labels)
        self.limit = limit
        self.max_bytes = max_bytes
        self.wanted = [m.encode() for m in self.metrics]
        self.names = [label.encode() for label in self.labels]
        self.clear()

    def clear(self) -> None:
        """Forget every label set."""
        self._ids: dict[bytes, int] = {}
        self._rows = 0
        self._metric = np.empty(0, np.int64)
        self._codes = np.empty((0, len(self.labels)), np.int64)
        # New lists rather than emptied ones: earlier selections keep theirs.
        self.label_values: list[list[str]] = [[] for _ in self.labels]
        self._value_ids: list[dict[str, int]] = [{} for _ in self.labels]
        self._bytes = 0  # accounted: the sets' bytes and the values' characters, + overhead

    def __len__(self) -> int:
        return len(self._ids)

    def accounted_bytes(self) -> int:
        """What the index holds, as bounded by ``max_bytes``."""
        return self._bytes + int(self._metric.nbytes + self._codes.nbytes)

    def full(self) -> bool:
        return len(self._ids) > self.limit or self.accounted_bytes() > self.max_bytes

    def code(self, label: int, value: str | None) -> int:
        """The number of ``value`` of wanted label ``label`` (-1 for none)."""
        if not value:
            return -1
        ids = self._value_ids[label]
        found = ids.get(value)
        if found is None:
            found = ids[value] = len(self.label_values[label])
            self.label_values[label].append(value)
            self._bytes += len(value) + _VALUE_OVERHEAD
        return found

    def lookup(self, data: bytes, start: IntArray, split: IntArray) -> IntArray:
        """The label set number of each span ``data[start:split]``, -1 where unknown."""
        get = self._ids.get
        spans = zip(start.tolist(), split.tolist(), strict=True)
        return np.array([get(data[s:e], -1) for s, e in spans], np.int64)

    def remember(self, keys: list[bytes], metric: IntArray, codes: IntArray) -> None:
        """Label sets by the bytes of their labels: metric and label value numbers."""
        first, n = self._rows, len(keys)
        if first + n > self._metric.shape[0]:  # grow by doubling: pushes add a few at a time
            size = max(1024, 2 * (first + n))
            self._metric = np.resize(self._metric, size)
            self._codes = np.resize(self._codes, (size, len(self.labels)))
        self._metric[first : first + n] = metric
        self._codes[first : first + n] = codes
        self._rows += n
        ids = self._ids
        for i, key in enumerate(keys):
            if key not in ids:  # a key met twice keeps its first row
                ids[key] = first + i
                self._bytes += len(key) + _SET_OVERHEAD

    def attributes(self, ids: IntArray) -> tuple[IntArray, IntArray]:
        """Metrics and label value numbers of label sets ``ids``."""
        return self._metric.take(ids), self._codes.take(ids, axis=0)
