"""The Kubernetes API for the metrics-server provider: auth, paged lists, error mapping.

Auth is ``kubernetes_asyncio``'s, loaded by ``access.py``. The service-account token is
re-read whenever its file changes (kubelet rotates it; the library re-reads it only now and
then), and a 401 rebuilds the client once. Answers are read unparsed, at most
``max_answer_bytes`` of each (as ``http.read_bounded`` reads), and decoded by orjson; lists
follow ``metadata.continue`` and restart once when the continue token expired (410). A 429
(API Priority and Fairness) or 503 carries its ``Retry-After`` on the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, Configuration

from loadwatcher.errors import ConfigError, ProviderError, ProviderErrorKind
from loadwatcher.providers.http import TokenSource, read_bounded
from loadwatcher.providers.kube.access import KubeAccess, open_client
from loadwatcher.providers.ratelimit import retry_after_seconds, retry_after_text

__all__ = ["KubeAccess", "KubeClient", "list_page", "status_error"]

MAX_PAGES = 10_000  # a list that never ends is a broken server, not a big cluster


def list_page(doc: Any, what: str) -> tuple[list[dict[str, Any]], str]:
    """``(items, continue token)`` of one page of a Kubernetes list ("" when it is the last)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ProviderError(ProviderErrorKind.BAD_RESPONSE, f"{what}: answer has no items list")
    items = doc["items"]
    if not all(isinstance(item, dict) for item in items):
        raise ProviderError(ProviderErrorKind.BAD_RESPONSE, f"{what}: malformed item in list")
    meta = doc.get("metadata")
    token = meta.get("continue") if isinstance(meta, dict) else None
    return items, token if isinstance(token, str) else ""


def _resource(what: str) -> str:
    """The RBAC name of what ``GET /path`` lists: ``pods`` for ``/api/v1/pods``,
    ``nodes.metrics.k8s.io`` for ``/apis/metrics.k8s.io/v1beta1/nodes``."""
    parts = what.rpartition(" ")[2].partition("?")[0].strip("/").split("/")
    if parts[0] == "apis" and len(parts) >= 4:
        return f"{parts[-1]}.{parts[1]}"
    return parts[-1]


def status_error(
    status: int, body: bytes, what: str, retry_after: str | None = None
) -> ProviderError:
    """The ProviderError for a non-2xx answer, with the API's own ``Status`` message;
    ``retry_after`` is the answer's ``Retry-After`` header, kept on a 429 or 503."""
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        detail = doc["message"][:300]
    else:
        detail = body[:200].decode("utf-8", "replace").strip() or "(empty body)"
    if status == 401:
        return ProviderError(
            ProviderErrorKind.AUTH,
            f"{what}: 401 Unauthorized: check the kubeconfig credentials or the service "
            f"account token ({detail})",
        )
    if status == 403:
        return ProviderError(
            ProviderErrorKind.AUTH,
            f"{what}: 403 Forbidden: the identity needs get/list on {_resource(what)} ({detail})",
        )
    if status == 404:
        return ProviderError(ProviderErrorKind.NOT_FOUND, f"{what}: 404 Not Found ({detail})")
    if status == 429:
        wait = retry_after_seconds(retry_after)
        return ProviderError(
            ProviderErrorKind.RATE_LIMITED,
            f"{what}: 429 Too Many Requests{retry_after_text(wait)} ({detail})",
            retry_after_s=wait,
        )
    if status >= 500:
        wait = retry_after_seconds(retry_after) if status == 503 else None
        return ProviderError(
            ProviderErrorKind.SERVER,
            f"{what}: {status}{retry_after_text(wait)} ({detail})",
            retry_after_s=wait,
        )
    return ProviderError(ProviderErrorKind.BAD_RESPONSE, f"{what}: {status} ({detail})")


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    retry_after: str | None  # the raw Retry-After header


