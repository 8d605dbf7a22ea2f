"""What a scheduler publishes under its leased ``stats/{name}`` key (``SchedulerStats``), as plain
data: ``omega.stats.StatsRecorder`` fills it in, ``cellstate.codec.stats`` encodes it. Definitions
follow the Omega paper: busyness is the fraction of wall time spent deciding and committing, the
conflict fraction is failed transactions per successful one."""

from __future__ import annotations

from dataclasses import dataclass

HOT_MACHINES_MAX = 10
RECENT_CONFLICTS_MAX = 20


@dataclass(frozen=True, slots=True)
class HotMachine:
    """A machine on which this scheduler's transactions failed ``conflicts`` times;
    ``winners`` counts who had changed the ledger first, most frequent first."""

    machine: str
    conflicts: int
    winners: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ConflictNote:
    """One attempt that lost a race: ``machines[i]`` had been changed by ``winners[i]``
    ("" when unknown). No machines: the job record itself had changed."""

    at: float
    job: str
    machines: tuple[str, ...] = ()
    winners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """What one scheduler publishes about itself (see notes/stats.md)."""

    name: str
    kind: str
    pid: int = 0
    host: str = ""
    started_at: float = 0.0
    updated_at: float = 0.0
    conflict_mode: str = ""
    commit_mode: str = ""
    attempts: int = 0
    txns: int = 0
    commits: int = 0
    conflicts: int = 0
    stale_retries: int = 0
    job_conflicts: int = 0
    """Of ``conflicts``, those caused by the job record changing (no machine was contended)."""
    retries: int = 0
    jobs_placed: int = 0
    tasks_placed: int = 0
    tasks_unplaced: int = 0
    jobs_per_s: float = 0.0
    placements_per_s: float = 0.0
    busyness: float = 0.0
    decision_ms_p50: float = 0.0
    decision_ms_p90: float = 0.0
    decision_ms_p99: float = 0.0
    hot_machines: tuple[HotMachine, ...] = ()
    recent_conflicts: tuple[ConflictNote, ...] = ()
    quarantined: int = 0
    """Keys of the cell whose values the scheduler's view holds quarantined now (they do not
    decode or name another id: left out of its decisions, never fatal)."""

    @property
    def conflict_fraction(self) -> float:
        """Conflicts per successful transaction (Omega's definition; stale retries are not
        conflicts); 0 without commits."""
        return self.conflicts / self.commits if self.commits else 0.0
