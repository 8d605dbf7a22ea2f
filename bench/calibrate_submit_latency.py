"""Calibrate the replay's submission-to-scheduler latency on a training trace, then validate it
on held-out parts (issue 30; docs/EXPERIMENTS.md, "Calibrate, then validate").

Procedure (stated before looking at the held-out parts): replay the training trace (default:
Google-2011 part 0 alone, the overcommit cell, every other setting the default) with no
latency; over the part's tasks each side placed (the two sets are nearly the same: its scheduled
ratio is ~1), take the nearest-rank ``--quantile`` (default 1: the floor of the delays, robust to
a handful of outliers) of each side's submit -> placed delays; the latency is ``max(0, real - replay)``, rounded to 0.01 s:
the part of the real cell's shortest delays that no decision in the model accounts for.

Validation (``--validate TRACE``, e.g. parts 0-4 imported as one trace): replay it with no
latency and with the calibrated one and print each part window's figures side by side (the
goals per window: t=0 pending <= 0.01, scheduled ratio in [0.95, 1.05], delay ratios in
[0.5, 2]). ``--latency S`` skips the calibration. ``--until S`` bounds each replay.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_replay_google import imported_trace  # noqa: E402
from omega.stats import percentile  # noqa: E402
from tools.fauxmaster.replay import ReplayConfig, replay  # noqa: E402

INF = float("inf")


def calibrate(trace: str, quantile: float, until: float | None) -> float:
    """The latency by the module docstring's procedure."""
    started = time.perf_counter()
    f = replay(trace, ReplayConfig(until=until, submit_latency_s=0.0)).fidelity  # (not the header's)
    real = [d for d in f.real_delays if d != INF]  # sorted
    rep = [d for d in f.replay_delays if d != INF]
    r, p = percentile(real, quantile), percentile(rep, quantile)
    latency = round(max(0.0, r - p), 2)
    print(f"training {trace}: {len(real):,} tasks placed by the real cell, {len(rep):,} by the replay; "
          f"p{quantile:g} real {r:.3f} s, replay {p:.3f} s "
          f"(min real {real[0]:.3f} s, replay {rep[0]:.3f} s) -> submit latency {latency:.2f} s "
          f"[{time.perf_counter() - started:.0f} s]")
    return latency


def validate(trace: str, latency: float, until: float | None) -> None:
    rows = {}
    for late in (0.0, latency):
        started = time.perf_counter()
        result = replay(trace, ReplayConfig(until=until, submit_latency_s=late))
        rows[late] = result.fidelity.windows
        print(f"replayed {trace} with submit latency {late:.2f} s: {result.sim_time_s:,.0f} virtual s "
              f"[{time.perf_counter() - started:.0f} s]", flush=True)
    print("| part | window s | latency s | t=0 pending | scheduled ratio | delay p50 ratio (replay / real s) "
          "| delay p90 ratio (replay / real s) | goals |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for late, windows in rows.items():
        for w in windows:
            missed = [k for k, ok in w["goals"].items() if ok is False]
            print(f"| {w['part']} | {w['start_s']:,.0f}-{w['end_s']:,.0f} | {late:.2f} | "
                  f"{_num(w['initial_pending_fraction'], 4)} | {_num(w['scheduled_ratio'])} | "
                  f"{_num(w['delay_p50_ratio'])} ({w['replay_delay_p50_s']:.2f} / {w['real_delay_p50_s']:.2f}) | "
                  f"{_num(w['delay_p90_ratio'])} ({w['replay_delay_p90_s']:.2f} / {w['real_delay_p90_s']:.2f}) | "
                  f"{'met' if not missed else 'missed: ' + ', '.join(missed)} |")


def _num(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default=None, help="training trace (default: part 0 alone, overcommit cell)")
    parser.add_argument("--validate", default=None, metavar="TRACE", help="held-out trace (e.g. parts 0-4)")
    parser.add_argument("--quantile", type=float, default=1.0, help="the delay quantile matched (default 1)")
    parser.add_argument("--latency", type=float, default=None, help="skip the calibration: use this latency")
    parser.add_argument("--until", type=float, default=None, help="stop each replay at this virtual time")
    args = parser.parse_args()
    latency = args.latency
    if latency is None:
        latency = calibrate(args.train or str(imported_trace("overcommit")), args.quantile, args.until)
    if args.validate:
        validate(args.validate, latency, args.until)
    return 0


if __name__ == "__main__":
    sys.exit(main())
