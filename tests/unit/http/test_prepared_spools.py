"""The memory files responses are sent from (``prepared``): few, bounded, and never given up.

Real memory files (``memfd_create``) counted in ``/proc/self/fd``; where descriptors must
run out, ``memfd_create`` is replaced by one that fails as the kernel does (EMFILE), since
lowering this test process's own descriptor limit would break the test runner. The real
shortage is in tests/system/test_descriptors_process.py.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadwatcher.http import descriptors, prepared
from tests.support.fuzzing import examples

pytestmark = pytest.mark.unit

LARGE = prepared.MIN_SPOOL_BYTES


def memory_files() -> int:
    """The memory files of responses this process holds open (each one a descriptor)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, gone by now
        count += target.startswith("/memfd:loadwatcher-body")
    return count


CAP = prepared.MAX_SPOOLS
_base = [0]


def held() -> tuple[int, int]:
    """(memory files counted, memory files open) beyond those open before the test (other
    tests' apps may still hold theirs)."""
    return prepared.open_spools() - _base[0], memory_files() - _base[0]


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with sendfile on, a new burst for the log, and room for ``CAP``
    memory files of its own."""
    gc.collect()
    _base[0] = prepared.open_spools()
    assert memory_files() == _base[0]
    monkeypatch.setattr(prepared, "MAX_SPOOLS", _base[0] + CAP)
    monkeypatch.setattr(prepared, "_spooling", True)
    monkeypatch.setattr(descriptors, "_shortages", descriptors.Refusals())
    yield
    gc.collect()


def clock(monkeypatch: pytest.MonkeyPatch, second: float) -> None:
    # prepared.time is the module's own import of time (not exported): the clock it reads.
    monkeypatch.setattr(prepared.time, "time", lambda: second)  # type: ignore[attr-defined]


def test_a_small_body_is_written_without_a_memory_file(monkeypatch) -> None:
    """One node's body: the many, rarely repeated variants never hold a descriptor."""
    clock(monkeypatch, 100.0)
    small = prepared.EncodedBody(b"x" * (LARGE - 1), '"s"', "gzip")
    large = prepared.EncodedBody(b"x" * LARGE, '"l"', "gzip")
    response = small.response(200, with_body=True)
    assert response._spool is None and response._data.endswith(b"x" * (LARGE - 1))
    assert large.response(200, with_body=True)._spool is not None
    assert held() == (1, 1)


def test_thousands_of_distinct_bodies_open_at_most_max_spools(monkeypatch) -> None:
    """The old code opened one memory file per body: 2,000 bodies, 2,000 descriptors."""
    clock(monkeypatch, 100.0)
    bodies = [prepared.EncodedBody(b"%d" % i * LARGE, f'"{i}"', None) for i in range(2000)]
    responses = [body.response(200, with_body=True) for body in bodies]
    assert held() == (CAP, CAP)
    assert sum(r._spool is not None for r in responses) == CAP
    for body, response in zip(bodies, responses, strict=True):  # every one whole, all the same
        assert response._data.endswith(body.payload) and response._data.startswith(b"HTTP/1.1 200")
    del responses, bodies
    gc.collect()
    assert held() == (0, 0)


def test_once_memory_files_close_new_ones_are_made_again(monkeypatch) -> None:
    clock(monkeypatch, 100.0)
    bodies = [prepared.EncodedBody(b"h" * LARGE, f'"{i}"', None) for i in range(CAP)]
    for body in bodies:
        body.response(200, with_body=True)
    late = prepared.EncodedBody(b"l" * LARGE, '"late"', None)
    assert late.response(200, with_body=True)._spool is None  # at the cap: written
    del bodies[:4]  # their bodies were dropped (a new snapshot)
    clock(monkeypatch, 101.0)
    assert late.response(200, with_body=True)._spool is not None
    assert held() == (CAP - 3, CAP - 3)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC])
