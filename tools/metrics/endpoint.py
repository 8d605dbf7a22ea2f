"""A Prometheus /metrics endpoint over one process's own registry, plain HTTP or TLS with
client certificates.

Each endpoint owns a registry (several can live in one process, as in the tests) that holds
prometheus_client's default collectors, as its global registry would: ``process_*`` (CPU,
memory, open files, start time) and ``python_*`` (version, garbage collector). ``serve``
binds loopback unless told otherwise (``--metrics-addr HOST:PORT``). With ``MetricsTls`` it
serves HTTPS and requires a client certificate signed by ``client_ca`` (a secure cell's CA):
a scrape without one is refused during the handshake, which runs in the request's own thread
(a client that never completes it cannot stall the endpoint).
"""

from __future__ import annotations

import logging
import math
import socket
import ssl
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import (
    CollectorRegistry, GCCollector, Gauge, PlatformCollector, ProcessCollector, make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

from tools.metrics.listen import LOOPBACK, MetricsTls, format_addr, parse_metrics_addr  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 5.0


def process_registry() -> CollectorRegistry:
    """A registry with the process, platform (``python_info``) and GC collectors."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class MetricsError(RuntimeError):
    """The endpoint cannot be served (address in use or not local, TLS files that do not load)."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        return


class _Server(ThreadingWSGIServer):
    """Prometheus' threading WSGI server; with ``ssl_context``, each request's thread does the
    TLS handshake (with a timeout) before the request is read."""

    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request, client_address):
        if self.ssl_context is None:
            return super().finish_request(request, client_address)
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("metrics scrape refused client=%s error=%s", client_address, exc)
            return None
        try:
            tls.settimeout(None)
            return super().finish_request(tls, client_address)
        finally:
            tls.close()


class _Server6(_Server):
    address_family = socket.AF_INET6


def replica_gauges(registry: CollectorRegistry, labels: dict[str, str], replica, head) -> None:
    """``omega_replica_revision`` (the revision ``replica`` has applied) and
    ``omega_replica_lag_revisions`` (``head()``, the store's revision read when scraped, minus
    it; NaN when the store does not answer), labelled ``labels``. The store's revision counts
    every write of the etcd, other cells' too: in a shared etcd the lag has a floor of their
    writes since the cell's last change."""
    names = tuple(labels)
    Gauge("omega_replica_revision", "Store revision the process's replica of the cell has applied.", names,
          registry=registry).labels(**labels).set_function(lambda: replica.revision)

    def lag() -> float:
        try:
            return max(0, head() - replica.revision)
        except Exception:  # noqa: BLE001 - any store failure: unknown, not an error of the scrape
            return math.nan

    Gauge("omega_replica_lag_revisions", "Store revision (read at scrape) minus the replica's: how far "
          "the watch is behind, in revisions (other cells' writes count too).", names,
          registry=registry).labels(**labels).set_function(lag)


class MetricsEndpoint:
    """Owns ``registry``; ``serve`` exposes it over HTTP(S), ``close`` stops serving."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or process_registry()
        self._server: _Server | None = None
        self.url = ""

    def serve(self, port: int, host: str = LOOPBACK, tls: MetricsTls | None = None) -> int:
        """Serve /metrics on ``host:port`` (0: a free port), over TLS with client certificates
        when ``tls`` is given; returns the port (``url`` names the endpoint). MetricsError when
        it cannot."""
        try:
            context = tls.context() if tls is not None else None
            server = make_server(host, port, make_wsgi_app(self.registry), _Server6 if ":" in host else _Server,
                                 handler_class=_QuietHandler)
        except (OSError, ValueError) as exc:
            raise MetricsError(f"cannot serve metrics on {format_addr(host, port)}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
        server.ssl_context = context
        threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
        self._server = server
        bound = server.server_port
        self.url = f"{'https' if tls else 'http'}://{format_addr(host, bound)}/metrics"
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

