"""Running the ``omega`` command line in-process from tests."""

from __future__ import annotations

import contextlib
import io

from tools.cli import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``omega ARGV`` in this process: (exit status, stdout, stderr); a usage error's
    ``SystemExit`` becomes its status."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    return status, out.getvalue(), err.getvalue()
