"""Cell specs: seeded expansion into machines, parsing with named errors, init_cell limits."""

from __future__ import annotations

import pytest

from cellstate.cellspec import CellExists, CellSpec, CellSpecError, build_machines, cell_spec_from_mapping, init_cell
from cellstate.codec.records import decode_machine
from cellstate.etcd.store import EtcdStore
from cellstate.resources import Resources


def test_demo_cell():
    cell = build_machines(CellSpec())
    assert len(cell) == 1000 and len({m.id for m in cell}) == 1000
    assert {m.zone for m in cell} == {"zone-a", "zone-b", "zone-c"} and len({m.rack for m in cell}) == 30
    assert {m.capacity.cpu for m in cell} == {8000, 16000, 32000}
    assert all(len(m.packages) == 5 for m in cell)
    assert build_machines(CellSpec()) == cell
    assert build_machines(CellSpec(seed=1)) != cell


def test_spec_mapping():
    spec = cell_spec_from_mapping({"machines": 2, "shapes": [{"cpu": 2, "memory": "4Gi", "disk": 100}],
                                   "packages": 3, "packages_per_machine": 3, "labels": {"ssd": ["yes"]}})
    [a, b] = build_machines(spec)
    assert a.capacity == Resources.of(2000, 4096, 100)
    assert a.packages == {"pkg-00", "pkg-01", "pkg-02"} and dict(b.labels) == {"ssd": "yes"}


@pytest.mark.parametrize("mapping, field", [
    ({"machine": 3}, "machine"),
    ({"machines": "3"}, "machines"),
    ({"machines": 0}, "machines"),
    ({"shapes": [{"cpu": 0, "memory": 1}]}, "shapes[0].cpu"),
    ({"shapes": [{"cpu": 1, "memory": "1GB"}]}, "shapes[0].memory"),
    ({"shapes": [{"cpu": 1}]}, "shapes[0]"),
    ({"shapes": []}, "shapes"),
    ({"platforms": {"x": -1}}, "platforms.x"),
    ({"packages": ["a", "a"]}, "packages"),
    ({"packages": 2, "packages_per_machine": 3}, "packages_per_machine"),
], ids=["unknown", "machines-type", "machines-zero", "shape-cpu", "shape-memory", "shape-no-memory",
        "no-shapes", "platform-weight", "duplicate-packages", "too-many-per-machine"])
def test_spec_errors_name_field(mapping, field):
    with pytest.raises(CellSpecError) as err:
        cell_spec_from_mapping(mapping)
    assert err.value.field == field


def test_init_cell_splits_and_refuses(etcd_server, cell_keys):
    with EtcdStore(etcd_server.endpoints, max_txn_ops=8) as store:
        init_cell(store, cell_keys, CellSpec(machines=20))
        kvs = store.range(cell_keys.kind_prefix("machines")).kvs
        assert len(kvs) == 20 and len({kv.mod_revision for kv in kvs}) == 3
        assert [decode_machine(kv.key, kv.value) for kv in kvs] == build_machines(CellSpec(machines=20))
        with pytest.raises(CellExists):
            init_cell(store, cell_keys, CellSpec(machines=3))
        init_cell(store, cell_keys, CellSpec(machines=3), replace=True)
        assert len(store.range(cell_keys.kind_prefix("machines")).kvs) == 3


def test_gpu_mix_counts_the_devices_per_model():
    from cellstate.cellspec import gpu_mix
    from cellstate.devices import MODEL_LABEL, gpu_capacity
    from cellstate.model import Machine
    from cellstate.resources import Resources

    def machine(i, gpus, model):
        return Machine(f"m{i}", Resources.of(1000, 1024, 0, **gpu_capacity(gpus)),
                       labels=((MODEL_LABEL, model),) if model else ())

    cell = [machine(0, 8, "V100"), machine(1, 2, "P100"), machine(2, 8, "V100"), machine(3, 0, "")]
    assert gpu_mix(cell) == "18 GPUs on 3 machines (16 V100, 2 P100)"
    assert gpu_mix(cell[3:]) == ""
