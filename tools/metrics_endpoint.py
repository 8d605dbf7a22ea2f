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

import ipaddress
import logging
import math
import socket
import ssl
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import (
    CollectorRegistry, GCCollector, Gauge, PlatformCollector, ProcessCollector, make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
HANDSHAKE_TIMEOUT_S = 5.0


def process_registry() -> CollectorRegistry:
    """A registry with the process, platform (``python_info``) and GC collectors."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def parse_metrics_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: a free one) as (host, port); ValueError
    naming what is wrong otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--metrics-addr must be HOST:PORT (port 0..65535, 0: a free one), got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"--metrics-addr: {host!r} is not an IPv6 address") from None
    return host, int(port)


def format_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class MetricsTls:
    """Server certificate and key of the endpoint, and the CA whose client certificates it accepts."""

    cert: str
    key: str
    client_ca: str

    def context(self) -> ssl.SSLContext:
        """A server context requiring a client certificate from ``client_ca`` (TLS 1.2+);
        ValueError naming the file that cannot be loaded."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        for what, load in (("client CA", lambda: context.load_verify_locations(cafile=self.client_ca)),
                           ("certificate/key", lambda: context.load_cert_chain(self.cert, self.key))):
            try:
                load()
            except (OSError, ssl.SSLError) as exc:
                files = self.client_ca if what == "client CA" else f"{self.cert}, {self.key}"
                raise ValueError(f"metrics TLS: cannot load the {what} ({files}): {exc}") from None
        return context


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
        when ``tls`` is given; returns the port (``url`` names the endpoint)."""
        context = tls.context() if tls is not None else None
        server = make_server(host, port, make_wsgi_app(self.registry), _Server6 if ":" in host else _Server,
                             handler_class=_QuietHandler)
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


def add_metrics_args(parser) -> None:
    """``--metrics-addr``, ``--metrics-port`` and the TLS flags of a process that serves metrics."""
    parser.add_argument("--metrics-addr", metavar="HOST:PORT", default=None,
                        help="serve Prometheus metrics on HOST:PORT (port 0: a free one, printed; default off)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help=f"the same as --metrics-addr {LOOPBACK}:PORT")
    parser.add_argument("--metrics-cert", metavar="PEM",
                        help="serve metrics over TLS with this certificate (with --metrics-key and "
                             "--metrics-client-ca: scrapers must present a certificate from that CA)")
    parser.add_argument("--metrics-key", metavar="PEM", help="the private key of --metrics-cert")
    parser.add_argument("--metrics-client-ca", metavar="PEM",
                        help="CA whose client certificates may scrape (a secure cell's pki/ca.pem)")


def metrics_from_args(args) -> tuple[str, int, MetricsTls | None] | None:
    """(host, port, tls) of the metrics flags, None when metrics are off; ValueError naming the
    flag that is wrong."""
    tls_flags = (args.metrics_cert, args.metrics_key, args.metrics_client_ca)
    if args.metrics_addr is not None and args.metrics_port is not None:
        raise ValueError("--metrics-addr and --metrics-port exclude each other")
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port < 65536:
            raise ValueError(f"--metrics-port must be a port number (0: a free one), got {args.metrics_port}")
        address = (LOOPBACK, args.metrics_port)
    elif args.metrics_addr is not None:
        address = parse_metrics_addr(args.metrics_addr)
    else:
        if any(tls_flags):
            raise ValueError("--metrics-cert/--metrics-key/--metrics-client-ca need --metrics-addr or --metrics-port")
        return None
    if any(tls_flags) and not all(tls_flags):
        raise ValueError("metrics over TLS needs all of --metrics-cert, --metrics-key and --metrics-client-ca")
    tls = MetricsTls(*tls_flags) if all(tls_flags) else None
    if tls is not None:
        tls.context()  # a file that does not load is a bad flag, found before anything starts
    return address[0], address[1], tls
