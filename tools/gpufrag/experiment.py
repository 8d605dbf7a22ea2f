"""The FGD paper's experiment (Weng et al., ATC '23, §6.1) over several policies and seeds.

``load_inputs`` reads an openb node list and pod list (``tools.trace.openb``) and says what it
kept; ``run_experiment`` places every seed's arrival sequence with every policy (``run_one``),
in a process pool, and reduces each policy to medians over the seeds at every whole percent of
arrived GPU demand: unallocated GPU (% of capacity) and fragmentation (% of idle GPU).
``to_json`` gives ``{"policies": {NAME: {"unallocated_gpu_pct_at": {"100": x, …}, …}}, …}``.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from schedulers.gpu.fleet import NodeSpec
from schedulers.gpu.policies import NAMES
from schedulers.gpu.workload import PodShape, TargetWorkload, target_workload
from tools.gpufrag.run import TIE_BREAKS, RunResult, run_one
from tools.htmltemplate import Template, join
from tools.trace.openb.lists import OpenbPod, fits_no_node, read_nodes, read_pods

# The artifact's published medians of unallocated GPU % at 100 % arrived, on its pod lists with
# the GPU node list, tune 1.3, seeds 42-51 (medians of the per-seed values in
# experiments/analysis/expected_results/analysis_allo_discrete.csv of
# hkust-adsl/kubernetes-scheduler-simulator): shown beside ours, never used by any run.
PUBLISHED = {
    "openb_pod_list_default": {"random": 13.75, "dotprod": 9.445, "gpuclustering": 8.42, "gpupacking": 8.195,
                               "bestfit": 7.09, "fgd": 4.77},
    "openb_pod_list_gpushare40": {"random": 15.04, "dotprod": 10.665, "gpuclustering": 10.18, "gpupacking": 10.195,
                                  "bestfit": 8.53, "fgd": 6.045},
    "openb_pod_list_multigpu20": {"random": 13.165, "dotprod": 8.185, "gpuclustering": 6.615, "gpupacking": 6.49,
                                  "bestfit": 6.27, "fgd": 4.47},
    "openb_pod_list_gpuspec10": {"random": 13.685, "dotprod": 9.75, "gpuclustering": 8.055, "gpupacking": 7.765,
                                 "bestfit": 6.885, "fgd": 5.30},
}

MODELLING = (
    "pods arrive one at a time in a seeded shuffle of the list, then pods drawn from the list with "
    "replacement are appended while the arrived GPU demand stays within tune x capacity (a list "
    "above it loses random pods); no pod departs; a pod that fits nowhere fails and is not retried",
    "a pod fits a node when CPU, memory, the GPU model (gpu_spec) and its GPU ask (a share of one "
    "device, or whole free devices) fit; nodes without GPUs take only CPU pods",
    "each policy scores feasible nodes 0-100 (integers, as a Kubernetes score plugin); ties go to "
    "the node first in a random order of all nodes drawn once per run from the seed (--tie-break "
    "shuffled, the artifact's simulator: it prefixes every node name with a seeded random permutation "
    "and takes the tied node whose name sorts first), to the node whose given name sorts first "
    "(--tie-break name) or to a uniformly random one at each placement (--tie-break random, upstream "
    "Kubernetes); Random picks uniformly among feasible nodes",
    "devices inside the node: FGD and DotProd choose the device their score prefers; the other "
    "policies put a share on the fullest device it fits (best fit), Random on a random fitting "
    "device; whole GPUs take the lowest-indexed free devices",
    "FGD's target workload: the most frequent pod shapes (CPU, GPU count, GPU milli, models; CPU "
    "pods included) covering 95 % of the pod list, frequencies renormalised",
    "fragmentation of a node: for each target shape, all its idle GPU milli when the shape cannot "
    "run there (or asks no GPU), else the idle milli of devices too small for it; weighted by "
    "frequency; reported as % of the cell's idle GPU",
    "measurement: the cell is sampled after the pod whose arrival first brings the arrived GPU demand to "
    "each whole percent of the GPU capacity (unallocated GPU = 100 - allocated %, with failed pods' demand "
    "counted as arrived; fragmentation 0 when no GPU is idle); each figure and curve is the median over the "
    "seeds at that percent",
)


class ExperimentError(ValueError):
    """A setting of the experiment that cannot be run (a one-line message naming it)."""


@dataclass
class Inputs:
    nodes: list[NodeSpec]
    shapes: list[PodShape]
    workload: TargetWorkload
    source: dict = field(default_factory=dict)


def shape_of_pod(pod: OpenbPod) -> PodShape:
    """What placement sees of an openb pod (the reader gives a CPU pod a ``gpu_milli`` of 0)."""
    return PodShape(pod.cpu, pod.memory, pod.num_gpu, pod.gpu_milli, pod.models)


def load_inputs(nodes_path: str | Path, pods_path: str | Path) -> Inputs:
    """The node specs and pod shapes of two openb lists (``OpenbError`` for bad input)."""
    nodes, node_stats = read_nodes(nodes_path)
    pods, pod_stats = read_pods(pods_path)
    specs = [NodeSpec(n.name, n.cpu, n.memory, n.gpus, n.model) for n in nodes]
    shapes = [shape_of_pod(p) for p in pods]
    models = {n.model for n in nodes if n.gpus}
    unrunnable = sum(1 for s in shapes if s.models and not set(s.models) & models)
    too_big = fits_no_node(((s.cpu, s.memory, s.count, s.models) for s in shapes), nodes)
    workload = target_workload(shapes)
    source = {
        "nodes_file": str(nodes_path), "pods_file": str(pods_path),
        "nodes": len(specs), "gpu_nodes": sum(1 for n in specs if n.gpus), "gpus": sum(n.gpus for n in specs),
        "pods": len(shapes), "cpu_pods": sum(1 for s in shapes if s.count == 0),
        "share_pods": sum(1 for s in shapes if s.shared), "whole_gpu_pods": sum(1 for s in shapes if s.count and not s.shared),
        "pods_with_gpu_spec": sum(1 for s in shapes if s.models), "pods_whose_gpu_spec_no_node_has": unrunnable,
        "pods_no_node_fits": too_big,
        "ignored_columns": sorted(set(node_stats.ignored_columns) | set(pod_stats.ignored_columns)),
        "absent_optional_columns": sorted(pod_stats.absent_columns),
        "target_shapes": len(workload.shapes), "distinct_shapes": workload.distinct,
        "target_coverage": round(workload.covered, 4),
    }
    if not source["gpus"]:
        raise ExperimentError(f"{nodes_path}: no node has a GPU")
    if not any(s.count for s in shapes):
        raise ExperimentError(f"{pods_path}: no pod asks for a GPU")
    if not any(s.count and (not s.models or set(s.models) & models) for s in shapes):
        asked = sorted({m for s in shapes if s.count for m in s.models})
        raise ExperimentError(f"{pods_path}: no GPU pod can run on {nodes_path}'s nodes: every one names only GPU "
                              f"models no node has (gpu_spec: {', '.join(asked[:8])}{', …' if len(asked) > 8 else ''}; "
                              f"the nodes have {', '.join(sorted(models))})")
    gpu_pods = [s for s in shapes if s.count]
    named_out = sum(1 for s in gpu_pods if s.models and not set(s.models) & models)
    if named_out + fits_no_node(((s.cpu, s.memory, s.count, s.models) for s in gpu_pods), nodes) == len(gpu_pods):
        raise ExperimentError(f"{pods_path}: no GPU pod can run on {nodes_path}'s nodes: each asks more CPU, "
                              f"memory or GPUs than any node (of its models) has (at most "
                              f"{max(n.gpus for n in nodes)} GPUs on a node)"
                              + (" or names only GPU models no node has" if named_out else ""))
    return Inputs(specs, shapes, workload, source)


def workload_args(workload: TargetWorkload) -> list[dict]:
    """The target workload as the ``fgd`` scorer's ``workload`` argument."""
    return [{"cpu": s.cpu, "gpu": s.gpu, "models": list(s.models), "weight": round(w, 6)}
            for s, w in zip(workload.shapes, workload.weights)]


