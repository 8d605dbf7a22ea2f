"""Prometheus metrics endpoints of omega's processes (docs/MONITOR.md)."""
