"""``EtcdStore``: the Store protocol over a real etcd (cslab-etcd3's gRPC stubs).

Requests are built as etcd protobufs directly and sent on the client's stubs, so a
txn costs what the bare client costs. Failures map to the Store errors:
connection loss or timeouts -> ``Unavailable`` (and the endpoint is marked failed,
so with several endpoints the next call tries another), compacted revisions ->
``Compacted``, too many ops or too many bytes -> ``TxnTooLarge`` (checked before
sending, too), anything else -> ``StoreError`` with etcd's message.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import grpc
import etcd3
import etcd3.etcdrpc as rpc

from cellstate.etcd import wire as etcd_wire
from cellstate.etcd.watch import EtcdWatchStream, watch_request
from cellstate.store import (
    Compacted, Compare, KeyValue, Op, RangeResult, StoreError, TxnResult, TxnTooLarge, Unavailable,
)

DEFAULT_PAGE_SIZE = 5_000
MAX_RECEIVE_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_send_message_length", MAX_RECEIVE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),  # etcd's default minimum is 5 s
    ("grpc.keepalive_timeout_ms", 5_000),
    # Reconnect within a second of a restarted server (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]
_REVISION_PROBE_KEY = b"\0"


SCHEMES = ("http", "https")


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of ``"host:port"``, ``"http://host:port"`` or ``"https://host:port"``; ValueError otherwise."""
    scheme, sep, text = endpoint.partition("://")
    if not sep:
        text = endpoint
    elif scheme not in SCHEMES:
        raise ValueError(f"etcd endpoint {endpoint!r}: scheme must be http:// or https://, not {scheme}://")
    host, sep, port = text.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"etcd endpoint {endpoint!r} is not host:port")
    return host, int(port)


def endpoints_scheme(endpoints: Sequence[str]) -> str | None:
    """"https" or "http" when every endpoint names that scheme, None when none names one;
    ValueError when they mix schemes (or some name one and some not)."""
    schemes = {e.partition("://")[0] if "://" in e else None for e in endpoints}
    if len(schemes) > 1:
        shown = ", ".join(sorted(f"{s}://" if s else "bare host:port" for s in schemes))
        raise ValueError(f"etcd endpoints mix schemes ({shown}): give every endpoint the same one")
    return schemes.pop() if schemes else None


def channel_credentials(endpoints: Sequence[str], ca_cert: str | None = None, cert: str | None = None,
                        key: str | None = None) -> grpc.ChannelCredentials | None:
    """The gRPC TLS credentials for ``endpoints``, or None for plain text; ValueError in one line.

    ``https://`` endpoints need ``ca_cert`` (the CA that signed the servers' certificates),
    ``http://`` ones are plain text and take no TLS files; bare ``host:port`` ones use TLS
    exactly when ``ca_cert`` is given. ``cert``/``key`` (both or neither, PEM) are the client
    certificate presented to an etcd started with ``--client-cert-auth``.
    """
    scheme = endpoints_scheme(endpoints)
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs both the certificate and its key (--cert and --key)")
    if scheme == "http" and (ca_cert or cert):
        raise ValueError("http:// endpoints are plain text: use https:// endpoints with TLS files "
                         "(--cacert, --cert, --key)")
    if ca_cert is None:
        if scheme == "https":
            raise ValueError("https:// endpoints need the CA certificate that signed etcd's (--cacert PEM)")
        if cert is not None:
            raise ValueError("a client certificate (--cert/--key) needs TLS: give the CA certificate (--cacert PEM)")
        return None
    files = {}
    for what, path in (("CA certificate", ca_cert), ("client certificate", cert), ("client key", key)):
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                files[what] = f.read()
        except OSError as exc:
            raise ValueError(f"cannot read etcd {what} {path!r}: {exc.strerror}") from None
    return grpc.ssl_channel_credentials(root_certificates=files["CA certificate"],
                                        private_key=files.get("client key"),
                                        certificate_chain=files.get("client certificate"))