def parse_seeds(text: str) -> list[int]:
    """``42-51`` (a range), ``42,43,47`` (a list) or one seed; ExperimentError otherwise."""
    try:
        if "-" in text.strip().lstrip("-"):
            low, high = (int(x) for x in text.split("-", 1))
            if high < low:
                raise ValueError
            seeds = list(range(low, high + 1))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ExperimentError(f"--seeds: expected A-B or a comma list of integers, got {text!r}") from None
    if not seeds or len(seeds) > 1000 or any(s < 0 for s in seeds):
        raise ExperimentError(f"--seeds: 1 to 1000 non-negative seeds, got {text!r}")
    return seeds


def parse_policies(text: str) -> list[str]:
    chosen = [p.strip().lower() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in NAMES]
    if unknown or not chosen:
        raise ExperimentError(f"--policies: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(NAMES)}")
    return list(dict.fromkeys(chosen))


@dataclass
class PolicySummary:
    runs: list[RunResult]

    def median_at(self, series: str) -> dict[str, float]:
        """Median over the seeds of ``series`` at each arrived percent every seed reached."""
        reached = set.intersection(*(set(r.arrived_pct) for r in self.runs))
        out = {}
        for pct in sorted(reached):
            values = [r.at(getattr(r, series), pct) for r in self.runs]
            out[str(pct)] = round(statistics.median(values), 3)
        return out


