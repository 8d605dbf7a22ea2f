"""Fuzzing the ``omega`` command line: argv drawn from plausible tokens of each command must
end with exit status 0, 1 or 2 and a message, never a traceback.

The store is an endpoint on a free loopback port with nothing listening (connections are
refused at once). ``etcd up`` is left out: it starts a real server and waits for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cellstate.etcd_server import free_port
from tools.cli import main

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
OUTS = [os.path.join(_TMP, "out.omt"), os.path.join(_TMP, "out.omt.gz"), os.path.join(_TMP, "no-dir", "o.omt"),
        _TMP, ""]
NAMES = ["m1", "m1,m2", "all", "", "/", "a/b", "x y", "batch"]
BOOLEAN = None
COMMON = {"--cell": NAMES, "--root": ["/omega", "", "x"], "--max-txn-ops": NUMBERS, "-v": BOOLEAN,
          "--help": BOOLEAN, "--bogus": BOOLEAN, "--endpoints": [DEAD, "", "nohost", "h:0", "h:99999", ","]}
COMMANDS = {
    ("submit",): ([GOOD_JOBS, BAD_JOBS, os.path.join(_TMP, "missing.json")], {}),
    ("kill",): (NAMES, {}),
    ("generate",): ([], {"--seed": NUMBERS, "--duration": NUMBERS, "--rate": NUMBERS,
                         "--service-fraction": NUMBERS, "--prefix": NAMES, "--out": OUTS}),
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
                             "--init-machines": NUMBERS}),
    ("scheduler", "run"): ([], {"--kind": ["batch", "service", "borg", "nope", ""], "--name": NAMES,
                                "--conflict-mode": ["sequence", "resource-fit", "x"],
                                "--commit-mode": ["incremental", "all-or-nothing", "x"], "--seed": NUMBERS,
                                "--config": FILES, "--batch-jobs": NUMBERS, "--steal-after": NUMBERS}),
}
# How long each long-running command may run (against a dead store it fails at once anyway).
RUN_LIMIT = {("record",): "--duration", ("monitor",): "--duration", ("scheduler", "run"): "--duration",
             ("agents", "run"): "--run-for"}
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
    if command == ("generate",) and "--out" not in argv:
        argv += ["--out", os.path.join(_TMP, "gen.json")]  # never --submit: it paces arrivals in real time
    if command in RUN_LIMIT:
        argv += [RUN_LIMIT[command], draw(st.sampled_from(LIMIT_VALUES))]
    if command == ("scheduler", "run"):
        argv += ["--startup-timeout", "0"]  # do not wait for the (dead) store to come up
    return argv


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", list(COMMANDS), ids=["-".join(c) for c in COMMANDS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_argv_ends_with_a_status_and_a_message(command, data):
    argv = data.draw(argvs(command))
    status, out, err = run_cli(argv)
    assert status in (0, 1, 2), (argv, status, err)
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
    (["agents", "run", "--init-machines", "3", "--run-for", "0.1"], 1, "omega: agents:"),
    (["generate", "--prefix", "a/b"], 2, "--prefix"),
    (["generate", "--out", os.path.join(_TMP, "no-dir", "x.json")], 2, "--out"),
], ids=["huge-package-count", "huge-machine-count", "agents-register-unreachable", "prefix-with-slash",
        "out-in-missing-dir"])
def test_found_by_fuzzing(argv, status, message):
    """Each used to end in a traceback or exhaust memory."""
    got, _, err = run_cli(argv + ["--endpoints", DEAD])
    assert (got, message in err) == (status, True), err
