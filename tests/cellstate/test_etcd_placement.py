"""Where embedded etcd members listen and are reached (cellstate.etcd.placement) and the
command lines and layouts that follow from it (no etcd is started)."""

from __future__ import annotations

import json

import pytest

from cellstate.etcd.binary import EtcdError
from cellstate.etcd.cluster import CLUSTER_FILE, EtcdCluster
from cellstate.etcd.placement import Placement, make_placement

INITIAL = "m1=10.77.0.1:2380,m2=https://10.77.0.2:2380,m3=10.77.0.3:2380"


def test_default_placement_is_loopback():
    assert make_placement() == Placement()


def test_per_host_member_takes_its_host_from_the_initial_cluster():
    placement = make_placement(name="m2", initial_cluster=INITIAL)
    assert placement.listen == "10.77.0.2" and placement.advertised == "10.77.0.2" and placement.per_host
    assert placement.hosts() == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    assert placement.token() == make_placement(name="m1", initial_cluster=INITIAL).token()


@pytest.mark.parametrize("kwargs, message", [
    (dict(listen="etcd.example"), "--listen must be an IP address"),
    (dict(name="m1"), "--name and --initial-cluster go together"),
    (dict(name="m9", initial_cluster=INITIAL), "--name 'm9' is not in --initial-cluster"),
    (dict(name="m1", initial_cluster="m1=10.77.0.1"), "is not NAME=HOST:PEERPORT|is not host:port"),
    (dict(name="m1", initial_cluster="m1=10.77.0.1:2380,m1=10.77.0.2:2380"), "names member 'm1' twice"),
    (dict(name="m1", initial_cluster=INITIAL, advertise="10.77.0.5"), "differs from 10.77.0.1"),
    (dict(listen="0.0.0.0"), "binds every address: say where clients reach it with --advertise"),
    (dict(advertise="etcd.example"), "is a host name: give the IP to bind with --listen"),
])
def test_bad_placements_are_one_line_errors(kwargs, message):
    with pytest.raises(EtcdError, match=message) as info:
        make_placement(**kwargs)
    assert "\n" not in str(info.value)


def test_a_per_host_member_runs_alone_and_names_every_member(tmp_path):
    cluster = EtcdCluster(placement=make_placement(name="m2", initial_cluster=INITIAL), data_dir=str(tmp_path),
                          client_port=2379, binary="/bin/true", metrics=True)
    assert [m.spec.name for m in cluster.members] == ["m2"]
    assert cluster.endpoints == ["10.77.0.1:2379", "10.77.0.2:2379", "10.77.0.3:2379"]
    command = cluster.members[0].command()
    flag = lambda name: command[command.index(name) + 1]  # noqa: E731
    assert flag("--listen-client-urls") == "http://10.77.0.2:2379,http://127.0.0.1:2379"
    assert flag("--listen-peer-urls") == "http://10.77.0.2:2380"
    assert flag("--initial-cluster") == ("m1=http://10.77.0.1:2380,m2=http://10.77.0.2:2380,"
                                         "m3=http://10.77.0.3:2380")
    assert flag("--listen-metrics-urls").startswith("http://127.0.0.1:")
    recorded = json.loads((tmp_path / CLUSTER_FILE).read_text())
    assert recorded["local"] == ["m2"] and recorded["members"][1]["listen"] == "10.77.0.2"
    with pytest.raises(EtcdError, match="not this --name/--initial-cluster"):
        EtcdCluster(placement=make_placement(name="m1", initial_cluster=INITIAL), data_dir=str(tmp_path),
                    binary="/bin/true")


def test_without_the_loopback_listener_metrics_stay_on_the_client_port(tmp_path):
    cluster = EtcdCluster(size=1, data_dir=str(tmp_path), binary="/bin/true")
    command = cluster.members[0].command()
    assert command[command.index("--listen-metrics-urls") + 1] == ""
