"""The wall clock watched against the monotonic clock: a step is seen, said and survived.

Sample times are wall-clock times, and the retention trims by the wall clock: a step of it
(an NTP step, a VM resumed after a pause, an operator's ``date -s``) would otherwise erase
the whole history in one cycle (a step forward) or take back samples it now finds ahead of
it (a step back). ``ClockWatch.look`` compares how far the wall clock moved with how far the
monotonic clock did since the clocks last agreed: beyond ``tolerance_s`` a step is in force,
and the engine trims nothing until it is understood -- the clocks agree again; or a poll's
samples from a backend with a clock of its own are fresh by the new time (``agreed``: the
wall clock is right now, as after a VM resumes); or the step has lasted ``accept_after_s``
(the retention: by then every sample held was written under the new clock). NTP's slewing
stays within the tolerance and is followed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from loadwatcher.pipeline.added import AddResult
from loadwatcher.words import plural

log = logging.getLogger("loadwatcher.engine")

# A step of the wall clock is understood when a poll brings samples at most this old by it.
_STEP_AGREES_S = 60.0

# Beyond this the wall clock moved otherwise than time passed: a step, not a slew (NTP
# slews at most 0.5 ms a second).
DEFAULT_STEP_TOLERANCE_S = 5.0


@dataclass
class ClockWatch:
    """Seen ``look`` by ``look``; ``step_s`` is the step in force (+ forward), or None."""

    accept_after_s: float
    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic
    tolerance_s: float = DEFAULT_STEP_TOLERANCE_S
    step_s: float | None = None
    _reference: float | None = None  # wall - mono when the clocks last agreed
    _since: float | None = None  # monotonic time the step was first seen

    def look(self) -> float | None:
        """The step in force now, after comparing the clocks once more."""
        mono = self.mono()
        offset = self.wall() - mono
        if self._reference is None:
            self._reference = offset
            return None
        step = offset - self._reference
        if abs(step) <= self.tolerance_s:
            if self.step_s is not None:
                log.info("clock step over: the wall clock agrees with the monotonic clock again")
            self._reference, self.step_s, self._since = offset, None, None
            return None
        if self._since is None:
            self._since = mono
            log.error("%s; trimming by retention paused until the clocks agree", words(step))
        elif mono - self._since >= self.accept_after_s:
            log.warning("%s for %.0f s: taken as the right time", words(step), mono - self._since)
            self._reference, self.step_s, self._since = offset, None, None
            return None
        self.step_s = step
        return step

    def agreed(self) -> None:
        """The backend's fresh samples agree with the wall clock as it is now (a VM resumed,
        a wrong clock corrected): the step is understood, and taken as the right time."""
        if self.step_s is None:
            return
        log.warning("%s: taken as the right time (the backend's samples agree)", words(self.step_s))
        self._reference = self.wall() - self.mono()
        self.step_s, self._since = None, None


def words(step_s: float) -> str:
    """``clock stepped forward by 3600 s``."""
    return f"clock stepped {'forward' if step_s > 0 else 'back'} by {abs(step_s):.0f} s"


def agrees(added: AddResult, now: float) -> bool:
    """Whether a poll's samples, from a backend with a clock of its own, are fresh by the
    clock as it is now: then a step of it is the right time (``ClockWatch.agreed``)."""
    return len(added.added) > 0 and float(added.added.ts.max()) >= now - _STEP_AGREES_S


Skew = tuple[float, frozenset[str]]  # how far ahead the samples were (median), and whose


def skew(added: AddResult, was: Skew | None) -> Skew | None:
    """The clock skew a poll shows (most of its samples ahead of the clock: the backend's
    clock is ahead of ours, or ours stepped back; either way its times cannot be trusted),
    logged when it starts and when it ends."""
    future = added.dropped.get("future", 0)
    skewed = added.offered > 0 and 2 * future > added.offered
    if skewed and was is None:
        log.error(
            "clock skew: %s of %s ahead of this service's clock by %.0f s (median); "
            "they are dropped and their nodes are not ok until the clocks agree",
            plural(future, "sample"),
            plural(added.offered, "sample"),
            added.ahead_s,
        )
    elif was is not None and not skewed:
        log.info("clock skew over: the poll's samples are no longer ahead of the clock")
    return (added.ahead_s, added.future_nodes) if skewed else None


def problems(step_s: float | None, skewed: Skew | None, tolerance_s: float) -> tuple[str, ...]:
    """Health's service-level reasons for a step in force and a clock skew."""
    found: list[str] = []
    if step_s is not None:
        found.append(
            f"{words(step_s)} (against the monotonic clock): nothing is trimmed by retention "
            "until the clocks agree"
        )
    if skewed is not None:
        found.append(
            f"clock skew: backend is {skewed[0]:.0f} s ahead (samples more than "
            f"{tolerance_s:g} s ahead of this service's clock are dropped)"
        )
    return tuple(found)
