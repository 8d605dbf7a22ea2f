"""Flags and store construction shared by the commands that talk to a cell.

``--endpoints`` defaults to ``$OMEGA_ENDPOINTS`` (else 127.0.0.1:2379) and ``--cell`` to
``$OMEGA_CELL`` (else ``default``). ``connect`` opens the store, checks it answers and that the
cell exists (a cell exists once ``omega cell init`` has written its machines), and turns a
failure into one line saying what to do (``store_failure``).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
from contextlib import contextmanager

from cellstate.keys import DEFAULT_ROOT, CellKeys
from tools.printable import printable  # noqa: F401 - the commands' tables use it from here

DEFAULT_ENDPOINTS = "127.0.0.1:2379"
DEFAULT_CELL = "default"
# Safe for any etcd (its default --max-txn-ops); raise it for an etcd started with a higher limit.
DEFAULT_MAX_TXN_OPS = 128


def add_store_args(parser) -> None:
    """--endpoints, --cell, --root, --max-txn-ops and the TLS/auth flags (see add_auth_args)."""
    parser.add_argument("--endpoints", default=os.environ.get("OMEGA_ENDPOINTS", DEFAULT_ENDPOINTS),
                        help="comma-separated etcd endpoints: https://host:port (TLS, needs --cacert), "
                             "http://host:port (plain text) or host:port (TLS exactly when --cacert is given); "
                             f"one scheme for all (default: $OMEGA_ENDPOINTS or {DEFAULT_ENDPOINTS})")
    parser.add_argument("--cell", default=os.environ.get("OMEGA_CELL") or DEFAULT_CELL,
                        help=f"cell name (default: $OMEGA_CELL or {DEFAULT_CELL})")
    parser.add_argument("--root", default=DEFAULT_ROOT, help=f"key root (default: {DEFAULT_ROOT})")
    parser.add_argument("--max-txn-ops", type=int, default=DEFAULT_MAX_TXN_OPS,
                        help=f"operations per txn the etcd accepts (default {DEFAULT_MAX_TXN_OPS})")
    add_auth_args(parser)


def add_auth_args(parser) -> None:
    """--cacert/--ca-cert, --cert/--key, --user/--password/--password-file, --credentials/--as (all
    optional; env defaults)."""
    env = os.environ.get
    group = parser.add_argument_group("etcd TLS and authentication")
    group.add_argument("--cacert", "--ca-cert", dest="ca_cert", default=env("OMEGA_CACERT") or env("OMEGA_CA_CERT"),
                       metavar="PEM", help="connect over TLS trusting this CA (default: $OMEGA_CACERT, "
                                           "or the credentials file's)")
    group.add_argument("--cert", default=env("OMEGA_CERT"), metavar="PEM",
                       help="client certificate to present (etcd with --client-cert-auth; needs --key; "
                            "default: $OMEGA_CERT, or the credentials file's)")
    group.add_argument("--key", default=env("OMEGA_KEY"), metavar="PEM",
                       help="private key of --cert (default: $OMEGA_KEY, or the credentials file's)")
    group.add_argument("--user", default=env("OMEGA_USER"), help="etcd user (default: $OMEGA_USER)")
    group.add_argument("--password", default=env("OMEGA_PASSWORD"),
                       help="etcd password (default: $OMEGA_PASSWORD; prefer --password-file)")
    group.add_argument("--password-file", metavar="FILE", help="read the etcd password from FILE")
    group.add_argument("--credentials", default=env("OMEGA_CREDENTIALS"), metavar="FILE",
                       help="this component's credential file from `omega cell up --secure`, e.g. "
                            "DATA/credentials/default-monitor.json (default: $OMEGA_CREDENTIALS)")
    group.add_argument("--as", dest="as_user", default=env("OMEGA_AS"), metavar="USER",
                       help="with --credentials: the user to log in as; needed only for a directory of "
                            "files (default: $OMEGA_AS)")


def endpoints_of(text: str) -> list[str]:
    """The endpoints of a comma-separated list; UsageError when one is not [http[s]://]host:port
    or they mix schemes."""
    from cellstate.etcd.store import endpoints_scheme, parse_endpoint
    from tools.cli import UsageError

    endpoints = [e.strip() for e in text.split(",") if e.strip()]
    if not endpoints:
        raise UsageError("--endpoints: no endpoint given")
    try:
        for endpoint in endpoints:
            parse_endpoint(endpoint)
        endpoints_scheme(endpoints)
    except ValueError as exc:
        raise UsageError(f"--endpoints: {exc}") from None
    return endpoints


def store_auth(args) -> dict:
    """EtcdStore keyword arguments (user, password, ca_cert; cert and key when a client certificate
    is given) from the auth flags; {} when none is set. --cert/--key override the credentials
    file's, as --cacert does."""
    tls = _client_cert(args)
    auth = _store_login(args)
    if tls:
        auth = {"user": None, "password": None, "ca_cert": getattr(args, "ca_cert", None), **auth, **tls}
    return auth


def _client_cert(args) -> dict:
    """{cert, key} from --cert/--key ({} when neither); UsageError when only one is given."""
    from tools.cli import UsageError

    cert, key = getattr(args, "cert", None), getattr(args, "key", None)
    if (cert is None) != (key is None):
        raise UsageError("--cert needs --key (and --key needs --cert): a client certificate and its private key")
    return {"cert": cert, "key": key} if cert else {}


def _store_login(args) -> dict:
    """EtcdStore keyword arguments (user, password, ca_cert) from the login flags."""
    from tools.cli import UsageError

    flag = lambda name: getattr(args, name, None)  # noqa: E731 - namespaces built without add_auth_args
    user, password, ca_cert = flag("as_user") or flag("user"), flag("password"), flag("ca_cert")
    if flag("credentials"):
        from cellstate.security import SecurityError, load_credentials

        path = flag("credentials")
        try:
            creds = load_credentials(path)
            cred = creds.pick(user, f"credentials file {path}")
        except SecurityError as exc:
            raise UsageError(f"--credentials: {exc}") from None
        cell = flag("cell")
        if cred.cell is not None and cell is not None and cred.cell != cell:
            raise UsageError(f"--credentials: {path} is for user {cred.name} of cell {cred.cell!r}, "
                             f"not --cell {cell!r}")
        auth = creds.store_kwargs(cred.name)
        return {**auth, "ca_cert": ca_cert or auth["ca_cert"]}
    if flag("password_file"):
        try:
            with open(flag("password_file")) as f:
                password = f.read().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(f"--password-file {flag('password_file')!r}: {exc.strerror}") from None
    if (user is None) != (password is None):
        raise UsageError("--user needs --password or --password-file (and a password needs --user)")
    return {"user": user, "password": password, "ca_cert": ca_cert} if (user or ca_cert) else {}


def open_store(args):
    """An EtcdStore on ``args.endpoints``, with TLS and authentication when the flags ask for them
    (imported here: building the parser loads no gRPC)."""
    from cellstate.etcd.store import EtcdStore
    from tools.cli import UsageError

    if args.max_txn_ops < 1:
        raise UsageError(f"--max-txn-ops must be >= 1, got {args.max_txn_ops}")
    auth = store_auth(args)
    try:
        return EtcdStore(endpoints_of(args.endpoints), max_txn_ops=args.max_txn_ops, **auth)
    except ValueError as exc:  # an unreadable TLS file, https:// without a CA, http:// with one
        raise UsageError(str(exc)) from None


def cell_keys(args) -> CellKeys:
    """The keys of ``args.cell`` under ``args.root``; UsageError for a name with "/"."""
    from tools.cli import UsageError

    if not args.cell or "/" in args.cell:
        raise UsageError(f'--cell must be a non-empty name without "/", got {args.cell!r}')
    return CellKeys(cell=args.cell, root=args.root)


def store_failure(exc: BaseException, args) -> str:
    """One line for a store error: what went wrong and what to do. Nothing listening (connection
    refused), a TLS etcd reached without ``--ca-cert`` (the server closes the socket), a plain
    etcd reached with it (the handshake fails) and refused credentials each get their hint;
    other errors are told as they are."""
    from cellstate.store import PermissionDenied, Unavailable

    endpoints = getattr(args, "endpoints", "?")
    tls = bool(getattr(args, "ca_cert", None) or getattr(args, "credentials", None)
               or "https://" in str(endpoints))
    text = " ".join(str(exc).split())
    if isinstance(exc, Unavailable):
        if "Connection refused" in text or "connection refused" in text:
            return (f"cannot reach etcd at {endpoints} (connection refused): start one with `omega etcd up`, "
                    "or point --endpoints / $OMEGA_ENDPOINTS at a running etcd")
        if "Handshake" in text or "SSL" in text or "ssl" in text or "TSI_" in text:  # TSI_: gRPC's TLS layer
            return (f"TLS handshake with etcd at {endpoints} failed: is it a plain (non-TLS) etcd, is "
                    "--cacert the CA that signed its certificate, or does it want a client certificate "
                    "(--cert/--key)? (" + text + ")")
        if "Socket closed" in text and not tls:
            return (f"etcd at {endpoints} closed the connection: it probably serves TLS; pass --ca-cert PEM "
                    "(or --credentials FILE --as USER, written by `omega cell up --secure`)")
        return f"etcd at {endpoints} is unavailable: {text}"
    if isinstance(exc, PermissionDenied):
        if "user name is empty" in text:
            return (f"etcd at {endpoints} requires authentication: pass --credentials FILE --as USER "
                    "(or --user/--password-file)")
        return f"{text} (check --credentials/--as or --user/--password)"
    return text


def connect(args, *, existing_cell: bool = True, retry_for: float = 0.0, on_retry=None):
    """``open_store`` checked: the store answers (else CommandError with ``store_failure``'s
    hint) and, with ``existing_cell``, ``args.cell`` exists (else CommandError naming the cells
    that do). With ``retry_for`` > 0 a transient store error (etcd unreachable, a lost leader)
    is retried for that many seconds, ``on_retry(attempt, error, sleep_s, elapsed_s)`` called
    before each wait (jittered exponential, at most 2 s), as ``omega submit`` retries its
    submissions. The caller closes the store (it is a context manager)."""
    import time

    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

    from cellstate.store import StoreError
    from cellstate.submit import transient
    from tools.cli import CommandError

    keys = cell_keys(args)
    what = command_name(args)
    started = time.monotonic()

    def before_sleep(state) -> None:
        if on_retry is not None:
            on_retry(state.attempt_number, state.outcome.exception(), state.upcoming_sleep,
                     time.monotonic() - started)

    retrying = Retrying(retry=retry_if_exception(transient), stop=stop_after_delay(retry_for),
                        wait=wait_random_exponential(multiplier=0.2, max=2.0), before_sleep=before_sleep, reraise=True)
    try:
        return retrying(_checked_store, args, keys, what, existing_cell)
    except StoreError as exc:
        gave_up = f" (gave up after --retry-for {retry_for:g} s)" if retry_for and transient(exc) else ""
        raise CommandError(f"{what}: {store_failure(exc, args)}{gave_up}") from None


def _checked_store(args, keys: CellKeys, what: str, existing_cell: bool):
    """The store, once it answered and (with ``existing_cell``) the cell exists; closed on failure.
    An endpoint that cannot be reached is passed over for the next one (the store moves on after
    a failure): the store answers when any endpoint does."""
    from cellstate.store import Unavailable

    store = open_store(args)
    try:
        attempts = len(endpoints_of(args.endpoints))
        for attempt in range(attempts):
            try:
                store.revision()
                break
            except Unavailable:
                if attempt == attempts - 1:
                    raise
        if existing_cell:
            require_cell(store, keys, what)
    except BaseException:
        store.close()
        raise
    return store


def cell_exists(store, keys: CellKeys) -> bool:
    """Whether ``omega cell init`` has written machines for the cell (one keys-only read)."""
    return store.first_key(keys.kind_prefix("machines")) is not None


def list_cells(store, root: str) -> list[str]:
    """The names of the cells under ``root`` that have machines, sorted (two reads per cell seen)."""
    from cellstate.etcd.wire import prefix_end_bytes

    base = f"{root}/cells/"
    cells: list[str] = []
    start = base
    while True:
        key = store.first_key(base, start=start)
        if key is None:
            return sorted(cells)
        name = key[len(base):].partition("/")[0]
        if store.first_key(f"{base}{name}/machines/") is not None:
            cells.append(name)
        start = prefix_end_bytes(f"{base}{name}/".encode()).decode()


def command_name(args) -> str:
    """The command as typed, e.g. ``check``, ``cell init``, ``job list`` (for messages)."""
    words = [getattr(args, "command", None) or "omega"]
    words += [value for name, value in sorted(vars(args).items())
              if name.endswith("_command") and isinstance(value, str)]
    return " ".join(words)


def require_cell(store, keys: CellKeys, what: str = "omega") -> None:
    """CommandError unless the cell exists, naming the cells that do (those this user may see)."""
    from cellstate.store import PermissionDenied
    from tools.cli import CommandError

    try:
        if cell_exists(store, keys):
            return
    except PermissionDenied:
        raise CommandError(f"{what}: etcd denied reading cell {keys.cell!r}: this user's role does not cover it "
                           "(with --credentials, --as names a user of the cell: CELL-scheduler, CELL-monitor…)"
                           ) from None
    try:
        cells = list_cells(store, keys.root)
        known = ", ".join(cells) if cells else "none yet"
    except PermissionDenied:
        known = "not visible to this user"
    raise CommandError(f"{what}: no cell {keys.cell!r} under {keys.root} (cells: {known}); create it with "
                       f"`omega cell init --cell {keys.cell}`, or pick one with --cell / $OMEGA_CELL")


def job_arg(job_id: str, flag: str = "JOB") -> str:
    """A job id given on the command line, checked only for length (a stored id from before
    the safe character set may still be killed or shown); UsageError for a longer one, which
    no job can have (cellstate.jobspec.MAX_ID_LENGTH)."""
    from cellstate.jobspec import MAX_ID_LENGTH
    from tools.cli import UsageError

    if not job_id or len(job_id) > MAX_ID_LENGTH:
        raise UsageError(f"{flag}: a job id has 1..{MAX_ID_LENGTH} characters, got {len(job_id)}")
    return job_id


OUTPUTS = ("table", "json")


def add_output_arg(parser, json_alias: bool = True) -> None:
    """``-o/--output table|json``: how the command prints its result on stdout, the same in
    every command (table: for people, the default; json: one JSON document). ``json_alias``
    keeps the older ``--json`` (same as ``-o json``) working, deprecated and hidden."""
    import argparse

    parser.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                        help="print the result as a table/text (default) or as JSON on stdout")
    if json_alias:
        parser.add_argument("--json", dest="output", action="store_const", const="json",
                            help=argparse.SUPPRESS)


