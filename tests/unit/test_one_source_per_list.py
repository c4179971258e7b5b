"""Every list an extension touches has one source, in ``loadwatcher.model``: the JSON
Schema's enums, the client's operators, the OpenAPI parameters and the scoring flags are
checked against it, so adding an operator or a window is a change in one place."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import Any

from loadwatcher.client.snapshot import OPERATORS
from loadwatcher.http.openapi import spec
from loadwatcher.model import WINDOWS, Format, Operator, Resource
from loadwatcher.scoring.cli import register


def _schema() -> dict[str, Any]:
    text = resources.files("loadwatcher.wire").joinpath("schema/watcher.schema.json").read_text()
    found: dict[str, Any] = json.loads(text)
    return found


def _enums(node: Any, out: dict[str, list[str]]) -> dict[str, list[str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict) and "enum" in value:
                out[key] = value["enum"]
            _enums(value, out)
    elif isinstance(node, list):
        for item in node:
            _enums(item, out)
    return out


def test_the_wire_schema_enums_are_the_models_lists() -> None:
    enums = _enums(_schema(), {})
    assert enums["duration"] == [w.name for w in WINDOWS]
    assert set(enums["operator"]) == {str(op) for op in Operator}
    assert enums["type"] == [r.wire_type for r in Resource]


def test_the_client_and_the_openapi_document_read_the_same_lists() -> None:
    assert {str(op) for op in Operator} == OPERATORS
    windows = [
        p["schema"]["enum"]
        for path in spec(push=True)["paths"].values()
        for op in path.values()
        for p in op.get("parameters", [])
        if p.get("name") in ("window", "format")
    ]
    assert len(windows) >= 3
    for enum in windows:
        assert enum in ([x.name for x in WINDOWS], [str(f) for f in Format])


def test_the_scoring_flags_offer_the_models_windows_and_formats() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = {a.dest: a for a in sub.choices["score"]._actions}
    assert tuple(actions["window"].choices or ()) == tuple(w.name for w in WINDOWS)
    assert tuple(actions["fmt"].choices or ()) == tuple(str(f) for f in Format)
