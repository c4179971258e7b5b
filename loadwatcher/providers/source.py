"""What a journal's samples come from, told from the settings: the journal records it and
refuses to restore samples of another source (another provider, backend, query, cluster).

The description holds what decides WHICH values are measured and under which node names:
the provider, its address without credentials, the wire metric names, and the provider
section's fields except timeouts, intervals, limits and credentials (changing those does
not change what a sample means). Never a secret: it is logged and stored in the file.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from loadwatcher.config import Settings
from loadwatcher.providers import registry

# Section fields that say how, not what: never part of the description.
_HOW_SUFFIXES = ("_s", "_bytes", "_file", "_per_s", "_per_request")
_HOW_PREFIXES = ("max_",)
_HOW_NAMES = frozenset(
    {
        "receive",
        "page_size",
        "config",  # the kubeconfig's path; its context is what names the cluster
        "auth_scheme",
        "insecure_skip_verify",
        "read_capacity",
        "replica_label",
        "require_replica",
    }
)
_SECRET_WORDS = ("token", "password", "secret", "username", "key")


def source_of(settings: Settings) -> dict[str, str]:
    """The description of what this configuration measures (pure)."""
    from loadwatcher.providers import push  # a provider package: loaded by the registry

    name = settings.provider.name
    described = {"provider": name}
    address = public_address(settings.provider.address)
    if address:
        described["address"] = address
    for resource, wire in sorted(registry.metric_names(settings).items()):
        described[f"metric.{resource}"] = wire
    declared = {d.name: d for d in registry.declarations()}.get(name)
    if declared is not None and declared.section is not None:
        described.update(_what(settings.sections[declared.section.name]))
    pushed = settings.section(push.SECTION)
    if name != "push" and pushed.receive:  # pushes beside the poller's samples
        described["push"] = "yes"
        described.update({f"push.{k}": v for k, v in _what(pushed).items()})
    return described


def public_address(address: str) -> str:
    """``address`` without userinfo, query or fragment, scheme and host lower-cased, no
    trailing slash (pure)."""
    if not address:
        return ""
    parts = urllib.parse.urlsplit(address.strip())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def shown(described: dict[str, str] | None) -> str:
    """A description on one log line (pure)."""
    if described is None:
        return "an unrecorded source (an earlier release)"
    return ", ".join(f"{k}={v}" for k, v in described.items())


def _what(section: Any) -> dict[str, str]:
    if not dataclasses.is_dataclass(section):
        return {}
    kept: dict[str, str] = {}
    for f in dataclasses.fields(section):
        name = f.name
        if (
            name in _HOW_NAMES
            or name.endswith(_HOW_SUFFIXES)
            or name.startswith(_HOW_PREFIXES)
            or any(word in name for word in _SECRET_WORDS)
        ):
            continue
        kept[name] = str(getattr(section, name))
    return kept
