"""Loopback ports: the embedded etcd servers bind 127.0.0.1 (``HOST``) only; a port free a moment
ago, and a check that a port can be bound now."""

from __future__ import annotations

import socket

from cellstate.etcd.binary import EtcdError

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def check_port_free(port: int) -> None:
    """EtcdError when ``port`` on 127.0.0.1 cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as etcd itself binds
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            raise EtcdError(f"port {port} on {HOST} is already in use ({exc.strerror})") from None
