"""The push provider and the engine's push cadence: the buffer drained by every fetch, a
poller beside it at the cold start and then every poll interval, its failures and
back-offs, and cycles that publish every publish interval but republish an unchanged state
only every poll interval.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from loadwatcher import app
from loadwatcher.engine import Engine, EngineOptions
from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.model import FetchResult, Resource, Series, SeriesBatch
from loadwatcher.pipeline.analysis import Quality
from loadwatcher.providers.push import METRIC_NAMES, label_or_empty
from loadwatcher.providers.push.buffer import PushBuffer
from loadwatcher.providers.push.provider import PushProvider
from tests.support.service import settings

T = 1_700_000_000.0


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def batch(
    node: str, *samples: tuple[float, float], resource: Resource = Resource.CPU
) -> SeriesBatch:
    ts = np.array([t for t, _ in samples], np.float64)
    values = np.array([v for _, v in samples], np.float64)
    return SeriesBatch.of([Series(node, resource, ts, values)])


class FakePoller:
    """A polling provider that answers what the test queued and records what it was asked."""

    source = "Prometheus"

    def __init__(self) -> None:
        self.calls: list[tuple[float, float | None]] = []
        self.answers: list[FetchResult | ProviderError] = []
        self.closed = False

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        self.calls.append((now, since))
        answer = self.answers.pop(0) if self.answers else FetchResult()
        if isinstance(answer, ProviderError):
            raise answer
        return answer

    async def close(self) -> None:
        self.closed = True


def polled(node: str, *samples: tuple[float, float]) -> FetchResult:
    return FetchResult(
        series=[
            Series(
                node,
                Resource.MEMORY,
                np.array([t for t, _ in samples]),
                np.array([v for _, v in samples]),
            )
        ],
        known_nodes=frozenset({node, "idle-node"}),
        node_info={node: {"cpu": "4"}},
        notices=["a notice"],
        notes=["a note"],
        names={Resource.MEMORY: "1 - a / b"},
    )


def keys(result: FetchResult) -> list[tuple[str, Resource]]:
    return [
        *((s.node, s.resource) for s in result.series),
        *(k for b in result.batches for k in b.keys),
    ]


# -- the buffer alone ------------------------------------------------------------------------


async def test_push_only_with_nothing_received_is_an_empty_answer() -> None:
    provider = PushProvider(PushBuffer(100))
    result = await provider.fetch(T, None)
    assert result == FetchResult()
    assert provider.last_oldest_arrival is None
    assert provider.source == "Push"


async def test_each_fetch_drains_the_buffer() -> None:
    mono = Clock(5.0)
    buffer = PushBuffer(100, monotonic=mono)
    provider = PushProvider(buffer, monotonic=mono)
    first, second = batch("a", (T, 10.0)), batch("b", (T, 20.0), (T + 1, 30.0))
    buffer.put(first)
    mono.t = 6.0
    buffer.put(second)
    buffer.put(batch("c"))  # empty: nothing kept
    assert buffer.held == 3
    result = await provider.fetch(T + 2, T)
    assert result.batches == [first, second] and not result.errors
    assert provider.last_oldest_arrival == 5.0  # the oldest arrival, for the publish lag
    assert buffer.held == 0
    assert (await provider.fetch(T + 4, T + 1)).batches == []
    assert provider.last_oldest_arrival is None


def test_the_buffer_is_full_from_its_limit_on_and_keeps_what_is_put() -> None:
    buffer = PushBuffer(3)
    buffer.put(batch("a", (T, 1.0), (T + 1, 1.0)))
    assert not buffer.full
    buffer.put(batch("b", (T, 1.0), (T + 1, 1.0)))  # a mapped request is never refused
    assert buffer.full and buffer.held == 4
    taken = buffer.take()
    assert taken.nodes == {"a", "b"} and not buffer.full and buffer.held == 0


# -- beside a poller ------------------------------------------------------------------------


async def test_the_poller_answers_the_cold_start_then_every_poll_interval() -> None:
    mono = Clock()
    poller = FakePoller()
    buffer = PushBuffer(100)
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono)
    assert provider.source == "Prometheus"
    poller.answers.append(polled("polled-node", (T - 60, 40.0), (T - 5, 41.0)))
    buffer.put(batch("pushed-node", (T, 10.0)))
    result = await provider.fetch(T, None)
    assert poller.calls == [(T, None)]  # the cold start: the whole retention
    assert keys(result) == [("polled-node", Resource.MEMORY), ("pushed-node", Resource.CPU)]
    assert result.known_nodes == {"polled-node", "idle-node"}
    assert result.node_info == {"polled-node": {"cpu": "4"}}
    assert result.notices == ["a notice"]
    # What the poll says of its expressions stands beside the pushes (the fallback in use).
    assert result.notes == ["a note"] and result.names == {Resource.MEMORY: "1 - a / b"}
    for step in (2.0, 4.0, 14.9):  # cycles every publish interval: pushes only
        mono.t = 100.0 + step
        buffer.put(batch("pushed-node", (T + step, 10.0)))
        result = await provider.fetch(T + step, T + step - 2)
        assert keys(result) == [("pushed-node", Resource.CPU)]
        assert result.known_nodes == frozenset()
    assert len(poller.calls) == 1
    mono.t = 115.0
    await provider.fetch(T + 15, T + 14.9)
    # Asked from its own newest sample, not from the pushed samples' newer ones.
    assert poller.calls[1] == (T + 15, T - 5)
    mono.t = 129.0
    await provider.fetch(T + 29, T + 28)
    assert len(poller.calls) == 2
    mono.t = 130.0
    await provider.fetch(T + 30, T + 29)
    assert poller.calls[2] == (T + 30, T - 5)  # an empty answer keeps where it was


async def test_after_a_restart_the_poller_is_asked_from_the_journals_newest() -> None:
    poller = FakePoller()
    provider = PushProvider(PushBuffer(10), poller, monotonic=Clock())
    await provider.fetch(T, T - 30)
    assert poller.calls == [(T, T - 30)]


async def test_a_poll_answer_from_the_future_does_not_move_the_next_poll_past_now() -> None:
    mono = Clock()
    poller = FakePoller()
    provider = PushProvider(PushBuffer(10), poller, poll_interval_s=15, monotonic=mono)
    poller.answers.append(polled("n", (T - 1, 5.0), (T + 3600, 5.0), (math.nan, 5.0)))
    await provider.fetch(T, None)
    mono.t += 15
    await provider.fetch(T + 15, T)
    assert poller.calls[1] == (T + 15, T)


async def test_a_failed_poll_is_a_partial_error_when_pushes_brought_data() -> None:
    mono = Clock()
    poller = FakePoller()
    buffer = PushBuffer(100)
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono)
    down = ProviderError(ProviderErrorKind.CONNECT, "connection refused")
    poller.answers.append(down)
    buffer.put(batch("pushed", (T, 10.0)))
    result = await provider.fetch(T, None)
    assert result.errors == [down]
    assert keys(result) == [("pushed", Resource.CPU)]


async def test_a_failed_poll_raises_when_nothing_was_pushed() -> None:
    mono = Clock()
    poller = FakePoller()
    provider = PushProvider(PushBuffer(100), poller, poll_interval_s=15.0, monotonic=mono)
    down = ProviderError(ProviderErrorKind.TIMEOUT, "no answer in 10 s")
    poller.answers.append(down)
    with pytest.raises(ProviderError) as raised:
        await provider.fetch(T, None)
    assert raised.value is down
    mono.t += 2  # the next cycle: no poll due, nothing pushed, nothing to say
    assert await provider.fetch(T + 2, None) == FetchResult()
    assert len(poller.calls) == 1  # not retried every publish interval


async def test_a_failed_cold_start_keeps_the_backfill_for_the_next_poll() -> None:
    """Pushes move the store's newest on while the poller is down; once it is back it must
    still answer the whole retention."""
    mono = Clock()
    poller = FakePoller()
    buffer = PushBuffer(100)
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono)
    poller.answers += [ProviderError(ProviderErrorKind.CONNECT, "down"), polled("p", (T + 14, 1.0))]
    buffer.put(batch("pushed", (T, 10.0)))
    await provider.fetch(T, None)
    mono.t += 15
    buffer.put(batch("pushed", (T + 15, 10.0)))
    result = await provider.fetch(T + 15, T)  # the engine's since: the pushed newest
    assert poller.calls == [(T, None), (T + 15, None)]
    assert keys(result)[0] == ("p", Resource.MEMORY)


async def test_retry_after_postpones_the_poll_not_the_engine() -> None:
    mono = Clock()
    poller = FakePoller()
    buffer = PushBuffer(100)
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono, max_backoff_s=90)
    limited = ProviderError(
        ProviderErrorKind.RATE_LIMITED, "429 Too Many Requests", query="up", retry_after_s=60
    )
    poller.answers.append(limited)
    buffer.put(batch("pushed", (T, 10.0)))
    result = await provider.fetch(T, None)
    [error] = result.errors
    assert (error.kind, error.message, error.query) == (limited.kind, limited.message, "up")
    assert error.retry_after_s is None  # the engine keeps its cycles
    for step in (15.0, 30.0, 59.0):
        mono.t = 100.0 + step
        await provider.fetch(T + step, T)
    assert len(poller.calls) == 1
    mono.t = 160.0
    await provider.fetch(T + 60, T)
    assert len(poller.calls) == 2
    # Capped, and never shorter than the poll interval.
    poller.answers += [
        ProviderError(ProviderErrorKind.RATE_LIMITED, "slow down", retry_after_s=3600),
        FetchResult(errors=[ProviderError(ProviderErrorKind.SERVER, "503", retry_after_s=1)]),
    ]
    mono.t = 175.0
    with pytest.raises(ProviderError) as raised:
        await provider.fetch(T + 75, T)
    assert raised.value.retry_after_s is None
    mono.t = 264.9
    await provider.fetch(T + 165, T)
    assert len(poller.calls) == 3
    mono.t = 265.0
    result = await provider.fetch(T + 165, T)
    assert len(poller.calls) == 4
    assert [e.retry_after_s for e in result.errors] == [None]  # a partial error's too
    mono.t = 279.9
    await provider.fetch(T + 180, T)
    assert len(poller.calls) == 4
    mono.t = 280.0
    await provider.fetch(T + 180, T)
    assert len(poller.calls) == 5


async def test_close_closes_the_poller() -> None:
    poller = FakePoller()
    await PushProvider(PushBuffer(1), poller).close()
    assert poller.closed


# -- the engine's cadence ------------------------------------------------------------------------


def test_cycles_run_every_publish_interval_while_receiving() -> None:
    push = app.build_engine(
        settings(
            {
                "METRICS_PROVIDER_NAME": "push",
                "LOADWATCHER_PUSH_PUBLISH_INTERVAL_S": "3",
                "LOADWATCHER_POLL_INTERVAL_S": "20",
            }
        )
    )
    assert push.options.cycle_interval_s == 3.0
    # A cycle that started just past a whole second (as they are scheduled), asked when
    # it ends: the next one starts an interval after the last one began.
    for elapsed, wait in ((0.0, 3.0), (1.25, 1.75), (5.0, 0.0)):
        push.clock = functools.partial(float, T + 0.02 + elapsed)
        assert push.next_poll_delay(elapsed) == pytest.approx(wait)
        # Woken a millisecond late, it keeps its slot (not the next second's).
        push.clock = functools.partial(float, T + 0.021 + elapsed)
        assert push.next_poll_delay(elapsed) == pytest.approx(max(0.0, wait - 0.001))
    # Off the grid (the first cycle), the next one moves to the nearest slot just past a
    # whole second: windows end at whole seconds.
    push.clock = lambda: T + 0.5
    assert push.next_poll_delay(0.0) == pytest.approx(2.52)
    push.clock = lambda: T + 0.7
    assert push.next_poll_delay(0.0) == pytest.approx(3.32)
    polling = app.build_engine(settings({"LOADWATCHER_POLL_INTERVAL_S": "20"}))
    assert polling.options.cycle_interval_s is None
    assert polling.next_poll_delay(0) == 20.0


def test_receiving_beside_a_poller_wraps_it() -> None:
    engine = app.build_engine(
        settings(
            {
                "METRICS_PROVIDER_NAME": "prometheus",
                "METRICS_PROVIDER_ADDRESS": "http://127.0.0.1:9",
                "LOADWATCHER_PUSH_RECEIVE": "true",
                "LOADWATCHER_POLL_INTERVAL_S": "20",
                "LOADWATCHER_ANALYSIS_STALE_AFTER_S": "100",
            }
        )
    )
    provider = engine.provider
    assert isinstance(provider, PushProvider) and provider.poller is not None
    assert (provider.source, provider.poll_interval_s, provider.max_backoff_s) == (
        "Prometheus",
        20.0,
        80.0,  # as the engine caps a back-off: the nodes stay fresh
    )
    engine.clock = lambda: T + 0.02
    assert engine.next_poll_delay(0) == pytest.approx(2.0)


def published_at(engine: Engine) -> float | None:
    return engine.current.snapshot.taken_at if engine.current else None


async def test_a_cycle_with_nothing_new_republishes_only_after_a_poll_interval() -> None:
    engine = app.build_engine(
        settings({"METRICS_PROVIDER_NAME": "push", "LOADWATCHER_POLL_INTERVAL_S": "15"})
    )
    assert isinstance(engine.provider, PushProvider)
    buffer = engine.provider.buffer
    buffer.put(batch("n1", (T - 1, 10.0)))
    await engine.cycle(T)
    assert published_at(engine) == T
    for t in (T + 2, T + 4, T + 14.9):
        await engine.cycle(t)
        assert published_at(engine) == T, t
    buffer.put(batch("n1", (T + 5, 20.0)))
    await engine.cycle(T + 6)  # something new: published at once
    assert published_at(engine) == T + 6
    await engine.cycle(T + 20.9)
    assert published_at(engine) == T + 6
    await engine.cycle(T + 21)  # a poll interval on: the tags age
    assert published_at(engine) == T + 21


async def test_push_only_nodes_that_stop_sending_turn_stale() -> None:
    engine = app.build_engine(
        settings(
            {
                "METRICS_PROVIDER_NAME": "push",
                "LOADWATCHER_POLL_INTERVAL_S": "15",
                "LOADWATCHER_ANALYSIS_STALE_AFTER_S": "60",
            }
        )
    )
    assert isinstance(engine.provider, PushProvider)
    buffer = engine.provider.buffer
    buffer.put(batch("quiet", (T, 10.0)))
    buffer.put(batch("busy", (T, 10.0)))
    await engine.cycle(T + 1)
    assert not engine.report.nodes(Quality.STALE)
    t = T + 1
    while t < T + 90:  # cycles every 2 s; "busy" pushes every 10 s
        t += 2
        if round(t - T) % 10 == 1:
            buffer.put(batch("busy", (t - 1, 10.0)))
        await engine.cycle(t)
        stale = engine.report.nodes(Quality.STALE)
        assert "busy" not in stale
        # Staleness shows once a republication sees it (at most a poll interval late).
        if t - T > 60 + 15:
            assert "quiet" in stale, t
        if t - T <= 60:
            assert "quiet" not in stale, t


async def test_a_rate_limited_poller_does_not_pause_the_publishing_of_pushes() -> None:
    mono = Clock()
    poller = FakePoller()
    buffer = PushBuffer(100)
    provider = PushProvider(buffer, poller, poll_interval_s=15.0, monotonic=mono)
    options = EngineOptions(poll_interval_s=15.0, retention_s=3600.0, cycle_interval_s=2.0)
    engine = Engine(provider, None, options, METRIC_NAMES, clock=lambda: T)
    poller.answers.append(polled("polled", (T - 30, 50.0)))
    await engine.cycle(T)
    poller.answers.append(ProviderError(ProviderErrorKind.RATE_LIMITED, "429", retry_after_s=120))
    mono.t += 15
    buffer.put(batch("pushed", (T + 14, 10.0)))
    await engine.cycle(T + 15)
    assert engine.provider_status.backoff_until is None
    engine.clock = lambda: T + 15.52
    assert engine.next_poll_delay(0.5) == pytest.approx(1.5)
    assert published_at(engine) == T + 15
    assert engine.provider_status.partial_errors == ["rate_limited: 429"]
    mono.t += 2
    buffer.put(batch("pushed", (T + 16, 12.0)))
    await engine.cycle(T + 17)
    assert published_at(engine) == T + 17
    assert len(poller.calls) == 2


@pytest.mark.parametrize("text", ["prometheus_replica", "_x1", "Cluster", ""])
def test_label_settings_take_prometheus_label_names_or_empty(text: str) -> None:
    assert label_or_empty(text) == text


@pytest.mark.parametrize("text", ["1replica", "a-b", "réplica", "a b", "__name__ "])
def test_label_settings_refuse_what_is_not_a_label_name(text: str) -> None:
    with pytest.raises(ValueError, match="a Prometheus label name"):
        label_or_empty(text)
