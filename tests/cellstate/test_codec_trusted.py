"""The trusted encoders: the same bytes as the codec's encoders for every valid value, and
the same CodecError for every invalid one (they fall back to the codec when unsure)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from strategies import allocs, machines

from cellstate.codec.records import CodecError, encode_alloc, encode_machine
from cellstate.codec.trusted import pack_alloc, pack_machine
from cellstate.model import Alloc, Machine, MachineState
from cellstate.resources import Resources

R = Resources(250, 512)
M = Machine("m1", Resources(4000, 16384, 100), "z", "r", "p", frozenset({"a", "b"}), (("disk", "ssd"),),
            MachineState.UP, R, 1, "sched")
A = Alloc("j", 3, "m1", R, 2, "sched", 12.5)


class Zone(str):
    pass


MACHINES = {
    "common": M,
    "bare": Machine("m2", Resources(1, 1, 1)),
    "draining": replace(M, state=MachineState.DRAINING),
    "extra-resources": replace(M, capacity=Resources(1, 2, 3, (("gpu", 2),))),
    "str-subclass-zone": replace(M, zone=Zone("z")),
    "id-with-slash": replace(M, id="a/b"),
    "empty-id": replace(M, id=""),
    "negative-ledger": replace(M, allocated=Resources(-1, 0, 0)),
    "bool-cpu": replace(M, capacity=Resources(True, 1, 1)),
    "float-memory": replace(M, capacity=Resources(1, 1.5, 1)),
    "huge-cpu": replace(M, capacity=Resources(1 << 70, 1, 1)),
    "unsorted-extras": replace(M, capacity=Resources(1, 1, 1, (("z", 1), ("a", 1)))),
    "zero-extra": replace(M, capacity=Resources(1, 1, 1, (("gpu", 0),))),
    "extra-ledger": replace(M, capacity=Resources(9, 9, 9, (("gpu", 4), ("prod_cpu", 5))),
                            allocated=Resources(1, 1, 1, (("gpu", 2), ("prod_cpu", 1)))),
    "extra-only-ledger": replace(M, allocated=Resources(0, 0, 0, (("gpu", 1),))),
    "extra-named-cpu": replace(M, capacity=Resources(1, 1, 1, (("cpu", 5),))),
    "extra-empty-name": replace(M, capacity=Resources(1, 1, 1, (("", 5),))),
    "extra-bool": replace(M, capacity=Resources(1, 1, 1, (("gpu", True),))),
    "extra-negative-ledger": replace(M, allocated=Resources(1, 1, 1, (("gpu", -1),))),
    "extra-duplicate": replace(M, capacity=Resources(1, 1, 1, (("gpu", 1), ("gpu", 2)))),
    "extra-list": replace(M, capacity=Resources(1, 1, 1, [("gpu", 1)])),
    "none-zone": replace(M, zone=None),
    "state-as-text": replace(M, state="down"),
    "packages-list": replace(M, packages=["a"]),
    "empty-package": replace(M, packages=frozenset({""})),
    "duplicate-labels": replace(M, labels=(("x", "1"), ("x", "2"))),
    "label-named-zone": replace(M, labels=(("zone", "1"),)),
    "label-not-pair": replace(M, labels=(("x",),)),
    "negative-tasks": replace(M, task_count=-1),
    "bool-tasks": replace(M, task_count=True),
    "bytes-writer": replace(M, writer=b"s"),
    "not-a-machine": "m1",
}
ALLOCS = {
    "common": A,
    "defaults": Alloc("j", 0, "m1", R),
    "running": replace(A, running=True),
    "int-time": replace(A, placed_at=5),
    "negative-priority": replace(A, priority=-3),
    "extra-resources": replace(A, resources=Resources(1, 1, 1, (("gpu", 1),))),
    "unsorted-extras": replace(A, resources=Resources(1, 1, 1, (("z", 1), ("a", 1)))),
    "zero-extra": replace(A, resources=Resources(1, 1, 1, (("gpu", 0),))),
    "slash-job": replace(A, job_id="a/b"),
    "negative-task": replace(A, task_index=-1),
    "nan-time": replace(A, placed_at=float("nan")),
    "inf-time": replace(A, placed_at=float("inf")),
    "negative-time": replace(A, placed_at=-1.0),
    "text-running": replace(A, running="yes"),
    "float-priority": replace(A, priority=1.0),
    "not-an-alloc": None,
}


def outcome(encode, value):
    """The bytes, or the error message."""
    try:
        return encode(value)
    except CodecError as exc:
        return f"CodecError: {exc}"


@pytest.mark.parametrize("name", list(MACHINES), ids=list(MACHINES))
def test_pack_machine_is_encode_machine(name):
    assert outcome(pack_machine, MACHINES[name]) == outcome(encode_machine, MACHINES[name])


@pytest.mark.parametrize("name", list(ALLOCS), ids=list(ALLOCS))
def test_pack_alloc_is_encode_alloc(name):
    assert outcome(pack_alloc, ALLOCS[name]) == outcome(encode_alloc, ALLOCS[name])


@given(machines())
def test_generated_machines_pack_as_they_encode(machine):
    assert pack_machine(machine) == encode_machine(machine)


@given(allocs())
def test_generated_allocs_pack_as_they_encode(alloc):
    assert pack_alloc(alloc) == encode_alloc(alloc)


def test_the_common_shapes_skip_the_decode_back():
    from cellstate.codec import trusted as codec_trusted

    for name in ("common", "draining"):
        assert codec_trusted._fixed_ok(MACHINES[name]) and codec_trusted._ledger_map(MACHINES[name]) is not None
    assert codec_trusted._shared_part(ALLOCS["common"]) and codec_trusted._shared_part(ALLOCS["defaults"])
    for name in ("extra-resources", "extra-ledger", "extra-only-ledger"):  # extras of the normal form
        assert codec_trusted._fixed_ok(MACHINES[name]) and codec_trusted._ledger_map(MACHINES[name]) is not None
    assert codec_trusted._shared_part(ALLOCS["extra-resources"])
    for name in ("unsorted-extras", "zero-extra", "extra-named-cpu", "extra-empty-name", "extra-bool",
                 "extra-duplicate", "extra-list"):  # fall back to the codec
        assert not codec_trusted._fixed_ok(MACHINES[name]), name
    assert codec_trusted._ledger_map(MACHINES["extra-negative-ledger"]) is None


@pytest.mark.parametrize("name", list(MACHINES), ids=list(MACHINES))
def test_a_ledger_write_after_its_machine_packs_as_it_encodes(name):
    """With the fixed part of machine m1 remembered, a value sharing (or not) its field
    objects gives the codec's bytes or error, and m1 itself still packs as it encodes."""
    pack_machine(M)
    assert outcome(pack_machine, MACHINES[name]) == outcome(encode_machine, MACHINES[name])
    assert pack_machine(M) == encode_machine(M)


