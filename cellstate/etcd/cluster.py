"""Embedded etcd: start real etcd servers (one member or a cluster), on loopback unless a
``Placement`` puts them elsewhere (``cellstate.etcd.placement``: a listen IP and an advertised
host, or this host's one member of a cluster spread over hosts).

A cluster gets its own data directory (removed on stop unless ``keep_data``, and by a watcher
process when this process dies without stopping it, SIGKILL included: ``cellstate.dir_reaper``);
``stop`` stops every member (SIGTERM, then SIGKILL) and never leaves an orphan process.

The ports (and hosts) of a cluster are recorded in ``DATA_DIR/etcd-cluster.json`` when it is first made and
reused by every later start on that data directory, so a stopped cluster (or one member) can be
started again and rejoin; a recorded port that is taken now is a one-line EtcdError.
``EtcdCluster.supervise()`` restarts a member that exits on its own (``cellstate.etcd.supervisor``).
"""

from __future__ import annotations

import atexit
import json
import operator
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cellstate.dir_reaper import DirReaper
from cellstate.etcd.binary import EtcdError, binary_version, find_etcd_binary
from cellstate.etcd.member import EtcdMember, MemberSpec
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.placement import WILDCARDS, Placement, url_host
from cellstate.etcd.ports import HOST, check_port_free, free_port
from cellstate.etcd.supervisor import RestartPolicy, Supervisor

CLUSTER_FILE = "etcd-cluster.json"  # in the data dir: member names, ports, scheme and token


