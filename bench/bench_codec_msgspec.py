"""Today's codec against msgspec for the two hottest values (a machine with its ledger, an
allocation), same wire bytes, same strictness on the common shape.

msgspec (https://jcristharif.com/msgspec/) decodes msgpack straight into typed ``Struct``s and
checks types and constraints in C. The variant here declares the same maps (field names, order,
defaults omitted) with constraints as close as msgspec can state them (ids non-empty without
"/", amounts >= 0, states from the enum, no unknown field), and builds the model's dataclasses
from the structs, as the stores need. The bench first checks both encoders give the same bytes
and both decoders the same values for the sample, then times encode and decode per value
(best of ``--repeat`` runs of ``--values`` values each) and prints the ratio. The codec itself
packs and unpacks with msgspec since docs/LIBRARIES.md; this bench measures typed Struct
decoding, which stays unadopted (reasons there).

    python bench/bench_codec_msgspec.py [--values 50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    import msgspec
    from msgspec import Meta
except ImportError:
    sys.exit("bench_codec_msgspec: msgspec is not installed (pip install msgspec)")

from cellstate.codec.records import decode_alloc, decode_machine, encode_alloc, encode_machine  # noqa: E402
from cellstate.codec.resources import core_resources  # noqa: E402
from cellstate.codec.trusted import pack_alloc, pack_machine  # noqa: E402
from cellstate.fastbuild import builder  # noqa: E402
from cellstate.model import Alloc, Machine, MachineState  # noqa: E402
from cellstate.resources import Resources  # noqa: E402

Amount = Annotated[int, Meta(ge=0)]
Ident = Annotated[str, Meta(min_length=1, pattern="^[^/]+$")]


class Res(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    cpu: Amount = 0
    memory: Amount = 0
    disk: Amount = 0


NO_RES = Res()  # the default ledger; msgspec omits a default struct field only when it is this object


class MachineS(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    v: int
    t: Literal["machine"]
    id: Ident
    capacity: Res
    zone: str = ""
    rack: str = ""
    platform: str = ""
    packages: list[str] = []
    labels: dict[str, str] = {}
    state: Literal["up", "draining", "down"] = "up"
    allocated: Res = NO_RES
    tasks: Amount = 0
    writer: str = ""


class AllocS(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    v: int
    t: Literal["alloc"]
    job: Ident
    task: Amount
    machine: Ident
    resources: Res
    priority: int = 0
    scheduler: str = ""
    placed_at: float = 0.0
    running: bool = False


_MACHINE, _ALLOC = builder(Machine), builder(Alloc)
_STATES = {s.value: s for s in MachineState}
MACHINE_DEC, ALLOC_DEC = msgspec.msgpack.Decoder(MachineS), msgspec.msgpack.Decoder(AllocS)
ENC = msgspec.msgpack.Encoder()


def _res(r: Res) -> Resources:
    return core_resources(r.cpu, r.memory, r.disk)


def ms_decode_machine(raw: bytes) -> Machine:
    s = MACHINE_DEC.decode(raw)
    return _MACHINE(s.id, _res(s.capacity), s.zone, s.rack, s.platform, frozenset(s.packages), tuple(s.labels.items()),
                    _STATES[s.state], _res(s.allocated), s.tasks, s.writer)


def ms_encode_machine(m: Machine) -> bytes:
    c, a = m.capacity, m.allocated
    return ENC.encode(MachineS(1, "machine", m.id, Res(c.cpu, c.memory, c.disk), m.zone, m.rack, m.platform,
                               sorted(m.packages), dict(m.labels), m.state.value,
                               Res(a.cpu, a.memory, a.disk) if a.cpu or a.memory or a.disk else NO_RES,
                               m.task_count, m.writer))


def ms_decode_alloc(raw: bytes) -> Alloc:
    s = ALLOC_DEC.decode(raw)
    return _ALLOC(s.job, s.task, s.machine, _res(s.resources), s.priority, s.scheduler, s.placed_at, s.running)


def ms_encode_alloc(a: Alloc) -> bytes:
    r = a.resources
    return ENC.encode(AllocS(1, "alloc", a.job_id, a.task_index, a.machine_id, Res(r.cpu, r.memory, r.disk),
                             a.priority, a.scheduler, a.placed_at, a.running))


def sample(n: int, rng: random.Random) -> tuple[list[Machine], list[Alloc]]:
    machines, allocs = [], []
    for i in range(n):
        cap = Resources(32_000, 131_072, 1_048_576)
        used = rng.randrange(0, 32)
        machines.append(Machine(f"m{i:06d}", cap, zone=f"z{i % 3}", rack=f"r{i % 40}",
                                allocated=Resources(used * 500, used * 1024, 0), task_count=used, writer="batch-0"))
        allocs.append(Alloc(f"job{i // 7:06d}", i % 7, f"m{rng.randrange(n):06d}", Resources(500, 1024, 0), 100,
                            "batch-0", 1_700_000_000.0 + i, bool(i % 2)))
    return machines, allocs


def best(fn, values, repeat: int) -> float:
    """Seconds per value, best of ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        for v in values:
            fn(v)
        times.append(time.perf_counter() - started)
    return min(times) / len(values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--values", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    machines, allocs = sample(args.values, random.Random(1))
    raw_m = [encode_machine(m) for m in machines]
    raw_a = [encode_alloc(a) for a in allocs]
    for m, raw in zip(machines, raw_m):  # same bytes, same values, both ways
        assert ms_encode_machine(m) == raw and ms_decode_machine(raw) == m == decode_machine("k", raw)
    for a, raw in zip(allocs, raw_a):
        assert ms_encode_alloc(a) == raw and ms_decode_alloc(raw) == a == decode_alloc("k", raw)
    for bad in (b"\x83\xa1v\x01\xa1t\xa7machine\xa2id\xa3m/1", ENC.encode({"v": 1, "t": "alloc", "job": "j", "task": -1,
                                                                             "machine": "m", "resources": {}})):
        for decode in (ms_decode_machine, ms_decode_alloc):
            try:
                decode(bad)
            except msgspec.ValidationError:
                pass
            else:
                raise AssertionError("msgspec accepted an invalid value")
    rows = [
        ("machine decode", lambda r: decode_machine("k", r), ms_decode_machine, raw_m),
        ("machine encode", pack_machine, ms_encode_machine, machines),
        ("alloc decode", lambda r: decode_alloc("k", r), ms_decode_alloc, raw_a),
        ("alloc encode", pack_alloc, ms_encode_alloc, allocs),
    ]
    print(f"{args.values:,} values each, best of {args.repeat}; msgspec {msgspec.__version__}; same bytes and values "
          "checked first")
    print(f"{'':16} {'codec µs':>9} {'msgspec µs':>11} {'msgspec/codec':>14}")
    for name, ours, theirs, values in rows:
        a, b = best(ours, values, args.repeat), best(theirs, values, args.repeat)
        print(f"{name:16} {a * 1e6:9.2f} {b * 1e6:11.2f} {b / a:14.2f}")


if __name__ == "__main__":
    main()
