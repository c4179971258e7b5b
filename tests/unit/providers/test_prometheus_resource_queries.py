"""The Prometheus provider's queries of the other resources, as the settings make them."""

from __future__ import annotations

from loadwatcher import app
from loadwatcher.model import Resource
from loadwatcher.providers.prometheus import GPU_QUERY
from loadwatcher.providers.prometheus.provider import PrometheusProvider, Query
from tests.support.service import settings


def queries(**env: str) -> dict[Resource, Query]:
    engine = app.build_engine(
        settings(
            {"METRICS_PROVIDER_NAME": "Prometheus", "METRICS_PROVIDER_ADDRESS": "http://p:9090"}
            | env
        )
    )
    assert isinstance(engine.provider, PrometheusProvider)
    return {q.resource: q for q in engine.provider.options.queries}


def test_by_default_gpu_is_read_from_the_dcgm_exporter_and_nothing_else_is_added() -> None:
    got = queries()
    assert set(got) == {Resource.CPU, Resource.MEMORY, Resource.GPU, Resource.GPU_MAX}
    gpu = got[Resource.GPU]
    assert (gpu.expr, gpu.node_label, gpu.optional, gpu.default) == (
        GPU_QUERY,
        "Hostname",
        True,
        True,
    )
    assert not got[Resource.CPU].optional and got[Resource.CPU].node_label is None


def test_the_gpu_defaults_keep_their_factor_whatever_prometheus_scale_says() -> None:
    """Percent queries (prometheus.scale 1) do not make the DCGM default read 1 % for 100 %;
    a GPU query the user sets takes prometheus.scale as CPU's does."""
    got = queries(LOADWATCHER_PROMETHEUS_SCALE="1")
    assert got[Resource.CPU].scale == 1.0 and got[Resource.GPU].scale == 100.0
    mine = queries(
        LOADWATCHER_PROMETHEUS_SCALE="1",
        LOADWATCHER_PROMETHEUS_GPU_QUERY="avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)",
        LOADWATCHER_PROMETHEUS_GPU_NODE_LABEL="node",
        LOADWATCHER_PROMETHEUS_NETWORK_QUERY="instance:node_network_utilisation:ratio",
    )
    assert mine[Resource.GPU].scale == 1.0 and not mine[Resource.GPU].default
    assert mine[Resource.GPU].node_label == "node"
    assert mine[Resource.NETWORK].node_label is None and mine[Resource.NETWORK].optional


def test_an_empty_setting_turns_a_resource_off() -> None:
    got = queries(LOADWATCHER_PROMETHEUS_GPU_QUERY="", LOADWATCHER_PROMETHEUS_GPU_MAX_QUERY=" ")
    assert set(got) == {Resource.CPU, Resource.MEMORY}