def test_a_changed_fixed_field_is_packed_anew():
    pack_machine(M)
    for changed in (replace(M, zone="y"), replace(M, labels=()), replace(M, packages=frozenset({"c"})),
                    replace(M, capacity=Resources(4000, 16384, 101)), M.with_ledger(Resources(1, 2, 3), 7, "w"),
                    replace(M, state=MachineState.DOWN, allocated=Resources(0, 0, 0), task_count=0, writer="")):
        assert pack_machine(changed) == encode_machine(changed)


@pytest.mark.parametrize("name", list(ALLOCS), ids=list(ALLOCS))
def test_an_alloc_after_another_packs_as_it_encodes(name):
    """With the shared fields of A remembered, a value sharing (or not) its field objects
    gives the codec's bytes or error, and so does A itself after it."""
    pack_alloc(A)
    assert outcome(pack_alloc, ALLOCS[name]) == outcome(encode_alloc, ALLOCS[name])
    assert pack_alloc(A) == encode_alloc(A)


def test_the_claims_of_one_commit_pack_as_they_encode():
    claims = [replace(A, task_index=i, machine_id=f"m{i % 3}") for i in range(5)]
    claims += [replace(A, task_index=-1), replace(A, machine_id="a/b"), replace(A, task_index=1 << 70),
               replace(A, task_index=True), replace(A, machine_id="")]
    for alloc in claims:
        assert outcome(pack_alloc, alloc) == outcome(encode_alloc, alloc)
