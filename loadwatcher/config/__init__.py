"""Settings: every setting resolved from YAML < environment < flags into typed dataclasses.

``spec`` is the table of settings, ``parsers`` turns text into typed values with a message a
person can act on, ``settings`` holds the frozen dataclasses, ``resolve`` does the layering.
"""

from loadwatcher.config.resolve import (
    PROVIDERS,
    SPECS,
    SPECS_BY_KEY,
    Settings,
    Spec,
    effective,
    load,
    markdown_table,
    resolve,
)

__all__ = [
    "PROVIDERS",
    "SPECS",
    "SPECS_BY_KEY",
    "Settings",
    "Spec",
    "effective",
    "load",
    "markdown_table",
    "resolve",
]
