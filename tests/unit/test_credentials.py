"""The program's TLS credentials (`fiber.transport.credentials`): the throwaway authority
and its leaf, the contexts made of them (TLS 1.3, mutual, this program's authority
alone), their way to a job through its environment, a site's own files, and the config
keys. Real certificates, real handshakes over loopback TCP, real child processes."""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import threading
import warnings
from typing import Dict, List, Optional, Tuple

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fiber import config
from fiber._process_state import here
from fiber.config import Config, _values
from fiber.errors import ConfigError
from fiber.transport import credentials
from fiber.transport.credentials import CREDENTIALS_ENV, Credentials

#: Seconds any socket operation or thread of these tests may take.
DEADLINE = 20.0
ON = Config(tls="on")


@pytest.fixture(autouse=True)
def _fresh_contexts():
    here.transport.tls_contexts.clear()
    yield
    here.transport.tls_contexts.clear()


def _exchange(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> Dict[str, object]:
    """A handshake between the two over loopback TCP, then a ping and its pong: what each
    side saw (``server_error``, ``client_error``, ``reply``, the peers' certificates)."""
    seen: Dict[str, object] = {}
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(DEADLINE)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            conn.settimeout(DEADLINE)
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    seen["server_version"] = tls.version()
                    seen["client_cert"] = tls.getpeercert(binary_form=True)
                    if tls.recv(4) == b"ping":
                        tls.sendall(b"pong")
            finally:
                conn.close()
        except Exception as e:  # what the test looks at
            seen["server_error"] = e

    server = threading.Thread(target=serve, name="test-tls-server")
    server.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=DEADLINE) as sock:
            with client_ctx.wrap_socket(sock) as tls:
                seen["client_version"] = tls.version()
                seen["server_cert"] = tls.getpeercert(binary_form=True)
                tls.sendall(b"ping")
                seen["reply"] = tls.recv(4)
    except Exception as e:  # in TLS 1.3 a refused client certificate shows at the read
        seen["client_error"] = e
    finally:
        server.join(DEADLINE)
        listener.close()
    assert not server.is_alive(), "the server's side did not end in time"
    return seen


def _site_files(folder: str, creds: Credentials) -> Dict[str, str]:
    """``creds`` written as a site's files in ``folder``: config values naming them."""
    paths = {}
    for key, text in (("tls_ca_file", creds.ca_pem), ("tls_cert_file", creds.cert_pem),
                      ("tls_key_file", creds.key_pem)):
        paths[key] = os.path.join(folder, key + ".pem")
        with open(paths[key], "w") as f:
            f.write(text)
    return paths


