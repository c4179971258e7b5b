"""Regenerate what charts/loadwatcher derives from the rest of the repository.

* files/: copies of dashboards/loadwatcher.json and the PrometheusRules of
  deploy/components (Helm reads only files inside the chart);
* values.schema.json's ``config`` block: the sections and keys of the service's
  configuration (``loadwatcher config table``), so that a misspelt key fails at install;
* README.md's values table, from the ``# --`` comments of values.yaml (every key needs one).

  scripts/sync-chart           rewrite them (runs this module with the venv's Python)
  scripts/sync-chart --check   exit 1, naming the files, when any is not current (the tests)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from loadwatcher.providers import registry  # noqa: E402

CHART = ROOT / "charts" / "loadwatcher"
COPIES = {
    "files/loadwatcher.json": "dashboards/loadwatcher.json",
    "files/prometheusrule-alerts.yaml": "deploy/components/monitoring/prometheusrule-alerts.yaml",
    "files/prometheusrule-recording-rules.yaml": (
        "deploy/components/recording-rules/prometheusrule.yaml"
    ),
}
TABLE = re.compile(r"(<!-- values-table:start -->\n).*?(<!-- values-table:end -->)", re.S)
_KEY = re.compile(r"^( *)([A-Za-z0-9_]+):")
_DOC = re.compile(r"^( *)# -- (.*)$")
_MORE = re.compile(r"^( *)# (.*)$")


class SyncError(Exception):
    """values.yaml cannot be documented as it is (a key without a description)."""


def config_schema() -> dict[str, Any]:
    """The configuration's sections and keys; secrets are left out (they go in Secrets)."""
    catalogue = registry.catalogue()
    sections: dict[str, Any] = {}
    for section in catalogue.sections:
        keys = {
            spec.key.split(".", 1)[1]: {"description": spec.description}
            for spec in section.specs
            if not spec.secret
        }
        sections[section.name] = {
            "type": "object",
            "additionalProperties": False,
            "properties": keys,
        }
    # The chart acts on these: the provider's name (RBAC, push), in its canonical spelling
    # only, and the port (the container's, the Service's, the scheduler's watcherAddress).
    sections["provider"]["properties"]["name"]["enum"] = sorted(catalogue.providers)
    sections["server"]["properties"]["port"].update(type="integer", minimum=1, maximum=65535)
    return {
        "description": "the service's YAML configuration (loadwatcher config table); "
        "secrets come from providerToken, auth and push, never from here",
        "type": "object",
        "additionalProperties": False,
        "properties": sections,
    }


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) of every key of values.yaml preceded by a ``# --`` comment."""
    rows: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []
    doc: list[str] | None = None
    for line in text.splitlines():
        if (match := _DOC.match(line)) is not None:
            doc = [match.group(2)]
        elif doc is not None and (match := _MORE.match(line)) is not None:
            doc.append(match.group(2))
        elif (match := _KEY.match(line)) is not None:
            indent = len(match.group(1))
            path = [(i, k) for i, k in path if i < indent] + [(indent, match.group(2))]
            if doc is not None:
                rows.append((".".join(k for _, k in path), " ".join(doc)))
            doc = None
        elif not line.strip().startswith("#"):
            doc = None
    return rows


def _leaves(value: Any, prefix: str) -> list[str]:
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def _lookup(values: dict[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        node = node[part]
    return node


def values_table(text: str) -> str:
    values = yaml.safe_load(text)
    rows = documented_keys(text)
    keys = [key for key, _ in rows]
    for leaf in _leaves(values, ""):
        if not any(leaf == k or leaf.startswith(k + ".") for k in keys):
            raise SyncError(f"values.yaml: {leaf} has no '# -- ' description (nor a parent)")
    lines = ["| key | default | description |", "|---|---|---|"]
    for key, description in rows:
        grouped = any(other.startswith(key + ".") for other in keys)
        default = _lookup(values, key)
        shown = "" if grouped else f"`{json.dumps(default, separators=(',', ':'))}`"
        cell = description.replace("|", "\\|")
        lines.append(f"| `{key}` | {shown.replace('|', chr(92) + '|')} | {cell} |")
    return "\n".join(lines) + "\n"


def expected() -> dict[Path, str]:
    """Every generated file's path and the text it must have."""
    out = {CHART / dst: (ROOT / src).read_text(encoding="utf-8") for dst, src in COPIES.items()}
    schema_path = CHART / "values.schema.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    schema["properties"]["config"] = config_schema()
    out[schema_path] = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    readme = CHART / "README.md"
    table = values_table((CHART / "values.yaml").read_text(encoding="utf-8"))
    text = readme.read_text(encoding="utf-8")
    if not TABLE.search(text):
        raise SyncError(f"{readme}: no <!-- values-table:start/end --> markers")
    out[readme] = TABLE.sub(lambda m: m.group(1) + table + m.group(2), text)
    return out


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: scripts/sync-chart [--check]", file=sys.stderr)
        return 2
    try:
        files = expected()
    except SyncError as exc:
        print(f"sync-chart: {exc}", file=sys.stderr)
        return 1
    stale = [p for p, text in files.items() if p.read_text(encoding="utf-8") != text]
    if check:
        for path in stale:
            print(f"sync-chart: {path.relative_to(ROOT)} is not current: run scripts/sync-chart")
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path], encoding="utf-8")
        print(f"sync-chart: wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
