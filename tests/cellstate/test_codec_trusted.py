"""The trusted encoders: the same bytes as the codec's encoders for every valid value, and
the same CodecError for every invalid one (they fall back to the codec when unsure)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from strategies import allocs, machines

from cellstate.codec import CodecError, encode_alloc, encode_machine
from cellstate.codec_trusted import pack_alloc, pack_machine
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
    from cellstate import codec_trusted

    assert codec_trusted._machine_ok(MACHINES["common"]) and codec_trusted._machine_ok(MACHINES["draining"])
    assert codec_trusted._alloc_ok(ALLOCS["common"]) and codec_trusted._alloc_ok(ALLOCS["defaults"])
    assert not codec_trusted._machine_ok(MACHINES["extra-resources"])  # falls back to the codec
