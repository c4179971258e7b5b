"""The OpenAPI 3.1 description of the HTTP API, built from the shipped JSON Schemas."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from loadwatcher import __version__
from loadwatcher.http import openapi_promql
from loadwatcher.http.params import NODE_NAME_PATTERN
from loadwatcher.http.statuslist import DEFAULT_LIMIT, MAX_LIMIT
from loadwatcher.http.statusrows import SORTS
from loadwatcher.model import WINDOWS, Format
from loadwatcher.push.protocol import PushProtocol, QueryParam, Route, protocols


def _schema(name: str) -> dict[str, Any]:
    path = resources.files("loadwatcher.wire").joinpath("schema", name)
    text = path.read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    doc.pop("$schema", None)
    doc.pop("$id", None)
    return doc


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
}
_ERR_REF = {"$ref": "#/components/schemas/Error"}
_SNAPSHOT = {
    "oneOf": [
        {"$ref": "#/components/schemas/Watcher"},
        {"$ref": "#/components/schemas/WatcherKep"},
    ]
}
_HEALTH = {
    "type": "object",
    "required": ["status", "reasons", "provider", "journal", "snapshot"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "degraded", "unhealthy"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "serviceReasons": {"type": "array", "items": {"type": "string"}},
        "nodeReasons": {"type": "array", "items": {"type": "string"}},
        "notes": {"type": "array", "items": {"type": "string"}},
        "badNodes": {"type": "object"},
        "provider": {"type": "object"},
        "journal": {"type": "object"},
        "snapshot": {"type": "object"},
    },
}
_STATUS = {"type": "object", "properties": {"status": {"type": "string"}}}

_WINDOW = {
    "name": "window",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": [w.name for w in WINDOWS]},
    "description": "rollup window; default 15m, falling back to 10m then 5m when empty",
}
_FORMAT = {
    "name": "format",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": [str(f) for f in Format]},
}
_HOST_SCHEMA = {"type": "string", "pattern": NODE_NAME_PATTERN, "maxLength": 253}


def _snapshot_op(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": parameters,
        "responses": {
            "200": _json(_SNAPSHOT, "the latest snapshot"),
            "304": {"description": "not modified (If-None-Match matched the ETag)"},
            "400": _json(_ERR_REF, "bad parameter"),
            "401": _json(_ERR_REF, "a bearer token is required"),
            "404": _json(_ERR_REF, "no metrics for that node"),
            "503": _json(_ERR_REF, "no snapshot yet"),
        },
    }


# What a status means on any push route; a protocol's own table adds the others.
_PUSH_STATUSES = {
    400: "a body that can never succeed",
    401: "a writer's token (push.token_file) is required",
    408: "the body did not all arrive in time",
    413: "body or series over the caps",
    415: "a media type the route does not take",
    429: "over push.max_samples_per_s, or busy: see Retry-After",
}


def _push_op(protocol: PushProtocol, route: Route) -> dict[str, Any]:
    statuses = sorted({400, 401, 408, 413, 429, *protocol.statuses.values()})
    return {
        "summary": route.summary,
        "parameters": [_query(q) for q in route.query],
        # An empty body writes nothing and is taken (204), as InfluxDB takes it.
        "requestBody": {
            "required": False,
            "content": {route.content_type: {"schema": {"type": "string", "format": "binary"}}},
        },
        "responses": {
            "204": {"description": "taken"},
            **{
                str(status): _json(_ERR_REF, _PUSH_STATUSES.get(status, "refused"))
                for status in statuses
            },
        },
    }


def _query(param: QueryParam) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if param.choices is not None:
        schema["enum"] = list(param.choices)
    return {"name": param.name, "in": "query", "required": False, "schema": schema}


def push_paths(declared: tuple[PushProtocol, ...] | None = None) -> dict[str, Any]:
    """The push endpoints (docs/push.md), from the protocols' declarations."""
    return {
        route.path: {"post": _push_op(protocol, route)}
        for protocol in (protocols() if declared is None else declared)
        for route in protocol.routes
    }


def spec(push: bool = False) -> dict[str, Any]:
    """The whole document, with the push endpoints when the service receives."""
    return _spec(protocols() if push else ())


