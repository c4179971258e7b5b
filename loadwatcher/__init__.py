"""loadwatcher: node utilisation rollups for Kubernetes schedulers (Trimaran wire format)."""

__version__ = "0.1.0"
