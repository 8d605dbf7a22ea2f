"""Files only their owner reads (keys, passwords) and the public files beside them.

Each write goes to ``NAME.tmp`` with its final mode from the first byte, then replaces ``NAME``,
so a reader never sees a half-written file or a secret with a looser mode. Errors are the
``OSError`` of the failed step; callers name the file in their own error.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PUBLIC_FILE_MODE = 0o644
PRIVATE_DIRECTORY_MODE = 0o700


def private_directory(path: str | os.PathLike) -> Path:
    """``path`` made (with its parents) and set to mode 0700."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, PRIVATE_DIRECTORY_MODE)
    return directory


def write_private(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data``, mode 0600."""
    _replace(Path(path), data, PRIVATE_FILE_MODE)


def write_public(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data``, mode 0644."""
    _replace(Path(path), data, PUBLIC_FILE_MODE)


def _replace(target: Path, data: bytes, mode: int) -> None:
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)  # an existing file keeps its old mode through O_CREAT
    os.replace(tmp, target)