@cache
def _spec(declared: tuple[PushProtocol, ...]) -> dict[str, Any]:
    """The document for the protocols ``declared`` (built once for each tuple; the
    schemas are package data)."""
    watcher = _snapshot_op(
        "all nodes (or one with ?host=)",
        [
            _WINDOW,
            _FORMAT,
            {"name": "host", "in": "query", "required": False, "schema": _HOST_SCHEMA},
        ],
    )
    one = _snapshot_op(
        "one node",
        [
            {"name": "hostname", "in": "path", "required": True, "schema": _HOST_SCHEMA},
            _WINDOW,
            _FORMAT,
        ],
    )
    health = {
        "summary": "provider, snapshot and journal health",
        "responses": {
            "200": _json(_HEALTH, "ok, or degraded: only node-level reasons, within the share"),
            "401": _json(_ERR_REF, "a bearer token is required"),
            "503": _json(_HEALTH, "unhealthy; reasons say why"),
        },
    }
    forget = {
        "summary": "the node is gone on purpose: its samples leave the store and the "
        "journal, it is neither bad nor listed as gone (a later sample starts a new node)",
        "parameters": [
            {"name": "hostname", "in": "path", "required": True, "schema": _HOST_SCHEMA}
        ],
        "responses": {
            "200": _json(
                {
                    "type": "object",
                    "required": ["forgotten"],
                    "properties": {"forgotten": {"type": "string"}},
                },
                "forgotten; the snapshot is published again without it",
            ),
            "400": _json(_ERR_REF, "bad node name or parameter"),
            "401": _json(_ERR_REF, "a reader's token (server.auth_token_file) is required"),
            "403": _json(_ERR_REF, "without server.auth_token_file, only from loopback"),
            "404": _json(_ERR_REF, "no such node: neither served nor gone"),
            "503": _json(_ERR_REF, "the first poll has not completed"),
        },
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "loadwatcher",
            "version": __version__,
            "description": "Node utilisation rollups for Kubernetes schedulers (Trimaran).",
        },
        "paths": {
            "/watcher": {"get": watcher},
            "/watcher/health": {"get": health},
            "/watcher/{hostname}": {"get": one},
            "/watcher/{hostname}/forget": {"post": forget},
            "/healthz": {
                "get": {"summary": "liveness", "responses": {"200": _json(_STATUS, "alive")}}
            },
            "/readyz": {
                "get": {
                    "summary": "readiness: a snapshot exists",
                    "responses": {
                        "200": _json(_STATUS, "ready"),
                        "503": _json(_ERR_REF, "no snapshot yet"),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "the service's own metrics (Prometheus text format)",
                    "responses": {
                        "200": {
                            "description": "exposition",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": _json(_ERR_REF, "a bearer token is required"),
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "this document",
                    "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")},
                }
            },
            "/": {
                "get": {
                    "summary": "status page (HTML for people: a list, or one node's view)",
                    "parameters": [
                        {
                            "name": "sort",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": list(SORTS)},
                            "description": "'-' reverses; default quality (problem nodes first)",
                        },
                        {
                            "name": "q",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "node name substring (its first 253 characters)",
                        },
                        {
                            "name": "window",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": [w.name for w in WINDOWS]},
                            "description": "the window of the figures (default 15m)",
                        },
                        {
                            "name": "page",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                            "description": f"rows per page (default {DEFAULT_LIMIT})",
                        },
                        {
                            "name": "node",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 253},
                            "description": "one node's view: larger charts, every figure, tags",
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "HTML",
                            "content": {"text/html": {"schema": {"type": "string"}}},
                        },
                        "400": _json(_ERR_REF, "bad parameter"),
                        "401": _json(
                            _ERR_REF,
                            "a token is required: Bearer, or HTTP Basic with the token as "
                            "password (the challenge is Basic, so that a browser asks)",
                        ),
                        "404": {
                            "description": "?node= names no node of the snapshot (HTML)",
                            "content": {"text/html": {"schema": {"type": "string"}}},
                        },
                    },
                }
            },
        },
        "components": {
            "schemas": {
                "Watcher": _schema("watcher.schema.json"),
                "WatcherKep": _schema("kep.schema.json"),
                "Error": _ERROR,
            }
        },
    }
    document["paths"].update(openapi_promql.paths())
    document["paths"].update(push_paths(declared))
    return document
