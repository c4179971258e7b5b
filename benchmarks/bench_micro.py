"""Fast paths measured in process against their plain twins, for benchmarks/fastpaths.py.
Method: benchmarks/RESULTS.md."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from bench_common import med, setup_paths

setup_paths()

from push_common import DiscardPayload, RulePayload  # noqa: E402

from loadwatcher.promql import evaluate, render, series, storage  # noqa: E402
from loadwatcher.promql.values import Budget, Limits  # noqa: E402
from loadwatcher.push import line_protocol as lp  # noqa: E402
from loadwatcher.push import remote_write  # noqa: E402
from loadwatcher.push.line_protocol_mapping import LineProtocolMapping, map_line_protocol  # noqa: E402
from loadwatcher.push.remote_write_mapping import RemoteWriteMapping, RemoteWriteReceiver  # noqa: E402

INGEST = "ingest ≥ 1× Prometheus's samples per CPU-second (rule series), ≥ 5× (discarded)"
PROMQL = "PromQL answer time against Prometheus's (bench_promql: information, no number)"
NOW = 1_700_000_000.0


@dataclass(frozen=True)
class Pair:
    path: str
    what: str
    twin: str
    target: str
    unit: str
    work: Callable[[], Callable[[], object]]
    """Builds the inputs; returns the timed call."""
    plain: Callable[[], contextlib.AbstractContextManager[None]]
    """Puts the plain twin in the fast path's place while entered."""
    present: Callable[[], bool] = lambda: True
    """Whether the fast path is in the tree (a deleted one is reported as absent)."""


@contextlib.contextmanager
def _swapped(module: Any, **attrs: Any) -> Iterator[None]:
    old = {name: getattr(module, name) for name in attrs}
    for name, value in attrs.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(module, name, value)


# -- remote write ----------------------------------------------------------------------------


def _rw_work(rules: bool) -> Callable[[], Callable[[], object]]:
    """Decode and map one round of the bodies push.py sends, every label set seen before."""

    def build() -> Callable[[], object]:
        payload = RulePayload(5000) if rules else DiscardPayload(100)
        bodies = [b.data for b in payload.round(NOW, 1)]
        receiver = RemoteWriteReceiver(RemoteWriteMapping())

        def read() -> object:
            requests = (remote_write.decode_write_request(body, 1 << 26) for body in bodies)
            return [receiver.map(req, NOW + 1).batch.values.tolist() for req in requests]

        return read

    return build


def _no_first_label(req: Any, wanted: list[bytes]) -> Any:
    return np.full(len(req), -2, np.int64)


def _none_known(req: Any, pending: Any, index: Any) -> Any:
    empty = np.empty(0, np.int64)
    part = remote_write._ReadPart(empty, empty, np.empty((0, len(index.labels)), np.int64),
                                  empty, empty, np.empty(0))  # fmt: skip
    return part, pending


def _rw(path: str, what: str, twin: str, rules: bool, **tiers: Any) -> Pair:
    """A remote-write pair: ``tiers`` (the reader's functions) replaced by their none-read
    twins, on the rule series of 5,000 nodes or the other metrics of 100."""
    unit = (
        "decode + map 5,000 nodes' rule series (5 bodies), steady"
        if rules
        else "decode + map 200 other metrics of 100 nodes (10 bodies), steady"
    )
    return Pair(
        path, what, twin, INGEST, unit, _rw_work(rules), lambda: _swapped(remote_write, **tiers)
    )


TIERS = {"_metric_from_first_label": _no_first_label, "_read_known": _none_known,
         "_read_bulk": _none_known}  # fmt: skip


# -- line protocol ---------------------------------------------------------------------------


USAGE = ("guest", "idle", "iowait", "irq", "nice", "softirq", "system", "user")


def _telegraf_body(hosts: int) -> bytes:
    """What Telegraf's cpu, mem, system, disk and net inputs send for ``hosts`` hosts."""
    rng = random.Random(3)
    ts = int(NOW) * 10**9
    out = []
    for h in range(hosts):
        host = f"host=node-{h:05d}"
        for cpu in ["cpu-total", *(f"cpu{i}" for i in range(4))]:
            fields = ",".join(f"usage_{k}={rng.uniform(0, 100):.6f}" for k in USAGE)
            out.append(f"cpu,cpu={cpu},{host} {fields} {ts}")
        out.append(
            f"mem,{host} active={rng.randrange(1 << 33)}i,available={rng.randrange(1 << 33)}i,"
            f"available_percent={rng.uniform(0, 100):.4f},total=17179869184i,"
            f"used={rng.randrange(1 << 33)}i,used_percent={rng.uniform(0, 100):.4f} {ts}"
        )
        out.append(f"system,{host} load1=0.5,load5=0.4,n_cpus=4i,n_users=1i {ts}")
        out.append(f"disk,device=sda1,fstype=ext4,{host},mode=rw,path=/ free=1i,used=2i {ts}")
        out.append(f"net,{host},interface=eth0 bytes_recv=1i,bytes_sent=2i {ts}")
    return "\n".join(out).encode()


def _lp_work() -> Callable[[], object]:
    body, mapping = _telegraf_body(1000), LineProtocolMapping()
    return lambda: map_line_protocol(body, mapping, unit_ns=1, now=NOW).batch.values.tolist()


