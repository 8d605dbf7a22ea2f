"""Where the project's shared real traces live: ``$OMEGA_TRACES``, else ``shared/traces``
beside the repository checkout (the layout of the workspace and of CI)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def traces_dir() -> Path:
    """The folder holding ``google-2011/`` and ``swf/``."""
    env = os.environ.get("OMEGA_TRACES")
    return Path(env) if env else REPO.parent / "shared" / "traces"
