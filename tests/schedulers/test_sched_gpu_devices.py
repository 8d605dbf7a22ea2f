"""The chain's device choice: the ``fgd`` scorer picks the device inside the machine and the
batch scheduler's claim names it; chains without a device choice leave the binding to the
plan's best fit."""

from __future__ import annotations

import random

import pytest
from viewlib import DictView

from cellstate.devices import (
    MODEL_LABEL, DeviceError, GpuAsk, bind, bind_in, claimed_devices, best_fit, gpu_capacity,
)
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from schedulers.chains import make_scheduler

WORKLOAD = [{"cpu": 1000, "gpu": 400, "weight": 1}]  # the target workload: 0.4-GPU shares
FILTERS = [{"name": "machine_state"}, {"name": "resources_fit"}, {"name": "constraints"}]


def holed_machine() -> Machine:
    """Two T4s; device 0 has 400 milli left, device 1 is idle."""
    used = bind(Resources.of(1000, 10, 0, gpu=600), GpuAsk(1, 600), (0,))
    return Machine("a", Resources.of(32_000, 100_000, 0, **gpu_capacity(2)), labels=((MODEL_LABEL, "T4"),),
                   allocated=used, task_count=1)


def share_job(tasks: int = 1, milli: int = 200) -> Job:
    return Job("j", JobKind.BATCH, tasks, Resources.of(1000, 10, 0, gpu=milli))


def test_fgd_binds_a_share_where_the_workload_loses_least_not_best_fit():
    from schedulers.registry import SCORERS

    m, job = holed_machine(), share_job()
    # best fit: the fuller device 0 (400 -> 200 left: a 0.4 share no longer fits there)
    assert claimed_devices(bind_in(job.request, m.free)) == ((0, 200),)
    # fgd: device 1 (1000 -> 800), device 0 keeps its 400 for the workload's shares
    fgd = SCORERS["fgd"]({"workload": WORKLOAD})
    assert claimed_devices(fgd.bind(job, m, m.free)) == ((1, 200),)
    # a share fitting only device 0 goes there; one fitting nowhere is not bound
    assert claimed_devices(fgd.bind(share_job(milli=400), m, m.free)) == ((0, 400),)
    full = Machine("f", m.capacity, labels=m.labels, allocated=m.capacity, task_count=4)
    assert fgd.bind(job, full, full.free) is None
    # whole GPUs and CPU-only tasks: as the default binding
    whole = Job("w", JobKind.BATCH, 1, Resources.of(1000, 10, 0, gpu=1000))
    assert claimed_devices(fgd.bind(whole, m, m.free)) == ((1, 1000),)
    cpu = Job("c", JobKind.BATCH, 1, Resources.of(1000, 10))
    assert fgd.bind(cpu, m, m.free) == cpu.request


@pytest.mark.parametrize("scorers, devices", [
    ([{"name": "fgd", "args": {"workload": WORKLOAD}}], {1}),  # the scorer's choice is in the claim
    ([{"name": "least_loaded"}], set()),                      # no device choice: the claim is unbound
])
def test_batch_claims_name_the_devices_the_chain_chose(scorers, devices):
    view = DictView([holed_machine()])
    entry = view.add_job(share_job(tasks=2))
    sched = make_scheduler("batch", "b", 1, {"filters": FILTERS, "scorers": scorers})
    decision = sched.decide(entry, [0, 1], view)
    assert sorted(c.task_index for c in decision.claims) == [0, 1] and not decision.unplaced
    held = {i for c in decision.claims for i, _ in claimed_devices(c.request)}
    assert held == devices
    free = view.machine("a").machine.free
    for claim in decision.claims:  # the plan's binding keeps a named device with room, binds the others
        free = free - bind_in(claim.request, free)
    assert free.get("gpu.0") >= 0 and free.get("gpu.1") >= 0
    if not devices:  # best fit: both shares into device 0's hole, leaving it no room for a 0.4 share
        assert (free.get("gpu.0"), free.get("gpu.1")) == (0, 1000)
    else:
        assert (free.get("gpu.0"), free.get("gpu.1")) == (400, 600)


def test_a_named_device_without_room_is_bound_anew_by_the_given_choice():
    m = holed_machine()
    on0 = bind(Resources.of(1000, 10, 0, gpu=500), GpuAsk(1, 500), (0,))  # device 0 has only 400 left
    assert claimed_devices(bind_in(on0, m.free)) == ((1, 500),)
    assert bind_in(on0, m.free, lambda frees, ask: None) is None
    with pytest.raises(DeviceError, match="cannot hold"):
        bind_in(on0, m.free, lambda frees, ask: (0,))
    assert bind_in(on0, m.free, best_fit) == bind_in(on0, m.free)
    rng = random.Random(3)  # any choice among devices with room is honoured
    assert claimed_devices(bind_in(on0, m.free, lambda frees, ask: (rng.choice([1]),))) == ((1, 500),)


def test_fgd_with_best_fit_devices_leaves_the_binding_to_the_plan():
    from schedulers.plugin import PluginConfigError
    from schedulers.registry import SCORERS

    m, job = holed_machine(), share_job()
    fgd = SCORERS["fgd"]({"workload": WORKLOAD, "devices": "best_fit"})
    assert fgd.bind(job, m, m.free) == job.request  # unbound: the plan binds it by best fit
    chosen = SCORERS["fgd"]({"workload": WORKLOAD})
    assert fgd.score(job, m, m.free, None) < chosen.score(job, m, m.free, None)  # charged as best fit binds it
    with pytest.raises(PluginConfigError, match="devices must be one of fgd, best_fit"):
        SCORERS["fgd"]({"workload": WORKLOAD, "devices": "random"})
