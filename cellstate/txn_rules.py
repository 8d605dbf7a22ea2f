"""Checks etcd applies to a transaction before running it, for stores that enforce them
themselves (``MemoryStore``): operation and size limits, duplicate keys, compare types.

Messages follow etcd's wording so both stores report the same failures.
"""

from __future__ import annotations

from typing import Sequence

from cellstate.store import Compare, CompareTarget, Delete, Get, Op, Put, StoreError, TxnTooLarge

DUPLICATE_KEY_MESSAGE = "duplicate key given in txn request"
TOO_MANY_OPS_MESSAGE = "too many operations in txn request"
TOO_LARGE_MESSAGE = "request is too large"
# Protobuf framing of one op or compare (tags, lengths, wrapper) and of the request itself.
_OP_OVERHEAD = 12
_REQUEST_OVERHEAD = 32
_VALUE_TARGET = CompareTarget.VALUE
_SHORT_BRANCH = 4  # a branch of up to this many ops is checked op by op (cheaper than C-level passes)
_STR_ONLY, _INT_ONLY, _BYTES_ONLY, _BOOL_ONLY = {str}, {int}, {bytes}, {bool}


def check_txn(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op],
              max_txn_ops: int, max_request_bytes: int) -> bool:
    """Raise TxnTooLarge beyond the limits, StoreError on a duplicate key in a branch,
    ValueError/TypeError on malformed compares or ops. Returns whether a put of either
    branch carries a lease (the store then checks the lease exists)."""
    plain = _plain_size(compares, success, failure)
    if plain is None:  # something unusual: the checks one by one, each naming its problem
        for compare in compares:
            check_compare(compare)
        for branch in (success, failure):
            for op in branch:
                check_op(op)
    if len(compares) > max_txn_ops or len(success) > max_txn_ops or len(failure) > max_txn_ops:
        raise TxnTooLarge(f"{TOO_MANY_OPS_MESSAGE} (limit {max_txn_ops} per branch)")
    size = txn_request_bytes(compares, success, failure) if plain is None else plain[0]
    if size > max_request_bytes:
        raise TxnTooLarge(f"{TOO_LARGE_MESSAGE} ({size} bytes, limit {max_request_bytes})")
    if plain is None or not plain[1]:
        check_duplicates(success)
        check_duplicates(failure)
    if plain is None:
        return any(type(op) is Put and op.lease for branch in (success, failure) for op in branch)
    return plain[2]


def _plain_size(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]):
    """One pass over a txn of the usual shape (exact ``str`` keys, ``int`` revision compares,
    ``bytes`` values, valid leases, no prefix deletes): ``(txn_request_bytes, unique, leased)``
    where ``unique`` says no branch writes a key twice and ``leased`` that a put carries a
    lease; None for anything else (``check_txn`` then
    checks each op and compare itself and raises the precise error)."""
    # Every write of a replay passes here (the memory store's txn): one loop instead of four,
    # a long branch of one kind of op (a commit's puts, its gets) by C-level passes instead.
    size = _REQUEST_OVERHEAD
    for compare in compares:
        if type(compare) is not Compare:
            return None
        key = compare.key
        if type(key) is not str or type(compare.value) is not int or compare.target is _VALUE_TARGET:
            return None
        size += (len(key) if key.isascii() else len(key.encode())) + (8 + _OP_OVERHEAD)
    unique, leased = True, False
    for branch in (success, failure):
        if not branch:
            continue  # (a txn without a failure branch: no set, no loop)
        if len(branch) > _SHORT_BRANCH:
            found = _uniform_branch(branch)
            if found is None:
                return None
            if found is not False:
                size += found[0]
                unique, leased = unique and found[1], leased or found[2]
                continue
        puts: set[str] = set()
        put_count = 0
        deleted: list[str] = []
        for op in branch:
            t = type(op)
            if t is Put:
                key, value, lease = op.key, op.value, op.lease
                if type(key) is not str or type(value) is not bytes or type(lease) is not int or lease < 0:
                    return None
                size += (len(key) if key.isascii() else len(key.encode())) + len(value) + _OP_OVERHEAD
                if lease:
                    size += 8
                    leased = True
                puts.add(key)
                put_count += 1
            elif (t is Get or t is Delete) and op.prefix is False and type(op.key) is str:
                key = op.key
                size += (len(key) if key.isascii() else len(key.encode())) + _OP_OVERHEAD
                if t is Delete:
                    deleted.append(key)
            else:
                return None
        if len(puts) != put_count or deleted and not puts.isdisjoint(deleted):
            unique = False  # check_duplicates names the key
    return size, unique, leased


