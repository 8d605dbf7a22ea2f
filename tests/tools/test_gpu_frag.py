"""openb lists, the six GPU policies and ``omega experiment gpu-frag`` on vendored slices."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from schedulers.gpu.fleet import GpuFleet, NodeSpec
from schedulers.gpu.frag import FragMeasure
from schedulers.gpu.policies import NAMES, ShapeScoreCache, make_policy
from schedulers.gpu.workload import PodShape, target_workload
from tests.tools.cli_helpers import run_cli
from tools.gpufrag.experiment import load_inputs, parse_seeds
from tools.gpufrag.run import arrival_sequence, run_one, tie_rank
from tools.trace.openb.lists import OpenbError, read_nodes, read_pods

DATA = Path(__file__).resolve().parents[1] / "data" / "openb"
NODES = DATA / "nodes40.csv"
PODS = DATA / "pods_default_600.csv"


def test_vendored_lists_parse_with_what_they_lack_stated():
    nodes, _ = read_nodes(NODES)
    assert len(nodes) == 40 and sum(n.gpus for n in nodes) == 169
    pods, stats = read_pods(DATA / "pods_multigpu20_200.csv")
    assert len(pods) == 200
    assert "gpu_spec" in stats.absent_columns and "creation_time" in stats.absent_columns
    spec_pods, _ = read_pods(DATA / "pods_gpuspec10_400.csv")
    assert any(p.models for p in spec_pods)


@pytest.mark.parametrize("text, message", [
    ("name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n", "missing column(s) gpu_milli"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", "line 2: a share"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,x,1,0,0\n", "line 2: cpu_milli must be an integer"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,inf,1,0,0\n", "line 2: cpu_milli must be an integer"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0,0\np,1,1,0,0\n", "line 3: name must be a unique"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0\n", "line 2: 4 fields"),
])
def test_bad_pod_lists_name_the_line_and_column(tmp_path, text, message):
    path = tmp_path / "pods.csv"
    path.write_text(text)
    with pytest.raises(OpenbError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_pods(path)


def test_a_cut_gzip_is_invalid_input_with_the_file_named(tmp_path):
    whole = gzip.compress(PODS.read_bytes())
    cut = tmp_path / "pods.csv.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    status, out, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(cut), "--seeds", "1"])
    assert status == 65
    assert str(cut) in err and "truncated or corrupt gzip" in err and len(err.strip().splitlines()) == 1


def fleet2() -> GpuFleet:
    return GpuFleet([NodeSpec("a", 32000, 1 << 20, 4, "T4"), NodeSpec("b", 32000, 1 << 20, 4, "T4")])


def test_a_share_never_overcommits_a_device_and_release_restores_it():
    fleet = fleet2()
    half = PodShape(1000, 1, 1, 500)
    used = [fleet.place(0, half) for _ in range(8)]
    assert (fleet.left[0] == 0).all()
    assert not fleet.feasible(np.array([0]), half)[0]
    with pytest.raises(ValueError):
        fleet.place(0, half)
    for u in used:
        fleet.release(0, half, u)
    assert (fleet.left[0] == 1000).all() and fleet.cpu_left[0] == 32000


def scores(policy_name, fleet, shape, workload_shapes=None):
    workload = target_workload(workload_shapes or [shape])
    policy = make_policy(policy_name, FragMeasure(workload, fleet.models))
    return ShapeScoreCache(fleet, policy).lookup(shape)


def test_packing_prefers_a_partly_used_gpu_and_clustering_a_node_of_the_same_tag():
    fleet = fleet2()
    share = PodShape(1000, 1, 1, 300)
    fleet.place(1, share)
    score, dev = scores("gpupacking", fleet, share)
    assert score[1] > score[0] and dev[1] == 0
    score, _ = scores("gpuclustering", fleet, share)
    assert score[1] > score[0]
    score, _ = scores("gpuclustering", fleet, PodShape(1000, 1, 2, 1000))
    assert score[0] > score[1]  # an idle node beats a node holding only another tag


def test_fgd_puts_a_share_where_the_target_workload_loses_least():
    fleet = fleet2()
    fleet.place(1, PodShape(1000, 1, 1, 600))  # b: device 0 has 400 left
    small = PodShape(1000, 1, 1, 400)
    score, dev = scores("fgd", fleet, small, [small, PodShape(1000, 1, 1, 1000)])
    assert score[1] > score[0] and dev[1] == 0  # fills the 400 hole exactly


def test_score_cache_recomputes_only_changed_nodes():
    fleet = fleet2()
    shape = PodShape(1000, 1, 1, 1000)
    cache = ShapeScoreCache(fleet, make_policy("bestfit"))
    cache.lookup(shape)
    assert cache.recomputed == 2
    cache.lookup(shape)
    assert cache.recomputed == 2
    fleet.place(0, shape)
    cache.lookup(shape)
    assert cache.recomputed == 3


def test_arrivals_reach_tune_times_capacity_without_passing_it():
    shapes = [PodShape(1, 1, 1, 500), PodShape(1, 1, 2, 1000), PodShape(1, 1, 0, 0)]
    seq = arrival_sequence(shapes, 10_000, 1.3, seed=3)
    demand = sum(shapes[i].gpu for i in seq)
    assert 13_000 - 2000 < demand <= 13_000
    assert seq == arrival_sequence(shapes, 10_000, 1.3, seed=3)


def test_shuffled_ties_follow_one_seeded_node_order_per_run_whatever_the_list_order():
    names = [f"openb-node-{i:04d}" for i in range(50)]
    ranks = {seed: tie_rank(names, seed, "shuffled") for seed in range(10)}
    for seed, rank in ranks.items():
        assert sorted(rank) == list(range(50))
        assert (rank == tie_rank(names, seed, "shuffled")).all()
        # the order is drawn over the nodes sorted by name, as the artifact renames them
        backwards = tie_rank(names[::-1], seed, "shuffled")
        assert (backwards[::-1] == rank).all()
    firsts = {names[int(rank.argmin())] for rank in ranks.values()}
    assert len(firsts) > 1 and firsts != {names[0]}
    assert list(tie_rank(names[::-1], 3, "name")) == list(range(49, -1, -1))


def test_the_tie_break_decides_where_packing_puts_pods():
    inputs = load_inputs(NODES, PODS)
    runs = {tb: run_one(inputs.nodes, inputs.shapes, inputs.workload, "gpupacking", seed=5, tune=1.3, tie_break=tb)
            for tb in ("shuffled", "name")}
    assert runs["shuffled"].pods == runs["name"].pods
    assert runs["shuffled"].allocated_pct != runs["name"].allocated_pct


@pytest.mark.parametrize("policy", NAMES)
def test_every_policy_keeps_allocation_within_arrivals_and_capacity(policy):
    inputs = load_inputs(NODES, PODS)
    r = run_one(inputs.nodes, inputs.shapes, inputs.workload, policy, seed=5, tune=1.3)
    assert r.arrived_pct[0] == 0 and 120 <= r.arrived_pct[-1] <= 130
    assert all(b >= a for a, b in zip(r.allocated_pct, r.allocated_pct[1:]))
    # a percent is recorded once the arrived demand passes it: by at most one pod's GPUs (8 of 169)
    jump = 100 * 8000 / 169_000
    assert all(alloc <= pct + jump and alloc <= 100 for pct, alloc in zip(r.arrived_pct, r.allocated_pct))
    assert r.placed + r.failed == r.pods and r.failed > 0


def test_the_experiment_json_has_medians_per_arrived_percent_and_is_deterministic():
    argv = ["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(PODS),
            "--policies", "random,fgd", "--seeds", "1-3", "-o", "json"]
    status, out, err = run_cli(argv + ["--jobs", "1"])
    assert status == 0, err
    doc = json.loads(out)
    assert set(doc["policies"]) == {"random", "fgd"}
    fgd = doc["policies"]["fgd"]
    assert list(fgd["unallocated_gpu_pct_at"])[:3] == ["0", "1", "2"]
    assert "100" in fgd["unallocated_gpu_pct_at"] and "131" not in fgd["unallocated_gpu_pct_at"]
    assert set(fgd["unallocated_gpu_pct_at_100_by_seed"]) == {"1", "2", "3"}
    assert doc["inputs"]["pods"] == 600 and doc["modelling"] and doc["settings"]["tie_break"] == "shuffled"
    status2, out2, _ = run_cli(argv + ["--jobs", "2"])

    def results(d):  # without the wall times
        return {name: {k: v for k, v in p.items() if k != "run_wall_s_median"} for name, p in d["policies"].items()}

    assert status2 == 0 and results(json.loads(out2)) == results(doc)


@pytest.mark.parametrize("extra, message", [
    (["--policies", "fgd,tetris"], "unknown tetris"),
    (["--seeds", "9-3"], "--seeds"),
    (["--tune", "0"], "--tune"),
])
def test_bad_settings_are_usage_errors(extra, message):
    status, _, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(PODS), *extra])
    assert status == 2 and message in err


def test_gpu_frag_needs_both_lists_and_other_experiments_refuse_them():
    status, _, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES)])
    assert status == 2 and "--pods" in err
    status, _, err = run_cli(["experiment", "architectures", "--pods", str(PODS)])
    assert status == 2 and "gpu-frag" in err


def test_seed_lists():
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("7,9") == [7, 9]
    assert parse_seeds("3") == [3]


def test_html_report_has_plots_and_modelling_choices(tmp_path):
    pytest.importorskip("matplotlib")
    status, out, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(PODS),
                                "--policies", "bestfit", "--seeds", "1", "--html", str(tmp_path / "r")])
    assert status == 0, err
    page = (tmp_path / "r" / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "modelling choices" in page
    doc = json.loads((tmp_path / "r" / "result.json").read_text())
    bestfit = doc["policies"]["bestfit"]
    # every column and plot is said what it is: the seed range, failed of arrived, the empty
    # artifact column (no published number for this list), the plotted medians
    assert "<th>range over the seeds</th>" in page and "<th>arrived pods (median)</th>" in page
    assert f"<td>{bestfit['failed_pods_median']:g}</td><td>{bestfit['pods_median']:g}</td>" in page
    assert "artifact: no published median for this pod list" in page
    assert "median over the seeds at each whole percent of arrived GPU demand" in page
    assert any(m.startswith("measurement: the cell is sampled after the pod whose arrival first brings")
               for m in doc["modelling"])
    assert "failed: median arrived pods that fit on no node (of" in " ".join(out.split())


def test_the_artifact_column_says_where_it_comes_from_and_when_it_is_not_like_for_like():
    from tools.gpufrag.experiment import published_note

    doc = {"policies": {"fgd": {"published_unallocated_gpu_pct_at_100": 4.77}},
           "settings": {"seeds": list(range(42, 52)), "tune": 1.3, "tie_break": "shuffled"}}
    note = published_note(doc)
    assert "expected_results" in note and "seeds 42-51" in note and "not like for like" not in note
    doc["settings"].update(seeds=[42, 43], tie_break="name")
    assert published_note(doc).endswith("; this run differs in seeds 42-43 (artifact 42-51), tie_break name "
                                        "(artifact shuffled): not like for like")


def test_one_node_frag_agrees_with_the_vectorized_measure():
    from schedulers.gpu.frag import node_frag

    inputs = load_inputs(NODES, PODS)
    fleet = GpuFleet(inputs.nodes)
    measure = FragMeasure(inputs.workload, fleet.models)
    rng = np.random.default_rng(3)
    fleet.left[:] = np.where(fleet.left > 0, rng.integers(0, 1001, fleet.left.shape), 0)
    fleet.cpu_left[:] = rng.integers(0, 64_000, fleet.size)
    vectorized = measure.amount(fleet.cpu_left, fleet.left, fleet.model)
    for i in range(fleet.size):
        model = fleet.models[fleet.model[i]] if fleet.model[i] >= 0 else ""
        frees = [int(x) for x in fleet.left[i, :fleet.gpu_count[i]]]
        assert node_frag(int(fleet.cpu_left[i]), frees, model, inputs.workload) == pytest.approx(vectorized[i])


def test_the_fgd_scorer_prefers_the_machine_whose_hole_the_task_fills():
    from cellstate.devices import MODEL_LABEL, bind, GpuAsk, gpu_capacity
    from cellstate.model import Job, JobKind, Machine
    from cellstate.resources import Resources
    from schedulers.plugin import PluginConfigError
    from schedulers.registry import SCORERS

    scorer = SCORERS["fgd"]({"workload": [{"cpu": 1000, "gpu": 400, "weight": 1}, {"cpu": 1000, "gpu": 1000}]})
    cap = Resources.of(32_000, 100_000, 0, **gpu_capacity(2))
    used = bind(Resources.of(1000, 10, 0, gpu=600), GpuAsk(1, 600), (0,))  # device 0: 400 left
    holed = Machine("a", cap, labels=((MODEL_LABEL, "T4"),), allocated=used, task_count=1)
    idle = Machine("b", cap, labels=((MODEL_LABEL, "T4"),))
    job = Job("j", JobKind.BATCH, 1, Resources.of(1000, 10, 0, gpu=400))
    assert scorer.score(job, holed, holed.free, None) > 0.5 > scorer.score(job, idle, idle.free, None)
    cpu_only = Machine("c", Resources.of(32_000, 100_000))
    assert scorer.score(job, cpu_only, cpu_only.free, None) == 0.5
    learned = SCORERS["fgd"]()  # no workload: learned from the jobs it scores
    assert learned.reads is None
    learned.score(Job("w", JobKind.BATCH, 3, Resources.of(1000, 10, 0, gpu=1000)), idle, idle.free, None)
    assert learned.score(job, holed, holed.free, None) > 0.5 > learned.score(job, idle, idle.free, None)
    for bad in ({"workload": "x"}, {"workload": [{"cpu": 1, "gpu": 1500}]}, {"workload": [{"cpu": 1, "nope": 1}]}):
        with pytest.raises(PluginConfigError):
            SCORERS["fgd"](bad)


@pytest.mark.parametrize("kind, mode", [("batch", "resource-fit"), ("borg", "resource-fit"), ("batch", "sequence")])
def test_schedulers_scoring_by_fgd_replay_a_gpu_burst_with_every_task_on_named_devices(tmp_path, kind, mode):
    from tools.gpufrag.experiment import workload_args
    from tools.gpufrag.timed import write_burst_trace

    trace = tmp_path / "burst.omt"
    info = write_burst_trace(str(NODES), str(PODS), str(trace), seed=1, tune=1.0, rate=5.0, life_scale=0.01)
    chain = {"filters": [{"name": "machine_state"}, {"name": "resources_fit"}, {"name": "constraints"}],
             "scorers": [{"name": "fgd", "args": {"workload": workload_args(load_inputs(NODES, PODS).workload)}}]}
    spec = [{"name": f"s{i}", "kind": kind, "jobs": "all", "conflict_mode": mode, "options": chain} for i in range(3)]
    (tmp_path / "s.json").write_text(json.dumps(spec))
    status, out, err = run_cli(["replay", str(trace), "--schedulers", f"@{tmp_path / 's.json'}", "-o", "json",
                                "--until", str(info["arrival_window_s"] + 300), "--sample-every", "1"])
    assert status == 0, err
    doc = json.loads(out)
    assert doc["check"]["ok"]
    placed = sum(s["tasks_placed"] for s in doc["schedulers"])
    assert placed > info["pods"] * 0.8
    assert max(u["extra"]["gpu"] for u in doc["utilization"]) > 0.1


@pytest.mark.parametrize("rows, message", [
    ("p1,1000,100,0,0,\n", "no pod asks for a GPU"),
    # a list from another cluster: its GPU models named as no node here names them
    ("p1,1000,100,1,1000,H100\np2,1000,100,1,500,H100|A800\np3,1000,100,0,0,\n",
     "no GPU pod can run on " + str(NODES) + "'s nodes: every one names only GPU models no node has "
     "(gpu_spec: A800, H100; the nodes have "),
    # more GPUs (or CPU) than any node has, or a model no node has: nothing can run
    ("p1,1000,100,9,1000,\np2,999000,100,1,500,\np3,1000,100,1,1000,H100\np4,1000,100,0,0,\n",
     "no GPU pod can run on " + str(NODES) + "'s nodes: each asks more CPU, memory or GPUs than any node (of its "
     "models) has (at most 8 GPUs on a node) or names only GPU models no node has"),
])
def test_a_pod_list_no_gpu_pod_of_which_can_run_is_invalid_input(tmp_path, rows, message):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + rows)
    status, out, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(pods), "--seeds", "1"])
    assert status == 65 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_pod_list_without_memory_runs_the_experiment_and_lists_the_absent_column(tmp_path):
    """The nomem variants (hkust-adsl/kubernetes-scheduler-simulator data/csv) leave out memory_mib."""
    pods = tmp_path / "nomem.csv"
    pods.write_text("name,cpu_milli,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                    "scheduled_time\nopenb-pod-0000,12000,1,1000,,LS,Running,0,12537496,0\n"
                    "openb-pod-0001,6000,1,460,,LS,Running,427061,12902960,427061\n")
    listed, stats = read_pods(pods)
    assert [p.memory for p in listed] == [0, 0] and "memory_mib" in stats.absent_columns
    status, out, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(pods), "--seeds", "1",
                                "--policies", "fgd", "-o", "json"])
    assert status == 0, err
    assert "memory_mib" in json.loads(out)["inputs"]["absent_optional_columns"]


def test_pods_larger_than_any_node_are_counted_in_the_inputs(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np1,1000,100,1,500,\n"
                    "p2,1000,100,9,1000,\np3,1000,100,9,1000,\n")
    status, out, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(pods), "--seeds", "1",
                                "--policies", "fgd", "-o", "json"])
    assert status == 0, err
    inputs = json.loads(out)["inputs"]
    assert inputs["pods_no_node_fits"] == 2 and inputs["pods_whose_gpu_spec_no_node_has"] == 0
    status, out, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(pods), "--seeds", "1",
                                "--policies", "fgd"])
    assert status == 0 and "2 larger than any node" in " ".join(out.split()), out


def test_progress_off_a_terminal_is_a_line_per_run():
    status, _, err = run_cli(["experiment", "gpu-frag", "--nodes", str(NODES), "--pods", str(PODS), "--seeds", "1-2",
                              "--policies", "fgd", "--jobs", "1"])
    assert status == 0 and err == "gpu-frag: 1/2 runs\ngpu-frag: 2/2 runs\n", err
