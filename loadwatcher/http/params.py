"""Query parameters as the routes take them: only known names, each at most once."""

from __future__ import annotations

from collections.abc import Collection

from multidict import MultiMapping

# The node names ``?host=`` and ``/watcher/{hostname}`` accept; the OpenAPI document shows it.
from loadwatcher.model import NODE_NAME_PATTERN as NODE_NAME_PATTERN


class BadRequest(Exception):
    """A request the client must fix: answered 400 with ``code`` and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def checked(query: MultiMapping[str], allowed: Collection[str]) -> dict[str, str]:
    """The query as one value per name; unknown or repeated names are a ``BadRequest``.

    A repeated name is refused rather than its first value used: a client (or something
    between it and us) that sends two values must not have one silently ignored.
    """
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        noun = "parameter" if len(unknown) == 1 else "parameters"
        raise BadRequest("bad_parameter", f"unknown query {noun}: {', '.join(unknown)}")
    repeated = sorted(name for name in set(query) if len(query.getall(name)) > 1)
    if repeated:
        noun = "parameter" if len(repeated) == 1 else "parameters"
        raise BadRequest(
            "bad_parameter", f"query {noun} given more than once: {', '.join(repeated)}"
        )
    return {name: query[name] for name in query}
