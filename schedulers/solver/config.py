"""Configuration of the solver scheduler (``kind = "solver"``), from TOML or a dict.

Keys: ``time_limit_s`` (CP-SAT wall-time limit per solve), ``max_tasks`` (tasks per solve;
the rest of a batch goes to the greedy scorer), ``candidates`` (candidate machines per job),
``fallback`` ("borg": the Borg scorer's greedy choice when the solver has no solution;
"none"), ``workers`` (CP-SAT threads), ``constraints`` and ``objectives`` (declaration names,
``schedulers/solver/policies.py``), ``weights`` (objective name -> int weight),
``lookahead_jobs`` (other pending jobs solved with each job, their plans kept for their
turn), ``prefilter`` (pre-filter candidates with the Borg chain's hard filters),
``deterministic_time`` (CP-SAT's deterministic work limit per solve phase, in its
"deterministic seconds"; with one worker the same model then gets the same answer on any
host and load, as replays need; ``time_limit_s`` stays a wall-clock safety net).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from schedulers.solver import policies  # noqa: F401  (registers the built-in declarations)
from schedulers.plugin import PluginConfigError, build_args
from schedulers.solver.decl import CONSTRAINT, OBJECTIVE, resolve

DEFAULT_CONSTRAINTS = ("machine_state", "capacity", "different_machine", "max_per_machine", "zone",
                       "attribute", "gang")
DEFAULT_OBJECTIVES = ("placed", "balance", "domain_spread")
DEFAULT_WEIGHTS = {"balance": 1, "max_load": 100, "domain_spread": 100}
FALLBACKS = ("borg", "none")


@dataclass(frozen=True, slots=True)
class SolverConfig:
    """See the module docstring; every value is checked, a bad one names its key."""

    time_limit_s: float = 0.5
    max_tasks: int = 256
    candidates: int = 48
    fallback: str = "borg"
    workers: int = 1
    constraints: tuple[str, ...] = DEFAULT_CONSTRAINTS
    objectives: tuple[str, ...] = DEFAULT_OBJECTIVES
    weights: Mapping[str, int] = field(default_factory=dict)
    lookahead_jobs: int = 0
    prefilter: bool = True
    deterministic_time: float | None = None

    def __post_init__(self) -> None:
        work = self.deterministic_time
        if work is not None and (isinstance(work, bool) or not isinstance(work, (int, float)) or not work > 0):
            raise PluginConfigError(f"solver: deterministic_time must be a number > 0, got {work!r}")
        limit = self.time_limit_s
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
            raise PluginConfigError(f"solver: time_limit_s must be a number > 0, got {limit!r}")
        for key, low in (("max_tasks", 1), ("candidates", 1), ("workers", 1), ("lookahead_jobs", 0)):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise PluginConfigError(f"solver: {key} must be an int >= {low}, got {value!r}")
        if self.fallback not in FALLBACKS:
            raise PluginConfigError(f"solver: fallback must be one of {list(FALLBACKS)}, got {self.fallback!r}")
        if not isinstance(self.prefilter, bool):
            raise PluginConfigError(f"solver: prefilter must be a bool, got {self.prefilter!r}")
        constraints = tuple(d.name for d in resolve(self.constraints, CONSTRAINT))
        objectives = tuple(d.name for d in resolve(self.objectives, OBJECTIVE))
        if "capacity" not in constraints:
            raise PluginConfigError("solver: constraints must include 'capacity' (claims must fit)")
        if "placed" not in objectives:
            raise PluginConfigError("solver: objectives must include 'placed' (else nothing is placed)")
        object.__setattr__(self, "constraints", constraints)
        object.__setattr__(self, "objectives", objectives)
        object.__setattr__(self, "weights", _weights(self.weights, objectives))

    def weight(self, objective: str) -> int:
        return self.weights.get(objective, DEFAULT_WEIGHTS.get(objective, 1))

    @staticmethod
    def of(raw: SolverConfig | Mapping[str, Any] | None) -> SolverConfig:
        """A config from an instance, a mapping of its keys, or None (defaults); errors name the key."""
        return build_args(SolverConfig, raw, "solver")


def _weights(raw: Any, objectives: tuple[str, ...]) -> dict[str, int]:
    if not isinstance(raw, Mapping):
        raise PluginConfigError(f"solver: weights must map objective names to ints, got {raw!r}")
    out = {}
    for name, weight in raw.items():
        if name not in objectives:
            raise PluginConfigError(f"solver: weight for {name!r}, which is not among objectives {list(objectives)}")
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
            raise PluginConfigError(f"solver: weight of {name!r} must be an int >= 1, got {weight!r}")
        out[name] = weight
    return out