def _site_pki(folder: str) -> Tuple[Dict[str, str], bytes]:
    """A site's own authority and a host certificate it signed, made here as a site's
    tools would (its key in the traditional format, a chain file of leaf then
    authority): config values naming the files, and the leaf's DER."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Site Root CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=365))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA384()))
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node1")]))
            .issuer_name(ca_name).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=90))
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    texts = {
        "tls_ca_file": ca.public_bytes(pem),
        "tls_cert_file": leaf.public_bytes(pem) + ca.public_bytes(pem),
        "tls_key_file": leaf_key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()),
    }
    paths = {}
    for key, text in texts.items():
        paths[key] = os.path.join(folder, key + ".pem")
        with open(paths[key], "wb") as f:
            f.write(text)
    return paths, leaf.public_bytes(serialization.Encoding.DER)


def _refused(seen: Dict[str, object]) -> None:
    """Both sides failed: the server's handshake, the client's handshake or first read."""
    assert isinstance(seen.get("server_error"), ssl.SSLError), seen
    assert "client_error" in seen or seen.get("reply") == b"", seen


def test_the_authority_signs_the_leaf_and_both_are_short_lived():
    creds = credentials.make_credentials()
    ca = x509.load_pem_x509_certificate(creds.ca_pem.encode())
    leaf = x509.load_pem_x509_certificate(creds.cert_pem.encode())
    key = serialization.load_pem_private_key(creds.key_pem.encode(), password=None)
    ca.verify_directly_issued_by(ca)  # raises if not
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for public in (ca.public_key(), leaf.public_key(), key.public_key()):
        assert isinstance(public, ec.EllipticCurvePublicKey)
        assert public.curve.name == "secp256r1"
    assert key.public_key() == leaf.public_key()
    lifetime = ca.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    assert datetime.timedelta(days=29) < lifetime <= datetime.timedelta(days=30)
    assert creds.fingerprint() == ca.fingerprint(hashes.SHA256()).hex()
    assert Credentials.decoded(creds.encoded()) == creds


def test_contexts_are_tls13_mutual_of_this_program_alone_and_made_once():
    mine = credentials.program_credentials()
    for make in (credentials.server_context, credentials.client_context):
        ctx = make(ON)
        assert make(ON) is ctx  # once a process
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
        assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
        authorities = ctx.get_ca_certs(binary_form=True)
        assert authorities == [ssl.PEM_cert_to_DER_cert(mine.ca_pem)]  # no system CA
    assert credentials.server_context(ON) is not credentials.client_context(ON)


def test_two_processes_of_the_program_shake_hands_mutually():
    seen = _exchange(credentials.server_context(ON), credentials.client_context(ON))
    assert seen.get("reply") == b"pong", seen
    assert seen["server_version"] == seen["client_version"] == "TLSv1.3"
    leaf = ssl.PEM_cert_to_DER_cert(credentials.program_credentials().cert_pem)
    assert seen["client_cert"] == seen["server_cert"] == leaf


def test_another_programs_credentials_are_refused_both_ways(tmp_path):
    other = Config(tls="on", **_site_files(str(tmp_path), credentials.make_credentials()))
    _refused(_exchange(credentials.server_context(ON), credentials.client_context(other)))
    _refused(_exchange(credentials.server_context(other), credentials.client_context(ON)))


def test_a_client_without_a_certificate_is_refused():
    anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anonymous.check_hostname = False
    anonymous.load_verify_locations(cadata=credentials.program_credentials().ca_pem)
    _refused(_exchange(credentials.server_context(ON), anonymous))


def test_the_key_file_is_private_and_removed(monkeypatch):
    """``load_cert_chain`` reads files: the one written for it is the user's alone, in a
    folder of the user's alone, and both are gone once it is loaded."""
    seen: List[Tuple[str, int, int, bool]] = []
    real = ssl.SSLContext.load_cert_chain

    def spy(ctx: ssl.SSLContext, certfile: str, keyfile: Optional[str] = None,
            password: Optional[str] = None) -> None:
        with open(certfile) as f:
            has_key = "PRIVATE KEY" in f.read()
        seen.append((certfile, stat.S_IMODE(os.stat(certfile).st_mode),
                     stat.S_IMODE(os.stat(os.path.dirname(certfile)).st_mode), has_key))
        real(ctx, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    credentials.server_context(ON)
    credentials.client_context(ON)
    assert len(seen) == 2
    for path, file_mode, folder_mode, has_key in seen:
        assert (file_mode, folder_mode, has_key) == (0o600, 0o700, True)
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


_CHILD = """
import json, os
from fiber.transport import credentials
had = {env!r} in os.environ
fingerprint = credentials.program_credentials().fingerprint()
print(json.dumps({{"had": had, "left": {env!r} in os.environ, "fingerprint": fingerprint}}))
"""


def _child(code: str, env: Dict[str, str]) -> Dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    result: Dict[str, object] = json.loads(out.stdout)
    return result


def test_a_child_takes_the_programs_credentials_from_its_environment():
    env = credentials.credentials_env(ON)
    assert list(env) == [CREDENTIALS_ENV]
    assert credentials.program_credentials().key_pem not in env[CREDENTIALS_ENV]  # encoded
    seen = _child(_CHILD.format(env=CREDENTIALS_ENV), env)
    assert seen == {"had": True, "left": False,
                    "fingerprint": credentials.program_credentials().fingerprint()}
    alone = _child(_CHILD.format(env=CREDENTIALS_ENV), {})  # none inherited: its own
    assert alone["fingerprint"] != seen["fingerprint"]


def test_a_job_learns_its_tls_settings_before_its_config_arrives(tmp_path):
    code = ("import json, os\nfrom fiber.transport import credentials as c\n"
            "got = c.take_inherited()\n"
            f"print(json.dumps([got, {CREDENTIALS_ENV!r} in os.environ,\n"
            "      c.here.transport.tls_credentials is not None]))\n")
    assert _child(code, credentials.credentials_env(Config(tls="auto"))) == [
        {"tls": "auto"}, False, True]
    folder = tmp_path / "a b, c"  # any path: the variable carries it encoded
    folder.mkdir()
    site = Config(tls="on", **_site_files(str(folder), credentials.make_credentials()))
    assert _child(code, credentials.credentials_env(site)) == [
        {"tls": "on", "tls_ca_file": site.tls_ca_file, "tls_cert_file": site.tls_cert_file,
         "tls_key_file": site.tls_key_file}, False, False]
    assert _child(code, {}) == [{}, False, False]


def test_only_the_mode_is_handed_down_when_tls_is_off():
    """No credentials, but the mode: a job's default (auto) would speak TLS to a master
    that does not."""
    off = {credentials.CREDENTIALS_ENV: "off.n."}
    assert credentials.credentials_env(Config(tls="off")) == off
    assert credentials.credentials_env(Config(tls="off", tls_ca_file="/x",
                                              tls_cert_file="/y", tls_key_file="/z")) == off


def test_a_damaged_variable_is_named(monkeypatch):
    monkeypatch.setenv(CREDENTIALS_ENV, "on.k.not-base64!")
    with pytest.raises(ConfigError, match=CREDENTIALS_ENV):
        credentials.take_inherited()
    assert CREDENTIALS_ENV not in os.environ


def test_a_sites_own_files_are_used_and_not_handed_down(tmp_path):
    paths, leaf = _site_pki(str(tmp_path))
    site = config.from_dict({"tls": "on", **paths})
    seen = _exchange(credentials.server_context(site), credentials.client_context(site))
    assert seen.get("reply") == b"pong", seen
    assert seen["client_cert"] == seen["server_cert"] == leaf
    handed = credentials.credentials_env(site)[CREDENTIALS_ENV]
    assert "PRIVATE" not in handed and "-----" not in handed  # paths only, no key
    # the program's throwaway credentials are strangers to the site's
    _refused(_exchange(credentials.server_context(site), credentials.client_context(ON)))


def test_a_sites_file_that_cannot_be_loaded_is_named(tmp_path):
    paths, _ = _site_pki(str(tmp_path))
    broken = Config(tls="on", **{**paths, "tls_key_file": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError, match="tls_cert_file"):
        credentials.client_context(broken)


def test_a_wrong_tls_value_lists_the_choices(monkeypatch):
    with pytest.raises(ConfigError, match=r"'tls'.*must be one of off, auto, on, got 'bogus'"):
        config.from_dict({"tls": "bogus"})
    with pytest.raises(ConfigError, match=r"FIBER_TLS.*did you mean 'on'"):
        config.resolve({}, environ={"FIBER_TLS": "onn"}, config_file=os.devnull)
    with pytest.raises(ConfigError, match="must be one of off, auto, on"):
        credentials.mode(Config(tls="bogus"))  # settings that did not go through config
    assert _values.TLS_MODES == credentials.MODES


@pytest.mark.parametrize("given", [["tls_ca_file"], ["tls_cert_file", "tls_key_file"]])
def test_a_sites_files_half_set_are_refused(given):
    values = {key: f"/site/{key}.pem" for key in given}
    missing = [k for k in ("tls_ca_file", "tls_cert_file", "tls_key_file") if k not in given]
    with pytest.raises(ConfigError, match="missing: " + ", ".join(missing)):
        config.from_dict(values)
    with pytest.raises(ConfigError, match="missing: " + ", ".join(missing)):
        credentials.site_files(Config(tls="on", **values))


def test_the_keys_variables_do_not_collide_with_the_credentials():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # FIBER_TLS_CREDENTIALS is not an unknown setting
        cfg = config.resolve({}, environ={"FIBER_TLS": "auto", "FIBER_TLS_CA_FILE": "/a",
                                          "FIBER_TLS_CERT_FILE": "/b",
                                          "FIBER_TLS_KEY_FILE": "/c",
                                          CREDENTIALS_ENV: "on.k.x"},
                             config_file=os.devnull)
    assert (cfg.tls, cfg.tls_ca_file, cfg.tls_cert_file, cfg.tls_key_file) == (
        "auto", "/a", "/b", "/c")


def test_a_forked_child_keeps_the_credentials_and_makes_its_contexts_anew():
    creds = credentials.program_credentials()
    credentials.client_context(ON)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(20)
            state = here.transport
            fresh = not state.tls_contexts and state.tls_lock.acquire(timeout=5)
            state.tls_lock.release()
            same = credentials.program_credentials() is creds
            code = 0 if fresh and same and credentials.client_context(ON) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert here.transport.tls_contexts  # the parent's are its own


def test_fiber_needs_no_cryptography_while_tls_is_off():
    """Nor under the default, auto, for jobs on this host's network (see
    tests/backends/local/test_tls_local.py)."""
    code = ("import sys\nsys.modules['cryptography'] = None  # importing it fails\n"
            "import fiber\nfrom fiber.config import Config\n"
            "from fiber.transport import credentials\n"
            "credentials.prepare(Config(tls='off'))\n"
            "assert 'k.' not in str(credentials.credentials_env(Config(tls='off')))\n"
            "print('ssl' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # nor ssl: a context is made only when asked
