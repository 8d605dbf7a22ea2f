"""``CutProxy``: a loopback TCP proxy in front of one etcd member that the test can pause
(connections stay open, no byte moves: the clients fall behind) and cut (every connection is
closed: watch streams break, RPCs in flight fail with their outcome unknown to the client).
"""

from __future__ import annotations

import socket
import threading

from cellstate.etcd.ports import HOST


class CutProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` (``host:port``) until ``close``."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self._listener = socket.create_server((HOST, 0))
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closed = False
        self.cuts = 0
        threading.Thread(target=self._accept, name="cut-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def pause(self) -> None:
        """Hold every byte in both directions (connections stay open)."""
        self._flowing.clear()

    def cut(self) -> None:
        """Close every open connection, then let bytes flow again (new connections work)."""
        with self._lock:
            conns, self._conns = self._conns, []
            self.cuts += 1
        for conn in conns:
            _close(conn)
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.target, timeout=2.0)
                upstream.settimeout(None)
            except OSError:
                if self._closed:
                    return
                continue
            with self._lock:
                self._conns += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while not self._flowing.wait(0.05):
                    if self._closed or src.fileno() < 0:
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
