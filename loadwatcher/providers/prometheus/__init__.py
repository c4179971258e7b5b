"""Prometheus and any PromQL engine (VictoriaMetrics, Thanos, Mimir): raw samples."""
