"""The allocation half of ``ReplicaState`` (``cellstate.replica.state``): allocations held by
key and indexed by machine (by key) and by job (by task), and the jobs' alloc masks.

A job with ``MASK_FROM`` allocations or more keeps a mask (one byte per task, 1 where it has an
allocation) from its next record put on, until it has none, so that put finds its derived tasks
in C (``pending_allocated``). ``AllocIndex`` is a base of ``ReplicaState`` only: it uses the
state's dicts (``_allocs``, ``_allocs_on``, ``_allocs_of``, ``_alloc_masks``, ``_raw_jobs``,
``quarantine``) and its ``_note_alloc``/``_unnote_alloc``/``_store_value``.
"""

from __future__ import annotations

from itertools import compress

from cellstate.codec.records import ALLOC_MEMO, CodecError
from cellstate.model import Alloc

MASK_FROM = 16  # a job with this many allocs keeps a byte mask of them (``_alloc_masks``)
_PENDING = ord("p")  # a pending task's byte in a task-state string
_PENDING_BYTE = bytes(1 if byte == _PENDING else 0 for byte in range(256))  # translate: "p" -> 1, else 0
NUMPY_FROM = 4096  # a job of this many tasks has its pending allocated tasks found by numpy


def mark(mask: bytearray, task: int, bit: int) -> None:
    """Set ``task``'s byte of an alloc mask to ``bit`` (the mask grows with zeros to hold it)."""
    if task >= len(mask):
        if not bit:
            return
        mask.extend(bytes(task + 1 - len(mask)))
    mask[task] = bit


