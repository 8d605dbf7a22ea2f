"""Chain files: TOML tables naming a scheduler kind, its chain and its options.

``load_chain_config(path)`` reads a file of scheduler tables (see
``schedulers/default_chains.toml``); every error names the file, the table, the entry, the
plugin and the field. The chains themselves (``ChainConfig``, ``PluginSpec``, ``parse_chain``,
``default_chain``) are ``schedulers.chain_spec``'s, re-exported here: this module sits above
the scheduler kinds (``schedulers.chains``), which it validates and builds the tables with,
and nothing in ``schedulers`` imports it (docs/LAYERS.md).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from schedulers.chain_spec import DEFAULT_CHAINS, ChainConfig, PluginSpec, _tuples, default_chain, parse_chain
from schedulers.chains import KINDS, make_scheduler
from schedulers.plugin import PluginConfigError

__all__ = ["DEFAULT_CHAINS", "ChainConfig", "PluginSpec", "SchedulerTable", "default_chain", "load_chain_config",
           "parse_chain", "parse_chain_file"]


@dataclass(frozen=True, slots=True)
class SchedulerTable:
    """One table of a chain file: a scheduler ``kind``, its chain and its other options."""

    name: str
    kind: str
    chain: ChainConfig
    options: Mapping[str, Any] = field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        """The mapping ``chains.make_scheduler(kind, ...)`` takes."""
        return {**self.options, "chain": self.chain}


def parse_chain_file(data: Mapping[str, Any], source: str) -> dict[str, SchedulerTable]:
    """Scheduler configs of a parsed chain file: one per top-level table."""
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
        out[name] = SchedulerTable(name, kind, chain, options)
    return out


def load_chain_config(path: str | Path) -> dict[str, SchedulerTable]:
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


def _check_options(config: SchedulerTable, source: str) -> None:
    try:
        make_scheduler(config.kind, config.name, 0, config.as_config())
    except (PluginConfigError, ValueError) as err:
        raise PluginConfigError(f"{source}: [{config.name}]: {err}") from None
