"""Where the Kubernetes API server is and how to authenticate: ``kubernetes_asyncio``'s loading.

One path for the metrics-server provider and ``loadwatcher score --kubeconfig``: a kubeconfig
file or, without one, the pod's service account. The library's loading is used as it is,
corrected where it would fail late or unclearly (a missing file, no kubeconfig outside a
cluster, a cluster without an http(s) server, a token file's trailing newline). A failure is
one ``ConfigError`` line that names the file but never quotes it: it holds credentials.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from loadwatcher.config.spec import DEFAULT_MAX_ANSWER_BYTES
from loadwatcher.errors import ConfigError

__all__ = ["NOT_IN_CLUSTER", "KubeAccess", "NotInClusterError", "open_client"]

SETTING = "kube.config"
NOT_IN_CLUSTER = "not running in a cluster (no service account)"


class NotInClusterError(ConfigError):
    """No kubeconfig was given and nothing of a pod's service account is here either."""

    def __init__(self) -> None:
        super().__init__(
            SETTING, f"{NOT_IN_CLUSTER}; set KUBE_CONFIG or kube.config to a kubeconfig file"
        )


@dataclass(frozen=True)
class KubeAccess:
    """How to reach the API server.

    ``kubeconfig`` empty means in-cluster: ``token_file`` and ``ca_file`` are the service
    account's mount, and ``environ`` (None: the process environment, read when the client is
    built) gives ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``.
    ``max_answer_bytes`` bounds each answer (one list page), as ``provider.max_answer_bytes``.
    """

    kubeconfig: str = ""
    context: str = ""
    timeout_s: float = 10.0
    page_size: int = 500
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    token_file: str = SERVICE_TOKEN_FILENAME
    ca_file: str = SERVICE_CERT_FILENAME
    environ: Mapping[str, str] | None = None


def _source(access: KubeAccess) -> str:
    return f"kubeconfig {access.kubeconfig}" if access.kubeconfig else "in-cluster config"


def _fail(access: KubeAccess, problem: str) -> ConfigError:
    return ConfigError(SETTING, f"cannot load the {_source(access)}: {problem}")


def _require_file(access: KubeAccess) -> None:
    # The library only logs a missing file, then fails on a missing key: say it plainly.
    if not os.path.isfile(access.kubeconfig):
        raise _fail(access, "no such file")


def _require_cluster(access: KubeAccess, environ: Mapping[str, str]) -> None:
    # Neither the service's address nor a token: not in a pod at all. The library would
    # only say "Service host/port is not set."
    if not environ.get(SERVICE_HOST_ENV_NAME) and not os.path.exists(access.token_file):
        raise NotInClusterError()


def _check_loaded(
    access: KubeAccess, loader: kube_config.KubeConfigLoader, cfg: Configuration
) -> None:
    # Without a server the library keeps its default, http://localhost: refuse it here
    # rather than fail later with a bare URL as the message.
    server = getattr(loader, "host", "")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise _fail(access, "the cluster's server must be an http(s) URL")
    # client-go trims a tokenFile's content; the library sends it raw, and aiohttp refuses
    # the usual trailing newline in a header.
    token = cfg.api_key.get("BearerToken")
    if isinstance(token, str):
        cfg.api_key["BearerToken"] = token.strip()


async def _configuration(access: KubeAccess) -> Configuration:
    cfg = Configuration()
    try:
        if access.kubeconfig:
            _require_file(access)
            loader = await kube_config.load_kube_config(
                config_file=access.kubeconfig,
                context=access.context or None,
                client_configuration=cfg,
                persist_config=False,
            )
            _check_loaded(access, loader, cfg)
        else:
            environ = dict(os.environ if access.environ is None else access.environ)
            _require_cluster(access, environ)
            InClusterConfigLoader(
                access.token_file, access.ca_file, try_refresh_token=False, environ=environ
            ).load_and_set(cfg)
    except ConfigError:
        raise
    except yaml.YAMLError as exc:  # its text would quote the offending line
        mark = getattr(exc, "problem_mark", None)
        raise _fail(
            access, "not valid YAML" + (f" at line {mark.line + 1}" if mark else "")
        ) from None
    except (AttributeError, TypeError, IndexError) as exc:  # a shape the library did not expect
        raise _fail(access, f"not a usable kubeconfig ({exc})") from exc
    except Exception as exc:  # the library raises many kinds for one bad config
        raise _fail(access, str(exc) or type(exc).__name__) from exc
    return cfg


async def open_client(access: KubeAccess) -> ApiClient:
    """A library client for ``access``; ConfigError (setting ``kube.config``) if unusable.

    Runs the kubeconfig's exec plugin, if any, and reads the in-cluster token once; callers
    that outlive a token set ``configuration.refresh_api_key_hook``.
    """
    cfg = await _configuration(access)
    try:  # the client builds its TLS context now, from the CA and client certificate files
        return ApiClient(configuration=cfg)
    except OSError as exc:  # ssl.SSLError included
        raise _fail(access, f"unusable CA or client certificate: {exc}") from exc
