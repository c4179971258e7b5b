"""Pods as the plugins see them, and the resource sums the upstream code computes.

A pod is given as a PodSpec subset (``containers[].resources.requests/limits``,
``initContainers``, ``overhead``, ``priority``, ``ownerKind``) or as a whole manifest: a Pod,
or a workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) whose pod
template is used. CPU is counted in millicores (``MilliValue``), memory in bytes (``Value``).

Reading is strict (see ``strict``): in a PodSpec subset every key must be one scoring reads;
in a manifest the other Kubernetes fields are allowed, the ones scoring reads are checked
(a container's ``resources``), and the pod spec must list its ``containers``.

Two ways of summing, because upstream uses both:

- Trimaran (``GetEffectiveResource``): per container ``MilliValue()``/``Value()`` summed,
  then ``max`` with each init container, then overhead added.
- Kubernetes ``PodRequests``/``PodLimits`` (Koordinator's estimator): exact quantity sums,
  ``max`` with each init container, overhead added (to limits only where a limit exists).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

from loadwatcher.quantity import Quantity, parse_quantity
from loadwatcher.scoring.strict import at, check_keys, located

__all__ = ["SUBSET_KEYS", "Container", "Pod", "Resources", "parse_pod", "parse_resource_list"]

ResourceList = Mapping[str, Quantity]
# schedutil.DefaultMilliCPURequest (100m) and DefaultMemoryRequest (200Mi): cpu in cores.
_NONZERO_DEFAULTS = (Fraction(1, 10), Fraction(200 * 1024 * 1024))
_WORKLOADS = {
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "ReplicationController",
}
# The keys of a PodSpec subset and of one of its containers: all of them are read.
SUBSET_KEYS = frozenset(
    {"name", "containers", "initContainers", "overhead", "priority", "ownerKind"}
)
_SUBSET_CONTAINER_KEYS = frozenset({"name", "resources"})
_RESOURCES_KEYS = frozenset({"limits", "requests"})
# Kubernetes ResourceRequirements: ``claims`` (dynamic resource allocation) is valid in a
# manifest and holds no cpu or memory.
_MANIFEST_RESOURCES_KEYS = _RESOURCES_KEYS | {"claims"}


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU in millicores and memory in bytes (Go ``framework.Resource`` subset)."""

    milli_cpu: int = 0
    memory: int = 0


def parse_resource_list(raw: Any, where: str) -> dict[str, Quantity]:
    """``{"cpu": "250m", ...}`` -> quantities; ValueError naming ``where`` on bad input."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(located(where, "expected a mapping of resource name to quantity"))
    out: dict[str, Quantity] = {}
    for name, value in raw.items():
        try:
            out[str(name)] = parse_quantity(value)
        except ValueError as exc:
            raise ValueError(located(at(where, str(name)), str(exc))) from None
    return out


@dataclass(frozen=True)
class Container:
    """A container's resource requests and limits."""

    requests: ResourceList = field(default_factory=dict)
    limits: ResourceList = field(default_factory=dict)


def _container(raw: Any, where: str, manifest: bool) -> Container:
    if not isinstance(raw, Mapping):
        raise ValueError(located(where, "expected a mapping"))
    if not manifest:
        check_keys(raw, _SUBSET_CONTAINER_KEYS, where)
    res = raw.get("resources")
    res = {} if res is None else res
    if not isinstance(res, Mapping):
        raise ValueError(located(at(where, "resources"), "expected a mapping"))
    check_keys(
        res, _MANIFEST_RESOURCES_KEYS if manifest else _RESOURCES_KEYS, at(where, "resources")
    )
    return Container(
        parse_resource_list(res.get("requests"), at(where, "resources.requests")),
        parse_resource_list(res.get("limits"), at(where, "resources.limits")),
    )


def _add(total: Resources, rl: ResourceList) -> Resources:
    """Go ``Resource.Add(ResourceList)`` restricted to cpu and memory."""
    cpu, mem = rl.get("cpu"), rl.get("memory")
    return Resources(
        total.milli_cpu + (cpu.milli_value() if cpu else 0),
        total.memory + (mem.value() if mem else 0),
    )


