"""Alibaba cluster-trace-gpu-v2023 ("openb"): node and pod lists (``lists``) and the importer
into an omega trace (``importer``)."""
