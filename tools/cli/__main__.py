"""``python -m tools.cli``: the omega command line."""

from tools.cli import run

run()
