"""The public extension API (docs/EXTENDING.md): register a scheduler kind and filter or scorer
plugins, and load the modules that do.

    from schedulers.api import register_kind, register_filter, register_scorer

A *kind* is a factory ``factory(name, seed, config) -> scheduler``; a scheduler has a ``name``,
a ``kind``, ``decide(job_entry, task_indices, view) -> Decision`` and ``attach(host) ->
Attachment`` (what it asks of the process that runs it and offers back, ``omega.host``;
``attach = needs_nothing`` when nothing). A *filter* has a
``name``, ``reads`` and ``fits(job, machine, free, placed_here) -> Verdict``; a *scorer* a
``name``, ``reads`` and ``score(job, machine, free, ctx) -> float`` in [0, 1]; a plugin is
registered with a factory ``factory(args) -> plugin`` and may declare ``traits``
(``FilterTraits``, ``ScorerTraits``) so that the fast paths stay exact with it.

Plugin modules register what they define when imported. ``load_plugins`` imports the modules
given (``--plugin MODULE`` of ``omega scheduler run``, ``omega replay`` and ``omega experiment``)
and, first, every entry point of the group ``omega.plugins`` of the installed distributions (a
module, or a callable called with no arguments).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Iterable

from cellstate.plan import Claim, JobEntry, MachineEntry
from omega.host import Attachment, SchedulerHost
from omega.retry import RetryPolicy
from schedulers.base import Decision, Scheduler, needs_nothing
from schedulers.chain_spec import ChainConfig, PluginSpec, parse_chain
from schedulers.chains import KINDS, make_scheduler, register_kind, retry_policy_for
from schedulers.pipeline import Pipeline
from schedulers.plugin import (
    JOB, ROOM, Filter, FilterTraits, JobPlacement, PluginConfigError, ScoreContext, Scorer, ScorerTraits, Verdict,
    build_args,
)
from schedulers.registry import FILTERS, SCORERS, make_filter, make_scorer, register_filter, register_scorer

__all__ = [
    "ENTRY_POINT_GROUP", "JOB", "ROOM", "Attachment", "ChainConfig", "Claim", "Decision", "Filter",
    "FilterTraits", "JobEntry", "JobPlacement", "MachineEntry", "Pipeline", "PluginConfigError",
    "PluginLoadError", "PluginSpec", "RetryPolicy", "ScoreContext", "Scheduler", "SchedulerHost", "Scorer",
    "ScorerTraits", "Verdict", "build_args", "filter_names", "kind_names", "load_plugins", "make_filter",
    "make_scheduler", "make_scorer", "needs_nothing", "parse_chain", "register_filter", "register_kind",
    "register_scorer", "retry_policy_for", "scorer_names",
]

ENTRY_POINT_GROUP = "omega.plugins"


class PluginLoadError(Exception):
    """A plugin module or entry point could not be loaded (the message is one line)."""


def kind_names() -> list[str]:
    """The scheduler kinds known now (built in and registered), sorted."""
    return sorted(KINDS)


def filter_names() -> list[str]:
    return sorted(FILTERS)


def scorer_names() -> list[str]:
    return sorted(SCORERS)


def load_plugins(modules: Iterable[str] = (), *, entry_points_too: bool = True) -> list[str]:
    """Load the ``omega.plugins`` entry points (``entry_points_too``), then import ``modules``
    in order; the names loaded. A module or entry point that fails raises PluginLoadError
    naming it and the cause in one line."""
    loaded = []
    if entry_points_too:
        for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
            where = f"entry point {point.name!r} ({point.value}) of group {ENTRY_POINT_GROUP}"
            try:
                target = point.load()
                if callable(target):
                    target()
            except Exception as exc:  # a plugin's own failure, whatever it is: one line naming it
                raise PluginLoadError(f"{where}: {_one_line(exc)}") from exc
            loaded.append(point.name)
    for module in modules:
        if not isinstance(module, str) or not module.strip():
            raise PluginLoadError(f"plugin module must be a module name, got {module!r}")
        try:
            importlib.import_module(module.strip())
        except Exception as exc:
            raise PluginLoadError(f"plugin {module!r}: {_one_line(exc)}") from exc
        loaded.append(module.strip())
    return loaded


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
