"""Settings: every setting resolved from YAML < environment < flags into typed dataclasses.

``spec`` describes settings and sections, ``parsers`` turns text into typed values with a
message a person can act on, ``settings`` holds the frozen dataclasses, ``catalogue`` puts
config's sections and the providers' together, ``resolve`` does the layering, ``files``
checks the files settings name as the service will use them.
"""

from typing import TYPE_CHECKING

from loadwatcher.config.catalogue import Catalogue, ProviderEntry, install, installed
from loadwatcher.config.files import require_file
from loadwatcher.config.resolve import effective, load, markdown_table, resolve
from loadwatcher.config.settings import Settings
from loadwatcher.config.spec import Section, Spec

if TYPE_CHECKING:
    # Every setting of the installed catalogue (read when asked: providers register late).
    SPECS: tuple[Spec, ...]
    SPECS_BY_KEY: dict[str, Spec]
else:

    def __getattr__(name: str) -> object:
        if name == "SPECS":
            return installed().specs
        if name == "SPECS_BY_KEY":
            return installed().specs_by_key
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SPECS",
    "SPECS_BY_KEY",
    "Catalogue",
    "ProviderEntry",
    "Section",
    "Settings",
    "Spec",
    "effective",
    "install",
    "installed",
    "load",
    "markdown_table",
    "require_file",
    "resolve",
]
