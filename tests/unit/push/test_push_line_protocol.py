"""Line protocol: points round-trip through an encoder written here (escapes of every kind),
the fast path and the tokenizer agree on every line, ``read_points`` reads what Telegraf
writes and counts what it refuses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.push import line_protocol as lp
from loadwatcher.push.errors import PushError, PushErrorKind
from loadwatcher.push.line_protocol import (
    FieldValue,
    FieldWanted,
    LineError,
    field_value,
    precision_ns,
    read_points,
)
from tests.support.fuzzing import examples
from tests.support.line_reference import split_line, split_plain

# ------------------------------------------------------------------ an encoder


def escape_measurement(name: str) -> str:
    return name.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ")


def escape_key(name: str) -> str:
    out = name.replace("\\", "\\\\")
    for c in ",= ":
        out = out.replace(c, "\\" + c)
    return out


def encode_value(value: FieldValue, style: int) -> str:
    if isinstance(value, bool):
        return (["t", "true", "True", "TRUE"] if value else ["f", "false", "False", "FALSE"])[
            style % 4
        ]
    if isinstance(value, int):
        return f"{value}{'u' if value >= 2**63 or (value >= 0 and style % 2) else 'i'}"
    if isinstance(value, float):
        return repr(value) if style % 2 else f"{value:.17g}"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def encode(
    measurement: str,
    tags: list[tuple[str, str]],
    fields: list[tuple[str, FieldValue]],
    ts: int | None,
    style: int,
) -> bytes:
    head = escape_measurement(measurement) + "".join(
        f",{escape_key(k)}={escape_key(v)}" for k, v in tags
    )
    body = ",".join(f"{escape_key(k)}={encode_value(v, style)}" for k, v in fields)
    return f"{head} {body}{'' if ts is None else f' {ts}'}".encode()


nasty = st.lists(
    st.sampled_from([*"ab,= \\\"'#é\t{}🚀", "\\\\", "\\,", "\\ "]), min_size=1, max_size=8
).map("".join)
# A line starting with # (after spaces and tabs) is a comment, whatever follows.
measurements = nasty.filter(lambda m: not m.lstrip(" \t").startswith("#") and m[:1] not in " \t")
values: st.SearchStrategy[FieldValue] = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**63), 2**64 - 1),
    st.booleans(),
    st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=["Cs"]), max_size=10),
)


@settings(max_examples=examples(500), deadline=None)
@given(
    measurements,
    st.lists(st.tuples(nasty, nasty), max_size=4, unique_by=lambda kv: kv[0]),
    st.lists(st.tuples(nasty, values), min_size=1, max_size=4, unique_by=lambda kv: kv[0]),
    st.none() | st.integers(-(2**62), 2**62),
    st.integers(0, 7),
)
def test_points_round_trip(
    measurement: str,
    tags: list[tuple[str, str]],
    fields: list[tuple[str, FieldValue]],
    ts: int | None,
    style: int,
) -> None:
    line = split_line(encode(measurement, tags, fields, ts, style))
    assert line.measurement.decode() == measurement
    assert [(k.decode(), v.decode()) for k, v in line.tags] == tags
    got = [(k.decode(), field_value(v)) for k, v in line.fields]
    assert got == fields
    assert [type(v) for _, v in got] == [type(v) for _, v in fields]
    assert line.timestamp == ts


tricky = st.binary(max_size=40).map(lambda b: bytes(b"ab,= 1.ie-\t"[x % 11] for x in b))


@settings(max_examples=examples(1000), deadline=None)
@given(tricky)
def test_the_fast_path_and_the_tokenizer_agree(line: bytes) -> None:
    def outcome(split: object) -> object:
        try:
            return split(line)  # type: ignore[operator]
        except LineError as exc:
            return exc.reason

    assert outcome(split_plain) == outcome(lp._split_escaped)


@settings(max_examples=examples(1000), deadline=None)
@given(tricky, st.lists(st.sampled_from([b"a", b"b", b"ab", b"1", b"i", b"e"]), max_size=4))
def test_looking_up_a_plain_line_finds_what_the_tokenizer_finds(
    line: bytes, names: list[bytes]
) -> None:
    try:
        full = lp._split_escaped(line)
    except LineError as exc:
        with pytest.raises(LineError) as caught:
            lp._parse(line)
        assert caught.value.reason == exc.reason
        return
    measurement, tags, fields, stamp = lp._parse(line)
    assert (measurement, stamp) == (full.measurement, full.timestamp)
    for name in names + [k for k, _ in full.tags] + [k for k, _ in full.fields]:
        assert lp._get(tags, name) == dict(full.tags).get(name)
        assert lp._get(fields, name) == dict(full.fields).get(name)


# ------------------------------------------------------------------ values and lines


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"1", 1.0),
        (b"-1.5e3", -1500.0),
        (b".5", 0.5),
        (b"1.", 1.0),
        (b"+2", 2.0),
        (b"1i", 1),
        (b"-9223372036854775808i", -(2**63)),
        (b"18446744073709551615u", 2**64 - 1),
        (b"t", True),
        (b"FALSE", False),
        (b'"a \\"b\\" \\\\ c\\d"', 'a "b" \\ c\\d'),
        (b'""', ""),
    ],
)
def test_field_values(raw: bytes, value: FieldValue) -> None:
    got = field_value(raw)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "raw",
    [
        *(b"NaN", b"inf", b"1e", b"--1", b"1ii", b"9223372036854775808i", b"-1u", b"yes"),
        *(b"0x10", b'"open', b"18446744073709551616u", b"1_000"),
    ],
)
def test_invalid_field_values(raw: bytes) -> None:
    with pytest.raises(LineError) as caught:
        field_value(raw)
    assert caught.value.reason == lp.VALUE


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"cpu", lp.LINE),
        (b"cpu ", lp.LINE),
        (b"cpu,host usage=1", lp.LINE),
        (b"cpu,host= usage=1", lp.LINE),
        (b"cpu,=a usage=1", lp.LINE),
        (b"cpu,,host=a usage=1", lp.LINE),
        (b"cpu usage", lp.LINE),
        (b"cpu usage=", lp.LINE),
        (b"cpu =1", lp.LINE),
        (b"cpu usage=1,", lp.LINE),
        (b'cpu s="open', lp.LINE),
        (b"cpu usage=1 12x", lp.TIMESTAMP),
        (b"cpu usage=1 1 2", lp.TIMESTAMP),
        (b",host=a usage=1", lp.LINE),
    ],
)
def test_malformed_lines(line: bytes, reason: str) -> None:
    with pytest.raises(LineError) as caught:
        split_line(line)
    assert caught.value.reason == reason


def test_backslashes_as_the_reference_reads_them() -> None:
    # \ before a character it does not escape is itself; \\ is one backslash.
    line = split_line(b"m\\x\\\\\\ y,t\\k=v\\\\ f=1")
    assert line.measurement == b"m\\x\\ y"
    assert line.tags == [(b"t\\k", b"v\\")]


@pytest.mark.parametrize(
    ("text", "v1", "unit"),
    [
        (None, False, 1),
        ("", True, 1),
        ("ns", False, 1),
        ("us", False, 1_000),
        ("ms", False, 1_000_000),
        ("s", False, 1_000_000_000),
        ("n", True, 1),
        ("u", True, 1_000),
        ("m", True, 60_000_000_000),
        ("h", True, 3_600_000_000_000),
    ],
)
def test_precisions(text: str | None, v1: bool, unit: int) -> None:
    assert precision_ns(text, v1=v1) == unit


@pytest.mark.parametrize(("text", "v1"), [("h", False), ("n", False), ("sec", True), ("S", True)])
def test_unknown_precisions_are_refused(text: str, v1: bool) -> None:
    with pytest.raises(PushError) as caught:
        precision_ns(text, v1=v1)
    assert caught.value.kind is PushErrorKind.BAD_PRECISION
    assert "precision: expected one of" in str(caught.value)


# ------------------------------------------------------------------ read_points

TELEGRAF = [
    FieldWanted("cpu", "usage_idle", (("cpu", "cpu-total"),)),
    FieldWanted("mem", "used_percent"),
]


def test_telegraf_lines_are_read_and_the_rest_counted() -> None:
    body = (
        b"# written by telegraf\n"
        b"\n"
        b"cpu,cpu=cpu-total,host=n1 usage_user=2.5,usage_idle=97.5 1700000000000000000\r\n"
        b"cpu,cpu=cpu0,host=n1 usage_idle=90 1700000000000000000\n"
        b"  mem,host=n1 total=8589934592i,used_percent=42.25 1700000000000000000\n"
        b"mem,host=n2 used_percent=1i\n"
        b"disk,host=n1,path=/ used=1i 1700000000000000000\n"
        b"cpu_temp,host=n1 v=1\n"
        b'mem,host=n3 used_percent="high" 1\n'
        b"mem,host=n4 used_percent=5 abc\n"
        b"mem,host=n5 used_percent=5e 1\n"
        b"mem used_percent=5 1\n"
        b"mem,host=n6 free=5 1\n"
        b"mem,host=n7 used_percent=7 9223372036854775807\n"
    )
    points, counts = read_points(body, TELEGRAF, "host", unit_ns=1, now_ns=123)
    assert (points[0].keys, points[0].ts_ns, points[0].values) == (
        ["n1"],
        [1700000000000000000],
        [97.5],
    )
    assert (points[1].keys, points[1].ts_ns, points[1].values) == (
        ["n1", "n2"],
        [1700000000000000000, 123],
        [42.25, 1.0],
    )
    assert counts == {
        "lines": 12,
        "unmatched": 4,  # cpu0, disk, cpu_temp, mem without the field
        "not_numeric": 1,
        "malformed_timestamp": 2,
        "malformed_value": 1,
        "no_key": 1,
    }


def test_timestamps_are_scaled_by_the_precision_and_kept_in_range() -> None:
    body = b"mem,host=a used_percent=1 1700000000\nmem,host=b used_percent=2 9300000000"
    points, counts = read_points(body, TELEGRAF, "host", unit_ns=10**9, now_ns=0)
    assert points[1].ts_ns == [1700000000 * 10**9]
    assert counts == {"lines": 2, "unmatched": 0, "malformed_timestamp": 1}


def test_a_field_written_twice_counts_once_the_last() -> None:
    points, counts = read_points(
        b"mem,host=a used_percent=1,used_percent=2 5", TELEGRAF, "host", unit_ns=1, now_ns=0
    )
    assert points[1].values == [2.0]
    assert counts == {"lines": 1, "unmatched": 0}


def test_names_that_need_escaping() -> None:
    wanted = [FieldWanted("my cpu", "idle,x", (("c=1", "all cpus"),))]
    body = b"my\\ cpu,c\\=1=all\\ cpus,host=h\\ 1 idle\\,x=3 7\nmy\\ cpu,c\\=1=one idle\\,x=4 7"
    points, counts = read_points(body, wanted, "host", unit_ns=1, now_ns=0)
    assert (points[0].keys, points[0].values) == (["h 1"], [3.0])
    assert counts == {"lines": 2, "unmatched": 1}


def test_only_wanted_lines_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 lines of Telegraf's default inputs: the lines of other measurements and the
    per-core CPU lines are skipped on their first bytes, unparsed."""
    lines = []
    for host in range(250):
        for core in range(8):
            lines.append(f"cpu,cpu=cpu{core},host=h{host} usage_idle=90,usage_user=10 1")
        lines.append(f"cpu,cpu=cpu-total,host=h{host} usage_idle=80,usage_user=20 1")
        lines.append(f"mem,host=h{host} used_percent=40,total=1i 1")
        for disk in range(20):
            lines.append(f"disk,host=h{host},path=/d{disk} used=1i,free=2i 1")
        for n in range(10):
            lines.append(f"net,host=h{host},interface=eth{n} bytes_recv=1i 1")
    assert len(lines) == 10_000
    parsed = []
    original = lp._parse

    def counting(line: bytes) -> object:
        parsed.append(line)
        return original(line)

    monkeypatch.setattr(lp, "_parse", counting)
    points, counts = read_points("\n".join(lines).encode(), TELEGRAF, "host", unit_ns=1, now_ns=0)
    assert len(parsed) == 500
    assert len(points[0].values) == len(points[1].values) == 250
    assert counts == {"lines": 10_000, "unmatched": 9_500}
    assert math.fsum(points[0].values) == 250 * 80
