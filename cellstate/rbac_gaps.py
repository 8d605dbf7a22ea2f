"""What etcd's RBAC does not stop, by etcd version, and a guard that detects what it lets happen.

``RBAC_GAPS`` lists holes in etcd's RBAC (what any logged-in user can do whatever its role) with
the first fixed release of each minor line; ``rbac_gaps(version)`` names those of a running etcd
and ``rbac_warning(version)`` tells operators. ``CompactionGuard`` detects the one whose damage
(an early compaction of every cell's history, a raised alarm) can only be detected, not
prevented.
"""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.security import AuthAdmin, SecurityError


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of an etcd version like "3.5.1" or "v3.4.23"; SecurityError otherwise."""
    try:
        major, minor, patch = (int(part) for part in text.strip().lstrip("v").split("-")[0].split(".")[:3])
    except ValueError:
        raise SecurityError(f"not an etcd version: {text!r}") from None
    return major, minor, patch


@dataclass(frozen=True)
class RbacGap:
    """A hole in etcd's RBAC: what any logged-in user can do whatever its role, and the first
    fixed release of each minor line (a line older than all of them is affected, a newer one not)."""

    name: str
    what: str
    cve: str
    fixed: tuple[str, ...]

    def affects(self, version: str) -> bool:
        v = parse_version(version)
        lines = {parse_version(f)[:2]: parse_version(f) for f in self.fixed}
        if v[:2] in lines:
            return v < lines[v[:2]]
        return v[:2] < min(lines)


RBAC_GAPS = (
    RbacGap("lease-keys", "LeaseTimeToLive(keys=true) names the keys attached to any lease, other cells' "
            "keys too (names, not values)", "CVE-2023-32082", ("3.4.26", "3.5.9")),
    RbacGap("admin-apis", "any user may compact every cell's history, raise or clear alarms (NOSPACE "
            "stops all writes), list leases and members", "CVE-2026-33413", ("3.4.42", "3.5.28", "3.6.9")),
    RbacGap("nested-txn", "a txn nested in a txn is not checked: any user reads and writes every key",
            "CVE-2026-33343", ("3.4.42", "3.5.28", "3.6.9")),
    RbacGap("watch-from-key", "a watch from a permitted key to the end of the keyspace is checked as that "
            "key alone: any reader sees every later key and value", "CVE-2026-73499",
            ("3.5.33", "3.6.14", "3.7.1")),
    RbacGap("txn-put-prevkv-lease", "a put inside a txn is not checked for the read its prev_kv does or for "
            "the lease it attaches: a writer may attach its cell's keys to any lease (omega has no write-only "
            "role, so prev_kv reads nothing a writer may not read)", "CVE-2026-44283", ("3.4.44", "3.5.30", "3.6.11")),
)


def rbac_gaps(version: str) -> list[RbacGap]:
    """The RBAC_GAPS that etcd ``version`` has."""
    return [gap for gap in RBAC_GAPS if gap.affects(version)]


def rbac_warning(version: str) -> str | None:
    """One paragraph for operators on the RBAC gaps of etcd ``version``; None when it has none known."""
    gaps = rbac_gaps(version)
    if not gaps:
        return None
    lines = [f"etcd {version} does not enforce cell roles against a hostile holder of any cell credential:"]
    lines += [f"  - {gap.what} ({gap.cve}; fixed in {', '.join(gap.fixed)})" for gap in gaps]
    lines.append("  Roles still stop honest mistakes; against hostile components run etcd >= 3.5.33 or 3.6.14 "
                 "(ETCD_BIN=/path/to/etcd). Early compactions and alarms are reported below as ALERT lines.")
    return "\n".join(lines)


class CompactionGuard:
    """Detects what the ``admin-apis`` gap lets any user do: compact history early, raise alarms.

    etcd's revision auto-compactor keeps the last ``retention`` revisions, so the oldest readable
    revision never passes ``revision - retention`` on its own (with ``retention`` 0 it stays
    where it was when the guard started). ``check`` returns one line per new finding: an early
    compaction (naming the revision) or an alarm that became active; each is reported once.
    ``admin`` is an AuthAdmin logged in as root.
    """

    def __init__(self, admin: AuthAdmin, retention: int):
        if retention < 0:
            raise SecurityError(f"retention must be >= 0, got {retention}")
        self.admin = admin
        self.retention = retention
        self.baseline = admin.compact_revision()   # compactions before the guard started are not judged
        self._reported_compaction = self.baseline
        self._reported_alarms: set[str] = set()

    def check(self) -> list[str]:
        findings = []
        revision = self.admin.revision()
        oldest = self.admin.compact_revision()
        allowed = max(self.baseline, revision - self.retention) if self.retention else self.baseline
        if oldest > allowed and oldest != self._reported_compaction:
            self._reported_compaction = oldest
            keep = f"keeps the last {self.retention} revisions" if self.retention else "is off"
            findings.append(f"history of every cell compacted up to revision {oldest} at revision {revision}, "
                            f"though auto-compaction {keep}: a client compacted it (watchers relist)")
        current = set(self.admin.alarms())
        findings += [f"etcd alarm active: {alarm}" for alarm in sorted(current - self._reported_alarms)]
        self._reported_alarms = current
        return findings
