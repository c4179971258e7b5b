"""Shared plumbing for the plugin modules: batch results, argument readers, units.

Argument readers use the upstream JSON names and defaults; unknown argument names are
ignored (upstream configs carry fields, such as ``watcherAddress``, that scoring does not
need), but a known argument of the wrong type is a ValueError naming it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadwatcher._types import BoolArray, IntArray

__all__ = ["MEGA_FACTOR", "BatchScores", "arg_bool", "arg_float", "arg_int", "arg_map"]

MEGA_FACTOR = 1.0 / 1024.0 / 1024.0  # Trimaran MegaFactor: memory bytes -> MiB


@dataclass(frozen=True, eq=False)
class BatchScores:
    """One plugin's answer for every row of a Cluster.

    ``valid`` is False where upstream would have produced a non-finite score (the node then
    has the minimum score); ``filtered`` maps a row to the Filter plugin's reason.
    """

    scores: IntArray
    valid: BoolArray
    filtered: dict[int, str] = field(default_factory=dict)

    @staticmethod
    def zeros(n: int) -> BatchScores:
        """Every node at the minimum score."""
        return BatchScores(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.bool_))


def arg_int(raw: Mapping[str, Any], key: str, default: int, plugin: str) -> int:
    """An integer argument (JSON number with no fractional part)."""
    value = raw.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{plugin} args.{key}: expected an integer, got {value!r}")
    return value


def arg_float(raw: Mapping[str, Any], key: str, default: float, plugin: str) -> float:
    """A float argument; numbers given as strings are accepted (Go strconv.ParseFloat)."""
    value = raw.get(key, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{plugin} args.{key}: not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError(f"{plugin} args.{key}: expected a number, got {value!r}")
    return float(value)


def arg_bool(raw: Mapping[str, Any], key: str, default: bool, plugin: str) -> bool:
    """A boolean argument."""
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{plugin} args.{key}: expected true or false, got {value!r}")
    return value


def arg_map(raw: Mapping[str, Any], key: str, plugin: str) -> dict[str, Any] | None:
    """A mapping argument, or None when absent/null."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{plugin} args.{key}: expected a mapping, got {value!r}")
    return dict(value)
