"""The catalogue: config's own sections and the providers' (names, aliases, sections).

Config sits below the providers and cannot import them, so ``loadwatcher.providers.registry``
installs its catalogue here when it is imported; the functions of ``resolve`` take a
catalogue and default to the installed one. Without a registry, config knows no provider.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from loadwatcher.config import query, spec
from loadwatcher.config.parsers import ProviderNames
from loadwatcher.config.spec import Section, Spec


class ProviderEntry(Protocol):
    """What config needs to know of a provider (``registry.Declaration`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @property
    def section(self) -> Section[Any] | None: ...

    @property
    def needs_address(self) -> bool: ...

    @property
    def needs_token(self) -> bool: ...

    @property
    def check(self) -> Callable[[Any], None] | None: ...

    @property
    def parse_address(self) -> Callable[[str], str] | None: ...


class Catalogue:
    """Every section and setting, in the order of the table, and the providers' names."""

    def __init__(self, providers: Sequence[ProviderEntry] = ()) -> None:
        self.providers = {entry.name: entry for entry in providers}
        spellings: dict[str, str] = {}
        for entry in providers:
            for spelling in (entry.name, *entry.aliases):
                known = spellings.setdefault(spelling.lower(), entry.name)
                if known != entry.name:
                    raise ValueError(f"provider {entry.name}: {spelling!r} already names {known}")
        self.names = ProviderNames(tuple(self.providers), spellings)
        own = tuple(entry.section for entry in providers if entry.section is not None)
        # The providers' sections follow the provider section, as in the README's table.
        self.sections: tuple[Section[Any], ...] = (
            spec.SERVER,
            spec.JOURNAL,
            spec.POLL,
            spec.provider_section(self.names),
            *own,
            spec.ANALYSIS,
            spec.corroborate_section(self.names),
            spec.HEALTH,
            query.QUERY,
            spec.LOG,
        )
        self.section_names = tuple(section.name for section in self.sections)
        if len(set(self.section_names)) != len(self.sections):
            raise ValueError(f"two sections have one name: {', '.join(self.section_names)}")
        self.own_sections = frozenset(s.name for s in own)
        self.specs: tuple[Spec, ...] = tuple(s for section in self.sections for s in section.specs)
        self.specs_by_key = {s.key: s for s in self.specs}
        env = [name for s in self.specs for name in (s.env_name, *s.env)]
        if len(set(env)) != len(env):
            raise ValueError("two settings read one environment variable")


_CONFIG_ONLY = Catalogue()
_installed: Callable[[], Catalogue] | None = None


def install(source: Callable[[], Catalogue]) -> None:
    """Make ``source()`` the catalogue that config's functions use by default."""
    global _installed
    _installed = source


def installed() -> Catalogue:
    return _installed() if _installed is not None else _CONFIG_ONLY
