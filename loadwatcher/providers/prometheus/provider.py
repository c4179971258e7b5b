"""Prometheus and any PromQL engine (VictoriaMetrics, Thanos, Mimir): raw samples.

A range vector evaluated as an instant query (``query=<selector>[<Δ>s]&time=<now>``) returns
the raw points, so the service computes its own rollups; any other expression is sent as a
subquery ``(expr)[Δs:step]``. A cold start fetches the whole retention in slices (oldest
first, the next asked for while the last is parsed), later polls ``now − since`` plus an
overlap for samples ingested late.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from loadwatcher._types import BoolArray
from loadwatcher.model import (
    LONGEST_WINDOW_S,
    FetchResult,
    FloatArray,
    Resource,
    SeriesBatch,
    Summary,
)
from loadwatcher.pipeline.newer import NewestOf, newer
from loadwatcher.providers.base import collect, settled
from loadwatcher.providers.http import HttpBackend, HttpSettings, RawAnswer
from loadwatcher.providers.prometheus import nodelist, rules
from loadwatcher.providers.prometheus.absent import Absent
from loadwatcher.providers.prometheus.answer import ParseMemo, Vector, parse_answer, parse_vector
from loadwatcher.providers.prometheus.capacity import CapacityCache
from loadwatcher.providers.prometheus.nodelist import NodeList
from loadwatcher.providers.prometheus.resourcequery import Query as Query
from loadwatcher.providers.prometheus.resourcequery import unmatched_labels
from loadwatcher.providers.prometheus.spans import SELECTOR, Span, range_query, slices

DEFAULT_QUERIES = {
    Resource.CPU: "instance:node_cpu:ratio",
    Resource.MEMORY: "instance:node_memory_utilisation:ratio",
}

# Raw node-exporter equivalents of the kube-prometheus recording rules.
NODE_EXPORTER_QUERIES = {
    Resource.CPU: '1 - avg by ({label}) (rate(node_cpu_seconds_total{{mode="idle"}}[1m]))',
    Resource.MEMORY: "1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes",
}

INSTALL_RULES = "Install the kube-prometheus node recording rules (deploy/ has a PrometheusRule)"
# Why a query is empty is asked of Prometheus again after this long (a few small queries).
EXPLAIN_EVERY_S = 300.0


@dataclass(frozen=True)
class PrometheusOptions:
    queries: tuple[Query, ...]
    node_label: str = "instance"
    strip_port: bool = True
    step_s: float = 15.0
    overlap_s: float = 60.0
    retention_s: float = 1020.0
    fallback_node_exporter: bool = False


@dataclass(frozen=True)
class _Outcome:
    """One query's fetch: its samples, a reason for health (unhealthy), a note (information
    only) and, where another expression produced the samples, that expression."""

    batches: list[SeriesBatch]
    reason: str | None = None
    note: str | None = None
    name: str | None = None


class PrometheusProvider:
    source = "Prometheus"

    def __init__(self, http: HttpSettings, options: PrometheusOptions) -> None:
        self._http = HttpBackend(http)
        self.options = options
        self._memo = ParseMemo(options.node_label, options.strip_port)
        self._memos = {
            label: ParseMemo(label, options.strip_port)
            for q in options.queries
            if (label := q.node_label) is not None and label != options.node_label
        }
        self._parsing = asyncio.Lock()
        self._explained: dict[str, tuple[float, rules.Why]] = {}
        self._capacity = CapacityCache(options.node_label, options.strip_port)
        self._nodes = NodeList(options.node_label, options.strip_port)
        self._absent: Absent[_Outcome] = Absent()
        self._unlisted: Absent[None] = Absent()  # no node list (no kube-state-metrics)

    def _seconds(self, now: float, since: float | None) -> int:
        o = self.options
        if since is None:
            span = o.retention_s
        else:
            span = min(o.retention_s, max(now - since, 0.0) + o.overlap_s)
        return max(1, math.ceil(span))

    async def _query(
        self, q: Query, expr: str, spans: list[Span], newest_of: NewestOf | None
    ) -> list[SeriesBatch]:
        """The samples of each of ``spans``, kept apart (the store merges a cold start's
        slices one at a time: ``SampleStore.add_in_turn``). The next span is asked for while
        one is parsed: Prometheus answers while this process parses. Not in a restart's
        backfill (``newest_of``): beside a full store, one answer's text at a time."""
        promqls = [range_query(expr, seconds, self.options.step_s) for seconds, _ in spans]
        ahead = newest_of is None

        def ask(k: int) -> asyncio.Future[RawAnswer]:
            return asyncio.ensure_future(self._ask(promqls[k], f"{spans[k][1]:.3f}"))

        batches: list[SeriesBatch] = []
        pending = ask(0)
        try:
            for k, promql in enumerate(promqls):
                answer = await pending
                more = k + 1 < len(promqls)
                if more and ahead:
                    pending = ask(k + 1)
                batches.append(await self._parse(q, answer, promql, newest_of))
                del answer  # not held while the next answer arrives
                if more and not ahead:
                    pending = ask(k + 1)
        finally:
            if not pending.done():
                pending.cancel()
            elif not pending.cancelled():
                pending.exception()  # seen: the error that ended the loop is the one raised
        return batches

    async def _parse(
        self, q: Query, answer: RawAnswer, promql: str, newest_of: NewestOf | None
    ) -> SeriesBatch:
        memo = self._memo_of(q)

        def parse() -> SeriesBatch:
            batch, _ = parse_answer(answer.body, q.resource, q.scale, memo, promql)
            return batch if newest_of is None else newer(batch, newest_of(batch.keys))

        try:
            # In a worker thread: a cold start's answer of a large cluster is long to parse,
            # and the event loop keeps answering requests meanwhile. One at a time: the
            # parser's peak is about twice the answer's text, and two side by side would
            # add theirs (the CPU is the same either way).
            async with self._parsing:
                return await asyncio.to_thread(parse)
        except orjson.JSONDecodeError as exc:
            raise answer.not_json(promql) from exc

    def _memo_of(self, q: Query) -> ParseMemo:
        return self._memos.get(q.node_label or "", self._memo)

    async def _ask(self, promql: str, at: str) -> RawAnswer:
        """One instant query's answer, uncompressed: Prometheus's gzip of a poll's answer
        costs it more CPU than sending it (90 against 160 ms a poll at 5,000 nodes)."""
        return await self._http.request_bytes(
            "GET",
            "/api/v1/query",
            params={"query": promql, "time": at},
            query=promql,
            compressed=False,
        )

    async def _fetch_one(
        self, q: Query, spans: list[Span], now: float, newest_of: NewestOf | None
    ) -> _Outcome:
        batches = await self._query(q, q.expr, spans, newest_of)
        if any(b.keys for b in batches):
            return _Outcome(batches)
        if q.optional:
            label = q.node_label or self.options.node_label
            note = f"{q.resource} query {q.expr!r} returned no series with label {label!r}"
            return _Outcome(batches, note=None if q.default else note)
        metric = rules.metric_of(q.expr)
        if metric is None:  # an expression, not a series: nothing to look up
            label = self.options.node_label
            return _Outcome(
                batches, f"{q.resource} query {q.expr!r} returned no series with label {label!r}"
            )
        why = await self._why_empty(q.expr, metric, now)
        empty = f"{q.resource} query {q.expr!r} returned nothing: {why.text}"
        if q.expr != DEFAULT_QUERIES.get(q.resource):
            return _Outcome(batches, empty)
        if not self.options.fallback_node_exporter:
            fix = "Fix the rule" if why.rule_loaded else INSTALL_RULES
            return _Outcome(
                batches,
                f"{empty}. {fix}, set prometheus.{q.resource}_query to an expression that "
                "exists, or set prometheus.fallback_node_exporter=true",
            )
        raw = NODE_EXPORTER_QUERIES[q.resource].format(label=self.options.node_label)
        batches = await self._query(q, raw, spans, newest_of)
        if not any(b.keys for b in batches):
            return _Outcome(
                batches,
                f"{empty}; the node-exporter fallback {raw!r} (prometheus.fallback_node_exporter) "
                "returned nothing either: is node-exporter scraped by this Prometheus?",
            )
        # The documented fix is in use and the data is right: information, not a reason.
        note = f"{empty}; the values come from the node-exporter fallback {raw!r}"
        return _Outcome(batches, note=note, name=raw)

    async def _why_empty(self, expr: str, metric: str, now: float) -> rules.Why:
        """Why a selector returned nothing, asked of Prometheus at most once per
        ``EXPLAIN_EVERY_S`` per expression (the answer changes only when rules or scrape
        jobs do)."""
        cached = self._explained.get(expr)
        if cached is not None and 0 <= now - cached[0] < EXPLAIN_EVERY_S:
            return cached[1]
        diagnosis = rules.Diagnosis(self._get_json)
        why = await diagnosis.explain(expr.strip(), metric, self.options.node_label)
        self._explained[expr] = (now, why)
        return why

    async def _get_json(self, path: str, params: Mapping[str, str]) -> Any:
        return await self._http.request_json("GET", path, params=params, query=path)

    async def fetch_summary(self, now: float, fresh_within_s: float) -> Summary | None:
        """Prometheus's own mean and standard deviation of every series over the longest
        window ending at ``now`` floored: small answers, asked at once, in a fraction of the
        time of the raw samples, with which series have a sample within ``fresh_within_s``
        before the window's end. When a resource's count of those is its count of series,
        all are fresh; when it is lower, one more query per such resource
        (``last_over_time``) names the fresh ones, the others are stale. None when the
        answers do not match (a count higher than the series, a fresh series the mean does
        not have: they moved between the queries), or when a query is not a plain selector.
        """
        # The scored resources only: the others come with the raw samples a moment later.
        queries = tuple(q for q in self.options.queries if not q.optional)
        if not all(SELECTOR.match(q.expr.strip()) for q in queries):
            return None
        end = math.floor(now)
        window = LONGEST_WINDOW_S
        fresh = max(1, math.floor(min(fresh_within_s, window)))
        asked = [
            promql
            for q in queries
            for promql in (
                f"avg_over_time({q.expr.strip()}[{window}s])",
                f"stddev_over_time({q.expr.strip()}[{window}s])",
                f"count(last_over_time({q.expr.strip()}[{fresh}s]))",
            )
        ]
        answers = await asyncio.gather(*(self._vector(promql, end) for promql in asked))
        counts = [answers[3 * k + 2].count() for k in range(len(queries))]
        if not all(
            answers[3 * k].items == answers[3 * k + 1].items
            and 0 <= counts[k] <= answers[3 * k].items
            for k in range(len(queries))
        ):
            return None  # the answers moved: no early answer
        # Some series are stale only where the count is lower; with none fresh, nothing to ask.
        partly = [k for k in range(len(queries)) if 0 < counts[k] < answers[3 * k].items]
        last = await asyncio.gather(
            *(
                self._vector(f"last_over_time({queries[k].expr.strip()}[{fresh}s])", end)
                for k in partly
            )
        )
        fresh_nodes = dict(zip(partly, last, strict=True))
        keys: list[tuple[str, Resource]] = []
        columns: list[tuple[FloatArray, FloatArray, BoolArray]] = []
        for k, q in enumerate(queries):
            avg, std = answers[3 * k : 3 * k + 2]
            is_fresh = self._fresh_series(avg, counts[k], fresh_nodes.get(k))
            if is_fresh is None:
                return None
            if avg.nodes == std.nodes:  # the same series in the same order, as a rule
                keys += [(node, q.resource) for node in avg.nodes]
                columns.append((avg.values * q.scale, std.values * q.scale, is_fresh))
                continue
            std_of = dict(zip(std.nodes, std.values.tolist(), strict=True))
            both = [i for i, node in enumerate(avg.nodes) if node in std_of]
            keys += [(avg.nodes[i], q.resource) for i in both]
            picked = np.array(both, np.int64)
            std_values = np.array([std_of[avg.nodes[i]] for i in both], np.float64)
            columns.append((avg.values[picked] * q.scale, std_values * q.scale, is_fresh[picked]))
        flags = np.concatenate([c[2] for c in columns])
        return Summary(
            end,
            float(fresh),
            keys,
            np.concatenate([c[0] for c in columns]),
            np.concatenate([c[1] for c in columns]),
            None if bool(flags.all()) else flags,
        )

    @staticmethod
    def _fresh_series(avg: Vector, count: int, last: Vector | None) -> BoolArray | None:
        """Which of ``avg``'s labelled series are fresh, from the count of fresh series and,
        when only some are, the fresh ones themselves (``last``); None when the two do not
        match ``avg``. A node met twice is fresh when either series is: the store merges
        the two, and its newest sample is the fresher one's."""
        if count == avg.items:
            return np.ones(len(avg.nodes), bool)
        if count == 0:
            return np.zeros(len(avg.nodes), bool)
        if last is None or last.items != count or not set(last.nodes) <= set(avg.nodes):
            return None
        named = set(last.nodes)
        return np.fromiter((node in named for node in avg.nodes), bool, len(avg.nodes))

    async def _vector(self, promql: str, at: int) -> Vector:
        answer = await self._ask(promql, str(at))
        try:
            # One at a time: the first look's answers arrive together, and threads parsing
            # side by side take turns at the interpreter lock for longer than in a row.
            async with self._parsing:
                return await asyncio.to_thread(parse_vector, answer.body, self._memo, promql)
        except orjson.JSONDecodeError as exc:
            raise answer.not_json(promql) from exc

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        return await self._fetch(now, since)

    async def backfill(self, now: float, newest_of: NewestOf) -> FetchResult:
        return await self._fetch(now, None, newest_of)

    async def _fetch(
        self, now: float, since: float | None, newest_of: NewestOf | None = None
    ) -> FetchResult:
        seconds = self._seconds(now, since)
        # In slices after an outage too: one answer of a long gap can pass max_answer_bytes.
        spans = slices(now, seconds)
        ask = self._ask_at(now)
        side: list[asyncio.Future[None]] = []
        listing = self._nodes.listed is not None or self._unlisted.due(nodelist.QUERY, now)
        if listing:
            side.append(asyncio.ensure_future(self._nodes.refresh(ask)))
        if self._capacity.due(now):
            side.append(asyncio.ensure_future(self._capacity.refresh(now, ask)))
        # An optional query not due keeps its empty outcome, which is no answer: when every
        # query asked fails, the fetch fails (an outage is not a partial failure).
        asking = [
            q for q in self.options.queries if len(spans) > 1 or self._absent.due(q.expr, now)
        ]
        try:
            fetches = (self._fetch_one(q, spans, now, newest_of) for q in asking)
            if newest_of is None:
                asked = await asyncio.gather(*fetches, return_exceptions=True)
            else:  # a restart's backfill: one query at a time (``_query``)
                asked = [await settled(fetch) for fetch in fetches]
            result = collect(
                [o if isinstance(o, BaseException) else (o.batches, o.reason) for o in asked]
            )
            await asyncio.gather(*side)
            if listing and self._nodes.failure is None:
                self._unlisted.answered(nodelist.QUERY, now, None, self._nodes.listed is not None)
        finally:
            if not all(task.done() for task in side):
                for task in side:
                    task.cancel()
                await asyncio.gather(*side, return_exceptions=True)
        answers = dict(zip(asking, asked, strict=True))
        for q, o in answers.items():
            if q.optional and isinstance(o, _Outcome):
                self._absent.answered(q.expr, now, o, any(b.keys for b in o.batches))
        done = [(q, answers.get(q) or self._absent.last(q.expr)) for q in self.options.queries]
        notes = [o.note for _, o in done if isinstance(o, _Outcome) and o.note]
        answered = [(q, o.batches if isinstance(o, _Outcome) else None) for q, o in done]
        notes += unmatched_labels(answered, self.options.node_label)
        if self._capacity.note and result.known_nodes:  # no node: no size to miss
            notes.append(self._capacity.note)
        members, note = self._nodes.members(result.known_nodes)
        if note:
            notes.append(note)
        return dataclasses.replace(
            result,
            known_nodes=result.known_nodes | (members or frozenset()),
            members=members,
            notes=notes,
            names={q.resource: o.name for q, o in done if isinstance(o, _Outcome) and o.name},
            # The cache replaces its dicts, never changes one in place: no copy per poll.
            node_info=dict(self._capacity.info),
        )

    def _ask_at(self, now: float) -> Callable[[str], Awaitable[bytes]]:
        async def ask(promql: str) -> bytes:
            return (await self._ask(promql, f"{now:.3f}")).body

        return ask

    async def close(self) -> None:
        await self._http.close()
