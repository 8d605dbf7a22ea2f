"""Server options shared by every member of an embedded etcd.

History is bounded by default: ``--auto-compaction-mode=revision`` keeping the last
``DEFAULT_COMPACTION_RETENTION`` revisions, and a ``DEFAULT_QUOTA_BACKEND_BYTES`` backend quota.

With ``EtcdOptions(tls=TlsFiles(ca, cert, key))`` clients must use TLS (https
URLs, ``--cert-file/--key-file``; with ``client_cert_auth`` also
``--client-cert-auth --trusted-ca-file``) and members talk to each other over TLS
too, each presenting the same certificate (``--peer-client-cert-auth``: a peer
must show a certificate signed by the CA). ``cellstate.pki`` makes the files.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field

from cellstate.etcd.binary import EtcdError

DEFAULT_MAX_TXN_OPS = 10_000
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
# History stays bounded: etcd's revision compactor (every 5 minutes in etcd 3.5) keeps the last
# this many revisions; a watcher further behind relists (see replica.py). 0 turns it off.
DEFAULT_COMPACTION_RETENTION = 10_000
# The backend quota: past it etcd raises the NOSPACE alarm and refuses writes (reads still work).
DEFAULT_QUOTA_BACKEND_BYTES = 4 * 1024**3


@dataclass(frozen=True)
class TlsFiles:
    """PEM paths: the CA that signs certificates, and this party's certificate and private key."""

    ca: str
    cert: str
    key: str

    def check(self) -> None:
        """EtcdError naming the first file that cannot be read."""
        for role, path in (("CA certificate", self.ca), ("certificate", self.cert), ("private key", self.key)):
            if not os.access(path, os.R_OK):
                raise EtcdError(f"TLS {role} {path!r} is missing or unreadable")


@dataclass
class EtcdOptions:
    """Server options shared by every member."""

    max_txn_ops: int = DEFAULT_MAX_TXN_OPS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    quota_backend_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES
    auto_compaction_retention: int = DEFAULT_COMPACTION_RETENTION  # revisions kept; 0: no auto-compaction
    unsafe_no_fsync: bool = False
    extra_args: list[str] = field(default_factory=list)
    tls: TlsFiles | None = None
    client_cert_auth: bool = False  # with tls: clients must present a certificate signed by the CA

    def history_args(self) -> list[str]:
        """etcd flags bounding the history: backend quota and revision-based auto-compaction."""
        if self.quota_backend_bytes < 0 or self.auto_compaction_retention < 0:
            raise EtcdError("quota_backend_bytes and auto_compaction_retention must be >= 0")
        args = ["--quota-backend-bytes", str(self.quota_backend_bytes)]
        if self.auto_compaction_retention:
            args += ["--auto-compaction-mode", "revision",
                     "--auto-compaction-retention", str(self.auto_compaction_retention)]
        return args

    def tls_args(self) -> list[str]:
        """etcd flags for client and peer TLS (none without ``tls``).

        ``--trusted-ca-file`` makes etcd demand client certificates, so it is only
        passed (with ``--client-cert-auth``) when ``client_cert_auth`` is set.
        """
        if self.tls is None:
            if self.client_cert_auth:
                raise EtcdError("client_cert_auth needs tls files")
            return []
        t = self.tls
        args = ["--cert-file", t.cert, "--key-file", t.key,
                "--peer-cert-file", t.cert, "--peer-key-file", t.key, "--peer-trusted-ca-file", t.ca,
                "--peer-client-cert-auth"]
        if self.client_cert_auth:
            args += ["--client-cert-auth", "--trusted-ca-file", t.ca]
        return args

    def health_context(self) -> ssl.SSLContext | None:
        """The TLS context of the /health probe: trusts the CA, shows the member's certificate."""
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=self.tls.ca)
        if self.client_cert_auth:
            context.load_cert_chain(self.tls.cert, self.tls.key)
        return context
