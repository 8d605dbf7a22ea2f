"""``cellstate.fastbuild.builder``: the same instances as the dataclass constructors, refused
where setting slots is not what ``__init__`` does."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pytest

from cellstate.fastbuild import builder
from cellstate.model import Alloc, Job, JobKind, JobRecord, Machine, MachineState
from cellstate.resources import Resources
from cellstate.plan import JobEntry, MachineEntry

R = Resources(250, 512, 0, (("gpu", 1),))
MACHINE = Machine("m1", R, "z", "r", "p", frozenset({"a"}), (("disk", "ssd"),), MachineState.DRAINING, R, 2, "s")
VALUES = [
    (Resources, (1, 2, 3, (("gpu", 4),))),
    (Machine, tuple(getattr(MACHINE, f.name) for f in fields(Machine))),
    (Alloc, ("j", 3, "m1", R, 7, "sched", 1.5, True)),
    (MachineEntry, (MACHINE, 42)),
    (JobEntry, (JobRecord.new(Job("j", JobKind.BATCH, 2, R), 1.0), 9)),
]


@pytest.mark.parametrize("cls, values", VALUES, ids=[cls.__name__ for cls, _ in VALUES])
def test_built_instances_equal_constructed_ones(cls, values):
    built, made = builder(cls)(*values), cls(*values)
    assert type(built) is cls and built == made and hash(built) == hash(made) and repr(built) == repr(made)
    with pytest.raises(AttributeError):
        built.__setattr__(fields(cls)[0].name, None)  # still frozen


@dataclass(frozen=True)
class NoSlots:
    a: int


@dataclass(frozen=True, slots=True)
class PostInit:
    a: int

    def __post_init__(self):
        pass


@dataclass(frozen=True, slots=True)
class NotInInit:
    a: int
    b: int = field(init=False, default=0)


@dataclass(frozen=True, slots=True)
class Base:
    a: int


@dataclass(frozen=True, slots=True)
class Derived(Base):
    b: int


@pytest.mark.parametrize("cls, message", [
    (int, "needs a dataclass type"),
    (NoSlots, "no __slots__"),
    (Derived, "no __slots__ of its own"),
    (PostInit, "__post_init__"),
    (NotInInit, "excluded from __init__"),
], ids=["not-a-dataclass", "no-slots", "slots-inherited", "post-init", "field-not-in-init"])
def test_classes_where_slots_are_not_init_are_refused(cls, message):
    with pytest.raises(TypeError, match=message):
        builder(cls)


def test_a_built_instance_is_its_class_through_and_through():
    built = builder(Alloc)("j", 3, "m1", R, 7, "sched", 1.5, True)
    assert isinstance(built, Alloc) and built.__class__ is Alloc and not hasattr(built, "__dict__")
    with pytest.raises(AttributeError):
        built.task_index = 4
    assert builder(Alloc)("j", 3, "m1", R, 7, "sched", 1.5, True) == built != builder(Alloc)(
        "j", 4, "m1", R, 7, "sched", 1.5, True)


def test_builder_takes_every_field_positionally():
    with pytest.raises(TypeError):
        builder(Resources)(1, 2, 3)
