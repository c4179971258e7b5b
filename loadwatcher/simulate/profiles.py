"""Scheduling profiles: which plugins score, with which weights and args.

A profile is named by ``--profile SPEC``: one name, or several joined by ``+``, each with
an optional integer weight after ``*`` (``TargetLoadPacking*2+BalancedAllocation``).
Names are any plugin spelling ``score --plugin`` takes, or one of NodeResourcesFit's
strategies (``LeastAllocated``, ``MostAllocated``, ``RequestedToCapacityRatio``), which
run NodeResourcesFit with that ``scoringStrategy.type``. Every profile filters with
NodeResourcesFit, as kube-scheduler does; a profile that does not score with it has it at
weight 0 (its filter only). Plugin args come from the ``--args`` file ``score`` reads (a
mapping of plugin name to upstream-style args).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadwatcher.scoring import registry
from loadwatcher.scoring.plugins.resourcefit import NAME as FIT
from loadwatcher.scoring.plugins.resourcefit import STRATEGIES

__all__ = ["DEFAULT_PROFILES", "Profile", "parse_profile"]

DEFAULT_PROFILES = (
    "LeastAllocated",
    "MostAllocated",
    "RequestedToCapacityRatio",
    "BalancedAllocation",
    "TargetLoadPacking",
    "LoadVariationRiskBalancing",
    "LowRiskOverCommitment",
    "LoadAwareScheduling",
    "NodeResourcesAllocatable",
)
MAX_WEIGHT = 100


@dataclass(frozen=True)
class Profile:
    """``weights``: upstream plugin name -> weight (0: filter only); ``args`` typed."""

    name: str
    weights: tuple[tuple[str, int], ...]
    args: dict[str, Any]
    fallback: bool


def _term(text: str) -> tuple[str, int]:
    name, _, weight = text.strip().partition("*")
    if not name.strip():
        raise ValueError("--profile: empty plugin name")
    if not weight:
        return name.strip(), 1
    try:
        value = int(weight)
    except ValueError:
        raise ValueError(
            f"--profile: weight {weight!r} of {name.strip()} is not an integer"
        ) from None
    if not 1 <= value <= MAX_WEIGHT:
        raise ValueError(f"--profile: weight of {name.strip()} must be 1..{MAX_WEIGHT}")
    return name.strip(), value


def parse_profile(
    spec: str, raw_args: Mapping[str, Any] | None = None, *, fallback: bool = True
) -> Profile:
    """The profile named by ``spec``; ``raw_args`` maps canonical plugin names to raw args.

    ValueError on an unknown name, a bad weight, a plugin given twice or bad args."""
    raw_args = raw_args or {}
    weights: dict[str, int] = {}
    args: dict[str, Any] = {}
    for term in spec.split("+"):
        name, weight = _term(term)
        strategy = next((s for s in STRATEGIES if s.lower() == name.lower()), None)
        plugin = FIT if strategy else registry.canonical_name(name)
        if plugin in weights:
            raise ValueError(f"--profile {spec!r}: {plugin} is given twice")
        raw = copy.deepcopy(raw_args.get(plugin)) or {}
        if strategy:
            if not isinstance(raw, dict):
                raise ValueError(f"{FIT} args: expected a mapping")
            scoring = raw.setdefault("scoringStrategy", {})
            if not isinstance(scoring, dict):
                raise ValueError(f"{FIT} args.scoringStrategy: expected a mapping")
            scoring["type"] = strategy
        weights[plugin] = weight
        args[plugin] = registry.parse_plugin_args(plugin, raw)
    if FIT not in weights:
        weights = {FIT: 0, **weights}
        args = {FIT: registry.parse_plugin_args(FIT, raw_args.get(FIT)), **args}
    return Profile(spec.strip(), tuple(weights.items()), args, fallback)
