"""The FGD paper's baseline GPU policies as live scorers (``gpu_dotprod``, ``gpu_packing``,
``gpu_best_fit``, ``gpu_random``): their ranking on hand-built machines (expected scores worked
out by hand below), the device each chooses, bad arguments, the same scores as the experiment's
vectorised policies, and chains placing GPU tasks on a small in-memory cell."""

from __future__ import annotations

import numpy as np
import pytest
from viewlib import DictView

from cellstate.devices import MODEL_LABEL, GpuAsk, bind, bind_in, claimed_devices, gpu_capacity
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from schedulers.chain_config import load_chain_config
from schedulers.chains import make_scheduler
from schedulers.gpu.fleet import from_machines
from schedulers.gpu.policies import make_policy
from schedulers.plugin import PluginConfigError
from schedulers.plugins.fgd import shape_of
from schedulers.registry import make_scorer

FILTERS = [{"name": "machine_state"}, {"name": "resources_fit"}, {"name": "constraints"}]
NAMES = ("gpu_dotprod", "gpu_packing", "gpu_best_fit", "gpu_random")


def machine(name: str, gpus: int, used: dict[int, int] | None = None, cpu: int = 32_000, cpu_used: int = 0) -> Machine:
    """``gpus`` T4s, device i holding ``used[i]`` milli of one task each, ``cpu_used`` millicores
    taken (charged on the first task)."""
    allocated, tasks = Resources.of(0, 0), 0
    for i, milli in (used or {}).items():
        allocated = allocated + bind(Resources.of(cpu_used if not tasks else 0, 10, 0, gpu=milli), GpuAsk(1, milli), (i,))
        tasks += 1
    if not tasks and cpu_used:
        allocated, tasks = Resources.of(cpu_used, 10), 1
    return Machine(name, Resources.of(cpu, 100_000, 0, **gpu_capacity(gpus)), labels=((MODEL_LABEL, "T4"),),
                   allocated=allocated, task_count=tasks)


def job(gpu: int, cpu: int = 1000, tasks: int = 1) -> Job:
    return Job("j", JobKind.BATCH, tasks, Resources.of(cpu, 10, 0, gpu=gpu))


def scores(name: str, j: Job, machines: list[Machine], args=None) -> list[float]:
    scorer = make_scorer(name, args)
    return [scorer.score(j, m, m.free, None) for m in machines]


def test_gpu_packing_fills_partly_used_gpus_then_used_machines_then_idle_ones():
    holed = machine("holed", 2, {0: 600})            # device 0: 400 left, the share fits it
    used = machine("used", 2, {0: 1000})             # only an idle device fits: the machine is in use
    idle2, idle8 = machine("idle2", 2), machine("idle8", 8)
    # share 400 on holed: best fit takes device 0 (400 free, 40 tenths): 100 - 40 // 10 = 96
    # used: it takes idle device 1: 50 - 1 free device taken = 49
    # idle nodes: max(33 - F, F) with F free devices: 2 GPUs 31, 8 GPUs max(25, 8) = 25
    assert scores("gpu_packing", job(400), [holed, used, idle2, idle8]) == [0.96, 0.49, 0.31, 0.25]
    # whole GPUs on holed: device 1, a free device of a used machine: 50 - 1 = 49
    assert scores("gpu_packing", job(1000), [holed, idle2]) == [0.49, 0.31]
    assert scores("gpu_packing", job(0), [holed, idle2]) == [0.0, 0.0]  # CPU-only: any machine


