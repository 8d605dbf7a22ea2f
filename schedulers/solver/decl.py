"""Declarations of the solver scheduler (the DCM idea, Suresh et al. OSDI'20): every hard
constraint and every objective is a small ``Declaration`` — a name, the job fields it reads,
and a function that adds it to a ``SolverModel`` — kept in a registry and chosen by name in
the scheduler's config, as plugin chains are. The model's code knows no policy; adding a
policy is adding a declaration (``schedulers/solver/policies.py`` holds the built-in ones).

A constraint's ``add(model)`` posts constraints and returns None. An objective's returns an
``ObjectiveTerm``: a cost to minimize; ``dominant`` terms (placing tasks) come first, the
weighted sum of the others second, lexicographically (see ``SolverModel.solve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from schedulers.plugin import PluginConfigError

if TYPE_CHECKING:
    from schedulers.solver.model import SolverModel

CONSTRAINT = "constraint"
OBJECTIVE = "objective"


@dataclass(frozen=True, slots=True)
class ObjectiveTerm:
    """A cost to minimize (a CP-SAT linear expression); ``dominant``: optimized first."""

    cost: Any
    dominant: bool = False


@dataclass(frozen=True, slots=True)
class Declaration:
    """One policy: ``kind`` constraint or objective; ``reads``: the job fields it reads."""

    name: str
    kind: str
    reads: frozenset[str]
    add: Callable[[SolverModel], ObjectiveTerm | None]
    doc: str = ""


CONSTRAINTS: dict[str, Declaration] = {}
OBJECTIVES: dict[str, Declaration] = {}
_TABLES = {CONSTRAINT: CONSTRAINTS, OBJECTIVE: OBJECTIVES}


def declare(kind: str, name: str, reads: Iterable[str] = ()):
    """Decorator registering ``add`` as the ``kind`` declaration ``name`` (its docstring is
    the declaration's doc). A name may be declared once."""
    table = _TABLES.get(kind)
    if table is None:
        raise ValueError(f"declaration kind must be {CONSTRAINT!r} or {OBJECTIVE!r}, got {kind!r}")

    def register(add: Callable[[SolverModel], ObjectiveTerm | None]):
        if name in table:
            raise ValueError(f"{kind} {name!r} is declared twice")
        table[name] = Declaration(name, kind, frozenset(reads), add, (add.__doc__ or "").strip())
        return add

    return register


def resolve(names: Any, kind: str) -> tuple[Declaration, ...]:
    """The declarations of ``kind`` named in ``names`` (a list of strings), in order;
    PluginConfigError naming an unknown or repeated one."""
    table = _TABLES[kind]
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise PluginConfigError(f"solver: {kind}s must be a list of names, got {names!r}")
    out: list[Declaration] = []
    for name in names:
        if name not in table:
            raise PluginConfigError(f"solver: unknown {kind} {name!r}; known: {sorted(table)}")
        if table[name] in out:
            raise PluginConfigError(f"solver: {kind} {name!r} listed twice")
        out.append(table[name])
    return tuple(out)
