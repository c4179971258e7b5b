"""Pushed recording-rule series of the other resources (GPU, network, ...): read by the name
``prometheus.<resource>_query`` gives when that is a metric name, as CPU's are."""

from __future__ import annotations

from loadwatcher.model import Resource
from loadwatcher.push.protocols.remote_write import extra_metrics
from loadwatcher.push.remote_write_mapping import RemoteWriteMapping, RemoteWriteReceiver
from tests.support.service import settings
from tests.unit.push.test_push_mapping import CPU, MEM, as_dict, request

GPU = "instance:node_gpu_utilisation:ratio"
NET = "instance:node_network_utilisation:ratio"
T = 1_700_000_000_000


def test_gpu_and_network_rules_become_percent_beside_cpu_and_raw_series() -> None:
    mapping = RemoteWriteMapping(
        raw_node_exporter=True, extra=((Resource.NETWORK, NET), (Resource.GPU, GPU))
    )
    decoded = RemoteWriteReceiver(mapping).map(
        request(
            (GPU, {"instance": "n1:9100"}, [(T, 0.5), (T + 15_000, 0.75)]),
            (CPU, {"instance": "n1:9100"}, [(T, 0.25)]),
            (NET, {"instance": "n2:9100"}, [(T, 0.125)]),
            (MEM, {"instance": "n2:9100"}, [(T, 0.5)]),
            ("node_memory_MemTotal_bytes", {"instance": "n1:9100"}, [(T, 8e9)]),
            ("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "n1", "gpu": "0"}, [(T, 90.0)]),
        ),
        now=T / 1000 + 30,
    )
    assert as_dict(decoded.batch) == {
        ("n1", Resource.CPU): [(T / 1000, 25.0)],
        ("n1", Resource.GPU): [(T / 1000, 50.0), (T / 1000 + 15, 75.0)],
        ("n2", Resource.MEMORY): [(T / 1000, 50.0)],
        ("n2", Resource.NETWORK): [(T / 1000, 12.5)],
    }
    assert decoded.counts["unmatched"] == 1  # the raw DCGM series: no rule of ours


def test_only_metric_names_are_read_from_pushes() -> None:
    prom = settings(
        {
            "LOADWATCHER_PROMETHEUS_NETWORK_QUERY": NET,
            "LOADWATCHER_PROMETHEUS_DISK_QUERY": "rate(node_disk_io_time_seconds_total[1m])",
            "LOADWATCHER_PROMETHEUS_ENERGY_QUERY": CPU,  # the CPU rule's: read once, as CPU
        }
    ).sections["prometheus"]
    taken = RemoteWriteMapping().metrics()
    # The GPU defaults are expressions: GPU is not read from pushes unless set to a rule.
    assert extra_metrics(prom, taken) == ((Resource.NETWORK, NET),)


def test_line_protocol_reads_the_other_fields_and_gpus_per_device() -> None:
    """Telegraf's nvidia_smi sends a point per GPU: a host's GPU is their mean at each time
    and GPUMax the busiest; a network field is read as it is; nothing without a setting."""
    from loadwatcher.push.line_protocol_mapping import LineProtocolMapper
    from loadwatcher.push.protocols.line_protocol import PROTOCOL

    env = {
        "LOADWATCHER_INFLUXDB_GPU_FIELD": "nvidia_smi.utilization_gpu",
        "LOADWATCHER_INFLUXDB_NETWORK_FIELD": "net_util.percent",
    }
    mapper = PROTOCOL.build(settings(env))
    assert isinstance(mapper, LineProtocolMapper)
    s = 1_700_000_000
    body = "\n".join(
        [
            f"nvidia_smi,host=h1,index=0 utilization_gpu=20 {s}",
            f"nvidia_smi,host=h1,index=1 utilization_gpu=60 {s}",
            f"nvidia_smi,host=h1,index=0 utilization_gpu=30 {s + 15}",
            f"nvidia_smi,host=h2,index=0 utilization_gpu=90 {s}",
            f"net_util,host=h2 percent=12.5 {s}",
            f"disk_util,host=h2 percent=50 {s}",  # influxdb.disk_field is not set
            f"cpu,host=h1,cpu=cpu-total usage_idle=75 {s}",
        ]
    ).encode()
    from loadwatcher.push.line_protocol_mapping import map_line_protocol

    decoded = map_line_protocol(body, mapper.mapping, unit_ns=1_000_000_000, now=s + 30)
    assert as_dict(decoded.batch) == {
        ("h1", Resource.CPU): [(s, 25.0)],
        ("h1", Resource.GPU): [(s, 40.0), (s + 15, 30.0)],
        ("h1", Resource.GPU_MAX): [(s, 60.0), (s + 15, 30.0)],
        ("h2", Resource.GPU): [(s, 90.0)],
        ("h2", Resource.GPU_MAX): [(s, 90.0)],
        ("h2", Resource.NETWORK): [(s, 12.5)],
    }
    assert decoded.counts["unmatched"] == 1  # the disk line
    plain = PROTOCOL.build(settings({}))
    assert isinstance(plain, LineProtocolMapper) and plain.mapping.others == ()
