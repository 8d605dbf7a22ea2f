"""A local PKI for the embedded etcd: a CA, a server certificate for loopback, client certificates.

Keys are EC P-256, written PEM-encoded with mode 0600 in a directory of mode 0700.
The server certificate names ``127.0.0.1`` and ``localhost`` and is valid for both
server and client authentication (etcd members use it to talk to each other).

    pki = ensure_local_pki("/data/pki")      # reuses valid files, makes missing ones
    EtcdOptions(tls=pki.server)              # TlsFiles(ca, cert, key)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cellstate.etcd.options import TlsFiles
from cellstate.private_files import private_directory, write_private, write_public

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
DEFAULT_DAYS = 365
CA_NAME = "ca"
SERVER_NAME = "server"
JWT_NAME = "jwt"


class PkiError(RuntimeError):
    """A certificate or key could not be made, read or written."""


@dataclass(frozen=True)
class LocalPki:
    """Paths of a local PKI: the CA certificate and the etcd server's TlsFiles."""

    directory: Path
    ca_cert: str
    server: TlsFiles


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    write_public(path, cert.public_bytes(serialization.Encoding.PEM))


def _prepare_directory(directory: str | os.PathLike) -> Path:
    try:
        return private_directory(directory)
    except OSError as exc:
        raise PkiError(f"cannot prepare PKI directory {str(directory)!r}: {exc.strerror}") from None


def _subject_alt_names(hosts) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_ca(directory: str | os.PathLike, common_name: str = "omega local CA", days: int = DEFAULT_DAYS) -> str:
    """Create ``ca.pem`` and ``ca.key`` (0600) in ``directory``; returns the certificate path."""
    if days < 1:
        raise PkiError(f"certificate validity must be at least 1 day, got {days}")
    path = _prepare_directory(directory)
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(path / f"{CA_NAME}.key", key)
    _write_cert(path / f"{CA_NAME}.pem", cert)
    return str(path / f"{CA_NAME}.pem")


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((directory / f"{CA_NAME}.pem").read_bytes())
        key = serialization.load_pem_private_key((directory / f"{CA_NAME}.key").read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise PkiError(f"cannot load the CA in {str(directory)!r}: {exc}") from None
    return cert, key


def issue_cert(directory: str | os.PathLike, name: str, hosts=LOOPBACK_HOSTS, server: bool = True,
               client: bool = True, days: int = DEFAULT_DAYS) -> TlsFiles:
    """Sign ``{name}.pem``/``{name}.key`` (0600) with the CA in ``directory``.

    ``hosts`` become the subject alternative names (IPs or DNS names); the common
    name is ``name`` (etcd maps a client certificate's CN to a user under
    ``--client-cert-auth``). ``server``/``client`` choose the extended key usages.
    """
    if not name or "/" in name or name == CA_NAME:
        raise PkiError(f"certificate name must be a non-empty file name other than {CA_NAME!r}, got {name!r}")
    if not (server or client):
        raise PkiError(f"certificate {name!r} needs server or client usage")
    path = _prepare_directory(directory)
    ca_cert, ca_key = _load_ca(path)
    key = _new_key()
    usages = [oid for wanted, oid in ((server, ExtendedKeyUsageOID.SERVER_AUTH),
                                      (client, ExtendedKeyUsageOID.CLIENT_AUTH)) if wanted]
    now = _now()
    builder = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if hosts:
        builder = builder.add_extension(_subject_alt_names(hosts), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(path / f"{name}.key", key)
    _write_cert(path / f"{name}.pem", cert)
    return TlsFiles(str(path / f"{CA_NAME}.pem"), str(path / f"{name}.pem"), str(path / f"{name}.key"))


def _still_valid(cert_path: Path, margin: dt.timedelta = dt.timedelta(days=1)) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError):
        return False
    return cert.not_valid_after_utc - margin > _now()


def ensure_local_pki(directory: str | os.PathLike, days: int = DEFAULT_DAYS) -> LocalPki:
    """The CA and loopback server certificate in ``directory``, made when missing or expiring.

    A new CA always comes with a new server certificate (the old one would not verify).
    """
    path = _prepare_directory(directory)
    ca_ok = _still_valid(path / f"{CA_NAME}.pem") and (path / f"{CA_NAME}.key").exists()
    if not ca_ok:
        make_ca(path, days=days)
    if not ca_ok or not (_still_valid(path / f"{SERVER_NAME}.pem") and (path / f"{SERVER_NAME}.key").exists()):
        issue_cert(path, SERVER_NAME, days=days)
    server = TlsFiles(str(path / f"{CA_NAME}.pem"), str(path / f"{SERVER_NAME}.pem"),
                      str(path / f"{SERVER_NAME}.key"))
    return LocalPki(path, server.ca, server)


def ensure_jwt_keys(directory: str | os.PathLike) -> tuple[str, str]:
    """(private, public) PEM paths of an ES256 key pair for etcd's JWT auth tokens (private 0600)."""
    path = _prepare_directory(directory)
    private, public = path / f"{JWT_NAME}.key", path / f"{JWT_NAME}.pub"
    if not (private.exists() and public.exists()):
        key = _new_key()
        _write_key(private, key)
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    return str(private), str(public)


METRICS_SERVER_NAME = "metrics-server"
METRICS_SCRAPER_NAME = "metrics-scraper"


def issue_metrics_certs(directory: str | os.PathLike, hosts=LOOPBACK_HOSTS,
                        days: int = DEFAULT_DAYS) -> tuple[TlsFiles, TlsFiles]:
    """(server, scraper) TlsFiles for metrics endpoints behind the CA in ``directory``: a
    server certificate for ``hosts`` (the scheduler and agents processes serve /metrics with
    it) and a client certificate a scraper presents. Valid files are reused."""
    path = _prepare_directory(directory)
    made = []
    for name, server in ((METRICS_SERVER_NAME, True), (METRICS_SCRAPER_NAME, False)):
        if _still_valid(path / f"{name}.pem") and (path / f"{name}.key").exists():
            made.append(TlsFiles(str(path / f"{CA_NAME}.pem"), str(path / f"{name}.pem"), str(path / f"{name}.key")))
        else:
            made.append(issue_cert(path, name, hosts=hosts if server else (), server=server, client=not server,
                                   days=days))
    return made[0], made[1]
