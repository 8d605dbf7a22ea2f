"""Msgpack codec of the scheduler stats published under ``stats/{scheduler}`` (leased keys).

The value is a map ``{"v": SCHEMA_VERSION, "t": "stats", <every SchedulerStats field>}``:
unlike cell values, every field is written and every field is required (the key is
rewritten every second, so explicitness costs nothing), but for ``quarantined``, read as 0
when absent (a scheduler from before it). ``hot_machines`` is a list of
``{"machine", "conflicts", "winners": {name: count}}``, ``recent_conflicts`` a list of
``{"at", "job", "machines": [...], "winners": [...]}`` (``winners[i]`` won ``machines[i]``).

Decoding is strict, like ``cellstate.codec.records``: it raises ``CodecError(key, field, …)`` for
non-msgpack bytes, a wrong tag or schema version, a missing or unknown field, a wrong type
(``True`` is not an int; an int is accepted where a float is expected), a negative count,
a negative or non-finite time, rate or percentile, busyness outside 0..1, percentiles out of
order (p50 <= p90 <= p99), an empty or "/"-containing name/kind/machine/job id (any such kind
is accepted: kinds are registered by the policy layer, which this codec does not know),
more than HOT_MACHINES_MAX hot machines or RECENT_CONFLICTS_MAX conflict notes, a winner
count below 1, or winners not parallel to machines. Encoding checks the value decodes back
equal, so whatever is written decodes.
"""

from __future__ import annotations

import sys

from cellstate.codec import fields as fc
from cellstate.codec.envelope import SCHEMA_VERSION, encode, unpack
from cellstate.codec.fields import CodecError
from cellstate.scheduler_stats import (
    ConflictNote, HOT_MACHINES_MAX, HotMachine, RECENT_CONFLICTS_MAX, SchedulerStats,
)

__all__ = ["CodecError", "encode_stats", "decode_stats"]

_TEXT = ("host", "conflict_mode", "commit_mode")
_TIMES = ("started_at", "updated_at")
_COUNTS = ("pid", "attempts", "txns", "commits", "conflicts", "stale_retries", "job_conflicts", "retries",
           "jobs_placed",
           "tasks_placed", "tasks_unplaced")
_RATES = ("jobs_per_s", "placements_per_s")
_PERCENTILES = ("decision_ms_p50", "decision_ms_p90", "decision_ms_p99")
_STATS_FIELDS = ("name", "kind") + _TEXT + _TIMES + _COUNTS + _RATES + ("busyness",) + _PERCENTILES + (
    "hot_machines", "recent_conflicts")
_OPTIONAL = ("quarantined",)  # written always; read as 0 when absent (stats of schedulers before it)
_ALLOWED = frozenset(("v", "t") + _STATS_FIELDS + _OPTIONAL)
_HOT_FIELDS = frozenset(("machine", "conflicts", "winners"))
_NOTE_FIELDS = frozenset(("at", "job", "machines", "winners"))


def encode_stats(stats: SchedulerStats) -> bytes:
    """Msgpack bytes of a scheduler's stats; CodecError if they would not decode back equal."""
    return encode(f"stats {getattr(stats, 'name', '?')}", stats, _stats_map, _stats_from_map)


def decode_stats(key: str, raw: bytes) -> SchedulerStats:
    """The SchedulerStats stored under ``key``; CodecError naming key and field otherwise."""
    return _stats_from_map(key, unpack(key, raw, "stats"))


# ---------------------------------------------------------------------- encoding


def _stats_map(s: SchedulerStats) -> dict:
    d = {"v": SCHEMA_VERSION, "t": "stats"}
    for name in _STATS_FIELDS[:-2]:
        d[name] = getattr(s, name)
    d["hot_machines"] = [{"machine": h.machine, "conflicts": h.conflicts, "winners": dict(h.winners)}
                         for h in s.hot_machines]
    d["recent_conflicts"] = [{"at": n.at, "job": n.job, "machines": list(n.machines), "winners": list(n.winners)}
                             for n in s.recent_conflicts]
    d["quarantined"] = s.quarantined
    return d