class EtcdStore:
    """A Store on etcd. ``page_size`` keys are read per Range request by ``range``. TLS and the
    client certificate: ``channel_credentials`` (a ValueError for a bad combination)."""

    def __init__(self, endpoints: list[str], max_txn_ops: int = 128, max_request_bytes: int = 1572864,
                 timeout: float = 5.0, user: str | None = None, password: str | None = None,
                 ca_cert: str | None = None, page_size: int = DEFAULT_PAGE_SIZE, time_retry: float = 0.5,
                 cert: str | None = None, key: str | None = None):
        if isinstance(endpoints, str) or not endpoints:
            raise ValueError(f"endpoints must be a non-empty list of host:port strings, got {endpoints!r}")
        if (user is None) != (password is None):
            raise ValueError("etcd authentication needs both user and password")
        for name, value in (("max_txn_ops", max_txn_ops), ("max_request_bytes", max_request_bytes),
                            ("page_size", page_size)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        self.page_size = page_size
        self._timeout = timeout
        self._closed = False
        self._watches: weakref.WeakSet[EtcdWatchStream] = weakref.WeakSet()
        creds = channel_credentials(endpoints, ca_cert, cert, key)
        eps = [etcd3.Endpoint(host, port, secure=creds is not None, creds=creds, time_retry=time_retry,
                              opts=_CHANNEL_OPTIONS) for host, port in map(parse_endpoint, endpoints)]
        self._client = etcd3.MultiEndpointEtcd3Client(endpoints=eps, failover=True, timeout=timeout)
        self._metadata = None
        self._credentials = (user, password) if user is not None else None
        if user is not None:
            try:
                self._login(user, password, len(eps))
            except grpc.RpcError as exc:
                self._client.close()
                raise etcd_wire.store_error(exc, "authentication") from None

    def _login(self, user: str, password: str, attempts: int) -> None:
        """Authenticate, moving on to the next endpoint while one cannot be reached (the client
        starts on a random one), at most ``attempts`` times. The auth token travels as metadata
        (call credentials are refused on plain channels)."""
        for attempt in range(attempts):
            try:
                resp = self._client.authstub.Authenticate(
                    rpc.AuthenticateRequest(name=user, password=password), self._timeout)
                break
            except grpc.RpcError as exc:
                if exc.code() not in etcd_wire.ENDPOINT_FAILURE_CODES or attempt == attempts - 1:
                    raise
                self._fail_endpoint(self._client.endpoint_in_use)
        self._metadata = self._client.metadata = (("token", resp.token),)

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, stub: str, method: str, request, what: str, revision: int | None = None):
        """One unary RPC with the Store error mapping."""
        if self._closed:
            raise StoreError(f"etcd {what} on a closed EtcdStore")
        try:
            try:
                return getattr(getattr(self._client, stub), method)(request, self._timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                if not self._renew_expired_token(exc):
                    raise
            return getattr(getattr(self._client, stub), method)(request, self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise self._error(exc, what, revision) from None
        except etcd_wire.CONNECTION_ERRORS as exc:
            raise Unavailable(f"etcd {what} failed: {type(exc).__name__}: {exc}") from None

    def _renew_expired_token(self, exc: grpc.RpcError) -> bool:
        """After etcd refused our auth token as invalid (expired, or lost in a restart with
        simple tokens): authenticate again and return True so the call is retried once."""
        if self._credentials is None or not etcd_wire.is_invalid_token(exc):
            return False
        user, password = self._credentials
        resp = self._client.authstub.Authenticate(
            rpc.AuthenticateRequest(name=user, password=password), self._timeout)
        self._metadata = self._client.metadata = (("token", resp.token),)
        return True

    def _error(self, exc: grpc.RpcError, what: str, revision: int | None) -> StoreError:
        if exc.code() in etcd_wire.ENDPOINT_FAILURE_CODES:
            self._fail_endpoint(self._client.endpoint_in_use)
        if etcd_wire.is_compacted(exc):
            return Compacted(self._compact_revision(), revision)
        return etcd_wire.store_error(exc, what)

    def _fail_endpoint(self, endpoint) -> None:
        """Mark ``endpoint`` failed for time_retry seconds and, when it is the one in use, move on
        to the next endpoint not failed (in list order, wrapping): the next call fails over even
        when it comes after time_retry (a retry a second later would otherwise find the failed
        endpoint still "in use" and no longer marked, and try it again, forever)."""
        endpoint.fail()
        if endpoint is self._client.endpoint_in_use:
            self._client._clear_old_stubs()
            labels = list(self._client.endpoints)
            at = labels.index(self._client._current_endpoint_label)
            for label in labels[at + 1:] + labels[:at]:
                if not self._client.endpoints[label].is_failed():
                    self._client._current_endpoint_label = label
                    break

    def _compact_revision(self) -> int:
        """etcd's current compact revision (0 if unknown): a watch from revision 1 reports it."""
        try:
            stream = self._open_watch(_REVISION_PROBE_KEY, b"", 1)
        except StoreError:
            return 0
        try:
            stream.next(timeout=self._timeout)
        except Compacted as exc:
            return exc.compact_revision
        except StoreError:
            pass
        finally:
            stream.cancel()
        return 0

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        resp = self._call("kvstub", "Range", rpc.RangeRequest(key=key.encode()), f"get of {key!r}")
        return etcd_wire.key_value(resp.kvs[0]) if resp.kvs else None

    def get_many(self, keys: Sequence[str]) -> tuple[int, dict[str, KeyValue]]:
        """Read several keys at one revision; chunks beyond max_txn_ops read at the first chunk's revision."""
        if isinstance(keys, str):
            raise TypeError("get_many needs a sequence of keys, not a str")
        found: dict[str, KeyValue] = {}
        revision = 0
        for start in range(0, max(len(keys), 1), self.max_txn_ops):
            ops = [rpc.RequestOp(request_range=rpc.RangeRequest(key=k.encode(), revision=revision))
                   for k in keys[start:start + self.max_txn_ops]]
            resp = self._call("kvstub", "Txn", rpc.TxnRequest(success=ops), "get_many", revision or None)
            revision = revision or resp.header.revision
            for op_resp in resp.responses:
                for kv in op_resp.response_range.kvs:
                    found[kv.key.decode()] = etcd_wire.key_value(kv)
        return revision, found

    def range(self, prefix: str, revision: int | None = None) -> RangeResult:
        """All keys under ``prefix`` at ``revision`` (default now), read in pages at one revision."""
        if revision is not None and (type(revision) is not int or revision < 1):
            raise ValueError(f"range revision must be a positive int or None, got {revision!r}")
        key = prefix.encode()
        end = etcd_wire.prefix_end_bytes(key)
        key = key or b"\0"
        rev = revision or 0
        kvs: list[KeyValue] = []
        while True:
            request = rpc.RangeRequest(key=key, range_end=end, limit=self.page_size, revision=rev)
            resp = self._call("kvstub", "Range", request, f"range of {prefix!r}", revision)
            rev = rev or resp.header.revision
            kvs.extend(etcd_wire.key_values(resp.kvs))
            if not resp.more or not resp.kvs:
                return RangeResult(rev, tuple(kvs))
            key = resp.kvs[-1].key + b"\0"

    def first_key(self, prefix: str, start: str | None = None) -> str | None:
        """The first key under ``prefix`` (from ``start`` on, when given), or None: one
        keys-only read of one key (the command line's cell checks)."""
        key = (start or prefix).encode() or b"\0"
        request = rpc.RangeRequest(key=key, range_end=etcd_wire.prefix_end_bytes(prefix.encode()), limit=1,
                                   keys_only=True)
        resp = self._call("kvstub", "Range", request, f"read of {prefix!r}")
        return resp.kvs[0].key.decode() if resp.kvs else None

    def revision(self) -> int:
        request = rpc.RangeRequest(key=_REVISION_PROBE_KEY, count_only=True)
        return self._call("kvstub", "Range", request, "revision").header.revision

    # -- writes ------------------------------------------------------------------------------

    def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        """One etcd transaction; TxnTooLarge before sending when a limit is exceeded."""
        limit = self.max_txn_ops
        if len(compares) > limit or len(success) > limit or len(failure) > limit:
            raise TxnTooLarge(f"txn has {len(compares)} compares, {len(success)} success and "
                              f"{len(failure)} failure ops; the limit is {limit} each")
        request = rpc.TxnRequest()
        etcd_wire.add_compares(request.compare, compares)
        success_size = etcd_wire.add_request_ops(request.success, success)
        failure_size = etcd_wire.add_request_ops(request.failure, failure)
        estimate = success_size + failure_size + 32 * len(compares)
        if estimate > self.max_request_bytes * 0.9 and request.ByteSize() > self.max_request_bytes:
            raise TxnTooLarge(f"txn request is {request.ByteSize()} bytes; the limit is {self.max_request_bytes}")
        resp = self._call("kvstub", "Txn", request, "txn")
        ran = success if resp.succeeded else failure
        return TxnResult(resp.succeeded, resp.header.revision, etcd_wire.branch_reads(ran, resp.responses))

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        if not isinstance(value, bytes):
            raise TypeError(f"put of {key!r} needs a bytes value, got {type(value).__name__}")
        request = rpc.PutRequest(key=key.encode(), value=value, lease=lease)
        return self._call("kvstub", "Put", request, f"put of {key!r}").header.revision

    def delete(self, key: str) -> int:
        request = rpc.DeleteRangeRequest(key=key.encode())
        return self._call("kvstub", "DeleteRange", request, f"delete of {key!r}").header.revision

    def compact(self, revision: int) -> None:
        """Compact history before ``revision``; Compacted if it already is."""
        self._call("kvstub", "Compact", rpc.CompactionRequest(revision=revision), f"compact to {revision}",
                   revision)

    # -- watches ------------------------------------------------------------------------------

    def watch(self, prefix: str, start_revision: int) -> EtcdWatchStream:
        """Every change under ``prefix`` from ``start_revision`` on, as WatchBatches."""
        if type(start_revision) is not int or start_revision < 1:
            raise ValueError(f"watch start_revision must be a positive int, got {start_revision!r}")
        key = prefix.encode()
        if self._credentials is not None:
            self.revision()  # etcd checks the token when a watch opens: renew it first if it expired
        return self._open_watch(key or b"\0", etcd_wire.prefix_end_bytes(key), start_revision)

    def _open_watch(self, key: bytes, range_end: bytes, start_revision: int) -> EtcdWatchStream:
        if self._closed:
            raise StoreError("watch on a closed EtcdStore")
        try:
            channel = self._client.channel
        except etcd_wire.CONNECTION_ERRORS as exc:
            raise Unavailable(f"etcd watch failed: {type(exc).__name__}: {exc}") from None
        endpoint = self._client.endpoint_in_use
        stream = EtcdWatchStream(channel, watch_request(key, range_end, start_revision), self._metadata,
                                 on_broken=lambda: self._fail_endpoint(endpoint))
        self._watches.add(stream)
        return stream

    # -- leases -------------------------------------------------------------------------------

    def grant_lease(self, ttl: int) -> int:
        if type(ttl) is not int or ttl < 1:
            raise ValueError(f"lease ttl must be a positive int of seconds, got {ttl!r}")
        resp = self._call("leasestub", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl), "lease grant")
        if resp.error:
            raise StoreError(f"etcd lease grant failed: {resp.error}")
        return resp.ID

    def refresh_lease(self, lease: int) -> None:
        """One keep-alive; StoreError when the lease is unknown or expired."""
        if self._closed:
            raise StoreError("lease refresh on a closed EtcdStore")
        try:
            try:
                ttl = self._keep_alive_once(lease)
            except grpc.RpcError as exc:
                if not self._renew_expired_token(exc):
                    raise
                ttl = self._keep_alive_once(lease)
        except grpc.RpcError as exc:
            raise self._error(exc, f"refresh of lease {lease}", None) from None
        except etcd_wire.CONNECTION_ERRORS as exc:
            raise Unavailable(f"etcd lease refresh failed: {type(exc).__name__}: {exc}") from None
        except StopIteration:
            raise Unavailable(f"etcd ended the keep-alive of lease {lease} without an answer") from None
        if ttl <= 0:
            raise StoreError(f"lease {lease} not found (expired or revoked)")

    def _keep_alive_once(self, lease: int) -> int:
        responses = self._client.leasestub.LeaseKeepAlive(
            iter([rpc.LeaseKeepAliveRequest(ID=lease)]), self._timeout, metadata=self._metadata)
        return next(iter(responses)).TTL

    def revoke_lease(self, lease: int) -> None:
        self._call("leasestub", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease), f"revoke of lease {lease}")

    def close(self) -> None:
        """Cancel every open watch and close the channels; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        for stream in list(self._watches):
            stream.cancel()
        self._client.close()

    def __enter__(self) -> EtcdStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
