"""``omega cell init`` (machines from a cell spec) and ``omega check`` (cell invariants).

``omega check`` exits 0 when the cell is clean, 1 on violations (or an unreachable store).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

# The cell-spec, checker and store modules are imported where they are used (a light parser).
from tools.cli.common import (
    add_output_arg, add_store_args, cell_keys, connect, output_json, readable_file, store_failure,
)


def register(sub) -> None:
    cell = sub.add_parser("cell", help="cell setup")
    cell_sub = cell.add_subparsers(dest="cell_command", required=True, metavar="ACTION")
    init = cell_sub.add_parser("init", help="write a cell's machines (default: the 1,000-machine demo cell)")
    init.add_argument("--spec", metavar="FILE", help="TOML/JSON cell spec (flags below override it)")
    init.add_argument("--machines", type=int)
    init.add_argument("--zones", type=int)
    init.add_argument("--racks-per-zone", type=int)
    init.add_argument("--shape", action="append", metavar="CORES,MEMORY[,DISK[,GPUS,MODEL]][:WEIGHT]",
                      help='a machine shape, e.g. "16,64Gi,1Ti:2", or with 8 V100 GPUs "96,512Gi,0,8,V100:3" '
                           '(repeat for several)')
    init.add_argument("--platforms", metavar="NAME[:WEIGHT],...")
    init.add_argument("--packages", type=int, metavar="N", help="N cached-package names pkg-00…")
    init.add_argument("--packages-per-machine", type=int)
    init.add_argument("--seed", type=int)
    init.add_argument("--replace", action="store_true", help="wipe the cell's machines, allocs and jobs first")
    add_store_args(init)
    init.set_defaults(func=run_init)

    check = sub.add_parser("check", help="verify a cell's invariants at one revision")
    check.add_argument("--revision", type=int, default=None, help="check at this revision (default: now)")
    add_output_arg(check)
    add_store_args(check)
    check.set_defaults(func=run_check)


def spec_from_args(args):
    """The cell spec of --spec (or the demo defaults) with the flags applied."""
    from cellstate.cellspec import CellSpec, load_cell_spec, package_names
    spec = load_cell_spec(args.spec) if args.spec else CellSpec()
    changes: dict = {}
    for name in ("machines", "zones", "racks_per_zone", "packages_per_machine", "seed"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.shape:
        changes["shapes"] = tuple(_shape_flag(text) for text in args.shape)
    if args.platforms:
        changes["platforms"] = tuple(_weighted(item) for item in args.platforms.split(",") if item)
    if args.packages is not None:
        changes["packages"] = package_names(args.packages)
        changes.setdefault("packages_per_machine", min(spec.packages_per_machine, args.packages))
    return replace(spec, **changes)


def _shape_flag(text: str):
    from cellstate.cellspec import CellSpecError, parse_shape
    body, _, weight = text.partition(":")
    parts = body.split(",")
    if len(parts) not in (2, 3, 5):
        raise CellSpecError("shape", f'expected "CORES,MEMORY[,DISK[,GPUS,MODEL]][:WEIGHT]", got {text!r}')
    try:
        cores = float(parts[0])
        w = float(weight) if weight else 1.0
    except ValueError:
        raise CellSpecError("shape", f"cores and weight must be numbers in {text!r}") from None
    fields = {"cpu": cores, "memory": parts[1], "weight": w}
    if len(parts) >= 3:
        fields["disk"] = parts[2]
    if len(parts) == 5:
        try:
            fields["gpu"] = int(parts[3])
        except ValueError:
            raise CellSpecError("shape", f"GPUS must be a whole number in {text!r}") from None
        fields["gpu_model"] = parts[4]
    return parse_shape(fields, "shape")


def _weighted(item: str) -> tuple[str, float]:
    from cellstate.cellspec import CellSpecError
    name, _, weight = item.partition(":")
    try:
        return name, float(weight) if weight else 1.0
    except ValueError:
        raise CellSpecError("platforms", f"bad weight in {item!r}") from None


def run_init(args) -> int:
    from cellstate.cellspec import CellExists, CellSpecError, build_machines, gpu_mix, init_cell, load_cell_spec
    from cellstate.store import StoreError
    from tools.cli import InputError, UsageError

    if args.spec:
        try:
            load_cell_spec(readable_file(args.spec, "--spec"))  # an invalid file: exit 65; invalid flags below: exit 2
        except CellSpecError as exc:
            raise InputError(str(exc)) from None
    try:
        spec = spec_from_args(args)
    except CellSpecError as exc:
        raise UsageError(str(exc)) from None
    keys = cell_keys(args)
    with connect(args, existing_cell=False) as store:
        try:
            revision = init_cell(store, keys, spec, replace=args.replace)
        except CellExists as exc:
            has = f"already has {exc.machines} machines" if exc.machines is not None else "got machines meanwhile"
            print(f"omega: cell init: cell {keys.cell!r} {has}; pass --replace to start a fresh cell (it deletes "
                  "the cell's machines, allocs and jobs)", file=sys.stderr)
            return 1
        except StoreError as exc:
            print(f"omega: cell init: {store_failure(exc, args)}", file=sys.stderr)
            return 1
    gpus = gpu_mix(build_machines(spec))
    print(f"cell {keys.cell!r}: {spec.machines} machines in {spec.zones} zones "
          f"({spec.racks_per_zone} racks each){'; ' + gpus if gpus else ''} at revision {revision}")
    return 0


def run_check(args) -> int:
    from cellstate.check import check_cell
    from cellstate.store import StoreError
    from tools.cli import UsageError

    if args.revision is not None and args.revision < 1:
        raise UsageError(f"--revision must be >= 1 (an etcd revision), got {args.revision}")
    keys = cell_keys(args)
    with connect(args) as store:
        try:
            report = check_cell(store, keys, args.revision)
        except StoreError as exc:
            print(f"omega: check: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        except ValueError as exc:
            print(f"omega: check: {exc}", file=sys.stderr)
            return 1
    if output_json(args):
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(f"cell {report.cell!r} at revision {report.revision}: {report.machines} machines, "
              f"{report.jobs} jobs, {report.allocs} allocs")
        for v in report.violations:
            print(f"  {v.kind:18} {v.key}: {v.message}")
        print("OK" if report.ok else f"{len(report.violations)} violation(s)")
    return 0 if report.ok else 1
