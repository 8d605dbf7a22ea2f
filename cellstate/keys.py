"""Key layout of a cell. Several cells may share one etcd under distinct prefixes.

    {root}/cells/{cell}/machines/{machine_id}      Machine ledger (its mod_revision is its sequence number)
    {root}/cells/{cell}/jobs/{job_id}              JobRecord: spec + task states
    {root}/cells/{cell}/allocs/{job_id}/{task}     Alloc: one task on one machine
    {root}/cells/{cell}/stats/{scheduler}          scheduler stats (leased: vanish with their process)
    {root}/cells/{cell}/conflicts/{scheduler}/{n}  recent conflicts (leased)
    {root}/cells/{cell}/gangs/{job_id}             a gang reservation in progress (leased)
    {root}/cells/{cell}/kills/{job_id}             kill marker: the job is being (or was) killed;
                                                   a placement that writes no record compares it missing

Ids may not contain "/" (validated by the codec and the job-spec loader).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cellstate.fastbuild import builder
from cellstate.store import Get

_GET = builder(Get)

DEFAULT_ROOT = "/omega"
KINDS = ("machines", "jobs", "allocs", "stats", "conflicts", "gangs", "kills")


@dataclass(frozen=True, slots=True)
class CellKeys:
    """Builds and parses the keys of one cell."""

    cell: str = "default"
    root: str = DEFAULT_ROOT
    prefix: str = field(init=False, repr=False, compare=False)
    """``{root}/cells/{cell}/``: formatted once (every key of a replay is built from it)."""
    machine_reads: dict[str, tuple[str, Get]] = field(init=False, repr=False, compare=False)
    """Machine id -> ``machine_read(id)``, for callers that look it up first."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", f"{self.root}/cells/{self.cell}/")
        object.__setattr__(self, "machine_reads", {})

    def kind_prefix(self, kind: str) -> str:
        return f"{self.prefix}{kind}/"

    def machine(self, machine_id: str) -> str:
        return f"{self.prefix}machines/{machine_id}"

    def machine_read(self, machine_id: str) -> tuple[str, Get]:
        """The machine's key and a ``Get`` of it, made once per machine: every txn that reads a
        machine back on failure (commits, task ends) shares the immutable op."""
        read = self.machine_reads.get(machine_id)
        if read is None:
            key = self.machine(machine_id)
            read = self.machine_reads[machine_id] = (key, _GET(key, False))
        return read

    def job(self, job_id: str) -> str:
        return f"{self.prefix}jobs/{job_id}"

    def alloc(self, job_id: str, task_index: int) -> str:
        return f"{self.prefix}allocs/{job_id}/{task_index}"

    def job_allocs(self, job_id: str) -> str:
        return f"{self.prefix}allocs/{job_id}/"

    def stats(self, scheduler: str) -> str:
        return f"{self.prefix}stats/{scheduler}"

    def gang(self, job_id: str) -> str:
        return f"{self.prefix}gangs/{job_id}"

    def kill(self, job_id: str) -> str:
        return f"{self.prefix}kills/{job_id}"

    def conflict(self, scheduler: str, seq: int) -> str:
        return f"{self.prefix}conflicts/{scheduler}/{seq:012d}"

    def parse(self, key: str) -> tuple[str, tuple[str, ...]]:
        """Split a key of this cell into (kind, id parts); ValueError otherwise."""
        if not key.startswith(self.prefix):
            raise ValueError(f"key {key!r} is not in cell {self.cell!r}")
        kind, _, rest = key[len(self.prefix):].partition("/")
        if kind not in KINDS or not rest:
            raise ValueError(f"key {key!r} has unknown kind {kind!r}")
        return kind, tuple(rest.split("/"))