def test_gpu_best_fit_and_dotprod_prefer_the_machine_the_task_fills():
    empty = machine("empty", 8, cpu=128_000)
    half = machine("half", 8, {i: 1000 for i in range(4)}, cpu=128_000, cpu_used=64_000)
    big = job(4000, cpu=64_000)  # 64 cores and 4 whole GPUs; normalisers 128 cores, 8 GPUs
    # best fit: 1 - mean of the fractions left: empty (0.5 + 0.5) / 2 -> 0.5; half 0 -> 1.0
    assert scores("gpu_best_fit", big, [empty, half]) == [0.5, 1.0]
    # dotprod: 1 - (free·ask)/2 per dimension: empty (1 · 0.5 + 1 · 0.5) / 2 = 0.5 -> 0.5;
    # half (0.5 · 0.5 + 0.5 · 0.5) / 2 = 0.25 -> 0.75
    assert scores("gpu_dotprod", big, [empty, half]) == [0.5, 0.75]
    # normalisers of a cell twice as large: best fit on empty 1 - (0.25 + 0.25) / 2 = 0.75
    assert scores("gpu_best_fit", big, [empty], {"max_cpu": 256_000, "max_gpus": 16}) == [0.75]
    # a machine larger than the normalisers: clipped into [0, 1]
    huge = machine("huge", 8, cpu=1_024_000)
    assert scores("gpu_best_fit", job(0, cpu=0), [huge], {"max_cpu": 1000, "max_gpus": 1}) == [0.0]


def test_gpu_random_scores_every_machine_alike():
    ms = [machine("a", 2, {0: 600}), machine("b", 8), machine("c", 1)]
    assert scores("gpu_random", job(400), ms) == [0.5, 0.5, 0.5]
    assert make_scorer("gpu_random").reads == frozenset()


@pytest.mark.parametrize("name", ["gpu_dotprod", "gpu_packing", "gpu_best_fit"])
def test_the_baselines_bind_by_best_fit(name):
    m = machine("m", 3, {0: 600, 2: 300})  # free: 400, 1000, 700
    scorer = make_scorer(name)
    assert scorer.reads == frozenset({"request"})
    assert claimed_devices(scorer.bind(job(300), m, m.free)) == ((0, 300),)   # the fullest it fits
    assert claimed_devices(scorer.bind(job(500), m, m.free)) == ((2, 500),)   # 400 too small: 700
    assert claimed_devices(scorer.bind(job(1000), m, m.free)) == ((1, 1000),)  # the one free device
    assert scorer.bind(job(2000), m, m.free) is None
    cpu = job(0)
    assert scorer.bind(cpu, m, m.free) == cpu.request


def test_gpu_random_binds_a_share_to_a_random_device_it_fits():
    m = machine("m", 3, {0: 600, 2: 800})  # free: 400, 1000, 200
    scorer = make_scorer("gpu_random", {"seed": 7})
    seen = {claimed_devices(scorer.bind(job(300), m, m.free))[0][0] for _ in range(64)}
    assert seen == {0, 1}  # never device 2 (200 free); both fitting devices drawn
    again = make_scorer("gpu_random", {"seed": 7})
    first = make_scorer("gpu_random", {"seed": 7})
    assert [again.bind(job(300), m, m.free) for _ in range(8)] == [first.bind(job(300), m, m.free) for _ in range(8)]
    assert claimed_devices(scorer.bind(job(1000), m, m.free)) == ((1, 1000),)  # whole GPUs: as best fit
    assert scorer.bind(job(500), machine("f", 1, {0: 600}), machine("f", 1, {0: 600}).free) is None


@pytest.mark.parametrize("name, args, message", [
    ("gpu_dotprod", {"max_cpu": 0}, r"gpu_dotprod: bad args .*max_cpu must be an integer > 0, got 0"),
    ("gpu_best_fit", {"max_gpus": "8"}, r"gpu_best_fit: bad args .*max_gpus must be an integer > 0, got '8'"),
    ("gpu_best_fit", {"max_gpus": True}, r"max_gpus must be an integer > 0, got True"),
    ("gpu_dotprod", {"max_cpus": 1}, r"gpu_dotprod: unknown args \['max_cpus'\]"),
    ("gpu_packing", {"max_cpu": 1}, r"gpu_packing: unknown args \['max_cpu'\]"),
    ("gpu_random", {"seed": 1.5}, r"gpu_random: bad args .*seed must be an integer, got 1.5"),
    ("gpu_random", [1], r"gpu_random: args must be a mapping"),
])
def test_bad_args_are_refused_naming_plugin_and_field(name, args, message):
    with pytest.raises(PluginConfigError, match=message):
        make_scorer(name, args)


@pytest.mark.parametrize("name, policy", [("gpu_dotprod", "dotprod"), ("gpu_packing", "gpupacking"),
                                          ("gpu_best_fit", "bestfit")])
