"""The OpenAPI description of the Prometheus query API (http/promapi.py, docs/promql.md)."""

from __future__ import annotations

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


def paths() -> dict[str, Any]:
    query = [
        _param("query", "PromQL (the subset of docs/promql.md)", True),
        _param("time", f"evaluation time, {_TIME}; default now"),
        _param("timeout", "at most this long (a duration or seconds)"),
    ]
    ranged = [
        _param("query", "PromQL (the subset of docs/promql.md)", True),
        _param("start", _TIME, True),
        _param("end", _TIME, True),
        _param("step", "a duration or seconds, > 0; at most 11,000 steps", True),
        _param("timeout", "at most this long (a duration or seconds)"),
    ]
    bounds = [_param("start", _TIME), _param("end", _TIME)]
    out: dict[str, Any] = {}
    for path, summary, params, evaluates in (
        ("/api/v1/query", "PromQL instant query", query, True),
        ("/api/v1/query_range", "PromQL range query", ranged, True),
        ("/api/v1/series", "series matching match[] (required)", [_MATCH, *bounds], False),
        ("/api/v1/labels", "label names", [_MATCH, *bounds], False),
    ):
        get = _op(summary, params, evaluates)
        post = {**_op(summary, [], evaluates), "requestBody": _form(params)}
        out[path] = {"get": get, "post": post}
    name = {"name": "name", "in": "path", "required": True, "schema": _STRING}
    out["/api/v1/label/{name}/values"] = {
        "get": _op("a label's values", [name, _MATCH, *bounds], False)
    }
    out["/api/v1/status/buildinfo"] = {
        "get": {
            "summary": "this service's version, in Prometheus's buildinfo shape",
            "responses": {"200": _json(_SUCCESS, "build information")},
        }
    }
    return out
