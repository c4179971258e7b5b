"""Strict reading of scoring input: paths into a document and refusal of unknown keys.

A key the reader does not know is an error naming its path, as ``kubectl --validate=strict``
does: a misspelt ``container:`` would otherwise read as a pod that requests nothing and
change the score without a word. Paths are rooted at the document (``nodes[1].pods[0]``);
the reader of a file puts the file's name in front (:func:`in_file`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

__all__ = ["at", "check_keys", "in_file", "located", "unique_keys"]

T = TypeVar("T")


def at(where: str, key: str | int) -> str:
    """The path of ``key`` (a mapping key, or a list index) inside ``where``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def located(where: str, message: str) -> str:
    """``message`` about the value at ``where`` (the document itself when empty)."""
    return f"{where}: {message}" if where else message


def check_keys(raw: Mapping[Any, Any], known: Collection[str], where: str) -> None:
    """ValueError naming the first key of ``raw`` not in ``known``, and the known ones."""
    for key in raw:
        if key not in known:
            names = ", ".join(sorted(known))
            raise ValueError(located(where, f"unknown key {str(key)!r} (known: {names})"))


def in_file(label: str, read: Callable[[], T]) -> T:
    """``read()``, its ValueError prefixed with the file's ``label``."""
    try:
        return read()
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that gives no key twice (``json.loads(object_pairs_hook=...)``).

    A duplicate is refused as kubectl's strict validation does: otherwise the last one
    wins without a word.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in an object with keys {', '.join(out)}")
        out[key] = value
    return out
