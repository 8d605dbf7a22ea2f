"""``cellstate.private_files``: modes from the first byte, whole replacements, nothing left behind."""

from __future__ import annotations

import os
import stat

import pytest

from cellstate.private_files import private_directory, write_private, write_public


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_private_replaces_a_looser_file_and_leaves_no_temporary(tmp_path):
    directory = private_directory(tmp_path / "a" / "b")
    assert mode(directory) == 0o700
    secret = directory / "key.pem"
    secret.write_bytes(b"old")
    os.chmod(secret, 0o644)
    write_private(secret, b"new")
    assert secret.read_bytes() == b"new" and mode(secret) == 0o600
    write_public(directory / "ca.pem", b"cert")
    assert mode(directory / "ca.pem") == 0o644
    assert sorted(p.name for p in directory.iterdir()) == ["ca.pem", "key.pem"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    secret = tmp_path / "key.pem"
    write_private(secret, b"old")
    (tmp_path / "key.pem.tmp").mkdir()  # the temporary cannot be opened
    with pytest.raises(OSError):
        write_private(secret, b"new")
    assert secret.read_bytes() == b"old"