def test_the_live_scores_are_the_experiments(name, policy):
    ms = [machine("a", 8, {0: 600, 1: 1000, 3: 250}, cpu=128_000, cpu_used=20_000), machine("b", 8, cpu=96_000),
          machine("c", 4, {2: 900}, cpu=64_000, cpu_used=60_000), machine("d", 8, {i: 1000 for i in range(7)}, cpu=128_000)]
    fleet = from_machines(ms)  # largest node: 128 cores, 8 GPUs, the scorers' default normalisers
    for gpu in (0, 100, 400, 1000, 2000):
        j = job(gpu, cpu=2000)
        idx = np.flatnonzero(fleet.feasible(np.arange(fleet.size), shape_of(j)))
        want, devices = make_policy(policy).scores(fleet, idx, shape_of(j))
        got = scores(name, j, [ms[i] for i in idx])
        assert got == [s / 100 for s in want.tolist()]
        binds = [make_scorer(name).bind(j, ms[i], ms[i].free) for i in idx]
        if j.request.get("gpu") < 1000:  # a share: the experiment's device is the claim's
            assert [claimed_devices(b)[0][0] if gpu else -1 for b in binds] == devices.tolist()


@pytest.mark.parametrize("name", NAMES)
def test_a_batch_chain_places_gpu_tasks_on_named_devices(name):
    holed, idle = machine("holed", 2, {0: 600}), machine("idle", 8)
    view = DictView([holed, idle])
    entry = view.add_job(job(400, tasks=2))
    sched = make_scheduler("batch", "b", 1, {"filters": FILTERS, "scorers": [{"name": name}]})
    decision = sched.decide(entry, [0, 1], view)
    assert sorted(c.task_index for c in decision.claims) == [0, 1] and not decision.unplaced
    for c in decision.claims:
        ((device, milli),) = claimed_devices(c.request)
        assert milli == 400
    if name == "gpu_packing":  # the hole of holed first (96 vs 25), then its now used machine
        assert [(c.machine_id, claimed_devices(c.request)) for c in decision.claims] == [
            ("holed", ((0, 400),)), ("holed", ((1, 400),))]
    free = {m.id: m.free for m in (holed, idle)}
    for c in decision.claims:  # every claim fits what the ones before left
        bound = bind_in(c.request, free[c.machine_id])
        assert bound == c.request
        free[c.machine_id] = free[c.machine_id] - bound


def test_a_chain_file_names_the_gpu_policies(tmp_path):
    path = tmp_path / "chain.toml"
    path.write_text('''
[batch]
filters = [{ name = "machine_state" }, { name = "resources_fit" }, { name = "constraints" }]
scorers = [{ name = "gpu_packing" }, { name = "gpu_best_fit", stage = 1, args = { max_cpu = 96000, max_gpus = 8 } }]
''')
    config = load_chain_config(path)["batch"]
    sched = make_scheduler(config.kind, "b", 1, config.as_config())
    assert sched.pipeline.names()[-2:] == ("gpu_packing", "gpu_best_fit")
    assert sched.pipeline.stages[1][0][0].args.max_cpu == 96_000 and sched.pipeline.binds
    bad = tmp_path / "bad.toml"
    bad.write_text('[batch]\nfilters = [{ name = "machine_state" }]\nscorers = [{ name = "gpu_dotprod", args = { max_cpu = -1 } }]\n')
    with pytest.raises(PluginConfigError, match="gpu_dotprod: bad args"):
        load_chain_config(bad)


def test_a_borg_chain_ranks_by_gpu_packing_and_leaves_the_devices_to_the_plan():
    holed, idle = machine("holed", 2, {0: 600}), machine("idle", 8)
    view = DictView([holed, idle])
    entry = view.add_job(job(400, tasks=2))
    sched = make_scheduler("borg", "b", 1, {"filters": FILTERS, "scorers": [{"name": "gpu_packing"}]})
    decision = sched.decide(entry, [0, 1], view)
    # 96 on holed's hole vs 25 on idle, then 49 on holed's idle device vs 25: both on holed
    assert [c.machine_id for c in decision.claims] == ["holed", "holed"] and not decision.unplaced
    assert all(not claimed_devices(c.request) for c in decision.claims)  # Borg does not bind: the plan does
