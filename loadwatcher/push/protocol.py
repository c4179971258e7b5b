"""A push protocol, as it declares itself, and the protocols there are.

A protocol is a module of ``loadwatcher.push.protocols`` that sets ``PROTOCOL`` to a
``PushProtocol``: its name, its routes (path, request content type, query parameters,
accepted ``Content-Encoding``), the settings sections its mapping reads, how its mapper is
built from the settings, and which status each ``PushErrorKind`` gets. Everything else is
derived from these declarations: the HTTP receiver's routes and handlers
(``http/push.py``), the paths the API's middleware leaves to the writers' tokens
(``http/api.py``), the OpenAPI document (``http/openapi.py``) and the endpoint table of
docs/push.md (checked by a test). Adding a protocol is adding such a module (or
``register``ing a declaration made elsewhere, as a test does).

Discovery imports only the declaration modules, which stay light: ``build`` imports the
mapping when the service receives (a polling service's start does not pay for it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from loadwatcher.config import Settings
from loadwatcher.push.errors import PushErrorKind
from loadwatcher.push.samples import Decoded


@dataclass(frozen=True)
class QueryParam:
    """A query parameter a route reads (or accepts and ignores); ``choices`` for an enum."""

    name: str
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Route:
    """One ``POST`` endpoint of a protocol.

    ``encodings`` are the ``Content-Encoding`` values taken (``""``: none), the header's
    absence meaning ``default_encoding``; aiohttp decodes gzip and deflate as it reads, any
    other accepted one is the mapper's to decode. ``token_param`` names a query parameter
    that may carry the writer's token (InfluxDB 1.x's ``p``). ``error_codes`` add a
    ``code`` to error bodies, by status (``error_code_default`` for the others), for
    clients that read their server's own codes.
    """

    path: str
    summary: str
    content_type: str
    encodings: frozenset[str]
    encoding_hint: str  # what the error says is needed: "snappy", "gzip or none"
    default_encoding: str = ""
    query: tuple[QueryParam, ...] = ()
    token_param: str | None = None
    error_codes: Mapping[int, str] | None = None
    error_code_default: str = "invalid"


@dataclass(frozen=True)
class PushRequest:
    """What a mapper may read of a request besides its body."""

    route: Route
    query: Mapping[str, str]
    content_type: str


@dataclass(frozen=True)
class Pending:
    """A body read and checked: ``series`` when known before mapping (a protocol whose
    mapping keeps state must know it: a request refused after mapping would lose its
    samples on the retry), and the mapping still to do, at the receive time given."""

    series: int | None
    map: Callable[[float], Decoded]


class Mapper(Protocol):
    """A protocol's request reader, built once per service from the settings."""

    def check(self, request: PushRequest) -> None:
        """Before the body is read: PushError for a request that cannot succeed."""

    def read(self, body: bytes, request: PushRequest, max_decoded_bytes: int) -> Pending:
        """The body decoded (PushError when it cannot be), its mapping still to do."""


@dataclass(frozen=True, eq=False)
class PushProtocol:
    """One push protocol. ``sections``: the settings sections ``build`` reads (named, as
    the documentation names them). ``statuses``: the status of each error kind its mapper
    raises (400 for a kind not listed). ``unmatched``: what a count of things skipped
    unread counts (``series``, ``lines``), named ``unmatched_<unmatched>`` in the metrics."""

    name: str
    title: str  # in messages: "remote write needs Content-Encoding: snappy"
    routes: tuple[Route, ...]
    sections: tuple[str, ...]
    build: Callable[[Settings], Mapper]
    statuses: Mapping[PushErrorKind, int]
    rank: int = 100

    def status(self, kind: PushErrorKind) -> int:
        return self.statuses.get(kind, 400)


_declared: dict[str, PushProtocol] | None = None


def _discover() -> dict[str, PushProtocol]:
    global _declared
    if _declared is None:
        from loadwatcher.push import protocols

        found: dict[str, PushProtocol] = {}
        for info in pkgutil.iter_modules(protocols.__path__, protocols.__name__ + "."):
            declared = getattr(importlib.import_module(info.name), "PROTOCOL", None)
            if isinstance(declared, PushProtocol):
                found[declared.name] = declared
        _declared = found
    return _declared


def protocols() -> tuple[PushProtocol, ...]:
    """Every protocol, in listed order."""
    return tuple(sorted(_discover().values(), key=lambda p: (p.rank, p.name)))


def register(protocol: PushProtocol) -> None:
    """Add a protocol declared outside ``loadwatcher.push.protocols`` (a test's)."""
    declared = _discover()
    if protocol.name in declared:
        raise ValueError(f"push protocol {protocol.name} is already registered")
    taken = writer_paths()
    clash = [r.path for r in protocol.routes if r.path in taken]
    if clash:
        raise ValueError(f"push protocol {protocol.name}: {', '.join(clash)} already routed")
    declared[protocol.name] = protocol


def unregister(name: str) -> None:
    """Remove a protocol ``register``ed before (a test's, when it is done)."""
    _discover().pop(name, None)


def writer_paths() -> frozenset[str]:
    """Every push route: writers authenticate there with their own tokens."""
    return frozenset(r.path for p in protocols() for r in p.routes)