def test_running_out_is_one_line_per_burst_and_sendfile_comes_back(
    monkeypatch, caplog, code
) -> None:
    """The old code switched sendfile off for the life of the process at the first EMFILE."""
    real = os.memfd_create
    short = [True]

    def memfd_create(name: str, flags: int = 0) -> int:
        if short[0]:
            raise OSError(code, os.strerror(code))
        return real(name, flags)

    # prepared.os is the module's own import of os (not exported): what it calls.
    monkeypatch.setattr(prepared.os, "memfd_create", memfd_create)  # type: ignore[attr-defined]
    body = prepared.EncodedBody(b"b" * LARGE, '"b"', "gzip")
    caplog.set_level(logging.INFO)
    for second in range(100, 110):  # ten seconds of shortage, one request each
        clock(monkeypatch, second)
        response = body.response(200, with_body=True)
        assert response._spool is None and response._data.endswith(body.payload)
    short[0] = False
    clock(monkeypatch, 110)
    assert body.response(200, with_body=True)._spool is not None  # by itself, the next second
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "out of file descriptors" in lines[0].getMessage() and lines[0].exc_info is None
    assert prepared._spooling is True


def test_a_memory_file_refused_for_good_switches_sendfile_off(monkeypatch, caplog) -> None:
    """A sandbox that forbids memfd (EPERM): no point asking every second."""
    calls = []

    def refuse(*args: object) -> int:
        calls.append(args)
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(prepared.os, "memfd_create", refuse)  # type: ignore[attr-defined]
    body = prepared.EncodedBody(b"b" * LARGE, '"b"', None)
    for second in (100, 101, 102):
        clock(monkeypatch, second)
        assert body.response(200, with_body=True)._spool is None
    assert len(calls) == 1 and prepared._spooling is False
    assert any("without sendfile" in r.getMessage() for r in caplog.records)


# Operations on the bodies: (body index, second, size in units of LARGE/4, memfd fails?)
STEPS = st.lists(
    st.tuples(st.integers(0, 11), st.integers(0, 5), st.integers(1, 8), st.booleans()),
    max_size=60,
)


# The autouse fixture only checks the start; each example cleans up after itself.
@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=STEPS, drops=st.sets(st.integers(0, 11)), cap=st.integers(1, 6))
def test_whatever_is_asked_the_count_is_bounded_and_exact(steps, drops, cap) -> None:
    """Any order of requests, seconds, sizes, failures and dropped bodies: at most ``cap``
    memory files, the count kept equals the files the process holds, every response whole."""
    saved = prepared.MAX_SPOOLS, prepared.os.memfd_create, prepared.time.time  # type: ignore[attr-defined]
    real = os.memfd_create
    failing = [False]
    bodies: dict[int, prepared.EncodedBody] = {}
    kept: list[prepared.PreparedResponse] = []

    def memfd_create(name: str, flags: int = 0) -> int:
        if failing[0]:
            raise OSError(errno.EMFILE, "Too many open files")
        return real(name, flags)

    def play() -> None:
        for index, second, quarters, fails in steps:
            failing[0] = fails
            prepared.time.time = lambda s=second: 1000.0 + s  # type: ignore[attr-defined]
            body = bodies.get(index)
            if body is None:
                payload = bytes([65 + index]) * (quarters * LARGE // 4)
                body = bodies[index] = prepared.EncodedBody(payload, f'"{index}"', None)
            response = body.response(200, with_body=True)
            assert response._data.endswith(body.payload)
            assert max(held()) <= cap
            kept.append(response)
            if index in drops:
                del bodies[index]  # a new snapshot: the body goes, responses in flight keep it
            if len(kept) > 3:
                kept.pop(0)  # responses finish
        assert held()[0] == held()[1]

    try:
        prepared.MAX_SPOOLS = _base[0] + cap
        prepared.os.memfd_create = memfd_create  # type: ignore[attr-defined]
        play()
    finally:
        prepared.MAX_SPOOLS, prepared.os.memfd_create, prepared.time.time = saved  # type: ignore[attr-defined]
        kept.clear()
        bodies.clear()
        gc.collect()
    assert held() == (0, 0)
