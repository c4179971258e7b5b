"""Which encoding of a body to answer with: gzip or identity, from ``Accept-Encoding``."""

from __future__ import annotations

_GZIP_NAMES = frozenset({"gzip", "x-gzip"})
_NEGOTIATED: dict[str, bool] = {}
_NEGOTIATED_MAX = 64  # distinct header values remembered; clients send very few


def _quality(params: list[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0  # unreadable weight: treat the coding as not accepted
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def wants_gzip(header: str) -> bool:
    """Whether to answer gzip to this ``Accept-Encoding`` (RFC 9110 §12.5.3, q-values).

    gzip (or x-gzip, or ``*`` when gzip is not named) must have a weight above 0, and at
    least the weight the client gives ``identity`` when it names it.
    """
    gzip_q: float | None = None
    star_q: float | None = None
    identity_q: float | None = None
    for item in header.split(","):
        coding, *params = item.split(";")
        coding = coding.strip().lower()
        if coding in _GZIP_NAMES:
            gzip_q = max(gzip_q or 0.0, _quality(params))
        elif coding == "*":
            star_q = _quality(params)
        elif coding == "identity":
            identity_q = _quality(params)
    q = gzip_q if gzip_q is not None else (star_q or 0.0)
    return q > 0.0 and (identity_q is None or q >= identity_q)


def accepts_gzip(header: str | None) -> bool:
    """``wants_gzip``, remembered per header value (the same few strings on every request)."""
    if not header:
        return False
    known = _NEGOTIATED.get(header)
    if known is None:
        if len(_NEGOTIATED) >= _NEGOTIATED_MAX:
            _NEGOTIATED.clear()
        known = _NEGOTIATED[header] = wants_gzip(header)
    return known
