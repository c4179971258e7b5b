"""File descriptors: room for the connections, and running out told once per burst.

Every open connection and every memory file a response is sent from (``prepared``) holds a
descriptor. At start the soft ``RLIMIT_NOFILE`` is raised toward the hard one as far as
``server.max_connections`` needs (as Go's runtime and nginx's ``worker_rlimit_nofile`` do);
where the hard limit is lower, connections are capped below it (``connection_room``), so that
the cap closes them at once rather than ``accept()`` failing.

When descriptors still run out (another part of the process holds many, or the system's
table is full), asyncio logs a traceback for every ``accept()`` that fails and retries a
second later; a memory file that cannot be made falls back to a plain write. Both are one
log line per burst here (``shortage``), and both recover by themselves once descriptors are
free again: nothing is switched off for good.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

log = logging.getLogger("loadwatcher.edge")

# A refusal this long after the last logged one starts a new burst (and a new log line).
BURST_QUIET_S = 60.0
# Descriptors kept free of connections: memory files (``prepared.MAX_SPOOLS``), the
# journal, the backend's connections, logging and the interpreter's own.
RESERVE = 128
# What asyncio's selector loop says when accept() fails for want of descriptors or memory
# (it then stops accepting for a second); any other error keeps the loop's own handling.
_ACCEPT_FAILED = "socket.accept() out of system resource"


class Refusals:
    """Counts refusals; says when one starts a new burst worth a log line."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._logged_at: float | None = None
        self.unlogged = 0

    def refused(self) -> bool:
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= BURST_QUIET_S:
            self._logged_at = now
            return True
        self.unlogged += 1
        return False

    def take_unlogged(self) -> str:
        """``; N more ... since the last such line`` for the next line, and start counting again."""
        more, self.unlogged = self.unlogged, 0
        return f"; {more} more since the last such line" if more else ""


_shortages = Refusals()


def soft_limit() -> int | None:
    """The process's soft descriptor limit (None: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_room(wanted: int) -> int:
    """How many connections to admit: ``wanted``, or fewer where the descriptor limit
    cannot be raised to hold them and ``RESERVE`` more (said once, at start)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + RESERVE
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError) as exc:
                log.info("cannot raise the descriptor limit to %d: %s", target, exc)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    room = max(soft // 2, soft - RESERVE)
    log.warning(
        "the descriptor limit (RLIMIT_NOFILE %d, hard %s) leaves room for %d connections, "
        "fewer than server.max_connections (%d): past them, idle ones make room or new ones "
        "are closed; raise the limit (ulimit -n) to serve more",
        soft,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
        room,
        wanted,
    )
    return room


def shortage(consequence: str, exc: OSError) -> None:
    """Descriptors (or memory) ran out: one warning per burst, whoever met it."""
    if not _shortages.refused():
        return
    limit = soft_limit()
    log.warning(
        "out of file descriptors or memory (%s; RLIMIT_NOFILE %s): %s%s",
        exc.strerror or exc,
        "unlimited" if limit is None else limit,
        consequence,
        _shortages.take_unlogged(),
    )


def quiet_accept_failures(loop: asyncio.AbstractEventLoop) -> None:
    """Route the loop's report of a failed ``accept()`` to ``shortage`` (asyncio retries
    the accept itself a second later); every other report goes where it went before."""
    previous = loop.get_exception_handler()
    if getattr(previous, "accept_failures_quiet", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if context.get("message") == _ACCEPT_FAILED and isinstance(exc, OSError):
            shortage("new connections wait in the listen queue; accept() resumes by itself", exc)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler.accept_failures_quiet = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)