def output_json(args) -> bool:
    """Whether ``-o json`` (or its deprecated alias) was asked for."""
    return getattr(args, "output", "table") == "json"


# Optional dependencies: module -> the extra that installs it (pyproject.toml).
OPTIONAL = {"matplotlib": "report", "ortools": "solver", "ray": "sweep", "pyarrow": "parquet"}


def require_optional(module: str, what: str) -> None:
    """CommandError (exit 1) before a long command starts when ``module`` (an optional
    dependency, see OPTIONAL) is not installed, naming the extra that installs it. Looks the
    module up without importing it."""
    import importlib.util

    from tools.cli import CommandError

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a None in sys.modules (as if uninstalled), a broken package
        found = False
    if not found:
        raise CommandError(f"{what} needs {module}, which is not installed: "
                           f"pip install 'omega-scheduler[{OPTIONAL[module]}]'")


def readable_file(path: str, flag: str = "") -> str:
    """``path`` when it is a readable file; else UsageError (exit 2: a bad argument, unlike a
    file that does not parse, exit 65) in one line naming it."""
    from tools.cli import UsageError

    where = f"{flag} {path}" if flag else path
    try:
        with open(path, "rb"):
            return path
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror or exc}") from None


@contextmanager
def replay_errors():
    """A replay's errors as the command line reports them (docs/CLI.md): a file that cannot be
    read, or a bad value, is a usage error (2); a trace that does not parse is an invalid input
    file (65). For ``replay`` and ``experiment``, which run whole replays."""
    from tools.cli import InputError, UsageError
    from tools.trace.format import TraceError

    try:
        yield
    except OSError as exc:
        raise UsageError(f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)) from None
    except TraceError as exc:
        raise InputError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@contextmanager