def _tokenized(line: bytes) -> Any:
    parsed = lp._split_escaped(line)
    return parsed.measurement, dict(parsed.tags), dict(parsed.fields), parsed.timestamp


# -- PromQL ----------------------------------------------------------------------------------


def _fleet(nodes: int) -> storage.SeriesSet:
    """Every node's CPU and memory ratios every 15 s for 15 minutes, as the store's raw sets."""
    from loadwatcher.model import Columns, Resource
    from loadwatcher.pipeline.store import Held

    rng = np.random.default_rng(7)
    times = NOW - 900 + np.arange(0.0, 901, 15.0)
    keys = [(f"node-{i:05d}", r) for i in range(nodes) for r in (Resource.CPU, Resource.MEMORY)]
    n = times.shape[0]
    cols = Columns(
        np.repeat(np.arange(len(keys)), n).astype(np.uint32),
        np.tile(times, len(keys)),
        rng.uniform(5, 85, len(keys) * n).round(2),
    )
    no_ends = Columns(np.empty(0, np.uint32), np.empty(0), np.empty(0))
    return series.raw(Held(tuple(keys), cols, no_ends))


def _query_work(text: str) -> Callable[[], Callable[[], object]]:
    def build() -> Callable[[], object]:
        fleet = _fleet(5000)
        sets = storage.Storage([(None, lambda: fleet)])
        end = int(NOW * 1000)

        def run() -> object:
            budget = Budget(Limits(), time.monotonic)
            result = evaluate.range_query(sets, text, end - 900_000, end, 15_000, budget)
            return orjson.dumps(render.data(result))

        return run

    return build


def _re2_only(pattern: str) -> Callable[[str], bool]:
    regex = storage.compiled(pattern)
    return lambda value: regex.fullmatch(value) is not None


def _numbers_one_by_one(values: Any) -> list[str]:
    return [render.number(v) for v in values.tolist()]


PAIRS = (
    _rw("rw-all", "remote-write reader, tiers 1-3 (`push/remote_write.py`, `bulk.py`, "
        "`series_index.py`)", "protobuf's parser for every series (tier 4)", True, **TIERS),
    _rw("rw-all-discard", "remote-write reader, tiers 1-3, other metrics",
        "protobuf's parser for every series (tier 4)", False, **TIERS),
    _rw("rw-first-label", "tier 1: the metric name from each series' first label",
        "tiers 2-4 read every series' labels", False, _metric_from_first_label=_no_first_label),
    _rw("rw-known", "tier 2: label sets read before (`SeriesIndex`), only the sample read",
        "tier 3 (bulk) reads every series again", True, _read_known=_none_known),
    _rw("rw-bulk", "tiers 2 and 3: the bulk reader and the index it fills",
        "protobuf's parser (tier 4), nothing remembered", True, _read_known=_none_known,
        _read_bulk=_none_known),
    Pair(
        "lp-split", "line protocol: lines without escapes split by bytes (`_parse`)",
        "the tokenizer (`_split_escaped`) for every line", INGEST + "; no line-protocol target",
        "map a Telegraf body of 1,000 hosts (9,000 lines)",
        _lp_work, lambda: _swapped(lp, _parse=_tokenized),
    ),
    Pair(
        "promql-regex", "PromQL `=~`: alternations of literals and `prefix.*` without RE2",
        "RE2 `fullmatch` on every label value", PROMQL,
        'range `instance:node_cpu:ratio{instance=~"node-0000.*"}`, 15 min at 15 s, '
        "5,000 nodes, rendered",
        _query_work('instance:node_cpu:ratio{instance=~"node-0000.*"}'),
        lambda: _swapped(storage, _pattern=_re2_only),
    ),
    Pair(
        "promql-numbers", "PromQL values as text: `repr` where it is Go's text (`numbers`)",
        "`number` value by value", PROMQL,
        "range `instance:node_cpu:ratio`, 15 min at 15 s, 5,000 nodes, rendered",
        _query_work("instance:node_cpu:ratio"),
        lambda: _swapped(render, numbers=_numbers_one_by_one),
        lambda: hasattr(render, "numbers"),  # deleted on its verdict (benchmarks/RESULTS.md)
    ),
)  # fmt: skip


@dataclass
class MicroFigures:
    path: str
    fast_ms: list[float]
    plain_ms: list[float]

    @property
    def share(self) -> float:
        """Time saved over the plain twin's time (medians)."""
        return 1.0 - med(self.fast_ms) / med(self.plain_ms)


def _cpu_ms(call: Callable[[], object]) -> float:
    began = time.thread_time()
    call()
    return (time.thread_time() - began) * 1000.0


def measure(pair: Pair, repeat: int) -> MicroFigures:
    """``repeat`` interleaved rounds (order alternating) after a warm-up of each."""
    call = pair.work()
    fast = call()
    with pair.plain():
        if call() != fast:
            raise RuntimeError(f"{pair.path}: the plain twin answers otherwise")
    figures = MicroFigures(pair.path, [], [])
    for k in range(repeat):
        for plain in (k % 2 == 1, k % 2 == 0):
            with pair.plain() if plain else contextlib.nullcontext():
                (figures.plain_ms if plain else figures.fast_ms).append(_cpu_ms(call))
    return figures
