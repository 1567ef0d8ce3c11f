"""This program's TLS credentials (config ``tls``) and the ``ssl`` contexts made of them.

The main process makes a throwaway certificate authority and one leaf certificate signed
by it; each job inherits them in its environment, as it inherits the program secret. A
site with its own PKI names its files instead (``tls_ca_file``, ``tls_cert_file``,
``tls_key_file``), which every job reads on the cluster's shared filesystem. Design:
docs/contributing/tls.md, "Credentials".
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import os
import shutil
import tempfile
import threading
from typing import TYPE_CHECKING, Dict, Optional, Tuple, TypedDict

from .._process_state import here
from ..errors import ConfigError
from .settings import Settings
from .tls import MODES, Policy, set_policy

if TYPE_CHECKING:
    import ssl  # imported where a context is made: import fiber does not pay for it

__all__ = ["MODES", "CREDENTIALS_ENV", "Credentials", "Inherited", "mode", "site_files",
           "program_credentials", "credentials_env", "take_inherited", "prepare",
           "server_context", "client_context", "make_credentials"]

#: The job's environment variable that hands it what it needs before its config arrives.
CREDENTIALS_ENV = "FIBER_TLS_CREDENTIALS"
#: Days the throwaway certificates are valid: longer than any run of a program.
VALID_DAYS = 30
#: Hours before now they are valid from: hosts' clocks differ.
CLOCK_SKEW_HOURS = 24

class Inherited(TypedDict, total=False):
    """The config values a job's variable hands it (`take_inherited`)."""

    tls: str
    tls_ca_file: str
    tls_cert_file: str
    tls_key_file: str


_KEYS = "k"  # the variable's kinds: the throwaway credentials, or the site's file paths,
_FILES = "f"
_NONE = "n"  # or nothing but the mode (a job on this host's network under auto)
_SITE_KEYS = ("tls_ca_file", "tls_cert_file", "tls_key_file")


@dataclasses.dataclass(frozen=True)
class Credentials:
    """The throwaway credentials of a program, as PEM text: its certificate authority's
    certificate, and the leaf certificate and key every process of the program shows."""

    ca_pem: str
    cert_pem: str
    key_pem: str

    def fingerprint(self) -> str:
        """The SHA-256 of the authority's certificate (hex): which program this is."""
        return hashlib.sha256(_der(self.ca_pem)).hexdigest()

    def encoded(self) -> str:
        """The three as base64url DER joined by dots: no character a shell, ``sbatch
        --export`` or a pod's spec would treat specially."""
        return ".".join(_b64(_der(pem)) for pem in (self.ca_pem, self.cert_pem, self.key_pem))

    @classmethod
    def decoded(cls, text: str) -> Credentials:
        """The credentials `encoded` gave ``text``.

        Raises:
            ValueError: ``text`` is not what `encoded` makes.
        """
        ca, cert, key = (_unb64(part) for part in text.split("."))
        return cls(_pem("CERTIFICATE", ca), _pem("CERTIFICATE", cert),
                   _pem("PRIVATE KEY", key))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _der(pem: str) -> bytes:
    body = [line for line in pem.strip().splitlines() if not line.startswith("-----")]
    return base64.b64decode("".join(body))


def _pem(label: str, der: bytes) -> str:
    text = base64.b64encode(der).decode("ascii")
    lines = [text[i:i + 64] for i in range(0, len(text), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""])


def mode(settings: Settings) -> str:
    """``settings``' ``tls``: ``off``, ``auto`` or ``on``.

    Raises:
        ConfigError: it is none of them.
    """
    value = settings.tls
    if value not in MODES:
        raise ConfigError("tls", f"must be one of {', '.join(MODES)}, got {value!r}")
    return value


