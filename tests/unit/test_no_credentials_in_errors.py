"""A backend address with a user and password never shows them in an error (log, health)."""

from __future__ import annotations

import aiohttp
import pytest

from loadwatcher.errors import ProviderError, ProviderErrorKind, without_credentials
from loadwatcher.providers.http import HttpSettings, transport_error


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("cannot connect to http://scraper:hunter2@10.0.0.1:9090", "http://***@10.0.0.1:9090"),
        ("https://u@h/x and http://a:b@c/d", "https://***@h/x and http://***@c/d"),
        ("http://host:9090/api/v1/query", "http://host:9090/api/v1/query"),
    ],
)
def test_credentials_of_urls_are_replaced(text: str, shown: str) -> None:
    assert shown in without_credentials(text)
    assert "hunter2" not in str(ProviderError(ProviderErrorKind.CONNECT, text))


def test_a_connect_error_to_an_address_with_a_password_does_not_show_it() -> None:
    settings = HttpSettings(address="http://scraper:hunter2@127.0.0.1:1")
    exc = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None),
        OSError(111, "Connection refused"),
    )
    for error in (
        transport_error(exc, settings.address + "/api/v1/query", settings, None),
        transport_error(TimeoutError(), settings.address + "/api/v1/query", settings, None),
    ):
        assert "hunter2" not in str(error) and "scraper" not in str(error), str(error)