def pending_allocated(tasks: str, mask: bytearray) -> set[int] | None:
    """The tasks pending in ``tasks`` (an ASCII task-state string) whose byte of the alloc
    ``mask`` is 1, or None when there is none (the usual answer: writers write the effective
    states). In C: below ``NUMPY_FROM`` tasks the pending bytes and the mask as two ints ANDed;
    from there on by numpy (imported then: a replica of small jobs never loads it), whose fixed
    cost of ~5 µs is less than the ints' ~1 µs per 1,000 tasks."""
    if len(tasks) < NUMPY_FROM:
        hit = int.from_bytes(tasks.encode("ascii").translate(_PENDING_BYTE), "little") & int.from_bytes(mask, "little")
        if not hit:
            return None
        flags = hit.to_bytes((hit.bit_length() + 7) // 8, "little")
        return set(compress(range(len(flags)), flags))
    import numpy as np

    n = min(len(tasks), len(mask))
    pending = np.frombuffer(tasks.encode("ascii"), np.uint8, n) == _PENDING
    found = (pending & np.frombuffer(mask, np.bool_, n)).nonzero()[0]
    return set(found.tolist()) if len(found) else None


class AllocIndex:
    """Allocation puts, deletes and indexes of a ``ReplicaState`` (see the module docstring)."""

    def _put_alloc(self, key: str, ident: str, raw: bytes, mod: int) -> None:
        alloc = self._decode_alloc(key, raw)
        job_id, task = alloc.job_id, alloc.task_index
        if ident != f"{job_id}/{task}":  # ids never contain "/": the same as comparing both parts
            raise CodecError(key, "job", f"alloc {job_id}/{task} does not match its key")
        self._set_alloc(key, alloc)

    def _put_allocs(self, puts: list) -> None:
        """``_put`` of each allocation put in ``puts`` (objects with ``key`` under ``allocs/``,
        ``value`` and ``mod_revision``, whose mod record the caller set), in order, without
        ``_put``'s dispatch by kind; a put whose value does not decode or match its key takes
        ``_store_value``'s path; a new key is indexed inline (``_set_alloc``'s work)."""
        quarantine, allocs, allocs_on, allocs_of = self.quarantine, self._allocs, self._allocs_on, self._allocs_of
        decode, start, raw_jobs, masks = self._decode_alloc, len(self._alloc_prefix), self._raw_jobs, self._alloc_masks
        for ev in puts:
            key, raw = ev.key, ev.value
            alloc = ALLOC_MEMO.get(raw) if type(raw) is bytes else None  # the decoder's first step, without its call
            if alloc is None:
                try:
                    alloc = decode(key, raw)
                except CodecError:
                    pass
            if alloc is None or key[start:] != f"{alloc.job_id}/{alloc.task_index}":
                self._store_value(key, raw, ev.mod_revision)
                continue
            if key in allocs:
                self._set_alloc(key, alloc)
            else:
                raw_job = raw_jobs.get(alloc.job_id)  # _note_alloc's first test, without its call
                if raw_job is not None:
                    states, task = raw_job.record.tasks, alloc.task_index
                    if task < len(states) and states[task] == "p":
                        self._note_alloc(alloc.job_id, task)
                allocs[key] = alloc
                on = allocs_on.get(alloc.machine_id)
                if on is None:
                    allocs_on[alloc.machine_id] = on = {}
                on[key] = alloc
                of = allocs_of.get(alloc.job_id)
                if of is None:
                    allocs_of[alloc.job_id] = of = {}
                of[alloc.task_index] = alloc
                if masks:
                    mask = masks.get(alloc.job_id)
                    if mask is not None:
                        mark(mask, alloc.task_index, 1)
            if quarantine and key in quarantine:
                del quarantine[key]

    def _set_alloc(self, key: str, alloc: Alloc) -> None:
        """Hold ``alloc`` under ``key`` and index it by machine (by key) and by job (by task)."""
        job_id = alloc.job_id
        old = self._allocs.get(key)
        if old is not None:
            self._unindex_alloc(key, old)
        self._allocs[key] = alloc
        self._note_alloc(job_id, alloc.task_index)
        on = self._allocs_on.get(alloc.machine_id)
        if on is None:
            self._allocs_on[alloc.machine_id] = on = {}
        on[key] = alloc
        of = self._allocs_of.get(job_id)
        if of is None:
            self._allocs_of[job_id] = of = {}
        of[alloc.task_index] = alloc
        mask = self._alloc_masks.get(job_id) if self._alloc_masks else None
        if mask is not None:
            mark(mask, alloc.task_index, 1)

    def _new_alloc_mask(self, job_id: str, of: dict[int, Alloc]) -> bytearray:
        """Start keeping job ``job_id``'s alloc mask (``_alloc_masks``), from its allocs ``of``."""
        mask = bytearray(max(of) + 1)
        for task in of:
            mask[task] = 1
        self._alloc_masks[job_id] = mask
        return mask

    def _drop_alloc(self, key: str) -> None:
        """Forget the allocation under ``key`` (if held) and its index entries (``_unindex_alloc``,
        inlined: once per task end)."""
        old = self._allocs.pop(key, None)
        if old is None:
            return
        on = self._allocs_on.get(old.machine_id)
        if on is not None:
            on.pop(key, None)
            if not on:
                del self._allocs_on[old.machine_id]
        of = self._allocs_of.get(old.job_id)
        if of is not None:
            of.pop(old.task_index, None)
            if not of:
                del self._allocs_of[old.job_id]
        if self._alloc_masks:
            self._unmask(old.job_id, old.task_index)
        if self._derived:
            self._unnote_alloc(old.job_id, old.task_index)

    def _unindex_alloc(self, key: str, alloc: Alloc) -> None:
        on = self._allocs_on.get(alloc.machine_id)
        if on is not None:
            on.pop(key, None)
            if not on:
                del self._allocs_on[alloc.machine_id]
        of = self._allocs_of.get(alloc.job_id)
        if of is not None:
            of.pop(alloc.task_index, None)
            if not of:
                del self._allocs_of[alloc.job_id]
        if self._alloc_masks:
            self._unmask(alloc.job_id, alloc.task_index)
        if self._derived:
            self._unnote_alloc(alloc.job_id, alloc.task_index)

    def _unmask(self, job_id: str, task: int) -> None:
        """Task ``task`` of ``job_id`` has no alloc any more: clear its byte of the job's mask
        (kept), or drop the mask with the job's last alloc."""
        mask = self._alloc_masks.get(job_id)
        if mask is not None:
            if job_id in self._allocs_of:
                mark(mask, task, 0)
            else:
                del self._alloc_masks[job_id]
