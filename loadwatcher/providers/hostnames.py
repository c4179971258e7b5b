"""Node names from the host names that Datadog and Splunk Observability (SignalFx) report.

Their agents tag a series with the machine's host name, often a fully qualified one
(``alpha.dev.k8s.com``), where Kubernetes knows the node as ``alpha``. The Go load-watcher
keeps a host name up to its first dot; ``short=False`` keeps the whole name less the
configured suffix, for clusters whose node names hold dots (``ip-10-0-0-1.ec2.internal``).
"""

from __future__ import annotations


def node_name(host: str, suffix: str, short: bool) -> str:
    """The node that ``host`` names (pure); empty when nothing is left."""
    host = host.strip()
    if short:
        return host.split(".", 1)[0]
    if suffix and host.endswith(suffix) and len(host) > len(suffix):
        return host[: -len(suffix)]
    return host


def host_pattern(suffix: str) -> str:
    """The wildcard that selects every host of the cluster: ``*`` and the suffix."""
    return "*" + suffix
