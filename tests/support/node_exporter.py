"""A small stand-in for node-exporter that Prometheus and vmagent scrape in the push tests.

Each node is a path (``/node/<name>``) serving the three series the push receiver reads
from agents — ``node_cpu_seconds_total{cpu,mode}``, ``node_memory_MemAvailable_bytes``,
``node_memory_MemTotal_bytes`` — and one it must discard. The counters grow linearly with
the wall clock, so every rate over them is exactly the node's busy share: what a correct
receiver serves is known without any other oracle.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CPUS = 2
MEM_TOTAL = 16 * 2**30


@dataclass(frozen=True)
class Node:
    name: str
    busy: float  # share of each CPU's time not idle, 0..1
    memory_used: float  # share of MemTotal in use, 0..1

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.busy

    @property
    def memory_percent(self) -> float:
        return 100.0 * self.memory_used


def exposition(node: Node, now: float) -> str:
    t = now - 1_700_000_000.0  # counters from a fixed origin: the same at every restart
    lines = ["# TYPE node_cpu_seconds_total counter"]
    for cpu in range(CPUS):
        modes = {
            "idle": (1.0 - node.busy) * t,
            "user": 0.7 * node.busy * t,
            "system": 0.3 * node.busy * t,
        }
        for mode, seconds in modes.items():
            lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} {seconds!r}')
    available = MEM_TOTAL * (1.0 - node.memory_used)
    lines += [
        "# TYPE node_memory_MemAvailable_bytes gauge",
        f"node_memory_MemAvailable_bytes {available!r}",
        "# TYPE node_memory_MemTotal_bytes gauge",
        f"node_memory_MemTotal_bytes {float(MEM_TOTAL)!r}",
        "# TYPE node_load1 gauge",
        "node_load1 0.5",
    ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def serve(nodes: list[Node]) -> Iterator[int]:
    """Serve the nodes on a loopback port from a thread of its own (yields the port).

    Not on the test's event loop: a loop busy elsewhere would answer a scrape late, with
    counters of a later time than the scrape's timestamp, and bend every rate."""
    by_name = {n.name: n for n in nodes}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.removeprefix("/node/")
            node = by_name.get(name)
            if node is None:
                self.send_error(404)
                return
            body = exposition(node, time.time()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: Prometheus scrapes every second

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="node-exporter", daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def scrape_config(port: int, nodes: list[Node], interval_s: int = 1) -> str:
    """The ``scrape_configs`` YAML: one target per node, ``instance`` = ``<name>:9100``."""
    targets = "".join(
        f"      - targets: ['127.0.0.1:{port}']\n"
        f"        labels: {{__metrics_path__: /node/{n.name}, instance: '{n.name}:9100'}}\n"
        for n in nodes
    )
    return (
        "scrape_configs:\n"
        "  - job_name: node\n"
        f"    scrape_interval: {interval_s}s\n"
        "    static_configs:\n" + targets
    )
