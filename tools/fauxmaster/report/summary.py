"""The figures of replay results side by side (``summary_rows``: the page's table of several runs and
``omega report``'s text table) and the utilization averaged over a result's samples."""

from __future__ import annotations

from pathlib import Path

from tools.fauxmaster.report.result import Run, extra_names


def utilization_means(samples: list[dict]) -> dict[str, float]:
    """cpu, memory and each extra resource's (gpu, …) utilization averaged over ``samples`` (dicts as in
    the JSON; a sample without an extra resource counts 0 for it); empty when there are no samples."""
    if not samples:
        return {}
    names = list(dict.fromkeys(name for u in samples for name in u.get("extra", {})))
    means = {"cpu": sum(u["cpu"] for u in samples) / len(samples),
             "memory": sum(u["memory"] for u in samples) / len(samples)}
    for name in names:
        means[name] = sum(u.get("extra", {}).get(name, 0.0) for u in samples) / len(samples)
    return means


def slowdown_text(sd: dict) -> str:
    """One line of a result's ``slowdown`` (``tools.fauxmaster.metrics.slowdown``)."""
    def num(value, spec):
        return "n/a" if value is None else format(value, spec)

    recorded = (f"; {sd['recorded_at_t0']:,} placed whole by the recorded t = 0 state left out"
                if sd.get("recorded_at_t0") else "")
    return (f"bounded slowdown (threshold {sd['threshold_s']:g} s) over {sd['jobs']:,} jobs with a run time fully "
            f"placed ({sd['never']:,} never{recorded}): mean {num(sd['mean'], ',.2f')}, median {num(sd['median'], ',.2f')}, "
            f"p90 {num(sd['p90'], ',.2f')}; makespan {num(sd['makespan_s'], ',.0f')} s over {sd['jobs_ended']:,} "
            f"jobs ended ({sd['jobs_not_ended']:,} submitted jobs had not ended by the stop)")


def summary_rows(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """The figures of ``runs`` side by side: (what, one value per run), "n/a" where a result lacks it."""
    def fmt(value, spec=",.0f"):
        return "n/a" if value is None else format(value, spec)

    def wait(d, key):
        w = d[key]
        return f"{w['mean']:.2f} / {w['p90']:.2f} / {w['p99']:.2f}"

    def never(d, key):
        cdf = d.get("wait_cdf")
        return "n/a" if not cdf else f"{cdf[key]['never']:,} of {cdf['jobs']:,}"

    def mean(d, key):
        value = utilization_means(d["utilization"]).get(key)
        return "n/a" if value is None else fmt(value, ".3f")

    def bsld(d):
        sd = d.get("slowdown")
        if not sd or sd.get("mean") is None:
            return "n/a"
        return f"{sd['mean']:,.2f} / {sd['median']:,.2f} / {sd['p90']:,.2f}"

    def fidelity(d, key):
        f = d.get("fidelity")
        return "n/a" if not f else fmt(f.get(key), ".3f")

    rows = [("trace", lambda d: Path(d["trace"]).name),
            ("virtual s", lambda d: fmt(d["sim_time_s"])),
            ("wall s", lambda d: fmt(d.get("wall_time_s"), ",.2f")),
            ("virtual s per wall s", lambda d: fmt(d.get("speedup"))),
            ("trace events", lambda d: fmt(d["events"])),
            ("jobs submitted", lambda d: fmt(d["jobs_submitted"])),
            ("unscheduled at the end", lambda d: fmt(d["jobs_unscheduled"])),
            ("wait to first attempt mean / p90 / p99 s", lambda d: wait(d, "wait_to_first_attempt")),
            ("wait to fully placed mean / p90 / p99 s", lambda d: wait(d, "wait_to_placed")),
            ("never attempted", lambda d: never(d, "to_first_attempt")),
            ("never fully placed", lambda d: never(d, "to_placed")),
            ("bounded slowdown mean / median / p90", bsld),
            ("makespan s", lambda d: fmt((d.get("slowdown") or {}).get("makespan_s"))),
            ("cpu utilization (mean of samples)", lambda d: mean(d, "cpu")),
            ("memory utilization (mean of samples)", lambda d: mean(d, "memory")),
            *((f"{name} utilization (mean of samples)", lambda d, name=name: mean(d, name))
              for name in extra_names(runs)),
            ("utilization sample interval s", lambda d: fmt(d.get("utilization_interval_s") or None))]
    if any(r.data.get("fidelity") for r in runs):
        rows += [(f"fidelity {key}", lambda d, key=key: fidelity(d, key))
                 for key in ("scheduled_ratio", "delay_p50_ratio", "delay_p90_ratio", "initial_pending_fraction")]
    return [(what, [value(r.data) for r in runs]) for what, value in rows]




NOT_SETTINGS = ("cell", "endpoints", "check", "job_records", "store_history")
"""Config keys that do not change a replay's figures (the store's cell name, where the store runs,
whether the final cell is checked, what else is kept): left out of the settings compared."""


def settings_of(run: Run) -> dict[str, str]:
    """The settings of ``run`` as (name, value text): the trace, the cell (trace header), and each
    config key (a scheduler's as ``scheduler NAME KEY``), in a stable order."""
    import json

    d = run.data
    out = {"trace": str(d.get("trace", "")), "the cell (trace header)": run.capacity_model
           or (d.get("fidelity") or {}).get("capacity_model", "")}
    config = d.get("config") or {}
    for key, value in sorted(config.items()):
        if key == "schedulers":
            for s in value:
                for field, v in sorted(s.items()):
                    if field != "name":
                        out[f"scheduler {s.get('name', '?')} {field}"] = _text(v, json)
        elif key not in NOT_SETTINGS:
            out[key] = _text(value, json)
    return out


def _text(value, json) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def settings_compared(runs: list[Run]) -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    """(the settings that differ between ``runs``: (name, one value per run, "n/a" where a run lacks it),
    the settings every run shares: (name, value)); empty values are left out of both."""
    each = [settings_of(r) for r in runs]
    names = list(dict.fromkeys(name for s in each for name in s))
    differ, shared = [], []
    for name in names:
        values = [s.get(name, "n/a") for s in each]
        if len(set(values)) > 1:
            differ.append((name, values))
        elif values[0] not in ("", "n/a"):
            shared.append((name, values[0]))
    return differ, shared