# ---------------------------------------------------------------------- decoding


def _stats_from_map(key: str, d: dict) -> SchedulerStats:
    fc.require(key, "", d, _STATS_FIELDS)
    fc.no_unknown(key, "", d, _ALLOWED)
    values = {"name": fc.ident(key, "name", d["name"]), "kind": sys.intern(fc.ident(key, "kind", d["kind"]))}
    values.update((f, fc.text(key, f, d[f])) for f in _TEXT)
    values.update((f, fc.seconds(key, f, d[f])) for f in _TIMES + _RATES + _PERCENTILES)
    values.update((f, fc.integer(key, f, d[f])) for f in _COUNTS)
    values["busyness"] = _fraction(key, "busyness", d["busyness"])
    _check_order(key, values)
    values["hot_machines"] = _bounded(key, "hot_machines", d["hot_machines"], HOT_MACHINES_MAX, _hot_machine)
    values["recent_conflicts"] = _bounded(key, "recent_conflicts", d["recent_conflicts"], RECENT_CONFLICTS_MAX,
                                          _conflict_note)
    values["quarantined"] = fc.integer(key, "quarantined", d.get("quarantined", 0))
    return SchedulerStats(**values)


def _fraction(key: str, field: str, x) -> float:
    t = type(x)
    if (t is not float and t is not int) or not (0 <= x <= 1):
        raise fc.expected(key, field, "a number between 0 and 1", x)
    return float(x)


def _check_order(key: str, values: dict) -> None:
    p50, p90, p99 = (values[f] for f in _PERCENTILES)
    if not p50 <= p90 <= p99:
        raise CodecError(key, "decision_ms_p90" if p50 > p90 else "decision_ms_p99",
                         f"percentiles out of order: p50={p50}, p90={p90}, p99={p99}")


def _bounded(key: str, field: str, x, limit: int, decode_item) -> tuple:
    items = fc.sequence(key, field, x)
    if len(items) > limit:
        raise CodecError(key, field, f"at most {limit} entries allowed, got {len(items)}")
    return tuple(decode_item(key, f"{field}[{i}]", item) for i, item in enumerate(items))


def _hot_machine(key: str, field: str, h) -> HotMachine:
    fc.mapping(key, field, h)
    fc.require(key, field + ".", h, ("machine", "conflicts", "winners"))
    fc.no_unknown(key, field + ".", h, _HOT_FIELDS)
    winners = fc.mapping(key, field + ".winners", h["winners"])
    for name, count in winners.items():
        fc.text(key, field + ".winners", name)
        fc.integer(key, f"{field}.winners.{name}", count, 1)
    return HotMachine(fc.ident(key, field + ".machine", h["machine"]),
                      fc.integer(key, field + ".conflicts", h["conflicts"]), tuple(winners.items()))


def _conflict_note(key: str, field: str, n) -> ConflictNote:
    fc.mapping(key, field, n)
    fc.require(key, field + ".", n, ("at", "job", "machines", "winners"))
    fc.no_unknown(key, field + ".", n, _NOTE_FIELDS)
    machines = fc.sequence(key, field + ".machines", n["machines"])
    winners = fc.sequence(key, field + ".winners", n["winners"])
    for i, machine in enumerate(machines):
        fc.ident(key, f"{field}.machines[{i}]", machine)
    for i, winner in enumerate(winners):
        fc.text(key, f"{field}.winners[{i}]", winner)
    if len(winners) != len(machines):
        raise CodecError(key, field + ".winners",
                         f"expected one winner per machine ({len(machines)}), got {len(winners)}")
    at = fc.seconds(key, field + ".at", n["at"])
    return ConflictNote(at, fc.ident(key, field + ".job", n["job"]), tuple(machines), tuple(winners))

