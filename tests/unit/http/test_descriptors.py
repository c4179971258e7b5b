"""File descriptors (``http/descriptors``): room for the connections, shortages told once.

The limits are read and set through ``resource``; here it is replaced by a stand-in that
records what was asked, since changing this test process's own limits would change the
test runner's. The real limits are in tests/system/test_descriptors_process.py.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
from typing import Any

import pytest

from loadwatcher.http import descriptors

pytestmark = pytest.mark.unit

INF = resource.RLIM_INFINITY


class Limits:
    """``getrlimit``/``setrlimit`` of RLIMIT_NOFILE, as a process whose hard limit is ``hard``."""

    def __init__(self, soft: int, hard: int, settable: bool = True) -> None:
        self.now = (soft, hard)
        self.settable = settable
        self.asked: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.now

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.asked.append(limits)
        if not self.settable or limits[1] != self.now[1] or limits[0] > limits[1] != INF:
            raise ValueError("not allowed to raise maximum limit")
        self.now = limits


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch):
    def install(soft: int, hard: int, settable: bool = True) -> Limits:
        fake = Limits(soft, hard, settable)
        # descriptors.resource is the module's own import (not exported): what it calls.
        monkeypatch.setattr(descriptors.resource, "getrlimit", fake.getrlimit)  # type: ignore[attr-defined]
        monkeypatch.setattr(descriptors.resource, "setrlimit", fake.setrlimit)  # type: ignore[attr-defined]
        return fake

    return install


def test_the_soft_limit_is_raised_as_far_as_the_connections_need(limits, caplog) -> None:
    fake = limits(1024, 524288)
    assert descriptors.connection_room(1024) == 1024
    assert fake.now == (1024 + descriptors.RESERVE, 524288)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(("soft", "hard"), [(4096, 4096), (INF, INF), (2000, INF)])
def test_a_limit_with_room_enough_is_left_alone(limits, soft, hard) -> None:
    fake = limits(soft, hard)
    assert descriptors.connection_room(1024) == 1024
    assert fake.asked == [] and fake.now == (soft, hard)


def test_an_unlimited_hard_limit_lets_the_soft_one_rise(limits) -> None:
    fake = limits(256, INF)
    assert descriptors.connection_room(1024) == 1024
    assert fake.now == (1024 + descriptors.RESERVE, INF)


@pytest.mark.parametrize(("soft", "room"), [(256, 128), (1024, 896), (64, 32), (2, 1)])
def test_a_low_hard_limit_caps_the_connections_below_it(limits, caplog, soft, room) -> None:
    """Connections beyond the room are closed by the guard; accept() need not fail."""
    fake = limits(soft, soft)
    caplog.set_level(logging.WARNING, "loadwatcher.edge")
    assert descriptors.connection_room(1024) == room
    assert fake.now == (soft, soft)
    [line] = [r.getMessage() for r in caplog.records]
    assert f"RLIMIT_NOFILE {soft}" in line and "server.max_connections (1024)" in line


def test_a_limit_that_cannot_be_raised_keeps_its_value(limits) -> None:
    fake = limits(256, 4096, settable=False)
    assert descriptors.connection_room(1024) == 128
    assert fake.asked == [(1024 + descriptors.RESERVE, 4096)] and fake.now == (256, 4096)


def test_a_shortage_is_one_line_per_burst(monkeypatch, caplog) -> None:
    now = [0.0]
    monkeypatch.setattr(descriptors, "_shortages", descriptors.Refusals(clock=lambda: now[0]))
    caplog.set_level(logging.WARNING, "loadwatcher.edge")
    exc = OSError(errno.EMFILE, "Too many open files")
    for _ in range(100):
        descriptors.shortage("what happens now", exc)
    now[0] = descriptors.BURST_QUIET_S + 1
    descriptors.shortage("what happens now", exc)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("out of file descriptors" in line for line in lines)
    assert "Too many open files" in lines[0] and "what happens now" in lines[0]
    assert lines[1].endswith("; 99 more since the last such line")


ACCEPT = "socket.accept() out of system resource"


async def test_failed_accepts_are_one_line_not_a_traceback_each(monkeypatch, caplog) -> None:
    """What asyncio reports when accept() fails for want of descriptors (and retries a
    second later): one line, no traceback; any other report goes where it went before."""
    monkeypatch.setattr(descriptors, "_shortages", descriptors.Refusals())
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        descriptors.quiet_accept_failures(loop)
        descriptors.quiet_accept_failures(loop)  # a second site: not wrapped twice
        caplog.set_level(logging.DEBUG)
        for code in [errno.EMFILE] * 50 + [errno.ENFILE, errno.ENOBUFS, errno.ENOMEM]:
            loop.call_exception_handler(
                {"message": ACCEPT, "exception": OSError(code, "Too many open files")}
            )
        other = {"message": "Task exception was never retrieved", "exception": ValueError()}
        loop.call_exception_handler(other)
        loop.call_exception_handler({"message": ACCEPT})  # no exception: not ours to judge
    finally:
        loop.set_exception_handler(None)
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1 and records[0].exc_info is None
    assert "accept() resumes by itself" in records[0].getMessage()
    assert seen == [other, {"message": ACCEPT}]
