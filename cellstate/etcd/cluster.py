"""Embedded etcd: start real etcd servers (one member or a cluster) on loopback.

A cluster gets its own data directory (removed on stop unless ``keep_data``, and by a watcher
process when this process dies without stopping it, SIGKILL included: ``cellstate.dir_reaper``);
``stop`` stops every member (SIGTERM, then SIGKILL) and never leaves an orphan process.

The ports of a cluster are recorded in ``DATA_DIR/etcd-cluster.json`` when it is first made and
reused by every later start on that data directory, so a stopped cluster (or one member) can be
started again and rejoin; a recorded port that is taken now is a one-line EtcdError.
``EtcdCluster.supervise()`` restarts a member that exits on its own (``cellstate.etcd.supervisor``).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from cellstate.dir_reaper import DirReaper
from cellstate.etcd.binary import EtcdError, binary_version, find_etcd_binary
from cellstate.etcd.member import EtcdMember, MemberSpec
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.ports import check_port_free, free_port
from cellstate.etcd.supervisor import RestartPolicy, Supervisor

CLUSTER_FILE = "etcd-cluster.json"  # in the data dir: member names, ports, scheme and token


class EtcdCluster:
    """A real etcd of ``size`` members on loopback. Use as a context manager or call start/stop."""

    def __init__(self, size: int = 1, options: EtcdOptions | None = None, data_dir: str | None = None,
                 keep_data: bool = False, client_port: int | None = None, binary: str | None = None):
        if size < 1:
            raise EtcdError(f"cluster size must be at least 1, got {size}")
        self.options = options or EtcdOptions()
        self.keep_data = keep_data or data_dir is not None
        self.data_root = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="omega-etcd-"))
        # A data dir of its own goes even when this process is SIGKILLed (cellstate.dir_reaper).
        self._reaper = DirReaper(self.data_root) if not self.keep_data else None
        self.data_root.mkdir(parents=True, exist_ok=True)
        self.binary = binary or find_etcd_binary()
        if self.options.tls is not None:
            self.options.tls.check()
        scheme = "http" if self.options.tls is None else "https"
        specs, token, self.recorded = cluster_layout(self.data_root, size, client_port, scheme)
        self.members = [EtcdMember(s, specs, self.data_root, self.options, self.binary, token) for s in specs]
        self.supervisor: Supervisor | None = None
        self._atexit = False
        self._version: str | None = None

    @property
    def endpoints(self) -> list[str]:
        """``host:port`` of every member's client URL."""
        return [m.endpoint for m in self.members]

    @property
    def version(self) -> str:
        """The version of the etcd binary the members run (asked once)."""
        if self._version is None:
            self._version = binary_version(self.binary)
        return self._version

    @property
    def ca_cert(self) -> str | None:
        """The CA certificate clients must trust, or None for a plain-text cluster."""
        return None if self.options.tls is None else self.options.tls.ca

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Start every member and wait until all are healthy; on failure stop them and raise."""
        if self.recorded:
            self.check_recorded_ports()
        try:
            for member in self.members:
                member.launch()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        return self

    def check_recorded_ports(self) -> None:
        """One-line EtcdError naming a port recorded for this data dir that is taken now."""
        for member in self.members:
            if member.running:
                continue
            for role, port in (("client", member.spec.client_port), ("peer", member.spec.peer_port)):
                try:
                    check_port_free(port)
                except EtcdError:
                    raise EtcdError(f"{role} port {port} of member {member.spec.name}, recorded in "
                                    f"{self.data_root / CLUSTER_FILE}, is in use now (is this cluster "
                                    f"already running?)") from None

    def supervise(self, policy: RestartPolicy | None = None, report: Callable[[str], None] | None = None,
                  interval: float = 0.5) -> Supervisor:
        """Start (once) a thread restarting members that exit on their own; ``stop`` ends it."""
        if self.supervisor is None:
            self.supervisor = Supervisor(self, policy or RestartPolicy(), report, interval).start()
        return self.supervisor

    def wait_healthy(self, timeout: float = 30.0, members: list[EtcdMember] | None = None) -> None:
        """Block until the members answer healthy; EtcdError with the log tail otherwise."""
        deadline = time.monotonic() + timeout
        for member in members or self.members:
            while not member.healthy():
                if not member.running:
                    raise EtcdError(f"etcd member {member.spec.name} exited during start:\n{member.log_tail()}")
                if time.monotonic() > deadline:
                    raise EtcdError(
                        f"etcd member {member.spec.name} not healthy after {timeout:.0f}s:\n{member.log_tail()}")
                time.sleep(0.05)

    def restart_member(self, index: int, timeout: float = 30.0) -> None:
        """Start a stopped or killed member again on its ports and data dir."""
        member = self.members[index]
        member.launch()
        self.wait_healthy(timeout, [member])

    def stop(self) -> None:
        """Stop the supervisor and every member; remove the data directory unless kept."""
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None
        for member in self.members:
            member.stop()
        if not self.keep_data:
            shutil.rmtree(self.data_root, ignore_errors=True)
        if self._reaper is not None:
            self._reaper.release()
            self._reaper = None
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def cluster_layout(data_root: Path, size: int, client_port: int | None,
                   scheme: str) -> tuple[list[MemberSpec], str, bool]:
    """(member specs, cluster token, whether they were recorded before) for ``data_root``.

    The first start picks free ports (``client_port`` for m0 when given) and records them in
    ``CLUSTER_FILE``; later starts reuse them, so members find each other at the peer URLs their
    data was made with. EtcdError when the recorded cluster does not match the request.
    """
    path = data_root / CLUSTER_FILE
    if path.exists():
        try:
            recorded = json.loads(path.read_text())
            specs = [MemberSpec(m["name"], int(m["client_port"]), int(m["peer_port"]), recorded["scheme"])
                     for m in recorded["members"]]
            token = recorded["token"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EtcdError(f"{path} is unreadable ({exc}); remove it only together with the member data") from None
        if len(specs) != size:
            raise EtcdError(f"{path} records a cluster of {len(specs)} member(s), not {size}")
        if specs[0].scheme != scheme:
            raise EtcdError(f"{path} records a cluster serving {specs[0].scheme}, not {scheme}")
        if client_port and specs[0].client_port != client_port:
            raise EtcdError(f"{path} records client port {specs[0].client_port} for m0, not {client_port}")
        return specs, token, True
    if size > 1 and any((data_root / f"m{i}.etcd").exists() for i in range(size)):
        raise EtcdError(f"{data_root} holds member data but no {CLUSTER_FILE}: its peer ports are unknown")
    ports: list[int] = [client_port] if client_port else []
    while len(ports) < 2 * size:
        port = free_port()
        if port not in ports:
            ports.append(port)
    specs = [MemberSpec(f"m{i}", ports[i], ports[size + i], scheme) for i in range(size)]
    token = f"omega-{os.getpid()}-{time.time_ns():x}"
    record = {"scheme": scheme, "token": token,
              "members": [{"name": s.name, "client_port": s.client_port, "peer_port": s.peer_port} for s in specs]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return specs, token, False


def start_etcd(size: int = 1, **kwargs) -> EtcdCluster:
    """Start an embedded etcd (see EtcdCluster) and return it running."""
    return EtcdCluster(size=size, **kwargs).start()
