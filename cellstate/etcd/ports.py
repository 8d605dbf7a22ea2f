"""Ports: the embedded etcd servers bind 127.0.0.1 (``HOST``) unless placed elsewhere
(``cellstate.etcd.placement``); a port free a moment ago, and a check that a port can be bound now."""

from __future__ import annotations

import errno
import socket

from cellstate.etcd.binary import EtcdError

HOST = "127.0.0.1"


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` (an IP, default 127.0.0.1) that was free a moment ago."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port_free(port: int, host: str = HOST) -> None:
    """EtcdError when ``port`` on ``host`` (an IP, default 127.0.0.1) cannot be bound."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as etcd itself binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            what = "already in use" if exc.errno == errno.EADDRINUSE else "not bindable"
            raise EtcdError(f"port {port} on {host} is {what} ({exc.strerror})") from None
