"""Where the members of an embedded etcd listen and are reached (``Placement``).

By default every member binds and advertises 127.0.0.1. ``listen`` is the IP the members bind
(``0.0.0.0`` for all; a non-loopback one also gets a loopback client listener, so the host's
own commands can use 127.0.0.1), ``advertise`` the host or IP other hosts and clients reach
them at (default: ``listen``). With ``name`` and ``initial_cluster`` only this host's member runs
here and the others, on their own hosts, are reached at their peer URLs: every member of such a
cluster serves clients on the same port (``--port``), so the client endpoints of all of them are
known on every host, and they agree on a cluster token derived from the member list.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from cellstate.etcd.binary import EtcdError
from cellstate.etcd.ports import HOST

WILDCARDS = ("0.0.0.0", "::")


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it appears in a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class PeerEntry:
    """One member of ``--initial-cluster``: its name, host and peer port."""

    name: str
    host: str
    peer_port: int


@dataclass(frozen=True)
class Placement:
    """Where members listen (``listen``, an IP) and are reached (``advertise``); with ``name`` and
    ``initial_cluster`` the one member of this host in a cluster spread over hosts."""

    listen: str = HOST
    advertise: str | None = None
    name: str | None = None
    initial_cluster: tuple[PeerEntry, ...] = ()

    @property
    def per_host(self) -> bool:
        return bool(self.initial_cluster)

    @property
    def advertised(self) -> str:
        return self.advertise or self.listen

    def hosts(self) -> list[str]:
        """Every host a server certificate must name: the advertised hosts of all members and the
        listen IP (loopback is always added by the PKI)."""
        hosts = [e.host for e in self.initial_cluster] + [self.advertised]
        if self.listen not in WILDCARDS:
            hosts.append(self.listen)
        return list(dict.fromkeys(hosts))

    def token(self) -> str:
        """The cluster token of a per-host cluster: the same on every host given the same list."""
        text = ",".join(f"{e.name}={e.host}:{e.peer_port}" for e in self.initial_cluster)
        return "omega-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def local_entry(self) -> PeerEntry:
        return next(e for e in self.initial_cluster if e.name == self.name)


def parse_initial_cluster(text: str) -> tuple[PeerEntry, ...]:
    """``NAME=[scheme://]HOST:PEERPORT,...`` as PeerEntry tuples; EtcdError naming a bad entry."""
    from cellstate.etcd.store import parse_endpoint

    entries: list[PeerEntry] = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise EtcdError(f"--initial-cluster entry {item!r} is not NAME=HOST:PEERPORT")
        try:
            host, port = parse_endpoint(url)
        except ValueError as exc:
            raise EtcdError(f"--initial-cluster entry {item!r}: {exc}") from None
        host = host.strip("[]")
        if any(e.name == name for e in entries):
            raise EtcdError(f"--initial-cluster names member {name!r} twice")
        entries.append(PeerEntry(name, host, port))
    if not entries:
        raise EtcdError("--initial-cluster: no member given")
    return tuple(entries)


def make_placement(listen: str | None = None, advertise: str | None = None, name: str | None = None,
                   initial_cluster: str | None = None) -> Placement:
    """The Placement of the ``--listen``/``--advertise``/``--name``/``--initial-cluster`` flags;
    EtcdError in one line for a combination that cannot work."""
    if listen is not None and not is_ip(listen):
        raise EtcdError(f"--listen must be an IP address (etcd binds IPs only), got {listen!r}")
    if (name is None) != (initial_cluster is None):
        raise EtcdError("--name and --initial-cluster go together: this host's member and every member")
    entries: tuple[PeerEntry, ...] = ()
    if initial_cluster is not None:
        entries = parse_initial_cluster(initial_cluster)
        local = next((e for e in entries if e.name == name), None)
        if local is None:
            raise EtcdError(f"--name {name!r} is not in --initial-cluster ({', '.join(e.name for e in entries)})")
        if advertise is not None and advertise != local.host:
            raise EtcdError(f"--advertise {advertise} differs from {local.host}, member {name}'s host in "
                            "--initial-cluster")
        advertise = local.host
    if listen is None:
        if advertise is None or advertise in (HOST, "localhost"):
            listen = HOST
        elif is_ip(advertise):
            listen = advertise
        else:
            raise EtcdError(f"--advertise {advertise} is a host name: give the IP to bind with --listen")
    if listen in WILDCARDS and advertise is None:
        raise EtcdError(f"--listen {listen} binds every address: say where clients reach it with --advertise")
    return Placement(listen, advertise, name, entries)
