"""Why a selector returned nothing, asked of Prometheus: no such series, or a recording rule
whose own selector matches nothing.

A query for a recording rule's name comes back empty for different reasons that need
different fixes: the rule is not loaded (install it), it is loaded but a matcher in its
expression matches no series (``job="node-exporter"`` where the job is ``node``: fix the
matcher), it fails, or its source series do not exist at all (node-exporter not scraped).
Prometheus's rules API (``/api/v1/rules``) says which rules exist and their expressions;
a ``count by`` over each source metric without its matchers says which label values exist.
The pure parts (finding the rule, reading its selectors, wording) are functions here;
``Diagnosis`` asks.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loadwatcher.errors import ProviderError

# Reading the metric selectors of a rule's expression: braces are set aside first (their
# strings are matchers), then strings (function arguments), grouping clauses (label lists)
# and durations are blanked; what is left that names something and is not called is a
# metric. Matchers of the form label="value" (equality) are the ones that can pin the
# source to a job; other operators are not checked.
_BRACES = re.compile(r"\{[^{}]*\}")
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`")
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.I)
_DURATION = re.compile(r"\[[^\[\]]*\]")
_NAME = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(\d+)\})?\s*(\()?")
_EQUALS = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
    | {"unless", "offset", "atan2", "inf", "nan"}
)
# Label values listed in a message at most.
_SHOWN = 5

AskJson = Callable[[str, Mapping[str, str]], Awaitable[Any]]


@dataclass(frozen=True)
class Rule:
    """One loaded recording rule."""

    name: str
    group: str
    query: str
    health: str
    last_error: str


@dataclass(frozen=True)
class Selector:
    """A metric selector of a rule's expression with its equality matchers."""

    metric: str
    matchers: tuple[tuple[str, str], ...]

    def text(self) -> str:
        if not self.matchers:
            return self.metric
        inside = ", ".join(f'{label}="{value}"' for label, value in self.matchers)
        return f"{self.metric}{{{inside}}}"


def metric_of(expr: str) -> str | None:
    """The metric name of a plain selector expression (None for anything else)."""
    match = re.fullmatch(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^{}]*\})?\s*", expr)
    return match.group(1) if match else None


def find_rule(answer: Any, name: str) -> Rule | None:
    """The recording rule ``name`` in a ``/api/v1/rules`` answer (None: not loaded)."""
    for group in _data_list(answer, "groups"):
        found = group.get("rules") if isinstance(group, dict) else None
        for rule in found if isinstance(found, list) else []:
            if (
                isinstance(rule, dict)
                and rule.get("type", "recording") == "recording"
                and rule.get("name") == name
            ):
                return Rule(
                    name,
                    str(group.get("name", "?")),
                    str(rule.get("query", "")),
                    str(rule.get("health", "unknown")),
                    str(rule.get("lastError", "")),
                )
    return None


def selectors(query: str) -> list[Selector]:
    """The metric selectors of ``query`` with their equality matchers, in order, each once."""
    braces: list[str] = []

    def set_aside(match: re.Match[str]) -> str:
        braces.append(match.group(0)[1:-1])
        return f"{{{len(braces) - 1}}}"

    text = _BRACES.sub(set_aside, query)
    for blank in (_STRING, _CLAUSE, _DURATION):
        text = blank.sub(" ", text)
    found: list[Selector] = []
    for match in _NAME.finditer(text):
        metric, brace, called = match.groups()
        if called or metric.lower() in _KEYWORDS:
            continue
        inside = braces[int(brace)] if brace is not None else ""
        matchers = tuple(
            (m.group(1), m.group(2))
            for part in inside.split(",")
            if (m := _EQUALS.fullmatch(part)) is not None and m.group(1) != "__name__"
        )
        selector = Selector(metric, matchers)
        if selector not in found:
            found.append(selector)
    return found


def series_missing(name: str) -> str:
    return f"the series {name} does not exist and no recording rule of that name is loaded"


def rule_failing(rule: Rule) -> str:
    return (
        f"the recording rule {rule.name} is loaded (group {rule.group!r}) but fails: "
        f"{rule.last_error or rule.health}"
    )


