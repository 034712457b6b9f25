"""Observability: metrics, structured logs."""
