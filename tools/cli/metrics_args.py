"""The flags of a process that serves Prometheus metrics (``--metrics-addr HOST:PORT``,
``--metrics-port``, the TLS files) and their checks. Light on purpose: building the command
line imports this, never prometheus_client or ssl (``tools.metrics.endpoint`` serves)."""

from __future__ import annotations

from tools.metrics.listen import LOOPBACK, MetricsTls, parse_metrics_addr


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
