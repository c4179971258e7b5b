"""Kubernetes manifests in tests: a subset of kustomize, and validation against schemas.

* ``kustomize`` implements the subset of kustomize that deploy/ uses (resources, components,
  namespace, configMapGenerator with create/replace/merge and kustomize's name-hash suffix
  and reference rewriting, strategic-merge patches of named resources) and refuses anything
  else (tests/packaging/test_deploy.py compares it with ``kubectl kustomize``).
* ``validate``: built-in kinds against the Kubernetes JSON schemas of PyPI
  ``kubernetes-validate`` (strict: unknown fields fail); ServiceMonitor and PrometheusRule
  against a strict subset of the Prometheus Operator CRD schemas written down here (the
  CRDs prune unknown fields silently, so a typo would otherwise vanish on apply).

Shared by the tests of deploy/ and of the Helm chart (charts/loadwatcher).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
K8S_VERSIONS = sorted({kubernetes_validate.utils.all_versions()[0], "1.30.0"})
K8S_VERSIONS.append(kubernetes_validate.utils.latest_version())


# --------------------------------------------------------------------------- kustomize subset

_SUPPORTED = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "components",
    "configMapGenerator",
    "patches",
}
# Strategic merge: lists merged by key (the Kubernetes patchMergeKey of these fields).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}
_GENERATED = "__kustomize_generated__"


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _kustomization(directory: Path) -> dict[str, Any]:
    doc = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    unsupported = set(doc) - _SUPPORTED
    assert not unsupported, f"{directory}: kustomize fields not covered by the test: {unsupported}"
    return dict(doc)


def strategic_merge(base: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            strategic_merge(current, value)
        elif isinstance(value, list) and isinstance(current, list) and key in _MERGE_KEYS:
            mk = _MERGE_KEYS[key]
            added = []
            for item in value:
                match = next((c for c in current if c.get(mk) == item.get(mk)), None)
                if match is None:
                    added.append(copy.deepcopy(item))
                else:
                    strategic_merge(match, item)
            current[:0] = added  # as kubectl does: the patch's new items come first
        else:
            base[key] = copy.deepcopy(value)


def _generate(directory: Path, k: dict[str, Any], objs: list[dict[str, Any]]) -> None:
    for gen in k.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for entry in gen.get("files", []):
            key, _, rel = entry.rpartition("=")
            data[key or Path(rel).name] = (directory / rel).read_text(encoding="utf-8")
        for literal in gen.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        namespace = gen.get("namespace", k.get("namespace"))
        existing = [
            o
            for o in objs
            if o["kind"] == "ConfigMap"
            and o["metadata"]["name"] == gen["name"]
            and o["metadata"].get("namespace") == namespace
        ]
        behavior = gen.get("behavior", "create")
        if behavior == "create":
            assert not existing, f"{gen['name']} generated twice"
            meta = {"name": gen["name"], **({"namespace": namespace} if namespace else {})}
            objs.append(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
                | {_GENERATED: True}
            )
        else:
            assert len(existing) == 1, f"{behavior}: no ConfigMap {gen['name']} to act on"
            if behavior == "replace":
                existing[0]["data"] = data
            else:
                existing[0]["data"].update(data)


def _build(directory: Path) -> list[dict[str, Any]]:
    k = _kustomization(directory)
    objs: list[dict[str, Any]] = []
    for entry in k.get("resources", []):
        path = directory / entry
        objs += _build(path) if path.is_dir() else _load(path)
    for entry in k.get("components", []):
        component = _kustomization(directory / entry)
        assert component["kind"] == "Component"
        objs += _build(directory / entry)
    _generate(directory, k, objs)
    for patch_entry in k.get("patches", []):
        assert set(patch_entry) == {"path"}, "only strategic-merge patch files are covered"
        for patch in _load(directory / patch_entry["path"]):
            targets = [
                o
                for o in objs
                if o["kind"] == patch["kind"] and o["metadata"]["name"] == patch["metadata"]["name"]
            ]
            assert len(targets) == 1, f"patch target {patch['kind']}/{patch['metadata']['name']}"
            strategic_merge(targets[0], patch)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    return objs


def config_map_hash(cm: dict[str, Any]) -> str:
    """kustomize's suffix: sha256 of Go's JSON of kind, name (kyaml reads it as '') and data."""
    doc = {"data": cm.get("data", {}), "kind": "ConfigMap", "name": ""}
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    template = obj.get("spec", {}).get("template")
    return template["spec"] if isinstance(template, dict) else None


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """Render a kustomization the way ``kubectl kustomize`` does (for the subset above)."""
    objs = _build(directory)
    renamed: dict[str, str] = {}
    for o in objs:
        if o.pop(_GENERATED, False):
            old = o["metadata"]["name"]
            o["metadata"]["name"] = renamed[old] = f"{old}-{config_map_hash(o)}"
    for o in objs:
        spec = _pod_spec(o)
        if spec is None:
            continue
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                name = volume["configMap"]["name"]
                volume["configMap"]["name"] = renamed.get(name, name)
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("configMapKeyRef")
                if ref:
                    ref["name"] = renamed.get(ref["name"], ref["name"])
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef")
                if ref:
                    ref["name"] = renamed.get(ref["name"], ref["name"])
    return objs


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


# --------------------------------------------------------------------------- schemas

_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
    r"(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {
            "type": "string",
            "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
            "maxLength": 253,
        },
        "namespace": {"type": "string"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _STRING_MAP, "matchExpressions": {"type": "array"}},
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "port": {"type": "string"},
        "targetPort": {"type": ["integer", "string"]},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "honorLabels": {"type": "boolean"},
        "honorTimestamps": {"type": "boolean"},
        "params": {"type": "object"},
        "relabelings": {"type": "array", "items": {"type": "object"}},
        "metricRelabelings": {"type": "array", "items": {"type": "object"}},
        "tlsConfig": {"type": "object"},
        "authorization": {"type": "object"},
    },
}
_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "properties": {
        "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "alert": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        "expr": {"type": ["string", "integer"], "minLength": 1},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
}
# Strict subsets of the Prometheus Operator CRDs (monitoring.coreos.com/v1, operator v0.7x).
CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "jobLabel": {"type": "string"},
                    "targetLabels": {"type": "array", "items": {"type": "string"}},
                    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                    "selector": _SELECTOR,
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "sampleLimit": {"type": "integer", "minimum": 0},
                    "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
                },
            },
        },
    },
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": _DURATION,
                                "limit": {"type": "integer"},
                                "rules": {"type": "array", "minItems": 1, "items": _RULE},
                            },
                        },
                    }
                },
            },
        },
    },
}


def validate(obj: dict[str, Any], version: str) -> None:
    schema = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
    if schema is not None:
        jsonschema.validate(obj, schema)
    else:
        kubernetes_validate.validate(obj, version, strict=True)
