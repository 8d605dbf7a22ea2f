"""Where a metrics endpoint listens (``HOST:PORT``, loopback by default) and its TLS files.
Light on purpose: no prometheus_client here (``tools.metrics.endpoint`` serves)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


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

    def context(self):
        """An ``ssl.SSLContext`` for a server requiring a client certificate from ``client_ca``
        (TLS 1.2+); ValueError naming the file that cannot be loaded."""
        import ssl

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