def _one(args) -> RunResult:
    inputs, policy, seed, tune, tie_break = args
    return run_one(inputs.nodes, inputs.shapes, inputs.workload, policy, seed, tune, tie_break=tie_break)


def run_experiment(inputs: Inputs, policies: list[str], seeds: list[int], tune: float = 1.3,
                   tie_break: str = "shuffled", jobs: int | None = None, progress=None) -> dict:
    """Every (policy, seed) run, reduced to the JSON document (see ``to_json``)."""
    if not 0 < tune <= 5:
        raise ExperimentError(f"--tune must be in (0, 5], got {tune}")
    if tie_break not in TIE_BREAKS:
        raise ExperimentError(f"--tie-break must be one of {', '.join(TIE_BREAKS)}, got {tie_break!r}")
    started = time.perf_counter()
    work = [(inputs, p, s, tune, tie_break) for p in policies for s in seeds]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    results: list[RunResult] = []
    if jobs == 1:
        for i, w in enumerate(work):
            results.append(_one(w))
            if progress:
                progress(i + 1, len(work))
    else:
        with ProcessPoolExecutor(jobs) as pool:
            for i, r in enumerate(pool.map(_one, work)):
                results.append(r)
                if progress:
                    progress(i + 1, len(work))
    by_policy = {p: PolicySummary([r for r in results if r.policy == p]) for p in policies}
    return to_json(inputs, by_policy, seeds, tune, tie_break, time.perf_counter() - started)


def to_json(inputs: Inputs, by_policy: dict[str, PolicySummary], seeds, tune, tie_break, wall_s) -> dict:
    allocated = {p: s.median_at("allocated_pct") for p, s in by_policy.items()}
    stem = Path(inputs.source.get("pods_file", "")).name.split(".")[0]
    published = PUBLISHED.get(stem, {}) if "gpu_node" in Path(inputs.source.get("nodes_file", "")).name else {}
    policies = {}
    for p, summary in by_policy.items():
        by_seed = {str(r.seed): round(100.0 - a, 3) for r in summary.runs
                   if (a := r.at(r.allocated_pct, 100)) is not None}
        at100 = list(by_seed.values())
        policies[p] = {
            "unallocated_gpu_pct_at": {k: round(100.0 - v, 3) for k, v in allocated[p].items()},
            "allocated_gpu_pct_at": allocated[p],
            "frag_pct_of_idle_at": summary.median_at("frag_pct"),
            "unallocated_gpu_pct_at_100_by_seed": by_seed,
            "unallocated_gpu_pct_at_100_range": [min(at100), max(at100)] if at100 else None,
            "failed_pods_median": statistics.median(r.failed for r in summary.runs),
            "pods_median": statistics.median(r.pods for r in summary.runs),
            "run_wall_s_median": round(statistics.median(r.wall_s for r in summary.runs), 3),
            "published_unallocated_gpu_pct_at_100": published.get(p),
        }
    return {"experiment": "gpu-frag", "settings": {"seeds": seeds, "tune": tune, "tie_break": tie_break,
                                                   "policies": list(by_policy)},
            "inputs": inputs.source, "modelling": list(MODELLING), "policies": policies,
            "wall_s": round(wall_s, 2)}


PUBLISHED_SETTINGS = {"seeds": list(range(42, 52)), "tune": 1.3, "tie_break": "shuffled"}
"""The settings the artifact's published medians were run with (on the GPU node list)."""


