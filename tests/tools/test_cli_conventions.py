"""CLI conventions: --version, shell completion, `-o json`, `job init|list|status`, exit
statuses (2 usage, 65 invalid input file), one chain-config format for `scheduler run
--config` and `explain --chains`, optional dependencies checked before a long command."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tools.cli import EXIT_DATA, EXIT_USAGE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_helpers import run_cli  # noqa: E402
from fauxmaster_traces import mixed_trace  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHAINS = str(REPO / "schedulers" / "default_chains.toml")


def test_version_is_the_projects():
    with open(REPO / "pyproject.toml", "rb") as f:
        expected = tomllib.load(f)["project"]["version"]
    assert run_cli(["--version"]) == (0, f"omega {expected}\n", "")


# ------------------------------------------------------------------------------- completion

def _complete(script: str, *words: str) -> list[str]:
    """What the bash completion offers for ``words`` (the last one being completed)."""
    code = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
            '_shtab_omega; printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture(scope="module")
def bash_script():
    status, out, _ = run_cli(["completion", "bash"])
    assert status == 0 and "complete -o bashdefault -F _shtab_omega omega" in out
    return out


@pytest.mark.parametrize("words, expected", [
    (("omega", "sch"), ["scheduler"]),
    (("omega", "job", ""), ["list", "status", "submit", "kill", "init"]),
    (("omega", "job", "-"), ["-h", "--help", "-v", "--verbose"]),
    (("omega", "scheduler", "run", "--ki"), ["--kind"]),
    (("omega", "check", "-o", ""), ["table", "json"]),
    (("omega", "--cell", "x", "check", "--rev"), ["--revision"]),
    (("omega", "completion", ""), ["bash", "zsh"]),
    (("omega", "replay", "--store", ""), ["memory", "etcd"]),
    (("omega", "replay", "--js"), ["--json-out"]),  # --json, a hidden alias, is not offered
])
def test_bash_completion(bash_script, words, expected):
    assert _complete(bash_script, *words) == expected


def test_bash_completion_offers_files_for_a_flags_free_value(bash_script):
    assert "pyproject.toml" in _complete(bash_script, "omega", "scheduler", "run", "--config", "py")
    assert "pyproject.toml" in _complete(bash_script, "omega", "submit", "py")  # a free positional


def test_zsh_completion_is_generated_from_the_same_parser():
    status, out, _ = run_cli(["completion", "zsh"])
    assert status == 0 and out.startswith("#compdef omega")
    assert "--json-out" in out and "--json[" not in out and "'--json'" not in out  # hidden alias left out
    assert all(f"{command}:" in out for command in ("scheduler", "replay", "completion"))
    if shutil.which("zsh"):
        done = subprocess.run(["zsh", "-n"], input=out, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------------- jobs

def test_job_init_writes_a_commented_example_that_validates(tmp_path):
    from cellstate.jobspec import load_jobs

    path = tmp_path / "jobs.toml"
    status, out, _ = run_cli(["job", "init", str(path)])
    assert status == 0 and f"omega submit {path}" in out
    text = path.read_text()
    assert text.count("\n#") + text.count("  #") > 10  # commented
    assert [j.id for j in load_jobs(path)] == ["hello-batch", "hello-web"]
    status, _, err = run_cli(["job", "init", str(path)])
    assert status == EXIT_USAGE and "exists (--force overwrites it)" in err
    path.write_text("x")
    assert run_cli(["job", "init", str(path), "--force"])[0] == 0 and path.read_text() == text


def test_job_list_and_status(etcd_server, cell_keys, tmp_path):
    args = ["--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell]
    assert run_cli(["cell", "init", "--machines", "4", "--zones", "2", *args])[0] == 0
    assert run_cli(["job", "init", str(tmp_path / "jobs.toml")])[0] == 0
    assert run_cli(["submit", str(tmp_path / "jobs.toml"), *args])[0] == 0
    assert run_cli(["kill", "hello-web", *args])[0] == 0

    status, out, _ = run_cli(["job", "list", *args])
    lines = out.splitlines()
    assert status == 0 and lines[0].split() == ["JOB", "KIND", "CLASS", "TASKS", "STATES", "AGE"]
    assert lines[1].split()[:6] == ["hello-batch", "batch", "batch", "4", "4", "pending"]
    assert lines[2].split()[:7] == ["hello-web", "service", "service", "3", "3", "killed", "(killed)"]
    assert lines[3].startswith("2 job(s) in cell")

    status, out, _ = run_cli(["job", "list", "-o", "json", "--state", "pending", *args])
    listing = json.loads(out)
    assert status == 0 and [j["id"] for j in listing["jobs"]] == ["hello-batch"]
    assert listing["jobs"][0]["states"] == {"pending": 4} and listing["cell"] == cell_keys.cell

    status, out, _ = run_cli(["job", "status", "hello-batch", "-o", "json", *args])
    job = json.loads(out)
    assert status == 0 and job["task_states"] == "pppp" and job["cpu_cores"] == 0.5 and job["machines"] == {}
    status, out, _ = run_cli(["job", "status", "hello-web", *args])
    assert status == 0 and out.startswith(f"job 'hello-web' (service, class service) in cell '{cell_keys.cell}'")
    status, _, err = run_cli(["job", "status", "nope", *args])
    assert status == 1 and err == f"omega: job status: no job 'nope' in cell '{cell_keys.cell}' (omega job list shows its jobs)\n"


def test_json_output_is_one_flag_everywhere():
    """-o json|table is accepted by every command with a result; --json stays a hidden alias."""
    from tools.cli import build_parser

    def visible_flags(parser, path=()):
        """Command path -> {flag: choices} of the flags --help shows, for every (sub-)parser."""
        flags, tree = {}, {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    tree.update(visible_flags(child, path + (name,)))
            elif action.option_strings and action.help != argparse.SUPPRESS:
                flags.update(dict.fromkeys(action.option_strings, list(action.choices or ())))
        return {path: flags, **tree}

    tree = visible_flags(build_parser())
    with_output = sorted(" ".join(path) for path, flags in tree.items() if "-o" in flags)
    assert with_output == ["check", "demo", "experiment", "explain", "job list", "job status", "monitor", "replay",
                           "report", "sweep"]
    assert all(tree[tuple(p.split())]["-o"] == ["table", "json"] for p in with_output)
    assert all("--json" not in tree[tuple(p.split())] for p in with_output)  # hidden aliases


# ------------------------------------------------------------------------------ exit statuses

@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad-jobs.toml").write_text('id = "a"\nkind = "batch"\n')  # tasks, cpu, memory missing
    (tmp_path / "bad.toml").write_text("x = [\n")
    (tmp_path / "bad-spec.toml").write_text("machines = -1\n")
    (tmp_path / "bad-chain.toml").write_text('[b]\nkind = "batch"\nfilters = [{name = "nope"}]\n')
    (tmp_path / "bad.omt").write_bytes(b"not a trace")
    return tmp_path


DEAD = "127.0.0.1:1"
STATUSES = {
    "submit-invalid": (["submit", "{d}/bad-jobs.toml", "--endpoints", DEAD], EXIT_DATA, "bad-jobs.toml"),
    "submit-missing": (["submit", "{d}/missing.toml", "--endpoints", DEAD], EXIT_USAGE, "missing.toml"),
    "cell-spec-invalid": (["cell", "init", "--spec", "{d}/bad-spec.toml", "--endpoints", DEAD], EXIT_DATA,
                          "bad-spec.toml"),
    "cell-spec-missing": (["cell", "init", "--spec", "{d}/nope.toml", "--endpoints", DEAD], EXIT_USAGE, "nope.toml"),
    "config-not-toml": (["scheduler", "run", "--kind", "batch", "--config", "{d}/bad.toml", "--endpoints", DEAD],
                        EXIT_DATA, "bad.toml"),
    "chain-file-invalid": (["scheduler", "run", "--kind", "batch", "--config", "{d}/bad-chain.toml",
                            "--endpoints", DEAD], EXIT_DATA, "bad-chain.toml"),
    "explain-chains-invalid": (["explain", "j", "--chains", "{d}/bad-chain.toml", "--endpoints", DEAD], EXIT_DATA,
                               "bad-chain.toml"),
    "trace-invalid": (["trace", "info", "{d}/bad.omt"], EXIT_DATA, "bad.omt"),
    "replay-invalid": (["replay", "{d}/bad.omt"], EXIT_DATA, "bad.omt"),
    "replay-schedulers-file-invalid": (["replay", "{d}/bad.omt", "--schedulers", "@{d}/bad.toml"], EXIT_DATA,
                                       "bad.toml: --schedulers item 'x = ['"),
    "replay-missing": (["replay", "/nonexistent.omt"], EXIT_USAGE, "trace /nonexistent.omt: No such file or directory"),
    "swf-missing": (["import", "swf", "{d}/none.swf", "--out", "{d}/o.omt"], EXIT_USAGE,
                    "none.swf: No such file or directory"),
    "unknown-flag": (["check", "--bogus"], EXIT_USAGE, "unrecognized arguments: --bogus"),
    "unreachable": (["check", "--endpoints", DEAD], 1, "cannot reach etcd"),
}


@pytest.mark.parametrize("name", list(STATUSES))
def test_exit_statuses(files, name):
    argv, status, text = STATUSES[name]
    got, out, err = run_cli([a.format(d=files) for a in argv])
    lines = 2 if name == "unknown-flag" else 1  # argparse's own: the usage line, then the error
    assert (got, err.count("\n")) == (status, lines) and text in err, err
    if status == EXIT_DATA:
        assert err.startswith("omega: error: ")


# --------------------------------------------------------------------------- chain configs

@pytest.mark.parametrize("kind", ["batch", "service", "borg"])
def test_scheduler_run_config_takes_the_chain_file_explain_reads(kind):
    import argparse

    from schedulers.chain_config import load_chain_config
    from tools.cli.scheduler import build_parts, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["scheduler", "run", "--kind", kind, "--config", CHAINS])
    scheduler = build_parts(args)[0]
    expected = load_chain_config(CHAINS)[kind].chain.pipeline()
    assert [type(f).__name__ for f in scheduler.pipeline.filters] == [type(f).__name__ for f in expected.filters]
    assert run_cli(["explain", "j", "--chains", CHAINS, "--table", kind, "--endpoints", DEAD])[0] == 1  # read fine


@pytest.mark.parametrize("argv, message", [
    (["--kind", "solver"], "has no table of kind 'solver' (tables: batch, borg, service)"),
    (["--kind", "batch", "--table", "borg"], "[borg] of"),
    (["--kind", "borg", "--table", "nope"], "has no table [nope]"),
])
def test_scheduler_run_chain_file_table_mistakes(argv, message):
    status, _, err = run_cli(["scheduler", "run", *argv, "--config", CHAINS, "--endpoints", DEAD])
    assert status == EXIT_USAGE and message in err, err


# ------------------------------------------------------------------- optional dependencies

def test_replay_html_without_matplotlib_stops_before_replaying(tmp_path, monkeypatch):
    trace = mixed_trace(tmp_path / "mixed.omt")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    status, out, err = run_cli(["replay", str(trace), "--html", str(tmp_path / "report")])
    assert status == 1 and out == ""  # no replay summary: it never ran
    assert err == ("omega: replay --html needs matplotlib, which is not installed: "
                   "pip install 'omega-scheduler[report]'\n")
    assert not (tmp_path / "report").exists()


def test_replay_json_output(tmp_path):
    trace = mixed_trace(tmp_path / "mixed.omt")
    status, out, _ = run_cli(["replay", str(trace), "-o", "json"])
    result = json.loads(out)
    assert status == 0 and result["jobs_submitted"] > 0 and "schedulers" in result


@pytest.mark.parametrize("argv, what", [
    (["experiment", "conflict-modes", "--quick", "--batch-kind", "solver"], "experiment --batch-kind solver"),
    (["demo", "--solver-schedulers", "1", "--duration", "1"], "demo --solver-schedulers"),
    (["replay", "{trace}", "--schedulers", "s:solver"], "replay of a solver scheduler"),
])
def test_solver_runs_without_ortools_stop_before_starting(tmp_path, monkeypatch, argv, what):
    trace = mixed_trace(tmp_path / "mixed.omt")
    monkeypatch.setitem(sys.modules, "ortools", None)  # as if the solver extra were not installed
    status, out, err = run_cli([a.format(trace=trace) for a in argv])
    assert (status, out) == (1, "")
    assert err == f"omega: {what} needs ortools, which is not installed: pip install 'omega-scheduler[solver]'\n"


def test_experiment_json_output_and_the_deprecated_file_flag(tmp_path):
    status, out, _ = run_cli(["experiment", "commit-modes", "--quick", "-o", "json"])
    report = json.loads(out)  # the report only: no table around it
    assert status in (0, 1) and report["name"] == "commit-modes" and report["rows"]
    status, out, _ = run_cli(["experiment", "commit-modes", "--quick", "--json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text())["name"] == "commit-modes"  # --json FILE: --json-out
    assert "commit-modes" in out  # the table still printed


def test_a_closed_stdout_pipe_is_a_quiet_stop_not_a_traceback():
    """``omega replay TRACE | head``: the reader went away; exit 141 (128 + SIGPIPE), nothing on stderr."""
    trace = str(REPO / "tests" / "data" / "traces" / "sweep" / "tiny-a.omt.gz")
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "replay", trace], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
