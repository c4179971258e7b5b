"""The queries of the Prometheus provider: one per resource, and what their answers say of
the node labels they name nodes by (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from loadwatcher.model import Resource, SeriesBatch

# Past this share of a query's nodes unknown to the CPU and memory queries, its node label
# names nodes otherwise.
MOSTLY = 0.5


@dataclass(frozen=True)
class Query:
    """One resource's PromQL expression and the factor that makes it percent."""

    resource: Resource
    expr: str
    scale: float
    node_label: str | None = None  # None: the provider's
    default: bool = False

    @property
    def optional(self) -> bool:
        """Answering nothing is no error (a cluster without GPUs): a resource the scorers do
        not read; a query the user set says so in a note, a default says nothing."""
        return not self.resource.scored


def unmatched_labels(done: list[tuple[Query, list[SeriesBatch] | None]], label: str) -> list[str]:
    """Notes for queries with a node label of their own (GPU's ``Hostname``) whose nodes are
    mostly not the CPU and memory queries' nodes: the two labels name nodes differently,
    and the GPU rows would be served as nodes of their own."""
    scored: set[str] = set()
    for q, batches in done:
        if not q.optional and batches is not None:
            scored.update(*(b.nodes for b in batches))
    notes = []
    for q, batches in done:
        if q.node_label is None or batches is None or not scored:
            continue
        theirs = set().union(*(b.nodes for b in batches))
        apart = sorted(theirs - scored)
        if apart and len(apart) > MOSTLY * len(theirs):
            notes.append(
                f"{q.resource} query {q.expr!r} names {len(apart)} of its {len(theirs)} nodes "
                f"by {q.node_label!r} otherwise than the CPU query by {label!r} "
                f"({', '.join(apart[:3])} ...): they are served as nodes of their own; "
                f"set prometheus.{q.resource.value.split('_')[0]}_node_label or the query so "
                "that both name the Kubernetes node"
            )
    return notes
