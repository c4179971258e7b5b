"""Kubernetes: API access (kubeconfig or in-cluster) and the metrics-server provider."""
