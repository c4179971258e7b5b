"""The Kubernetes API for the metrics-server provider: auth, paged lists, error mapping.

Config loading and auth are ``kubernetes_asyncio``'s, not ours: a kubeconfig file
(``KUBE_CONFIG``, with its contexts, client certificates, tokens and exec plugins) or, without
one, the pod's service account (``KUBERNETES_SERVICE_HOST``/``_PORT``, the mounted token and
the cluster CA). The service-account token is re-read whenever its file changes, because
kubelet rotates projected tokens (the library alone re-reads it only once a minute). A 401
rebuilds the client once, which re-reads the kubeconfig and re-runs its exec plugin.

Requests go through the library's ``ApiClient.call_api`` unparsed (``_preload_content=False``)
so that large lists are decoded once, by orjson, and every failure is mapped here to a
``ProviderError``. Lists follow ``metadata.continue``; an expired continue token (410) restarts
the list once from the beginning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from loadwatcher.errors import ProviderError, ProviderErrorKind
from loadwatcher.providers.http import TokenSource

MAX_PAGES = 10_000  # a list that never ends is a broken server, not a big cluster


@dataclass(frozen=True)
class KubeAccess:
    """How to reach the API server.

    ``kubeconfig`` empty means in-cluster: ``token_file`` and ``ca_file`` are the service
    account's mount, and ``environ`` (None: the process environment, read when the client is
    built) gives ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``.
    """

    kubeconfig: str = ""
    context: str = ""
    timeout_s: float = 10.0
    page_size: int = 500
    token_file: str = SERVICE_TOKEN_FILENAME
    ca_file: str = SERVICE_CERT_FILENAME
    environ: Mapping[str, str] | None = None


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


def status_error(status: int, body: bytes, what: str) -> ProviderError:
    """The ProviderError for a non-2xx answer, with the API's own ``Status`` message."""
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
            f"{what}: 403 Forbidden: the identity needs get/list on nodes and on "
            f"nodes.metrics.k8s.io ({detail})",
        )
    if status == 404:
        return ProviderError(ProviderErrorKind.NOT_FOUND, f"{what}: 404 Not Found ({detail})")
    if status >= 500:
        return ProviderError(ProviderErrorKind.SERVER, f"{what}: {status} ({detail})")
    return ProviderError(ProviderErrorKind.BAD_RESPONSE, f"{what}: {status} ({detail})")


class KubeClient:
    """GET lists from the API server; raises only ProviderError."""

    def __init__(self, settings: KubeAccess) -> None:
        self.settings = settings
        self._api: ApiClient | None = None
        # Clients dropped after a 401 while a concurrent request may still use them;
        # closed by close_retired() once no request of that fetch is in flight.
        self._retired: list[ApiClient] = []
        self._tokens = TokenSource("", settings.token_file)

    async def _configuration(self) -> Configuration:
        s = self.settings
        cfg = Configuration()
        try:
            if s.kubeconfig:
                await kube_config.load_kube_config(
                    config_file=s.kubeconfig,
                    context=s.context or None,
                    client_configuration=cfg,
                    persist_config=False,
                )
            else:
                environ = dict(os.environ if s.environ is None else s.environ)
                loader = InClusterConfigLoader(
                    s.token_file, s.ca_file, try_refresh_token=False, environ=environ
                )
                loader.load_and_set(cfg)
                cfg.refresh_api_key_hook = self._refresh_token
        except Exception as exc:  # the library raises many kinds for one bad config
            source = f"kubeconfig {s.kubeconfig}" if s.kubeconfig else "in-cluster config"
            raise ProviderError(
                ProviderErrorKind.AUTH, f"cannot load the {source}: {exc or type(exc).__name__}"
            ) from exc
        return cfg

    def _refresh_token(self, cfg: Configuration) -> None:
        """Called by the library before each request: the current service-account token."""
        cfg.api_key["BearerToken"] = "Bearer " + self._tokens.get()

    async def _client(self) -> ApiClient:
        if self._api is None:
            self._api = ApiClient(configuration=await self._configuration())
        return self._api

    async def _get(self, path: str, params: list[tuple[str, str]]) -> tuple[int, bytes, ApiClient]:
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
                return resp.status, await resp.read(), api
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
        status, body, api = await self._get(path, params)
        if status == 401:
            # Credentials may have rotated: retry once with a freshly configured client.
            if self._api is api:
                self._api = None
                self._retired.append(api)
            status, body, _ = await self._get(path, params)
        if status == 410:
            return status, None
        if not 200 <= status < 300:
            raise status_error(status, body, f"GET {path}")
        try:
            return status, orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ProviderError(
                ProviderErrorKind.BAD_RESPONSE,
                f"GET {path}: answered {status} with a non-JSON body",
            ) from exc

    async def list_all(self, path: str) -> list[dict[str, Any]]:
        """Every item of a list, following ``continue`` page by page."""
        items: list[dict[str, Any]] = []
        token = ""
        restarted = False
        for _ in range(MAX_PAGES):
            params = [("limit", str(self.settings.page_size))] if self.settings.page_size else []
            if token:
                params.append(("continue", token))
            status, doc = await self.get_json(path, params)
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
