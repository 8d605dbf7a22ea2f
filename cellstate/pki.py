"""A local PKI for the embedded etcd: a CA, a server certificate, client certificates.

Keys are EC P-256, written PEM-encoded with mode 0600 in a directory of mode 0700.
The server certificate names ``127.0.0.1`` and ``localhost`` plus the hosts the members are
reached at (``ensure_local_pki(dir, hosts=...)``, from ``--advertise``/``--initial-cluster``)
and is valid for both server and client authentication (etcd members use it to talk to each
other). A member host may hold the CA certificate without its key (``ca.key`` stays on the
host that issues certificates): valid files naming its hosts are used as they are.

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
from cryptography.exceptions import InvalidSignature
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
               client: bool = True, days: int = DEFAULT_DAYS, out: str | os.PathLike | None = None,
               common_name: str | None = None) -> TlsFiles:
    """Sign ``{name}.pem``/``{name}.key`` (0600) with the CA in ``directory``, written to
    ``out`` (default ``directory``).

    ``hosts`` become the subject alternative names (IPs or DNS names); the common
    name is ``common_name`` (default ``name``; etcd maps a client certificate's CN to a user
    under ``--client-cert-auth``). ``server``/``client`` choose the extended key usages.
    """
    if not name or "/" in name or name == CA_NAME:
        raise PkiError(f"certificate name must be a non-empty file name other than {CA_NAME!r}, got {name!r}")
    if not (server or client):
        raise PkiError(f"certificate {name!r} needs server or client usage")
    path = _prepare_directory(directory)
    ca_cert, ca_key = _load_ca(path)
    target = path if out is None else _prepare_directory(out)
    key = _new_key()
    usages = [oid for wanted, oid in ((server, ExtendedKeyUsageOID.SERVER_AUTH),
                                      (client, ExtendedKeyUsageOID.CLIENT_AUTH)) if wanted]
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if hosts:
        builder = builder.add_extension(_subject_alt_names(hosts), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(target / f"{name}.key", key)
    _write_cert(target / f"{name}.pem", cert)
    return TlsFiles(str(path / f"{CA_NAME}.pem"), str(target / f"{name}.pem"), str(target / f"{name}.key"))


def _still_valid(cert_path: Path, margin: dt.timedelta = dt.timedelta(days=1)) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError):
        return False
    return cert.not_valid_after_utc - margin > _now()


def cert_hosts(cert_path: str | os.PathLike) -> set[str]:
    """The IPs and DNS names a certificate's subject alternative names hold (empty when none)."""
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return ({str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
            | set(names.get_values_for_type(x509.DNSName)))


def _normal_host(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def ensure_local_pki(directory: str | os.PathLike, days: int = DEFAULT_DAYS, hosts=()) -> LocalPki:
    """The CA and the server certificate in ``directory``, made when missing or expiring.

    The server certificate names loopback plus ``hosts``; one that misses any of them is issued
    again. A new CA always comes with a new server certificate (the old one would not verify).
    Without ``ca.key`` (a member host) valid files covering ``hosts`` are used as they are, and
    anything to issue is a PkiError naming what is missing: a CA is never made afresh beside a
    ``ca.pem`` that other hosts trust.
    """
    path = _prepare_directory(directory)
    wanted = list(dict.fromkeys([*LOOPBACK_HOSTS, *(_normal_host(h) for h in hosts)]))
    ca_pem, ca_key = path / f"{CA_NAME}.pem", path / f"{CA_NAME}.key"
    server_pem, server_key = path / f"{SERVER_NAME}.pem", path / f"{SERVER_NAME}.key"
    server_ok = _still_valid(server_pem) and server_key.exists()
    missing = sorted(set(wanted) - cert_hosts(server_pem)) if server_ok else wanted
    if ca_pem.exists() and not ca_key.exists():
        if not _still_valid(ca_pem):
            raise PkiError(f"{ca_pem} is expired or unreadable and {ca_key} (to issue a new one) is not here")
        if not server_ok or missing:
            what = f"does not name {', '.join(missing)}" if server_ok else "is missing or expiring"
            raise PkiError(f"{server_pem} {what}, and {ca_key} is not here to issue it: issue it on the host "
                           f"holding the CA (omega cell certs --host ...) and copy it here")
    else:
        ca_ok = _still_valid(ca_pem) and ca_key.exists()
        if not ca_ok:
            make_ca(path, days=days)
        if not ca_ok or not server_ok or missing:
            issue_cert(path, SERVER_NAME, hosts=wanted, days=days)
    server = TlsFiles(str(ca_pem), str(server_pem), str(server_key))
    return LocalPki(path, server.ca, server)


def client_cert_valid(directory: str | os.PathLike, cert_path: str | os.PathLike, key_path: str | os.PathLike,
                      common_name: str) -> bool:
    """Whether ``cert_path`` (with ``key_path`` present) is a client certificate for
    ``common_name``, signed by the CA in ``directory`` and valid for more than a day."""
    try:
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
        ca = x509.load_pem_x509_certificate((Path(directory) / f"{CA_NAME}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return (Path(key_path).exists() and names == [common_name] and _still_valid(Path(cert_path)))


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
