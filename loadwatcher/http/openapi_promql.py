"""The routes of the Prometheus query API (handled by http/promapi.py, docs/promql.md) and
their OpenAPI description: one declaration that the router and the OpenAPI document both
read (this module imports nothing heavy: the handlers' module is imported at the first
query)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_STRING = {"type": "string"}
_SUCCESS = {
    "type": "object",
    "required": ["status", "data"],
    "properties": {
        "status": {"const": "success"},
        "data": {},
        "warnings": {"type": "array", "items": _STRING},
    },
}
_FAILURE = {
    "type": "object",
    "required": ["status", "errorType", "error"],
    "properties": {
        "status": {"const": "error"},
        "errorType": {"type": "string", "enum": ["bad_data", "execution", "timeout"]},
        "error": _STRING,
    },
}


def _param(name: str, description: str, required: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": _STRING,
        "description": description,
    }


_TIME = "Unix seconds (with a fraction) or RFC 3339"
_MATCH = {
    "name": "match[]",
    "in": "query",
    "required": False,
    "schema": {"type": "array", "items": _STRING},
    "style": "form",
    "explode": True,
    "description": "series selectors (any of them)",
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, parameters: list[dict[str, Any]], evaluates: bool) -> dict[str, Any]:
    responses = {
        "200": _json(_SUCCESS, "success: data as Prometheus answers it"),
        "400": _json(_FAILURE, "bad_data: a bad parameter, or a query outside the subset"),
        "401": _json({"type": "object"}, "a reader's bearer token is required"),
        "503": _json(_FAILURE, "timeout: the query's time cap, or the queue"),
    }
    if evaluates:
        responses["422"] = _json(_FAILURE, "execution: the samples or series cap, a match error")
    return {"summary": summary, "parameters": parameters, "responses": responses}


def _form(parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """The same parameters as a form body (POST)."""
    props: dict[str, Any] = {}
    for p in parameters:
        props[p["name"]] = p["schema"]
    return {
        "required": False,
        "content": {
            "application/x-www-form-urlencoded": {"schema": {"type": "object", "properties": props}}
        },
    }


@dataclass(frozen=True)
class Route:
    """One endpoint of the Prometheus query API: its path, the name of its handler in
    ``http/promapi.py``, what OpenAPI says of it, whether a form body may be POSTed, and
    whether it answers 422 (a cap or a match error)."""

    path: str
    handler: str
    summary: str
    parameters: tuple[dict[str, Any], ...]
    post: bool = True
    capped: bool = True


_QUERY = _param("query", "PromQL (the subset of docs/promql.md)", True)
_TIMEOUT = _param("timeout", "at most this long (a duration or seconds)")
_BOUNDS = (_param("start", _TIME), _param("end", _TIME))
_NAME = {"name": "name", "in": "path", "required": True, "schema": _STRING}

ROUTES = (
    Route(
        "/api/v1/query",
        "query",
        "PromQL instant query",
        (_QUERY, _param("time", f"evaluation time, {_TIME}; default now"), _TIMEOUT),
    ),
    Route(
        "/api/v1/query_range",
        "query_range",
        "PromQL range query",
        (
            _QUERY,
            _param("start", _TIME, True),
            _param("end", _TIME, True),
            _param("step", "a duration or seconds, > 0; at most 11,000 steps", True),
            _TIMEOUT,
        ),
    ),
    Route(
        "/api/v1/series",
        "series_list",
        "series matching match[] (required)",
        (_MATCH, *_BOUNDS, _TIMEOUT),
    ),
    Route("/api/v1/labels", "labels", "label names", (_MATCH, *_BOUNDS, _TIMEOUT), capped=False),
    Route(
        "/api/v1/label/{name}/values",
        "label_values",
        "a label's values",
        (_NAME, _MATCH, *_BOUNDS, _TIMEOUT),
        post=False,
        capped=False,
    ),
    Route(
        "/api/v1/status/buildinfo",
        "buildinfo",
        "this service's version, in Prometheus's buildinfo shape",
        (),
        post=False,
        capped=False,
    ),
)


def paths() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for route in ROUTES:
        params = list(route.parameters)
        if route.handler == "buildinfo":
            out[route.path] = {
                "get": {
                    "summary": route.summary,
                    "responses": {"200": _json(_SUCCESS, "build information")},
                }
            }
            continue
        entry = {"get": _op(route.summary, params, route.capped)}
        if route.post:
            body = [p for p in params if p["in"] == "query"]
            entry["post"] = {**_op(route.summary, [], route.capped), "requestBody": _form(body)}
        out[route.path] = entry
    return out
