"""The providers, as each declares itself, and the provider that the settings name.

A provider is a sub-package of ``loadwatcher.providers`` whose ``__init__`` sets
``PROVIDER`` to a ``Declaration``; adding one is adding such a package. Discovery imports
only those ``__init__`` modules, so they stay light and their ``build`` imports the
implementation when called: influxdb-client and kubernetes_asyncio are slow to import, and
every start of the service pays for what it imports before it serves its journal's snapshot.

Config cannot import this module (it sits below): importing it installs the catalogue of
every provider's names and settings in ``loadwatcher.config``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loadwatcher import config
from loadwatcher.config import Catalogue, Section, Settings
from loadwatcher.errors import ConfigError
from loadwatcher.model import Resource
from loadwatcher.providers.base import Provider

S = TypeVar("S")


@dataclass(frozen=True)
class Declaration(Generic[S]):
    """One provider: its names, its settings section, and how to build it from settings.

    ``build`` and ``metric_names`` get the settings and this provider's section (``None``
    without one); ``build`` also builds the corroborating provider. ``check`` validates the
    section when this is the main provider. ``rank`` orders lists (help, messages, the
    table); equal ranks go by name.
    """

    name: str
    build: Callable[[Settings, S], Provider]
    metric_names: Callable[[S], Mapping[Resource, str]]  # the wire `name` per resource
    aliases: tuple[str, ...] = ()  # other spellings, any case: the Go load-watcher's names
    section: Section[S] | None = None
    needs_address: bool = True  # provider.address is required
    needs_token: bool = False  # provider.token or provider.token_file is required
    check: Callable[[S], None] | None = None
    rank: int = 100
    # Parses provider.address in place of an http(s) URL: Datadog's Go provider takes a
    # bare site host (datadoghq.eu) there.
    parse_address: Callable[[str], str] | None = None


_declared: dict[str, Declaration[Any]] | None = None
_catalogue: Catalogue | None = None


def _discover() -> dict[str, Declaration[Any]]:
    global _declared
    if _declared is None:
        from loadwatcher import providers

        found: dict[str, Declaration[Any]] = {}
        for info in pkgutil.iter_modules(providers.__path__, providers.__name__ + "."):
            if info.ispkg:
                declared = getattr(importlib.import_module(info.name), "PROVIDER", None)
                if isinstance(declared, Declaration):
                    found[declared.name] = declared
        _declared = found
    return _declared


def declarations() -> tuple[Declaration[Any], ...]:
    """Every provider, in listed order."""
    return tuple(sorted(_discover().values(), key=lambda d: (d.rank, d.name)))


def register(declaration: Declaration[Any]) -> None:
    """Add a provider (one declared outside this package: a test's, a plug-in's)."""
    global _catalogue
    declared = _discover()
    if declaration.name in declared:
        raise ValueError(f"provider {declaration.name} is already registered")
    Catalogue([*declared.values(), declaration])  # raises on a clash of names or sections
    declared[declaration.name] = declaration
    _catalogue = None


def unregister(name: str) -> None:
    global _catalogue
    del _discover()[name]
    _catalogue = None


def catalogue() -> Catalogue:
    """Config's sections and every provider's, for ``config.resolve`` and the table."""
    global _catalogue
    if _catalogue is None:
        _catalogue = Catalogue(declarations())
    return _catalogue


def names() -> tuple[str, ...]:
    return tuple(d.name for d in declarations())


def _chosen(settings: Settings) -> tuple[Declaration[Any], Any]:
    name = settings.provider.name
    declared = _discover().get(name)
    if declared is None:
        raise ConfigError("provider.name", f"provider {name!r} is not available in this version")
    section = declared.section
    return declared, settings.sections[section.name] if section is not None else None


def metric_names(settings: Settings) -> dict[Resource, str]:
    """The wire ``name`` of each resource's metrics."""
    declared, section = _chosen(settings)
    return dict(declared.metric_names(section))


def build_provider(settings: Settings) -> Provider:
    declared, section = _chosen(settings)
    return declared.build(settings, section)


def build_corroborating_provider(settings: Settings) -> Provider | None:
    """The corroborating provider: the main settings with another name, address and
    credentials (the main provider's token and TLS settings are for the main address)."""
    other = settings.corroborate
    if other.name is None:
        return None
    provider = dataclasses.replace(
        settings.provider,
        name=other.name,
        address=other.address,
        token="",
        token_file=other.token_file,
        ca_file=other.ca_file,
        insecure_skip_verify=other.insecure_skip_verify,
    )
    return build_provider(dataclasses.replace(settings, provider=provider))


config.install(catalogue)