def published_note(doc: dict) -> str:
    """One line on the artifact column: where its numbers come from, or why it is empty, and
    which of this run's settings differ from the artifact's (then the comparison is not like for
    like)."""
    if all(p["published_unallocated_gpu_pct_at_100"] is None for p in doc["policies"].values()):
        return ("artifact: no published median for this pod list and node list (the artifact published "
                "the four openb_pod_list_{default,gpushare40,multigpu20,gpuspec10} on openb_node_list_gpu_node)")
    settings = doc["settings"]
    differ = [f"{k} {_setting(settings[k])} (artifact {_setting(v)})" for k, v in PUBLISHED_SETTINGS.items()
              if settings[k] != v]
    return ("artifact: the artifact's published median unallocated GPU % at 100 % arrived (hkust-adsl/"
            "kubernetes-scheduler-simulator expected_results; seeds 42-51, tune 1.3, the same lists)"
            + ("; this run differs in " + ", ".join(differ) + ": not like for like" if differ else ""))


def _setting(value) -> str:
    if isinstance(value, list) and value == list(range(value[0], value[-1] + 1)) and len(value) > 1:
        return f"{value[0]}-{value[-1]}"
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


# The page of ``write_html`` (tools.htmltemplate: every value is escaped).
PAGE = Template("<!doctype html><html><head><meta charset='utf-8'><title>gpu-frag</title></head><body>"
                "<h1>gpu-frag</h1><p>settings: <code>$settings</code></p>"
                "<table border=1 cellpadding=4><tr><th>policy</th><th>unallocated GPU % at 100 % arrived (median)</th>"
                "<th>range over the seeds</th><th>artifact's published median</th>"
                "<th>fragmentation % of idle at 100 %</th><th>failed pods (median)</th><th>arrived pods (median)</th>"
                "</tr>$rows</table><p>$published</p><p>failed: arrived pods that fit on no node (not retried); "
                "arrived: the pods of the arrival sequence, up to tune x the GPU capacity in demand</p>"
                "<p>The plots show, per policy, the median over the seeds at each whole percent of arrived GPU "
                "demand (unallocated GPU as % of the cell's GPU capacity; fragmentation as % of the idle GPU)."
                "</p>$plots<h2>inputs</h2><ul>$inputs</ul><h2>modelling choices</h2><ul>$modelling</ul></body></html>")
ROW = Template("<tr><td>$policy</td><td>$unallocated</td><td>$range</td><td>$published</td><td>$frag</td>"
               "<td>$failed</td><td>$arrived</td></tr>")
PLOT = Template("<h2>$label</h2><img src='data:image/png;base64,$data'>")
ITEM = Template("<li>$text</li>")


def _range(rng) -> str:
    return f"{rng[0]:.2f}-{rng[1]:.2f}" if rng else ""


def write_html(doc: dict, directory: str | Path) -> Path:
    """``index.html`` with two plots (unallocated GPU and fragmentation against arrived demand)
    and the summary table, plus ``result.json``; matplotlib is required (checked first)."""
    import base64
    import io
    import json

    from tools.fauxmaster.report.page import require_matplotlib

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    images = []
    for key, label in (("unallocated_gpu_pct_at", "unallocated GPU (% of capacity)"),
                       ("frag_pct_of_idle_at", "fragmentation (% of idle GPU)")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, p in doc["policies"].items():
            xs = [int(k) for k in p[key]]
            ax.plot(xs, list(p[key].values()), label=name)
        ax.set_xlabel("arrived GPU demand (% of capacity)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        images.append((label, base64.b64encode(buf.getvalue()).decode()))
    page = PAGE.render(
        settings=json.dumps(doc["settings"]),
        rows=join(ROW.render(policy=n, unallocated=f"{p['unallocated_gpu_pct_at'].get('100', float('nan')):.2f}",
                             range=_range(p["unallocated_gpu_pct_at_100_range"]),
                             published="" if p["published_unallocated_gpu_pct_at_100"] is None
                             else p["published_unallocated_gpu_pct_at_100"],
                             frag=f"{p['frag_pct_of_idle_at'].get('100', float('nan')):.1f}",
                             failed=f"{p['failed_pods_median']:g}", arrived=f"{p['pods_median']:g}")
                  for n, p in doc["policies"].items()),
        published=published_note(doc),
        plots=join(PLOT.render(label=label, data=data) for label, data in images),
        inputs=join(ITEM.render(text=f"{k}: {v}") for k, v in doc["inputs"].items()),
        modelling=join(ITEM.render(text=m) for m in doc["modelling"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(doc, indent=2) + "\n")
    index = out / "index.html"
    index.write_text(page)
    return index