def _uniform_branch(branch: Sequence[Op]):
    """``(size of the ops, unique, leased)`` for a branch of plain puts only, plain gets only or
    single-key deletes only (None if one is not plain), by C-level passes over the ops' fields;
    False for a branch of several kinds of ops."""
    kinds = {*map(type, branch)}
    if len(kinds) != 1:
        return False
    kind, = kinds
    if kind is not Put and kind is not Get and kind is not Delete:
        return None
    keys = [op.key for op in branch]
    if {*map(type, keys)} != _STR_ONLY:
        return None
    if kind is Put:
        values, leases = [op.value for op in branch], [op.lease for op in branch]
        if {*map(type, values)} != _BYTES_ONLY or {*map(type, leases)} != _INT_ONLY:
            return None
        unleased = leases.count(0)
        if unleased < len(leases) and min(leases) < 0:
            return None
        size, unique, leased = (sum(map(len, values)) + 8 * (len(leases) - unleased), len(set(keys)) == len(keys),
                                unleased < len(leases))
    else:
        prefixes = [op.prefix for op in branch]
        if {*map(type, prefixes)} != _BOOL_ONLY or any(prefixes):
            return None
        size, unique, leased = 0, True, False
    joined = "".join(keys)
    size += (len(joined) if joined.isascii() else sum([len(key.encode()) for key in keys])) + _OP_OVERHEAD * len(keys)
    return size, unique, leased


def check_compare(compare: Compare) -> None:
    """ValueError unless ``compare`` is a Compare whose value suits its target."""
    if not isinstance(compare, Compare):
        raise TypeError(f"expected a Compare, got {compare!r}")
    _check_key(compare.key)
    if compare.target is CompareTarget.VALUE:
        if not isinstance(compare.value, bytes):
            raise ValueError(f"compare on the value of {compare.key!r} needs bytes, "
                             f"got {type(compare.value).__name__}")
    elif type(compare.value) is not int:
        raise ValueError(f"compare on {compare.target.value} of {compare.key!r} needs an int, "
                         f"got {compare.value!r}")


def check_op(op: Op) -> None:
    """TypeError unless ``op`` is a Put (with a bytes value), a Delete or a Get."""
    if type(op) not in (Put, Delete, Get):
        raise TypeError(f"unknown txn op {op!r} (expected Put, Delete or Get)")
    _check_key(op.key)
    if type(op) is Put:
        if not isinstance(op.value, bytes):
            raise TypeError(f"put of {op.key!r} needs a bytes value, got {type(op.value).__name__}")
        if type(op.lease) is not int or op.lease < 0:
            raise ValueError(f"put of {op.key!r} has an invalid lease {op.lease!r}")


def _check_key(key: str) -> None:
    if not isinstance(key, str):
        raise TypeError(f"keys are str, got {key!r}")


def txn_request_bytes(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> int:
    """Estimated encoded size of the txn request (etcd refuses it above max_request_bytes)."""
    size = _REQUEST_OVERHEAD
    for compare in compares:
        value = compare.value
        size += len(compare.key.encode()) + (len(value) if isinstance(value, bytes) else 8) + _OP_OVERHEAD
    for op in (*success, *failure):
        key_bytes = len(op.key.encode())
        if type(op) is Put:
            size += key_bytes + len(op.value) + _OP_OVERHEAD + (8 if op.lease else 0)
        else:
            size += (2 * key_bytes if op.prefix else key_bytes) + _OP_OVERHEAD
    return size


def check_duplicates(ops: Sequence[Op]) -> None:
    """StoreError when two writes of one branch touch the same key (as etcd: two puts of a key,
    or a put inside a deleted key or range; two deletes may overlap)."""
    put_keys: set[str] = set()
    for op in ops:
        if type(op) is Put:
            if op.key in put_keys:
                raise StoreError(f"{DUPLICATE_KEY_MESSAGE}: {op.key!r}")
            put_keys.add(op.key)
    for op in ops:
        if type(op) is Delete:
            hit = [k for k in put_keys if k.startswith(op.key)] if op.prefix else \
                ([op.key] if op.key in put_keys else [])
            if hit:
                raise StoreError(f"{DUPLICATE_KEY_MESSAGE}: {hit[0]!r}")
