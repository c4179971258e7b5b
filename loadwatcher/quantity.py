"""Exact Kubernetes resource quantities (``"250m"``, ``"1536Mi"``, ``"2e3"``, ``"1.5"``).

Grammar (k8s.io/apimachinery ``resource.ParseQuantity``)::

    quantity  ::= sign? digits ( "." digits? )? suffix      |  sign? "." digits suffix
    suffix    ::= "" | n | u | m | k | M | G | T | P | E      (powers of 10)
                | Ki | Mi | Gi | Ti | Pi | Ei                  (powers of 2)
                | ( "e" | "E" ) sign? digits                   (decimal exponent)

Values are held as exact :class:`fractions.Fraction`. Like Go, a non-zero value is rounded
*up* (away from zero) to a whole nano-unit when parsed, and ``milli_value()`` / ``value()``
round up (away from zero) to whole milli-units / units, as ``Quantity.MilliValue()`` and
``Quantity.Value()`` do. CPU is read in millicores with ``milli_value()``, memory in bytes
with ``value()``.

Deliberately stricter than Go: Go parses ``""`` as an error but ``"+"``, ``"-"`` and ``"."``
as zero; here a quantity must contain at least one digit. Go caps BinarySI values at
2**63-1; here values stay exact (no cap).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

__all__ = ["Quantity", "capacity_facts", "node_quantity", "parse_quantity"]

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.ASCII | re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)
_MAX_EXPONENT = 1000  # beyond this the value is certainly a mistake (and huge to hold)
_NANO = Fraction(1, 10**9)
_HINT = "expected a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, e3, ...)"


def _ceil_away(value: Fraction) -> int:
    """Round to an integer away from zero (Go's inf.RoundUp)."""
    return math.ceil(value) if value >= 0 else -math.ceil(-value)


@dataclass(frozen=True, slots=True)
class Quantity:
    """A parsed quantity: ``exact`` value in base units (cores, bytes) and the source text."""

    exact: Fraction
    text: str
    _milli: int = field(init=False, repr=False, compare=False)
    _units: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_milli", _ceil_away(self.exact * 1000))
        object.__setattr__(self, "_units", _ceil_away(self.exact))

    def milli_value(self) -> int:
        """Value in milli-units, rounded up away from zero (Go ``MilliValue()``)."""
        return self._milli

    def value(self) -> int:
        """Value in units, rounded up away from zero (Go ``Value()``)."""
        return self._units

    def __float__(self) -> float:
        return float(self.exact)

    def __str__(self) -> str:
        return self.text

    @staticmethod
    def zero() -> Quantity:
        """The quantity ``0``."""
        return Quantity(Fraction(0), "0")


def _suffix_scale(suffix: str, text: str) -> Fraction:
    if suffix in _DECIMAL_SUFFIXES:
        return Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    if suffix in _BINARY_SUFFIXES:
        return Fraction(2) ** _BINARY_SUFFIXES[suffix]
    match = _EXPONENT.fullmatch(suffix)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}: unknown suffix {suffix!r}; {_HINT}")
    exponent = int(match.group(1))
    if abs(exponent) > _MAX_EXPONENT:
        raise ValueError(f"invalid quantity {text!r}: exponent {exponent} is out of range")
    return Fraction(10) ** exponent


def parse_quantity(raw: str | int | float) -> Quantity:
    """Parse a Kubernetes quantity exactly; raise ValueError with a one-line reason.

    JSON numbers are accepted as Kubernetes accepts them (``1``, ``0.5``); booleans,
    NaN and infinities are not.
    """
    if isinstance(raw, bool):
        raise ValueError(f"invalid quantity {raw!r}: expected a string or a number")
    if isinstance(raw, int):
        return Quantity(Fraction(raw), str(raw))
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise ValueError(f"invalid quantity {raw!r}: not a finite number")
        text = repr(raw)
    elif isinstance(raw, str):
        text = raw
    else:
        raise ValueError(f"invalid quantity {raw!r}: expected a string or a number")
    match = _NUMBER.fullmatch(text)
    if match is None:  # pragma: no cover - the pattern matches every string
        raise ValueError(f"invalid quantity {text!r}: {_HINT}")
    sign, whole, frac, suffix = match.groups()
    if not whole and not frac:
        raise ValueError(f"invalid quantity {text!r}: {_HINT}")
    digits = Fraction(int(whole or "0"))
    if frac:
        digits += Fraction(int(frac), 10 ** len(frac))
    amount = digits * _suffix_scale(suffix, text)
    if amount:
        amount = math.ceil(amount / _NANO) * _NANO  # Go rounds up to nano precision
    return Quantity(-amount if sign == "-" else amount, text)


def node_quantity(resource: str, value: float) -> str | None:
    """A node size as the quantity string the wire's ``metadata`` carries: cores (``"4"``,
    ``"3920m"``) or bytes; None for a value no node can have (a backend or a writer may
    send anything)."""
    if not math.isfinite(value) or value <= 0 or value >= 2**63:
        return None
    if resource == "cpu":
        milli = round(value * 1000)
        if not 0 < milli < 2**63:  # Go's int64 millicores
            return None
        return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    whole = round(value)
    return str(whole) if whole > 0 else None


def capacity_facts(cpus: float | None, memory_bytes: float | None) -> dict[str, str]:
    """``capacity.cpu`` and ``capacity.memory`` of one node, leaving out what is unknown or
    impossible."""
    facts: dict[str, str] = {}
    for resource, value in (("cpu", cpus), ("memory", memory_bytes)):
        shown = None if value is None else node_quantity(resource, value)
        if shown is not None:
            facts[f"capacity.{resource}"] = shown
    return facts
