"""The Store interface: a versioned key-value store with etcd's semantics.

Both ``EtcdStore`` (a real etcd) and ``MemoryStore`` implement it and pass one
contract suite (``tests/cellstate/test_store_contract.py``).

Revision rules (as etcd): the store has one global revision, raised by one for
every successful write transaction (a txn with several puts raises it once).
Each key carries ``create_revision`` (revision of the put that created it),
``mod_revision`` (revision of its last put) and ``version`` (puts since
creation). A missing key compares as create/mod revision 0 and version 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterator, Protocol, Sequence


class StoreError(Exception):
    """Base class of store failures."""


class Unavailable(StoreError):
    """The store could not be reached (connection refused, timed out, stream broken)."""


class Compacted(StoreError):
    """A read or watch asked for a revision that has been compacted away."""

    def __init__(self, compact_revision: int, requested: int | None = None):
        super().__init__(f"revision {requested} compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision
        self.requested = requested


class TxnTooLarge(StoreError):
    """A transaction exceeds the store's operation or request-size limit."""


class PermissionDenied(StoreError):
    """The store refused the request for the credentials used: no permission on a key,
    a wrong or missing user name or password, or an expired auth token."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


class EventKind(Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Event:
    """One change; for DELETE, ``value`` is b"" and ``mod_revision`` is the delete's revision."""

    kind: EventKind
    key: str
    value: bytes
    mod_revision: int
    create_revision: int = 0
    version: int = 0


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """Events of one or more whole revisions, in revision order; ``revision`` is the
    store revision the batch brings the watcher up to (>= every event's mod_revision)."""

    revision: int
    events: tuple[Event, ...]


class CompareTarget(Enum):
    MOD = "mod"
    CREATE = "create"
    VERSION = "version"
    VALUE = "value"


class CompareOp(Enum):
    EQ = "=="
    NE = "!="
    LT = "<"
    GT = ">"


@dataclass(frozen=True, slots=True)
class Compare:
    key: str
    target: CompareTarget
    op: CompareOp
    value: int | bytes


def mod_revision_is(key: str, revision: int) -> Compare:
    """True when ``key``'s mod_revision equals ``revision`` (0: key missing)."""
    return Compare(key, CompareTarget.MOD, CompareOp.EQ, revision)


def exists(key: str) -> Compare:
    return Compare(key, CompareTarget.CREATE, CompareOp.GT, 0)


def missing(key: str) -> Compare:
    return Compare(key, CompareTarget.CREATE, CompareOp.EQ, 0)


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Get:
    key: str
    prefix: bool = False


Op = Put | Delete | Get


@dataclass(frozen=True, slots=True)
class TxnResult:
    """``succeeded`` says which branch ran; ``revision`` is the store revision after it;
    ``reads`` holds, for each Get of the branch that ran, its key-values (in op order)."""

    succeeded: bool
    revision: int
    reads: tuple[tuple[KeyValue, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class RangeResult:
    revision: int
    kvs: tuple[KeyValue, ...]


class WatchStream(Protocol):
    """Batches of a watch, in order. ``next`` returns the next batch, or None after
    ``timeout`` seconds; it raises ``Compacted`` when the start revision is gone and
    ``Unavailable`` when the stream broke (resume from the last revision seen + 1)."""

    def next(self, timeout: float | None = None) -> WatchBatch | None: ...

    def cancel(self) -> None: ...

    def __iter__(self) -> Iterator[WatchBatch]: ...


class Store(Protocol):
    """A versioned key-value store with transactions, watches and leases.

    ``max_txn_ops`` and ``max_request_bytes`` are the limits the server enforces
    (etcd defaults 128 and 1.5 MiB); a txn beyond them raises ``TxnTooLarge``.
    """

    max_txn_ops: int
    max_request_bytes: int

    def get(self, key: str) -> KeyValue | None: ...

    def get_many(self, keys: Sequence[str]) -> tuple[int, dict[str, KeyValue]]:
        """Read several keys at one revision: (revision, present keys)."""
        ...

    def range(self, prefix: str, revision: int | None = None) -> RangeResult:
        """All keys under ``prefix`` at ``revision`` (default: now), sorted by key."""
        ...

    def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        ...

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Unconditional put; returns the new revision."""
        ...

    def delete(self, key: str) -> int:
        """Unconditional delete; returns the store revision after it."""
        ...

    def watch(self, prefix: str, start_revision: int) -> WatchStream: ...

    def revision(self) -> int: ...

    def compact(self, revision: int) -> None: ...

    def grant_lease(self, ttl: int) -> int: ...

    def refresh_lease(self, lease: int) -> None: ...

    def revoke_lease(self, lease: int) -> None: ...

    def close(self) -> None: ...


def prefix_end(prefix: str) -> str:
    """The first key after every key that starts with ``prefix`` (etcd's range_end)."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return raw.decode("latin-1") if raw[-1] > 0x7F else raw.decode()
        raw.pop()
    return "\0"
