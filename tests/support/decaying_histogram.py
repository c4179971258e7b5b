"""Decaying histogram (Koordinator ``pkg/util/histogram``, after the Kubernetes VPA).

No plugin the service reproduces reads it (Koordinator's node prediction does, which is not
reproduced); it is kept, checked against upstream's table, for when one does.

Linear buckets ``[k × size, (k+1) × size)``, ``ceil(max / size) + 1`` of them, the last one
open-ended. A sample added at time t weighs ``weight × 2^((t − ref) / halfLife)``, so a
sample loses half its importance every ``halfLife``; ``ref`` moves forward (and all weights
are rescaled) when the exponent would exceed 100. ``percentile(p)`` walks the buckets until
the cumulative weight reaches ``p × total`` and returns the *end* of that bucket (the start
of the last bucket for the last one); a bucket lighter than ``epsilon`` counts as empty.
Times are Unix seconds; the reference time starts at Go's zero time, as upstream.
"""

from __future__ import annotations

import math

__all__ = ["DecayingHistogram"]

GO_ZERO_TIME_S = -62135596800.0  # 0001-01-01T00:00:00Z in Unix seconds
MAX_DECAY_EXPONENT = 100


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


class DecayingHistogram:
    """A linear-bucket histogram whose sample weights decay with a half-life."""

    def __init__(
        self, max_value: float, bucket_size: float, half_life_s: float, epsilon: float = 1e-15
    ) -> None:
        if max_value <= 0 or bucket_size <= 0 or epsilon <= 0 or half_life_s <= 0:
            raise ValueError("max_value, bucket_size, epsilon and half_life_s must be positive")
        self.bucket_size = bucket_size
        self.num_buckets = math.ceil(max_value / bucket_size) + 1
        self.epsilon = epsilon
        self.half_life_s = half_life_s
        self.reference_s = GO_ZERO_TIME_S
        self.weights = [0.0] * self.num_buckets
        self.total = 0.0
        self.min_bucket = self.num_buckets - 1
        self.max_bucket = 0

    def find_bucket(self, value: float) -> int:
        """Index of the bucket holding ``value`` (clamped to the first/last bucket)."""
        bucket = int(value / self.bucket_size) if math.isfinite(value) else 0
        return min(max(bucket, 0), self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        """Lower bound of ``bucket``."""
        return float(bucket) * self.bucket_size

    def _decay_factor(self, t: float) -> float:
        if t > self.reference_s + self.half_life_s * MAX_DECAY_EXPONENT:
            self._shift_reference(t)
        return math.pow(2.0, (t - self.reference_s) / self.half_life_s)

    def _shift_reference(self, t: float) -> None:
        hl = self.half_life_s
        new_ref = GO_ZERO_TIME_S + _round_half_up((t - GO_ZERO_TIME_S) / hl) * hl
        exponent = _round_half_up((self.reference_s - new_ref) / hl)
        self._scale(math.ldexp(1.0, max(exponent, -2000)))
        self.reference_s = new_ref

    def _scale(self, factor: float) -> None:
        for b in range(self.min_bucket, self.max_bucket + 1):
            self.weights[b] *= factor
        self.total *= factor
        last = self.num_buckets - 1
        while self.weights[self.min_bucket] < self.epsilon and self.min_bucket < last:
            self.min_bucket += 1
        while self.weights[self.max_bucket] < self.epsilon and self.max_bucket > 0:
            self.max_bucket -= 1

    def add_sample(self, value: float, weight: float, t: float) -> None:
        """Add ``value`` with ``weight`` (≥ 0) observed at Unix time ``t``."""
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        weight *= self._decay_factor(t)
        bucket = self.find_bucket(value)
        self.weights[bucket] += weight
        self.total += weight
        if bucket < self.min_bucket and self.weights[bucket] >= self.epsilon:
            self.min_bucket = bucket
        if bucket > self.max_bucket and self.weights[bucket] >= self.epsilon:
            self.max_bucket = bucket

    def is_empty(self) -> bool:
        """True when no bucket holds at least ``epsilon``."""
        return self.weights[self.min_bucket] < self.epsilon

    def percentile(self, p: float) -> float:
        """Approximate p-quantile (p in [0, 1]); 0.0 when empty."""
        if self.is_empty():
            return 0.0
        threshold, partial = p * self.total, 0.0
        bucket = self.min_bucket
        while bucket < self.max_bucket:
            partial += self.weights[bucket]
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self.num_buckets - 1:
            return self.bucket_start(bucket + 1)
        return self.bucket_start(bucket)

    def average(self) -> float:
        """Weighted mean of bucket starts; 0.0 when empty."""
        if self.is_empty():
            return 0.0
        total = sum(
            self.weights[b] * self.bucket_start(b)
            for b in range(self.min_bucket, self.max_bucket + 1)
        )
        return total / self.total
