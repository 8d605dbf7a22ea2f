"""A Prometheus /metrics endpoint on loopback over one process's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server


class MetricsEndpoint:
    """Owns ``registry``; ``serve`` exposes it over HTTP, ``close`` stops serving."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._server = None

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on ``host:port`` (0: a free port); returns the port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return server.server_port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
