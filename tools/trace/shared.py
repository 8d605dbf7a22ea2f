"""Where the project's public real traces live: ``$OMEGA_TRACES`` when set, else the copy in
the repository, ``tests/data/traces`` (licences and citations in its README.md), so a clone
anywhere finds them."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IN_REPO = REPO / "tests" / "data" / "traces"


def traces_dir() -> Path:
    """The folder holding ``google-2011/`` and ``swf/``: ``$OMEGA_TRACES``, else ``tests/data/traces``."""
    env = os.environ.get("OMEGA_TRACES")
    return Path(env) if env else IN_REPO