def site_files(settings: Settings) -> Optional[Tuple[str, str, str]]:
    """The site's CA, certificate and key files that ``settings`` name, or None (the
    program's throwaway credentials are used).

    Raises:
        ConfigError: some are set, not all: it names those missing.
    """
    paths = (settings.tls_ca_file, settings.tls_cert_file, settings.tls_key_file)
    if not any(paths):
        return None
    missing = [key for key, path in zip(_SITE_KEYS, paths) if not path]
    if missing:
        raise ConfigError(missing[0], "a site's own TLS files are set with all three of "
                          f"{', '.join(_SITE_KEYS)}; missing: {', '.join(missing)}")
    return paths


def make_credentials(days: int = VALID_DAYS) -> Credentials:
    """A new certificate authority (EC P-256, valid ``days``) and one leaf signed by it,
    for client and server use both. One leaf, and so one key, for every process of the
    program: the identity a peer proves is "a process of this program", nothing finer.
    Imports ``cryptography`` (the standard library cannot make certificates)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def usage(cert_sign: bool) -> x509.KeyUsage:  # an authority's, or a leaf's
        return x509.KeyUsage(digital_signature=not cert_sign, content_commitment=False,
                             key_encipherment=False, data_encipherment=False,
                             key_agreement=False, key_cert_sign=cert_sign,
                             crl_sign=cert_sign, encipher_only=False, decipher_only=False)

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=CLOCK_SKEW_HOURS), now + datetime.timedelta(
        days=days)
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"fiber program CA {here.pid}")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(usage(cert_sign=True), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                        "fiber program")]))
            .issuer_name(ca_name).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key = leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return Credentials(ca.public_bytes(pem).decode("ascii"),
                       leaf.public_bytes(pem).decode("ascii"), key.decode("ascii"))


def _take_env() -> Inherited:
    """(Under ``tls_lock``.) What this process's variable hands it, the variable removed:
    the credentials kept in ``here.transport``, the config values returned."""
    text = os.environ.pop(CREDENTIALS_ENV, None)
    if not text:
        return {}
    try:
        tls, kind, rest = text.split(".", 2)
        if tls not in MODES or kind not in (_KEYS, _FILES, _NONE):
            raise ValueError(text[:8])
        if kind == _NONE:
            return {"tls": tls}
        if kind == _KEYS:
            here.transport.tls_credentials = Credentials.decoded(rest)
            return {"tls": tls}
        ca, cert, key = (_unb64(part).decode("utf-8") for part in rest.split("."))
        return {"tls": tls, "tls_ca_file": ca, "tls_cert_file": cert, "tls_key_file": key}
    except ValueError:
        raise ConfigError("tls", f"the variable {CREDENTIALS_ENV} that fiber hands its "
                          "jobs is damaged") from None


def take_inherited() -> Inherited:
    """In a job: its TLS settings (``tls``; the site's file paths) and credentials, from
    the variable its launcher set, which is removed from ``os.environ``; the job's first
    connections, made before its config arrives, need them. {} when there is none.

    Raises:
        ConfigError: the variable is damaged.
    """
    with here.transport.tls_lock:
        return _take_env()


def program_credentials() -> Credentials:
    """This program's throwaway credentials: inherited from the parent job, or made here
    on first use (kept in ``here.transport``).

    Raises:
        ConfigError: the inherited variable is damaged.
    """
    state = here.transport
    with state.tls_lock:
        if state.tls_credentials is None:
            _take_env()
        if state.tls_credentials is None:
            state.tls_credentials = make_credentials()
        return state.tls_credentials


def prepare(settings: Settings, remote_jobs: bool = True) -> None:
    """Take ``settings``' mode as this process's TLS (`fiber.transport.tls.policy`), and
    make or take its throwaway credentials now if a connection of its may need them
    (``on``; ``auto`` when ``remote_jobs``: its backend's jobs are on other hosts):
    before the main process hands out an address, so that a child it forks inherits
    them. Under ``auto`` with jobs on this host (the local backend) they are made only
    if a connection ever needs them: making them costs a program's start ~0.1-0.3 s.

    Raises:
        ConfigError: ``settings`` are wrong (see `mode`, `site_files`).
    """
    current = mode(settings)
    if (current == "on" or (current == "auto" and remote_jobs)) and site_files(settings) is None:
        program_credentials()
    set_policy(None if current == "off" else Policy(
        current, lambda: server_context(settings), lambda: client_context(settings)))


def credentials_env(settings: Settings, remote: bool = True) -> Dict[str, str]:
    """The environment entry that hands a child job its TLS mode and credentials (a
    site's: only its file paths); the mode alone when ``tls`` is off, or under ``auto``
    for a job on this host's network (not ``remote``), whose connections stay plain. A
    job needs its mode before its config arrives: its default (``auto``) would speak TLS
    to a master that does not.

    Raises:
        ConfigError: ``settings`` are wrong (see `mode`, `site_files`).
    """
    tls = mode(settings)
    if tls == "off":
        return {CREDENTIALS_ENV: f"{tls}.{_NONE}."}
    files = site_files(settings)
    if files is not None:
        body = ".".join(_b64(path.encode("utf-8")) for path in files)
        return {CREDENTIALS_ENV: f"{tls}.{_FILES}.{body}"}
    if tls == "auto" and not remote:
        return {CREDENTIALS_ENV: f"{tls}.{_NONE}."}
    return {CREDENTIALS_ENV: f"{tls}.{_KEYS}.{program_credentials().encoded()}"}


def server_context(settings: Settings) -> ssl.SSLContext:
    """The context of this process's TLS servers (see `client_context`), made once.

    Raises:
        ConfigError: ``settings`` are wrong, or a site's file cannot be loaded.
    """
    return _context(settings, server=True)


def client_context(settings: Settings) -> ssl.SSLContext:
    """The context of this process's TLS clients, made once: TLS 1.3 only, the peer's
    certificate required and verified against the program's authority alone (no system
    authority), no host name checked (a throwaway certificate names no host), this
    process's certificate shown (servers require one too).

    Raises:
        ConfigError: ``settings`` are wrong, or a site's file cannot be loaded.
    """
    return _context(settings, server=False)


def _context(settings: Settings, server: bool) -> ssl.SSLContext:
    files = site_files(settings)
    key = (server, files)
    state = here.transport
    found = state.tls_contexts.get(key)
    if found is not None:
        return found
    made = _made_context(server, files)
    with state.tls_lock:
        return state.tls_contexts.setdefault(key, made)


def _made_context(server: bool, files: Optional[Tuple[str, str, str]],
                  creds: Optional[Credentials] = None) -> ssl.SSLContext:
    """A context (see `client_context`) of ``files``, else of ``creds`` (default: this
    program's)."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    if server:
        ctx.num_tickets = 0  # no session is resumed: no ticket after the handshake
    if files is None:
        creds = creds or program_credentials()
        ctx.load_verify_locations(cadata=creds.ca_pem)
        _load_chain(ctx, creds)
        return ctx
    try:
        ctx.load_verify_locations(files[0])
    except OSError as e:  # ssl.SSLError too
        raise ConfigError(_SITE_KEYS[0], f"{files[0]!r} cannot be loaded: {e}") from None
    try:
        ctx.load_cert_chain(files[1], files[2])
    except OSError as e:
        raise ConfigError(_SITE_KEYS[1], f"{files[1]!r} with key {files[2]!r} cannot be "
                          f"loaded: {e}") from None
    return ctx


def _load_chain(ctx: ssl.SSLContext, creds: Credentials) -> None:
    """Load the leaf's certificate and key into ``ctx`` through a file (what
    ``load_cert_chain`` reads) of mode 0600 in a private directory, both removed at once."""
    folder = tempfile.mkdtemp(prefix="fiber-tls-")  # mode 0700
    try:
        path = os.path.join(folder, "leaf.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(creds.cert_pem + creds.key_pem)
        ctx.load_cert_chain(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _forget_in_child() -> None:
    """A forked child keeps the program's credentials but makes its contexts anew: a lock
    inside OpenSSL that another thread held at the fork stays held in the copies."""
    state = here.transport
    state.tls_lock = threading.Lock()
    state.tls_contexts = {}


here.after_fork_in_child(_forget_in_child)
here.for_tests(lambda: here.transport.tls_contexts.clear())  # a test's settings are its own
