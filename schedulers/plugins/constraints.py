"""Filter: the machine satisfies the job's constraints (eq / in / not-in / exists on
``zone``, ``rack``, ``platform`` or a label), plus any scheduler-wide ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from cellstate.model import Constraint, ConstraintOp, Job, Machine
from cellstate.resources import Resources
from schedulers.plugin import ROOM, FilterTraits, PluginConfigError, Verdict, build_args

NAME = "constraints"
_MAX_CACHED = 4096  # verdicts kept per distinct constraint


def _as_constraint(raw: Constraint | Mapping[str, Any]) -> Constraint:
    if isinstance(raw, Constraint):
        c = raw
    elif isinstance(raw, Mapping) and set(raw) <= {"attribute", "op", "values"} and "attribute" in raw:
        try:
            c = Constraint(str(raw["attribute"]), ConstraintOp(raw.get("op", "")),
                           tuple(str(v) for v in raw.get("values", ())))
        except ValueError as err:
            raise PluginConfigError(f"{NAME}: bad constraint {dict(raw)!r}: {err}") from err
    else:
        raise PluginConfigError(f"{NAME}: a constraint is a Constraint or a map "
                                f"{{attribute, op, values}}, got {raw!r}")
    return _checked(c)


def _checked(c: Constraint) -> Constraint:
    count = len(c.values)
    if not c.attribute:
        raise PluginConfigError(f"{NAME}: constraint without attribute: {c!r}")
    if ((c.op is ConstraintOp.EQ and count != 1) or (c.op is ConstraintOp.EXISTS and count)
            or (c.op in (ConstraintOp.IN, ConstraintOp.NOT_IN) and not count)):
        raise PluginConfigError(f"{NAME}: wrong number of values for {c.op.value}: {c!r}")
    return c


@dataclass(frozen=True, slots=True)
class ConstraintsArgs:
    """``extra``: constraints applied to every job this scheduler places."""

    extra: tuple[Constraint, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.extra, (str, Mapping)):
            raise PluginConfigError(f"{NAME}: extra must be a sequence of constraints, got {self.extra!r}")
        object.__setattr__(self, "extra", tuple(_as_constraint(c) for c in self.extra))


def satisfied(c: Constraint, machine: Machine) -> bool:
    """True when ``machine`` meets constraint ``c`` (not-in holds when the attribute is absent)."""
    value = machine.attribute(c.attribute)
    op = c.op
    if op is ConstraintOp.EQ:
        return value == c.values[0]
    if op is ConstraintOp.IN:
        return value in c.values
    if op is ConstraintOp.NOT_IN:
        return value not in c.values
    return value is not None


def describe(c: Constraint) -> str:
    """``zone in [a, b]``, ``rack eq r1``, ``gpu exists``."""
    if c.op is ConstraintOp.EXISTS:
        return f"{c.attribute} exists"
    if c.op is ConstraintOp.EQ:
        return f"{c.attribute} eq {c.values[0]}"
    return f"{c.attribute} {c.op.value} [{', '.join(c.values)}]"


class Constraints:
    """Unresolvable, naming the first constraint the machine does not meet."""

    name = NAME
    reads = frozenset({"constraints"})
    # machines' attributes are fixed: only a machine added (a freed one) can meet them anew
    traits = FilterTraits(monotone_in_free=True, lifted_by=frozenset({ROOM}))

    def __init__(self, args: ConstraintsArgs) -> None:
        self.args = args
        self._ok = Verdict.fit(NAME)
        self._misses: dict[Constraint, Verdict] = {}

    def fits(self, job: Job, machine: Machine, free: Resources, placed_here: int) -> Verdict:
        if not job.constraints and not self.args.extra:
            return self._ok
        for c in self.args.extra + job.constraints:
            if not satisfied(c, machine):
                return self._miss(c)
        return self._ok

    def _miss(self, c: Constraint) -> Verdict:
        verdict = self._misses.get(c)
        if verdict is None:
            if len(self._misses) >= _MAX_CACHED:
                self._misses.clear()
            verdict = self._misses[c] = Verdict.never(NAME, describe(c))
        return verdict


def factory(args: ConstraintsArgs | dict | None = None) -> Constraints:
    return Constraints(build_args(ConstraintsArgs, args, NAME))