def selector_empty(rule: Rule, selector: Selector, label: str, values: list[str]) -> str:
    """The rule exists but ``selector``'s ``label`` matcher matches nothing."""
    wanted = dict(selector.matchers)[label]
    if values:
        shown = ", ".join(f'{label}="{v}"' for v in values[:_SHOWN])
        more = f" and {len(values) - _SHOWN} more" if len(values) > _SHOWN else ""
        exists = f"{selector.metric} exists with {shown}{more}"
    else:
        exists = f"{selector.metric} exists without a {label} label"
    return (
        f"the recording rule {rule.name} exists (group {rule.group!r}) but its selector "
        f'{label}="{wanted}" matches nothing: {exists}; change the matcher in the rule'
    )


def source_missing(rule: Rule, selector: Selector) -> str:
    return (
        f"the recording rule {rule.name} exists (group {rule.group!r}) but its source series "
        f"{selector.metric} do not exist: is node-exporter scraped by this Prometheus?"
    )


def rule_silent(rule: Rule) -> str:
    return (
        f"the recording rule {rule.name} exists (group {rule.group!r}) and its source series "
        "match, but it has produced nothing yet (newly loaded, or its joins match nothing)"
    )


def unknown(name: str, why: str) -> str:
    return (
        f"the series {name} does not exist (Prometheus did not say whether a rule of that "
        f"name is loaded: {why})"
    )


def label_values(answer: Any, label: str) -> list[str]:
    """The values of ``label`` in an instant vector answer of ``count by (label)``."""
    values = []
    for item in _data_list(answer, "result"):
        metric = item.get("metric", {}) if isinstance(item, dict) else {}
        if isinstance(metric, dict) and label in metric:
            values.append(str(metric[label]))
    return sorted(values)


def series_count(answer: Any) -> int:
    return len(_data_list(answer, "result"))


def _data_list(answer: Any, key: str) -> list[Any]:
    """``answer["data"][key]`` where that is a list; an empty list for any other shape."""
    data = answer.get("data") if isinstance(answer, dict) else None
    found = data.get(key) if isinstance(data, dict) else None
    return found if isinstance(found, list) else []


def unlabelled(expr: str, label: str) -> str:
    return f"{expr} has series, but none with the label {label!r} (prometheus.node_label)"


@dataclass(frozen=True)
class Why:
    """Why a selector is empty, and whether a recording rule of its name is loaded (the
    fix is then in the rule or the scrape, not in installing it)."""

    text: str
    rule_loaded: bool = False


class Diagnosis:
    """Asks Prometheus why a selector is empty; ``ask(path, params)`` is one GET returning
    decoded JSON (raising ``ProviderError``)."""

    def __init__(self, ask: AskJson) -> None:
        self._ask = ask

    async def explain(self, expr: str, metric: str, node_label: str) -> Why:
        """Why the selector ``expr`` (of metric ``metric``) gave no series with
        ``node_label``."""
        try:
            if await self._count(expr):
                return Why(unlabelled(expr, node_label))
            return await self._explain(metric)
        except ProviderError as exc:
            return Why(unknown(metric, exc.message))

    async def _explain(self, name: str) -> Why:
        rule = find_rule(await self._ask("/api/v1/rules", {"type": "record"}), name)
        if rule is None:
            return Why(series_missing(name))
        if rule.health == "err":
            return Why(rule_failing(rule), True)
        for selector in selectors(rule.query):
            if await self._count(selector.text()):
                continue
            if not await self._count(selector.metric):
                return Why(source_missing(rule, selector), True)
            for label, _ in selector.matchers:
                others = [(k, v) for k, v in selector.matchers if k != label]
                if await self._count(Selector(selector.metric, tuple(others)).text()):
                    values = await self._values(selector.metric, label)
                    return Why(selector_empty(rule, selector, label, values), True)
        return Why(rule_silent(rule), True)

    async def _count(self, selector: str) -> int:
        answer = await self._ask("/api/v1/query", {"query": f"count({selector})"})
        return series_count(answer)

    async def _values(self, metric: str, label: str) -> list[str]:
        answer = await self._ask("/api/v1/query", {"query": f"count by ({label}) ({metric})"})
        return label_values(answer, label)
