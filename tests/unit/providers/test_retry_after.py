"""A backend's ``Retry-After`` (RFC 9110 §10.2.3) on a 429 or 503 is carried by the
ProviderError as ``retry_after_s``; a 429 is kind ``rate_limited``, a 503 stays ``server``."""

from __future__ import annotations

import datetime as dt
import email.utils
import time

import pytest
from aiohttp import web

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers import ratelimit
from loadwatcher.providers.http import HttpBackend, HttpSettings
from loadwatcher.providers.ratelimit import retry_after_seconds

NOW = 1_800_000_000.0


def http_date(seconds: float) -> str:
    return email.utils.format_datetime(dt.datetime.fromtimestamp(seconds, dt.UTC), usegmt=True)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("30", 30.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        (http_date(NOW + 90), 90.0),
        (http_date(NOW - 3600), 0.0),  # a date already past: retry now
        (time.strftime("%A, %d-%b-%y %H:%M:%S GMT", time.gmtime(NOW + 45)), 45.0),  # RFC 850
        (time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(NOW + 5)), 5.0),  # asctime
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),  # delta-seconds are whole seconds
        ("30 s", None),
        ("9" * 400, None),  # infinite
        ("Sun, 06 Nov", None),  # an incomplete date
        ("Sun, 32 Nov 1994 08:49:37 GMT", None),  # no such day
    ],
)
def test_retry_after_seconds(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header, NOW) == seconds


async def backend_answering(aiohttp_server, status: int, headers: dict[str, str]) -> HttpBackend:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"error": "slow down"}, status=status, headers=headers)

    application = web.Application()
    application.router.add_get("/api/v1/query", answer)
    server = await aiohttp_server(application)
    return HttpBackend(HttpSettings(address=str(server.make_url("")).rstrip("/")))


async def failure(aiohttp_server, status: int, **headers: str) -> tuple[ProviderError, str]:
    """The error of request_json and request_bytes (the same but for the clock's progress
    between the two when Retry-After is a date), and the URL asked."""
    http = await backend_answering(aiohttp_server, status, headers)
    url = http.settings.address + "/api/v1/query"
    try:
        with pytest.raises(ProviderError) as as_json:
            await http.request_json("GET", "/api/v1/query", query="up")
        with pytest.raises(ProviderError) as as_bytes:
            await http.request_bytes("GET", "/api/v1/query", query="up")
    finally:
        await http.close()
    a, b = as_json.value, as_bytes.value
    assert a.kind is b.kind
    if "GMT" in headers.get("Retry-After", ""):
        assert a.retry_after_s == pytest.approx(b.retry_after_s, abs=5)
    else:
        assert (str(a), a.retry_after_s) == (str(b), b.retry_after_s)
    return a, url


async def test_429_with_delta_seconds_is_rate_limited(aiohttp_server) -> None:
    error, url = await failure(aiohttp_server, 429, **{"Retry-After": "30"})
    assert error.kind is ProviderErrorKind.RATE_LIMITED
    assert str(error.kind) == "rate_limited"
    assert error.retry_after_s == 30.0
    assert error.message == f"{url} answered 429 (Retry-After 30 s)"
    assert str(error) == f"rate_limited: {url} answered 429 (Retry-After 30 s) (query 'up')"


async def test_503_with_an_http_date_stays_server_and_carries_the_wait(aiohttp_server) -> None:
    error, url = await failure(aiohttp_server, 503, **{"Retry-After": http_date(time.time() + 120)})
    assert error.kind is ProviderErrorKind.SERVER
    assert error.retry_after_s is not None
    # The date has whole seconds and the clock moved on a little since it was written.
    assert 100 < error.retry_after_s <= 120
    assert error.message.startswith(f"{url} answered 503: slow down (Retry-After ")


async def test_429_without_retry_after_is_still_rate_limited(aiohttp_server) -> None:
    error, url = await failure(aiohttp_server, 429)
    assert error.kind is ProviderErrorKind.RATE_LIMITED
    assert error.retry_after_s is None
    assert error.message == f"{url} answered 429"


async def test_a_garbage_retry_after_is_ignored(aiohttp_server) -> None:
    error, url = await failure(aiohttp_server, 429, **{"Retry-After": "in a while"})
    assert error.kind is ProviderErrorKind.RATE_LIMITED
    assert error.retry_after_s is None
    assert error.message == f"{url} answered 429"


async def test_503_without_retry_after_has_no_wait(aiohttp_server) -> None:
    error, url = await failure(aiohttp_server, 503)
    assert error.kind is ProviderErrorKind.SERVER
    assert error.retry_after_s is None
    assert error.message == f"{url} answered 503: slow down"


async def test_only_429_and_503_carry_retry_after(aiohttp_server) -> None:
    error, _ = await failure(aiohttp_server, 500, **{"Retry-After": "30"})
    assert error.kind is ProviderErrorKind.SERVER
    assert error.retry_after_s is None
    assert "Retry-After" not in error.message


async def test_429_with_datadogs_x_ratelimit_reset_waits_that_long(aiohttp_server) -> None:
    """Datadog answers a 429 with X-RateLimit-Reset (seconds until its period resets) and
    no Retry-After: that is the wait."""
    headers = {"X-RateLimit-Reset": "42", "X-RateLimit-Remaining": "0"}
    error, url = await failure(aiohttp_server, 429, **headers)
    assert error.kind is ProviderErrorKind.RATE_LIMITED
    assert error.retry_after_s == 42.0
    assert error.message == f"{url} answered 429 (X-RateLimit-Reset 42 s)"


async def test_retry_after_wins_over_x_ratelimit_reset(aiohttp_server) -> None:
    headers = {"Retry-After": "7", "X-RateLimit-Reset": "42"}
    error, _ = await failure(aiohttp_server, 429, **headers)
    assert error.retry_after_s == 7.0


@pytest.mark.parametrize("reset", ["soon", "-1", "1.5", "9" * 400])
async def test_a_garbage_x_ratelimit_reset_is_ignored(aiohttp_server, reset: str) -> None:
    error, url = await failure(aiohttp_server, 429, **{"X-RateLimit-Reset": reset})
    assert error.retry_after_s is None
    assert error.message == f"{url} answered 429"


def test_provider_error_defaults_to_no_wait() -> None:
    error = ProviderError(ProviderErrorKind.CONNECT, "cannot connect")
    assert error.retry_after_s is None
    assert str(error) == "connect: cannot connect"


@pytest.mark.parametrize(
    ("headers", "remaining", "reset", "exhausted"),
    [
        ({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"}, 0, 30.0, True),
        ({"X-RateLimit-Remaining": "12", "X-RateLimit-Reset": "30"}, 12, 30.0, False),
        ({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0"}, 0, 0.0, False),
        ({"X-RateLimit-Remaining": "0"}, 0, None, False),  # no reset: nothing to wait for
        ({"X-RateLimit-Remaining": "-1", "X-RateLimit-Reset": "soon"}, None, None, False),
        ({}, None, None, False),
    ],
)
def test_the_quota_of_an_answer(headers, remaining, reset, exhausted) -> None:
    q = ratelimit.quota(headers)
    assert (q.remaining, q.reset_s, q.exhausted) == (remaining, reset, exhausted)
