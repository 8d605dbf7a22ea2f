"""Every ``omega …`` command shown in README.md and docs/*.md runs as written: its sub-command
path exists, every flag it passes belongs to that sub-command (argparse would ignore an unknown
flag before ``--help``, so they are checked against the parser), and ``--help`` of that path
exits 0. Commands are taken from code blocks (fenced or indented) and inline code spans;
``[optional]`` parts are included, the first of ``a|b`` alternatives is taken, ``…`` dropped."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from tools.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_PREFIX = re.compile(r"^(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\S*/)?omega (?=[a-z-])")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the shell lines in fenced and indented code blocks, with
    backslash continuations joined, and of inline code spans."""
    out: list[tuple[int, str]] = []
    fenced = False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        start = i
        if fenced or line.startswith("    "):
            joined = line.strip()
            while joined.endswith("\\") and i + 1 < len(lines):
                i += 1
                joined = joined[:-1] + " " + lines[i].strip()
            out.append((start + 1, joined))
        else:
            out.extend((start + 1, span) for span in re.findall(r"`([^`]+)`", line))
        i += 1
    return out


def doc_commands() -> list[tuple[str, str]]:
    """(where, command line) of every ``omega`` command in the docs."""
    found = []
    for path in DOCS:
        for number, line in _code_lines(path.read_text()):
            match = _PREFIX.match(line)
            if match:
                found.append((f"{path.relative_to(REPO)}:{number}", "omega " + line[match.end():]))
    return found


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    tokens = []
    for token in lexer:
        if token in ("|", "&", "&&", ";", "||"):
            break  # the rest is another shell command
        token = token.strip("[]")
        if not token or token in ("...", "…") or token.startswith(("<", ">")):
            continue
        if "|" in token and not token.startswith("{"):
            token = token.split("|")[0]
        tokens.append(token)
    return tokens


def _subparsers(parser: argparse.ArgumentParser):
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def check(command: str) -> tuple[list[str], str | None]:
    """(sub-command path, the problem or None) of one documented command line."""
    parser, path = build_parser(), []
    match = _PREFIX.match(command)
    tokens = _tokens(command[match.end():] if match else command)
    if not match and tokens[:1] == ["omega"]:
        tokens = tokens[1:]
    for token in tokens:
        sub = _subparsers(parser)
        if token.startswith("-") and len(token) > 1 and not token[1:2].isdigit():
            flag = token.split("=", 1)[0]
            if flag not in parser._option_string_actions:
                return path, f"unknown flag {flag} for `omega {' '.join(path)}`"
        elif sub is not None and token in sub.choices:
            parser = sub.choices[token]
            path.append(token)
        elif sub is not None and sub.required:
            return path, f"unknown sub-command {token!r} of `omega {' '.join(path)}`"
    if _subparsers(parser) is not None and _subparsers(parser).required and not {"--help", "--version"} & set(tokens):
        return path, f"`omega {' '.join(path)}` needs a sub-command"
    return path, None


COMMANDS = doc_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 50
    assert any("agents run" in c for _, c in COMMANDS)


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_runs_as_written(where, command):
    path, problem = check(command)
    assert problem is None, f"{where}: {command}: {problem}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0, err.getvalue()


@pytest.mark.parametrize("command, problem", [
    ("omega agents run --cell demo -x", "unknown flag -x for `omega agents run`"),
    ("omega agents run --cell demo -v", None),
    ("omega scheduler go --kind batch", "unknown sub-command 'go' of `omega scheduler`"),
    ("omega check --jsn", "unknown flag --jsn for `omega check`"),
    ("omega cell", "`omega cell` needs a sub-command"),
    ("omega scheduler run --kind batch|borg [--order fair|drf] ...", None),
    ("PYTHONPATH=x omega replay t.omt --schedulers '[{\"a\": 1}]' | head", None),
])
def test_the_checker_catches_what_argparse_help_would_not(command, problem):
    assert check(command)[1] == problem
