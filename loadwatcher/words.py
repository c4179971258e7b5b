"""Words for messages, logs and pages: a count and its noun agree ("1 node", "2 nodes")."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, the noun in plural unless ``count`` is 1.

    The plural is ``noun + "s"`` unless ``many`` gives it (``plural(n, "series", "series")``,
    ``plural(n, "query", "queries")``).
    """
    return f"{count} {noun if count == 1 else (many or noun + 's')}"