class KubeClient:
    """GET lists from the API server; raises only ProviderError."""

    def __init__(self, settings: KubeAccess, api: ApiClient | None = None) -> None:
        """``api``: a client already opened (``access.open_client``) to use first, so
        that an exec plugin does not run twice; after a 401 the client is opened afresh."""
        self.settings = settings
        self._api = api
        # Clients dropped after a 401 while a concurrent request may still use them;
        # closed by close_retired() once no request of that fetch is in flight.
        self._retired: list[ApiClient] = []
        self._tokens = TokenSource("", settings.token_file)
        if api is not None:
            self._watch_token(api)

    def _watch_token(self, api: ApiClient) -> None:
        """In-cluster, have the library ask for the token before each request (it rotates)."""
        if not self.settings.kubeconfig:
            api.configuration.refresh_api_key_hook = self._refresh_token

    def _refresh_token(self, cfg: Configuration) -> None:
        """Called by the library before each request: the current service-account token."""
        cfg.api_key["BearerToken"] = "Bearer " + self._tokens.get()

    async def _client(self) -> ApiClient:
        if self._api is None:
            try:
                api = await open_client(self.settings)
            except ConfigError as exc:  # at run time an unusable config is an auth failure
                raise ProviderError(ProviderErrorKind.AUTH, exc.message) from exc
            self._watch_token(api)
            self._api = api
        return self._api

    async def _get(self, path: str, params: list[tuple[str, str]]) -> tuple[_Answer, ApiClient]:
        api = await self._client()
        what = f"GET {path}"
        try:
            resp = await api.call_api(
                path,
                "GET",
                query_params=params,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.settings.timeout_s,
            )
            async with resp:
                body = await read_bounded(resp, self.settings.max_answer_bytes, what)
                return _Answer(resp.status, body, resp.headers.get("Retry-After")), api
        except TimeoutError as exc:
            raise ProviderError(
                ProviderErrorKind.TIMEOUT,
                f"{what}: no answer within {self.settings.timeout_s:g} s",
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise ProviderError(
                ProviderErrorKind.CONNECT, f"{what}: cannot connect: {exc.os_error}"
            ) from exc
        except aiohttp.ClientError as exc:
            raise ProviderError(ProviderErrorKind.CONNECT, f"{what}: {exc}") from exc

    async def get_json(self, path: str, params: list[tuple[str, str]]) -> tuple[int, Any]:
        """``(status, decoded body)``; a 401 rebuilds the client and tries once more."""
        answer, api = await self._get(path, params)
        if answer.status == 401:
            # Credentials may have rotated: retry once with a freshly configured client.
            if self._api is api:
                self._api = None
                self._retired.append(api)
            answer, _ = await self._get(path, params)
        status = answer.status
        if status == 410:
            return status, None
        if not 200 <= status < 300:
            raise status_error(status, answer.body, f"GET {path}", answer.retry_after)
        try:
            return status, orjson.loads(answer.body)
        except orjson.JSONDecodeError as exc:
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE,
                f"GET {path}: answered {status} with a non-JSON body",
            ) from exc

    async def list_all(
        self, path: str, params: Sequence[tuple[str, str]] = ()
    ) -> list[dict[str, Any]]:
        """Every item of a list, following ``continue`` page by page; ``params`` are sent
        with every page (``fieldSelector`` ...)."""
        items: list[dict[str, Any]] = []
        token = ""
        restarted = False
        for _ in range(MAX_PAGES):
            query = list(params)
            if self.settings.page_size:
                query.append(("limit", str(self.settings.page_size)))
            if token:
                query.append(("continue", token))
            status, doc = await self.get_json(path, query)
            if status == 410:  # the continue token expired: the list changed too much
                if restarted or not token:
                    raise status_error(410, b"", f"GET {path}")
                items, token, restarted = [], "", True
                continue
            page, token = list_page(doc, f"GET {path}")
            items.extend(page)
            if not token:
                return items
        raise ProviderError(
            ProviderErrorKind.BAD_RESPONSE, f"GET {path}: more than {MAX_PAGES} pages"
        )

    async def close_retired(self) -> None:
        """Close the clients replaced after a 401 (call between fetches)."""
        retired, self._retired = self._retired, []
        for api in retired:
            await api.close()

    async def close(self) -> None:
        await self.close_retired()
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()
