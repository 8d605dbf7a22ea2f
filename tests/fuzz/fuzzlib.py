"""Shared fuzzing strategies: arbitrary JSON/msgpack values and structural mutations.

Import from tests in this folder as ``from fuzzlib import …`` (the folder is put on sys.path
by each test module).
"""

from __future__ import annotations

import copy

from hypothesis import strategies as st

# Numbers beyond what a float or a 64-bit integer holds (float(10**400) raises OverflowError).
HUGE_INTEGERS = [2**63, -(2**63) - 1, 2**64, 10**30, 10**400, -(10**400)]
# Sizes whose amount is beyond any float or integer the codec holds ("9…9Mi" parses to inf as a float).
HUGE_SIZES = ["9" * 400 + "Mi", "9" * 400 + ".5Gi", "1" + "0" * 5000 + "Ki", "9223372036854775808Mi", "8388608Ti"]
# Scalars that stress validators: bools where ints go, huge and non-finite numbers, odd text.
TRICKY_SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.sampled_from([0, -1, 1, *HUGE_INTEGERS]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, 1.7e308, 9.3e15]),
    st.text(max_size=8), st.sampled_from(["", "/", "a/b", "512Mi", "2Gi", "-1", "nan", "batch", "eq", *HUGE_SIZES]),
)

json_values = st.recursive(
    TRICKY_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)

msgpack_values = st.recursive(
    TRICKY_SCALARS.filter(lambda x: not (isinstance(x, int) and not isinstance(x, bool)
                                        and not -(2**63) <= x < 2**64)) | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=8) | st.integers(-5, 5), children, max_size=4),
    max_leaves=12,
)


def paths(node, prefix=()):
    """Every path (tuple of keys/indices) to a map entry or list item inside ``node``."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield prefix + (key,)
        yield from paths(child, prefix + (key,))


def _parent(root, path):
    for step in path[:-1]:
        root = root[step]
    return root


@st.composite
def mutated(draw, base, values=json_values, rounds: int = 3):
    """A deep copy of ``base`` with 1..rounds mutations: replace, delete, or add a field/item."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, rounds))):
        where = list(paths(doc))
        if not where:
            return draw(values)
        path = draw(st.sampled_from(where))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(values)
        else:
            parent.insert(draw(st.integers(0, len(parent))), draw(values))
    return doc