class EtcdCluster:
    """A real etcd of ``size`` members (all here, or with a per-host ``placement`` this host's one
    of ``placement.initial_cluster``). ``metrics``: each member here also serves etcd's /metrics
    over plain HTTP on its own loopback port (``EtcdMember.metrics_url``); else /metrics is only
    on the client port. Use as a context manager or call start/stop."""

    def __init__(self, size: int = 1, options: EtcdOptions | None = None, data_dir: str | None = None,
                 keep_data: bool = False, client_port: int | None = None, binary: str | None = None,
                 placement: Placement | None = None, metrics: bool = False):
        self.placement = placement or Placement()
        if self.placement.per_host:
            size = len(self.placement.initial_cluster)
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
        layout = cluster_layout(self.data_root, size, client_port, scheme, self.placement, metrics)
        self.specs, self.recorded = layout.specs, layout.recorded
        local = [s for s in self.specs if not self.placement.per_host or s.name == self.placement.name]
        self.members = [EtcdMember(s, self.specs, self.data_root, self.options, self.binary, layout.token,
                                   layout.metrics_ports.get(s.name)) for s in local]
        self.supervisor: Supervisor | None = None
        self._atexit = False
        self._version: str | None = None

    @property
    def endpoints(self) -> list[str]:
        """``host:port`` of every member's client URL (those on other hosts too)."""
        return [f"{url_host(s.host)}:{s.client_port}" for s in self.specs]

    @property
    def urls(self) -> list[str]:
        """Every member's client URL with its scheme (``https://`` for a TLS cluster)."""
        return [s.client_url for s in self.specs]

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
            for host, port in member.spec.binds():
                role = "peer" if port == member.spec.peer_port else "client"
                try:
                    check_port_free(port, host)
                except EtcdError:
                    where = "" if host == HOST else f" on {host}"
                    raise EtcdError(f"{role} port {port}{where} of member {member.spec.name}, recorded in "
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
        from tenacity import Retrying, retry_if_result, wait_fixed  # (not at import: `omega --help` stays light)

        deadline = time.monotonic() + timeout
        poll = Retrying(retry=retry_if_result(operator.not_), wait=wait_fixed(0.05))
        for member in members or self.members:
            poll(_healthy_in_time, member, deadline, timeout)

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


@dataclass
class Layout:
    """Every member's spec, the cluster token, loopback metrics ports by member name, and whether
    they were recorded before."""

    specs: list[MemberSpec]
    token: str
    metrics_ports: dict[str, int]
    recorded: bool


def cluster_layout(data_root: Path, size: int, client_port: int | None, scheme: str,
                   placement: Placement | None = None, metrics: bool = False) -> Layout:
    """The layout of the cluster whose data is (or will be) in ``data_root``.

    The first start picks free ports (``client_port`` for m0, or for a per-host cluster's every
    member, when given) and records them with the hosts in ``CLUSTER_FILE``; later starts reuse
    them, so members find each other at the peer URLs their data was made with. EtcdError when
    the recorded cluster does not match the request.
    """
    placement = placement or Placement()
    path = data_root / CLUSTER_FILE
    if path.exists():
        layout = _recorded_layout(path, size, scheme, placement, metrics)
        if client_port and layout.specs[0].client_port != client_port and not placement.per_host:
            raise EtcdError(f"{path} records client port {layout.specs[0].client_port} for m0, not {client_port}")
        return layout
    names = [e.name for e in placement.initial_cluster] or [f"m{i}" for i in range(size)]
    if any((data_root / f"{n}.etcd").exists() for n in names) and (size > 1 or placement.per_host):
        raise EtcdError(f"{data_root} holds member data but no {CLUSTER_FILE}: its peer ports are unknown")
    bind = placement.listen if placement.listen not in WILDCARDS else HOST
    if placement.per_host:
        port = client_port or free_port(bind)
        specs = [MemberSpec(e.name, port, e.peer_port, scheme, e.host,
                            placement.listen if e.name == placement.name else None)
                 for e in placement.initial_cluster]
        token = placement.token()
    else:
        ports: list[int] = [client_port] if client_port else []
        while len(ports) < 2 * size:
            port = free_port(bind)
            if port not in ports:
                ports.append(port)
        listen = placement.listen if placement.listen != placement.advertised else None
        specs = [MemberSpec(f"m{i}", ports[i], ports[size + i], scheme, placement.advertised, listen)
                 for i in range(size)]
        token = f"omega-{os.getpid()}-{time.time_ns():x}"
    local = [s.name for s in specs if not placement.per_host or s.name == placement.name]
    metrics_ports = {name: free_port() for name in local} if metrics else {}
    record = {"scheme": scheme, "token": token, "local": local,
              "members": [{"name": s.name, "client_port": s.client_port, "peer_port": s.peer_port,
                           "host": s.host, "listen": s.listen,
                           **({"metrics_port": metrics_ports[s.name]} if s.name in metrics_ports else {})}
                          for s in specs]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return Layout(specs, token, metrics_ports, False)


def _recorded_layout(path: Path, size: int, scheme: str, placement: Placement, metrics: bool) -> Layout:
    """The layout in ``CLUSTER_FILE``, checked against the request (EtcdError when it differs)."""
    try:
        recorded = json.loads(path.read_text())
        specs = [MemberSpec(m["name"], int(m["client_port"]), int(m["peer_port"]), recorded["scheme"],
                            m.get("host", HOST), m.get("listen")) for m in recorded["members"]]
        token = recorded["token"]
        metrics_ports = {m["name"]: int(m["metrics_port"]) for m in recorded["members"] if m.get("metrics_port")}
        local = recorded.get("local", [s.name for s in specs])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EtcdError(f"{path} is unreadable ({exc}); remove it only together with the member data") from None
    if len(specs) != size:
        raise EtcdError(f"{path} records a cluster of {len(specs)} member(s), not {size}")
    if specs[0].scheme != scheme:
        raise EtcdError(f"{path} records a cluster serving {specs[0].scheme}, not {scheme}")
    if placement.per_host:
        wanted = [(e.name, e.host, e.peer_port) for e in placement.initial_cluster]
        if [(s.name, s.host, s.peer_port) for s in specs] != wanted or local != [placement.name]:
            raise EtcdError(f"{path} records members {', '.join(f'{s.name}={s.peer_url}' for s in specs)} "
                            f"with {', '.join(local)} here, not this --name/--initial-cluster")
    elif placement != Placement() and any((s.host, s.listen or s.host) != (placement.advertised, placement.listen)
                                          for s in specs):
        raise EtcdError(f"{path} records members on {specs[0].host}, not --advertise {placement.advertised} "
                        f"--listen {placement.listen}")
    if metrics and set(metrics_ports) != set(local):
        raise EtcdError(f"{path} records no loopback metrics ports: start it without the metrics listener, "
                        f"or on a new data dir")
    return Layout(specs, token, metrics_ports if metrics else {}, True)


def start_etcd(size: int = 1, **kwargs) -> EtcdCluster:
    """Start an embedded etcd (see EtcdCluster) and return it running."""
    return EtcdCluster(size=size, **kwargs).start()


def _healthy_in_time(member: EtcdMember, deadline: float, timeout: float) -> bool:
    """Whether ``member`` answers healthy; EtcdError with its log tail once it exited or
    ``deadline`` (``timeout`` seconds after the wait began) has passed."""
    if member.healthy():
        return True
    if not member.running:
        raise EtcdError(f"etcd member {member.spec.name} exited during start:\n{member.log_tail()}")
    if time.monotonic() > deadline:
        raise EtcdError(f"etcd member {member.spec.name} not healthy after {timeout:.0f}s:\n{member.log_tail()}")
    return False
