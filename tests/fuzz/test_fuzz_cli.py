"""Fuzzing the ``omega`` command line: argv drawn from plausible tokens of each command must
end with exit status 0, 1 or 2 (65 only for an input file that does not parse or validate,
named in the message) and a message, never a traceback.

The store is an endpoint on a free loopback port with nothing listening (connections are
refused at once). ``etcd up`` is left out: it starts a real server and waits for Ctrl-C.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cellstate.etcd.ports import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from cli_helpers import run_cli  # noqa: E402

DEAD = f"127.0.0.1:{free_port()}"
_TMP = tempfile.mkdtemp(prefix="omega-fuzz-cli-")
GOOD_JOBS = os.path.join(_TMP, "good.json")
BAD_JOBS = os.path.join(_TMP, "bad.toml")
BAD_SWF = os.path.join(_TMP, "bad.swf")
with open(GOOD_JOBS, "w") as _f:
    json.dump({"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": 1}, _f)
with open(BAD_JOBS, "w") as _f:
    _f.write("id = [\n")
with open(BAD_SWF, "w") as _f:
    _f.write("; MaxNodes: 2\n1 2 3\n")

NUMBERS = ["0", "1", "-1", "2.5", "nan", "inf", "1e400", "abc", "", "99999999999999999999", "3"]
FILES = [GOOD_JOBS, BAD_JOBS, BAD_SWF, os.path.join(_TMP, "missing.json"), _TMP]
# Files that exist and may be invalid for the command reading them: the only cause of exit 65.
INPUT_FILES = (GOOD_JOBS, BAD_JOBS, BAD_SWF)
OUTS = [os.path.join(_TMP, "out.omt"), os.path.join(_TMP, "out.omt.gz"), os.path.join(_TMP, "no-dir", "o.omt"),
        _TMP, ""]
NAMES = ["m1", "m1,m2", "all", "", "/", "a/b", "x y", "batch"]
RETRY_FOR = ["0", "0.2", "-1", "nan", "inf", "abc", ""]  # bounded: the store is dead, a retry waits it out
BOOLEAN = None
METRICS_FLAGS = {"--metrics-addr": ["127.0.0.1:0", "9100", "h:99999", "[x]:1", ":0", ""], "--metrics-port": NUMBERS,
                 "--metrics-cert": FILES, "--metrics-key": FILES, "--metrics-client-ca": FILES}
COMMON = {"--cell": NAMES, "--root": ["/omega", "", "x"], "--max-txn-ops": NUMBERS, "-v": BOOLEAN,
          "--help": BOOLEAN, "--bogus": BOOLEAN, "--endpoints": [DEAD, "", "nohost", "h:0", "h:99999", ","]}
COMMANDS = {
    ("submit",): ([GOOD_JOBS, BAD_JOBS, os.path.join(_TMP, "missing.json")], {"--retry-for": RETRY_FOR}),
    ("kill",): (NAMES, {}),
    ("generate",): ([], {"--seed": NUMBERS, "--duration": NUMBERS, "--rate": NUMBERS,
                         "--service-fraction": NUMBERS, "--prefix": NAMES, "--out": OUTS,
                         "--retry-for": RETRY_FOR}),
    ("cell", "init"): ([], {"--spec": FILES, "--machines": NUMBERS, "--zones": NUMBERS,
                            "--racks-per-zone": NUMBERS, "--shape": ["4,8", "4,8,1:2", "x", "4", "-1,2", ""],
                            "--platforms": ["x,y:2", "a:0", ":", ""], "--packages": NUMBERS,
                            "--packages-per-machine": NUMBERS, "--seed": NUMBERS, "--replace": BOOLEAN}),
    ("check",): ([], {"--revision": NUMBERS, "--json": BOOLEAN}),
    ("monitor",): ([], {"--once": BOOLEAN, "--json": BOOLEAN, "--follow": BOOLEAN, "--refresh-hz": NUMBERS}),
    ("import", "google2011"): ([], {"--task-events": FILES, "--job-events": FILES, "--out": OUTS,
                                    "--capacity-model": ["mix", "uniform", "x"], "--seed": NUMBERS,
                                    "--limit": NUMBERS}),
    ("import", "swf"): ([BAD_SWF, GOOD_JOBS, os.path.join(_TMP, "missing.swf")],
                        {"--out": OUTS, "--skip-bad": BOOLEAN, "--nodes": NUMBERS, "--node-memory-mib": NUMBERS}),
    ("trace", "info"): (FILES + OUTS, {}),
    ("record",): ([], {"--out": OUTS}),
    ("agents", "run"): ([], {"--machines": NAMES, "--name": NAMES, "--time-scale": NUMBERS,
                             "--fail-rate": NUMBERS, "--repair-after": NUMBERS, "--fail": NAMES,
                             "--drain": NAMES, "--seed": NUMBERS, "--init-spec": FILES,
                             "--init-machines": NUMBERS, **METRICS_FLAGS}),
    ("scheduler", "run"): ([], {"--kind": ["batch", "service", "borg", "nope", ""], "--name": NAMES,
                                "--conflict-mode": ["sequence", "resource-fit", "x"],
                                "--commit-mode": ["incremental", "all-or-nothing", "x"], "--seed": NUMBERS,
                                "--config": FILES, "--batch-jobs": NUMBERS, "--steal-after": NUMBERS,
                                **METRICS_FLAGS}),
}
# How long each long-running command may run (against a dead store it fails at once anyway).
RUN_LIMIT = {("record",): "--duration", ("monitor",): "--duration", ("scheduler", "run"): "--duration",
             ("agents", "run"): "--duration"}
LIMIT_VALUES = ["0", "0.1", "-1", "nan", "abc"]


@st.composite
def argvs(draw, command: tuple[str, ...]):
    """The command, its positionals (mostly plausible), flags with values of their kind, and
    now and then a stray token; a bounded run time where the command would run on."""
    positionals, flags = COMMANDS[command]
    flags = {**flags, **COMMON}
    argv = list(command)
    if positionals and draw(st.integers(0, 9)):
        argv.append(draw(st.sampled_from(positionals)))
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from(sorted(flags)))
        if flag in ("--help", "--bogus") and draw(st.integers(0, 4)):
            continue  # rarer: both end in argparse
        argv.append(flag)
        if flags[flag] is not BOOLEAN:
            argv.append(draw(st.sampled_from(flags[flag])))
    if not draw(st.integers(0, 9)):
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(NUMBERS + NAMES)))
    if "--endpoints" not in argv:
        argv += ["--endpoints", DEAD]
    if command in (("submit",), ("generate",)) and "--retry-for" not in argv:
        argv += ["--retry-for", "0"]  # the default retries the dead store for a minute
    if command == ("generate",) and "--out" not in argv:
        argv += ["--out", os.path.join(_TMP, "gen.json")]  # never --submit: it paces arrivals in real time
    if command in RUN_LIMIT:
        argv += [RUN_LIMIT[command], draw(st.sampled_from(LIMIT_VALUES))]
    if command == ("scheduler", "run"):
        argv += ["--startup-timeout", "0"]  # do not wait for the (dead) store to come up
    return argv


@pytest.mark.parametrize("command", list(COMMANDS), ids=["-".join(c) for c in COMMANDS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_argv_ends_with_a_status_and_a_message(command, data):
    argv = data.draw(argvs(command))
    status, out, err = run_cli(argv)
    assert status in (0, 1, 2, 65), (argv, status, err)
    if status == 65:  # EX_DATAERR: an existing input file that does not parse or validate, named
        assert [f for f in INPUT_FILES if f in argv and os.path.basename(f) in err], (argv, err)
        assert err.count("\n") == 1, err
    assert "Traceback" not in out + err, (argv, err)
    if status:
        assert err.strip(), (argv, status)


@pytest.mark.parametrize("argv", [
    ["generate", "--rate", "inf"], ["generate", "--rate", "nan"], ["generate", "--duration", "nan"],
    ["generate", "--rate", "99999999999999999999"],
], ids=["infinite-rate", "nan-rate", "nan-duration", "endless-rate"])
def test_generate_refuses_unbounded_workloads(argv):
    """Found by fuzzing: a traceback (inf), or generating without end (nan, huge rates)."""
    status, _, err = run_cli(argv + ["--out", os.path.join(_TMP, "gen.json")])
    assert status == 2 and "--rate" in err


@pytest.mark.parametrize("argv,status,message", [
    (["cell", "init", "--packages", "99999999999999999999"], 2, "packages"),
    (["cell", "init", "--machines", "99999999999999999999"], 2, "machines"),
    (["agents", "run", "--init-machines", "3", "--run-for", "0.1"], 1, "omega: agents run: cannot reach etcd"),
    (["generate", "--prefix", "a/b"], 2, "--prefix"),
    (["generate", "--out", os.path.join(_TMP, "no-dir", "x.json")], 2, "--out"),
], ids=["huge-package-count", "huge-machine-count", "agents-register-unreachable", "prefix-with-slash",
        "out-in-missing-dir"])
def test_found_by_fuzzing(argv, status, message):
    """Each used to end in a traceback or exhaust memory."""
    got, _, err = run_cli(argv + ["--endpoints", DEAD])
    assert (got, message in err) == (status, True), err


# ---------------------------------------------- records of an unknown schema version, huge input

def _corrupt(store, key: str, version: int = 2) -> None:
    """Rewrite the value of ``key`` as a newer omega would: schema version ``version``."""
    import msgpack

    value = msgpack.unpackb(store.get(key).value)
    value["v"] = version
    store.put(key, msgpack.packb(value))


@pytest.fixture
def unreadable_cell(etcd_server, etcd_store, cell_keys):
    """A cell of 3 machines and two jobs whose ``victim`` (and machine ``m00001``) are stored
    with schema version 2; yields the CLI's store flags."""
    import time

    from cellstate.cellspec import CellSpec, init_cell
    from cellstate.jobspec import parse_jobs
    from cellstate.submit import submit_jobs

    init_cell(etcd_store, cell_keys, CellSpec(machines=3, seed=0))
    submit_jobs(etcd_store, cell_keys, parse_jobs([{"id": name, "kind": "batch", "tasks": 2, "cpu": 1, "memory": 64}
                                                   for name in ("victim", "fine")]), time.time())
    _corrupt(etcd_store, cell_keys.job("victim"))
    _corrupt(etcd_store, cell_keys.machine("m00001"))
    yield ["--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell]


# command -> (exit status, text the output must hold, one-line error?)
READERS = {
    "kill": (["kill", "victim"], 65, "kill victim: cannot read", True),
    "kill-other": (["kill", "fine"], 0, "killed job 'fine'", False),
    "explain": (["explain", "victim"], 65, "job 'victim': its record does not decode", True),
    "explain-other": (["explain", "fine"], 0, "left out 2 value(s) that do not decode", False),
    "check": (["check"], 1, "undecodable", False),
    "check-json": (["check", "--json"], 1, "undecodable", False),
    "monitor": (["monitor", "--once"], 0, "", False),
    "monitor-json": (["monitor", "--once", "--json"], 0, "", False),
    "record": (["record", "--out", os.path.join(_TMP, "unknown-v.omt"), "--duration", "0.1"], 0,
               "ignored 2 value(s) that did not decode", False),
}


@pytest.mark.parametrize("name", list(READERS))
def test_records_of_an_unknown_schema_version(unreadable_cell, etcd_store, cell_keys, name):
    """Every command that reads records turns one it cannot decode (here: schema version 2)
    into a one-line error (exit 65, nothing written) or a counted skip; `omega kill` used to
    end in a CodecError traceback."""
    argv, status, text, one_line = READERS[name]
    before = etcd_store.revision()
    got, out, err = run_cli(argv + unreadable_cell)
    assert got == status and text in out + err, (got, out[-500:], err[-500:])
    assert "Traceback" not in out + err
    if one_line:
        assert err.count("\n") == 1 and "unknown schema version 2" in err, err
    if got != 0:
        assert etcd_store.revision() == before, "a refused command wrote to the cell"


@pytest.mark.parametrize("field", ["header", "machine", "job"])
def test_trace_records_of_an_unknown_version(tmp_path, field):
    """`omega trace info` on a trace whose header or a record is of an unknown version: one line, exit 65."""
    import msgpack

    from cellstate.model import Job, JobKind, Machine
    from cellstate.resources import Resources
    from tools.trace.events import JobSubmit, MachineAdd
    from tools.trace.format import TraceHeader, TraceWriter

    good, bad = tmp_path / "good.omt", tmp_path / "bad.omt"
    header = TraceHeader(source="test", created_at="2024-01-01T00:00:00+00:00", capacity_model="test")
    with TraceWriter(good, header) as writer:
        writer.write(MachineAdd(0.0, Machine("m1", Resources.of(1000, 1024))))
        writer.write(JobSubmit(0.0, Job("j", JobKind.BATCH, 1, Resources.of(100, 1))))
    records = list(msgpack.Unpacker(open(good, "rb"), raw=False))
    target = {"header": records[0], "machine": records[1]["machine"], "job": records[2]["job"]}[field]
    target["version" if field == "header" else "v"] = 99
    bad.write_bytes(b"".join(msgpack.packb(r) for r in records))
    status, _, err = run_cli(["trace", "info", str(bad)])
    assert status == 65 and err.count("\n") == 1 and "99" in err, err


HUGE_JOBS = {
    "memory-400-digits": '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": %s}' % ("9" * 400),
    "memory-inf-Mi": '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1, "memory": "%sMi"}' % ("9" * 400),
    "cpu-huge": '{"id": "a", "kind": "batch", "tasks": 1, "cpu": 1.7e308, "memory": 1}',
    "nested-100k": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.parametrize("name", list(HUGE_JOBS))
def test_submit_of_huge_numbers_and_deep_nesting(etcd_server, etcd_store, cell_keys, name):
    """Each used to end `omega submit` in a traceback (OverflowError, RecursionError)."""
    path = os.path.join(_TMP, f"{name}.json")
    with open(path, "w") as f:
        f.write(HUGE_JOBS[name])
    status, _, err = run_cli(["submit", path, "--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell])
    assert status == 65 and err.count("\n") == 1 and "nothing submitted" in err, err[:500]
    assert etcd_store.range(cell_keys.prefix).kvs == ()
