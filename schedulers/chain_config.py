"""Chains from configuration: which plugins, in which order, with which weights and args.

A chain is ``filters`` (run in order, cheapest first; the first failure decides) and
``scorers`` (each with a ``weight`` > 0 and a ``stage`` >= 0: scorers of one stage form a
weighted mean normalized to [0, 1]; stages compare lexicographically, lowest stage first).
``load_chain_config(path)`` reads a TOML file of scheduler tables (see
``schedulers/default_chains.toml``); every error names the file, the table, the entry,
the plugin and the field.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from schedulers.pipeline import Pipeline
from schedulers.plugin import PluginConfigError
from schedulers.registry import FILTERS, SCORERS, make_filter, make_scorer

DEFAULT_CHAINS = Path(__file__).with_name("default_chains.toml")
_FILTER_KEYS = frozenset({"name", "args"})
_SCORER_KEYS = frozenset({"name", "args", "weight", "stage"})


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One plugin of a chain: its registry name, args (fields of its args dataclass),
    and for a scorer its weight and ranking stage."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    stage: int = 0


@dataclass(frozen=True, slots=True)
class ChainConfig:
    """Filters in order and weighted scorers; ``pipeline()`` builds the plugins."""

    filters: tuple[PluginSpec, ...]
    scorers: tuple[PluginSpec, ...] = ()

    def pipeline(self) -> Pipeline:
        filters = [make_filter(spec.name, dict(spec.args)) for spec in self.filters]
        stages: dict[int, list] = {}
        for spec in self.scorers:
            stages.setdefault(spec.stage, []).append((make_scorer(spec.name, dict(spec.args)), spec.weight))
        return Pipeline(filters, [stages[s] for s in sorted(stages)])


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """One table of a chain file: a scheduler ``kind``, its chain and its other options."""

    name: str
    kind: str
    chain: ChainConfig
    options: Mapping[str, Any] = field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        """The mapping ``chains.make_scheduler(kind, ...)`` takes."""
        return {**self.options, "chain": self.chain}


def parse_chain(raw: Mapping[str, Any], where: str) -> ChainConfig:
    """A validated ChainConfig from ``{"filters": [...], "scorers": [...]}``; every plugin is
    built once so bad args fail here. ``where`` prefixes error messages."""
    filters = _plugin_list(raw.get("filters"), "filters", FILTERS, _FILTER_KEYS, where)
    if not filters:
        raise PluginConfigError(f"{where}: filters: a chain needs at least one filter")
    scorers = _plugin_list(raw.get("scorers", []), "scorers", SCORERS, _SCORER_KEYS, where)
    chain = ChainConfig(tuple(filters), tuple(scorers))
    try:
        chain.pipeline()
    except PluginConfigError as err:
        raise PluginConfigError(f"{where}: {err}") from None
    return chain


def _plugin_list(raw: Any, what: str, table: Mapping, keys: frozenset[str], where: str) -> list[PluginSpec]:
    if not isinstance(raw, list):
        raise PluginConfigError(f"{where}: {what} must be a list of plugin tables, got {raw!r}")
    specs, seen = [], set()
    for i, entry in enumerate(raw):
        at = f"{where}: {what}[{i}]"
        spec = _plugin_spec(entry, at, table, keys)
        if spec.name in seen:
            raise PluginConfigError(f"{at} ({spec.name}): listed twice")
        seen.add(spec.name)
        specs.append(spec)
    return specs


def _plugin_spec(entry: Any, at: str, table: Mapping, keys: frozenset[str]) -> PluginSpec:
    if not isinstance(entry, Mapping) or "name" not in entry:
        raise PluginConfigError(f"{at}: expected a table with a name, got {entry!r}")
    name = entry["name"]
    if name not in table:
        raise PluginConfigError(f"{at}: unknown plugin {name!r}; known: {sorted(table)}")
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise PluginConfigError(f"{at} ({name}): unknown fields {unknown}; known: {sorted(keys)}")
    args = entry.get("args", {})
    if not isinstance(args, Mapping):
        raise PluginConfigError(f"{at} ({name}): args must be a table, got {args!r}")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
        raise PluginConfigError(f"{at} ({name}): weight must be a number > 0, got {weight!r}")
    stage = entry.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or stage < 0:
        raise PluginConfigError(f"{at} ({name}): stage must be an int >= 0, got {stage!r}")
    spec = PluginSpec(name, _tuples(args), float(weight), stage)
    try:
        table[name](dict(spec.args))
    except PluginConfigError as err:
        raise PluginConfigError(f"{at} ({name}): {err}") from None
    return spec


def _tuples(args: Mapping[str, Any]) -> dict[str, Any]:
    """TOML arrays as tuples (the args dataclasses are frozen and hashable)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}


def parse_chain_file(data: Mapping[str, Any], source: str) -> dict[str, SchedulerConfig]:
    """Scheduler configs of a parsed chain file: one per top-level table."""
    from schedulers.chains import KINDS

    out = {}
    for name, table in data.items():
        where = f"{source}: [{name}]"
        if not isinstance(table, Mapping):
            raise PluginConfigError(f"{where}: expected a table, got {table!r}")
        kind = table.get("kind", name)
        if kind not in KINDS:
            raise PluginConfigError(f"{where}: kind: unknown scheduler kind {kind!r}; known: {sorted(KINDS)}")
        chain = parse_chain(table, where)
        options = {k: _tuples({k: v})[k] for k, v in table.items() if k not in ("kind", "filters", "scorers")}
        out[name] = SchedulerConfig(name, kind, chain, options)
    return out


def load_chain_config(path: str | Path) -> dict[str, SchedulerConfig]:
    """Scheduler configs of a TOML chain file, keyed by table name; PluginConfigError naming
    the file, table, entry, plugin and field for anything wrong (OSError if unreadable)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PluginConfigError(f"{path}: not valid TOML: {err}") from None
    configs = parse_chain_file(data, str(path))
    for config in configs.values():  # options are checked by building the scheduler once
        _check_options(config, str(path))
    return configs


def _check_options(config: SchedulerConfig, source: str) -> None:
    from schedulers.chains import make_scheduler

    try:
        make_scheduler(config.kind, config.name, 0, config.as_config())
    except (PluginConfigError, ValueError) as err:
        raise PluginConfigError(f"{source}: [{config.name}]: {err}") from None


@cache
def default_chain(table: str) -> ChainConfig:
    """The chain of ``table`` in ``schedulers/default_chains.toml``."""
    data = tomllib.loads(DEFAULT_CHAINS.read_text())
    if table not in data:
        raise PluginConfigError(f"{DEFAULT_CHAINS}: no table [{table}]")
    return parse_chain(data[table], f"{DEFAULT_CHAINS}: [{table}]")