@dataclass(frozen=True)
class Pod:
    """The pod to place, or a pod already on a node."""

    name: str = ""
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: ResourceList = field(default_factory=dict)
    priority: int | None = None
    owner_kind: str | None = None
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def _effective(self, limits: bool) -> Resources:
        total = Resources()
        for c in self.containers:
            total = _add(total, c.limits if limits else c.requests)
        for c in self.init_containers:
            rl = c.limits if limits else c.requests
            cpu, mem = rl.get("cpu"), rl.get("memory")
            total = Resources(
                max(total.milli_cpu, cpu.milli_value() if cpu else 0),
                max(total.memory, mem.value() if mem else 0),
            )
        return _add(total, self.overhead) if self.overhead else total

    @cached_property
    def requested(self) -> Resources:
        """Trimaran ``GetResourceRequested``."""
        return self._effective(limits=False)

    @cached_property
    def limited(self) -> Resources:
        """Trimaran ``GetResourceLimits`` (not yet raised to the requests)."""
        return self._effective(limits=True)

    @cached_property
    def requests_and_limits(self) -> tuple[Resources, Resources]:
        """Trimaran ``CreatePodResourcesStateData``: limits raised to at least the requests."""
        req, lim = self.requested, self.limited
        return req, Resources(max(lim.milli_cpu, req.milli_cpu), max(lim.memory, req.memory))

    def kube_requests(self, nonzero: bool) -> Resources:
        """Kubernetes ``PodRequests`` of cpu (millicores) and memory (bytes), as the default
        scheduler counts them: ``k8s_sums`` of the requests, then ``MilliValue``/``Value``.
        With ``nonzero`` a container that does not *list* cpu or memory counts 100m / 200Mi
        (``NonMissingContainerRequests``; an explicit zero stays zero), as
        ``NodeInfo.NonZeroRequested`` and NodeResourcesFit's score do."""
        key = ("kube_requests", nonzero)
        if key not in self.memo:
            sums = self.k8s_sums(False, nonzero=nonzero)
            cpu = Quantity(sums.get("cpu", Fraction(0)), "")
            mem = Quantity(sums.get("memory", Fraction(0)), "")
            self.memo[key] = Resources(cpu.milli_value(), mem.value())
        result: Resources = self.memo[key]
        return result

    def k8s_sums(self, limits: bool, *, nonzero: bool = False) -> dict[str, Fraction]:
        """Kubernetes ``PodRequests``/``PodLimits``: exact sums, init max, overhead. With
        ``nonzero`` (requests only) a container that does not list cpu or memory counts
        100m / 200Mi for it."""
        out: dict[str, Fraction] = {}
        for init, containers in ((False, self.containers), (True, self.init_containers)):
            for c in containers:
                listed = c.limits if limits else c.requests
                values = {name: q.exact for name, q in listed.items()}
                if nonzero:
                    for name, default in zip(("cpu", "memory"), _NONZERO_DEFAULTS, strict=True):
                        values.setdefault(name, default)
                for name, value in values.items():
                    before = out.get(name, Fraction(0))
                    out[name] = max(before, value) if init else before + value
        for name, q in self.overhead.items():
            if not limits or name in out:
                out[name] = out.get(name, Fraction(0)) + q.exact
        return out


def _is_manifest(doc: Mapping[str, Any]) -> bool:
    """A Kubernetes object (its other fields allowed), not a PodSpec subset."""
    return any(k in doc for k in ("apiVersion", "kind", "spec"))


def _spec_of(doc: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str, str, str | None]:
    """The pod spec inside a manifest, its path, the pod's name, and its owner kind."""
    kind = doc.get("kind")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
    spec, spec_at = doc.get("spec"), at(where, "spec")
    if not isinstance(spec, Mapping):
        raise ValueError(located(spec_at, "expected the pod spec (a mapping)"))
    if kind == "CronJob":
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, Mapping) else None
        if not isinstance(spec, Mapping):
            raise ValueError(located(where, "CronJob has no spec.jobTemplate.spec"))
        kind, spec_at = "Job", at(spec_at, "jobTemplate.spec")
    if kind in _WORKLOADS:
        template = spec.get("template")
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            raise ValueError(located(where, f"{kind} has no spec.template.spec"))
        return template["spec"], at(spec_at, "template.spec"), name, kind
    if kind not in (None, "Pod"):
        raise ValueError(located(where, f"unsupported manifest kind {kind!r}"))
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    owner = next((o.get("kind") for o in owners or () if isinstance(o, Mapping)), None)
    return spec, spec_at, name, owner if isinstance(owner, str) else None


def parse_pod(raw: Any, where: str = "", extra: frozenset[str] = frozenset()) -> Pod:
    """A :class:`Pod` from a PodSpec subset or a manifest; ValueError naming the bad field.

    ``extra`` names the keys a subset may carry besides its own (a recent pod's
    ``ageSeconds``); the caller reads them.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(located(where, "expected a mapping (a PodSpec subset or a pod manifest)"))
    manifest = _is_manifest(raw)
    if manifest:
        spec, spec_at, name, owner = _spec_of(raw, where)
        if "containers" not in spec:  # required by Kubernetes: a typo must not read as none
            raise ValueError(located(at(spec_at, "containers"), "missing"))
    else:
        check_keys(raw, SUBSET_KEYS | extra, where)
        spec, spec_at, name, owner = raw, where, "", None
    name = str(raw.get("name", name))
    lists = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        items = [] if items is None else items
        if not isinstance(items, list):
            raise ValueError(located(at(spec_at, key), "expected a list"))
        lists.append(
            tuple(_container(c, at(at(spec_at, key), i), manifest) for i, c in enumerate(items))
        )
    priority = spec.get("priority", raw.get("priority"))
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ValueError(located(at(spec_at, "priority"), f"expected an integer, got {priority!r}"))
    owner_kind = raw.get("ownerKind", owner)
    if owner_kind is not None and not isinstance(owner_kind, str):
        raise ValueError(located(at(where, "ownerKind"), "expected a string"))
    return Pod(
        name,
        lists[0],
        lists[1],
        parse_resource_list(spec.get("overhead"), at(spec_at, "overhead")),
        priority,
        owner_kind,
    )
