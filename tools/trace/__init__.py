"""Workload traces: the ``omega-trace`` file format and importers from published traces."""