def output_file_errors(what: str, flag: str, path: str):
    """A failed write of an output file (``--json-out /dev/full``: no space left; a directory
    that cannot be made) as one line naming the flag and the file: CommandError (exit 1), the
    work before it done and shown."""
    from tools.cli import CommandError

    try:
        yield
    except OSError as exc:
        raise CommandError(f"{what}: {flag} {path}: cannot write it: {exc.strerror or exc}") from None


SHUTDOWN_GRACE_S = 10.0
_PROCESS = {"entry": False}  # set by ``tools.cli.run``: the command owns the process


def own_process() -> None:
    """The command line runs as its own process (``tools.cli.run``), not inside another
    program (tests call ``main`` in-process): ``exit_once_stopped`` may end the process."""
    _PROCESS["entry"] = True


def exit_once_stopped(status: int = 0, within_s: float = SHUTDOWN_GRACE_S) -> None:
    """Called when a command has stopped its work (nothing left to write): if closing its
    clients or the interpreter's own exit has not ended the process ``within_s`` seconds later,
    log a warning and every thread's stack on stderr and exit with ``status`` (what the command
    returns), instead of hanging until someone SIGKILLs it. Does nothing in-process."""
    if not _PROCESS["entry"]:
        return

    def force_exit() -> None:
        logging.getLogger("omega.shutdown").warning(
            "the process had not exited %g s after stopping its work; thread stacks follow, exiting", within_s)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(status)

    timer = threading.Timer(within_s, force_exit)
    timer.daemon = True
    timer.start()
