"""Black-box tests of TLS listeners (src/tls/tls.c): versions, SNI, ALPN, resumption,
self-signed certificates, handshake timeout and certificate errors."""
import os
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY, http_request


def gen_cert(d: Path, name, cn, sans, kind="ec"):
    crt, key = d / f"{name}.crt", d / f"{name}.key"
    newkey = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if kind == "ec"
              else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", *newkey, "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "3", "-subj", f"/CN={cn}",
                    "-addext", "subjectAltName=" + ",".join(f"DNS:{s}" for s in sans)],
                   check=True, capture_output=True, timeout=30)
    return crt, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    return {
        "a": gen_cert(d, "a", "a.test", ["a.test"]),
        "b": gen_cert(d, "b", "b.test", ["b.test", "*.wild.test"], kind="rsa"),
    }


def tls_conf(tls_block):
    return ("listeners:\n  - address: 127.0.0.1:{port}\n    tls:\n" + tls_block +
            "routes:\n  - respond:\n      body: \"hello tls\\n\"\n")


def single(certs, extra=""):
    crt, key = certs["a"]
    return tls_conf(f"      cert: \"{crt}\"\n      key: \"{key}\"\n" + extra)


def client_ctx(minv=None, maxv=None, alpn=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if minv:
        ctx.minimum_version = minv
    if maxv:
        ctx.maximum_version = maxv
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def tls_get(port, ctx, sni="localhost", session=None, path="/"):
    """GET over a new TLS connection; returns (ssl socket info dict, response bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni, session=session) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            info = {"version": s.version(), "alpn": s.selected_alpn_protocol(),
                    "session": s.session, "reused": s.session_reused,
                    "der": s.getpeercert(binary_form=True)}
    return info, data


def s_client(port, *args, timeout=10):
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *args],
                       input=b"", capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def pem_der(path):
    return ssl.PEM_cert_to_DER_cert(Path(path).read_text())


# ---- versions ----

def test_tls_get(server, certs):
    f = server(single(certs))
    info, data = tls_get(f.port, client_ctx())
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"hello tls\n")
    assert info["der"] == pem_der(certs["a"][0])


@pytest.mark.parametrize("ver,name", [(ssl.TLSVersion.TLSv1_2, "TLSv1.2"),
                                      (ssl.TLSVersion.TLSv1_3, "TLSv1.3")])
def test_tls_versions(server, certs, ver, name):
    f = server(single(certs))
    info, data = tls_get(f.port, client_ctx(minv=ver, maxv=ver))
    assert info["version"] == name
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"hello tls\n")


@pytest.mark.parametrize("flag,name", [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")])
def test_tls_versions_s_client(server, certs, flag, name):
    f = server(single(certs))
    rc, out = s_client(f.port, flag, "-servername", "a.test")
    assert f"Protocol  : {name}" in out or f"New, {name}" in out, out[-2000:]


def test_tls_min_version_13_refuses_12(server, certs):
    f = server(single(certs, "      min-version: \"1.3\"\n"))
    with pytest.raises(ssl.SSLError):
        tls_get(f.port, client_ctx(maxv=ssl.TLSVersion.TLSv1_2))
    info, data = tls_get(f.port, client_ctx(minv=ssl.TLSVersion.TLSv1_3))
    assert info["version"] == "TLSv1.3"
    assert data.endswith(b"hello tls\n")


def test_tls_min_version_13_s_client(server, certs):
    f = server(single(certs, "      min-version: \"1.3\"\n"))
    rc, out = s_client(f.port, "-tls1_2")
    assert rc != 0
    assert "Cipher is (NONE)" in out, out[-2000:]
    assert "hello tls" not in out


# ---- SNI ----

@pytest.fixture
def sni_server(server, certs):
    (ac, ak), (bc, bk) = certs["a"], certs["b"]
    return server(tls_conf(f"      certificates:\n"
                           f"        - cert: \"{ac}\"\n          key: \"{ak}\"\n"
                           f"        - cert: \"{bc}\"\n          key: \"{bk}\"\n"))


@pytest.mark.parametrize("sni,cn", [("a.test", "a.test"), ("b.test", "b.test"),
                                    ("x.wild.test", "b.test"), ("A.TEST", "a.test"),
                                    ("unknown.example", "a.test"), ("wild.test", "a.test"),
                                    ("y.x.wild.test", "a.test")])
def test_tls_sni_s_client(sni_server, sni, cn):
    rc, out = s_client(sni_server.port, "-servername", sni)
    m = re.search(r"^subject=\s*(.*)$", out, re.M)
    assert m, out[-2000:]
    assert re.search(rf"CN\s*=\s*{re.escape(cn)}\b", m.group(1)), m.group(1)


def test_tls_sni_no_servername_gets_first(sni_server, certs):
    rc, out = s_client(sni_server.port, "-noservername")
    m = re.search(r"^subject=\s*(.*)$", out, re.M)
    assert m and re.search(r"CN\s*=\s*a\.test\b", m.group(1)), out[-2000:]


@pytest.mark.parametrize("sni,which", [("a.test", "a"), ("b.test", "b"), ("q.wild.test", "b"),
                                       ("nope.test", "a")])
def test_tls_sni_python(sni_server, certs, sni, which):
    info, data = tls_get(sni_server.port, client_ctx(), sni=sni)
    assert info["der"] == pem_der(certs[which][0])
    assert data.endswith(b"hello tls\n")


def test_tls_sni_cert_plus_certificates(server, certs):
    # cert/key at the top is the default; certificates[] are added for SNI
    (ac, ak), (bc, bk) = certs["a"], certs["b"]
    f = server(tls_conf(f"      cert: \"{ac}\"\n      key: \"{ak}\"\n      certificates:\n"
                        f"        - cert: \"{bc}\"\n          key: \"{bk}\"\n"))
    assert tls_get(f.port, client_ctx(), sni="zzz.test")[0]["der"] == pem_der(ac)
    assert tls_get(f.port, client_ctx(), sni="b.test")[0]["der"] == pem_der(bc)


# ---- ALPN ----

def test_tls_alpn_http11_s_client(server, certs):
    f = server(single(certs))
    rc, out = s_client(f.port, "-alpn", "http/1.1")
    assert "ALPN protocol: http/1.1" in out, out[-2000:]


def h1_only(text):
    """The same config with the listener restricted to HTTP/1.1 (`protocols: [h1]`)."""
    return text.replace("    tls:\n", "    protocols: [h1]\n    tls:\n", 1)


def test_tls_alpn_python(server, certs):
    f = server(h1_only(single(certs)))
    info, data = tls_get(f.port, client_ctx(alpn=["h2", "http/1.1"]))
    assert info["alpn"] == "http/1.1"
    assert data.endswith(b"hello tls\n")
    info, data = tls_get(f.port, client_ctx())
    assert info["alpn"] is None
    assert data.endswith(b"hello tls\n")


def test_tls_alpn_default_prefers_h2(server, certs):
    """TLS listeners default to protocols h1,h2: a client offering both gets h2."""
    f = server(single(certs))
    rc, out = s_client(f.port, "-alpn", "h2,http/1.1")
    assert "ALPN protocol: h2" in out, out[-2000:]


def test_tls_alpn_h2_only_fails(server, certs):
    f = server(h1_only(single(certs)))
    with pytest.raises(ssl.SSLError) as ei:
        tls_get(f.port, client_ctx(alpn=["h2"]))
    assert "NO APPLICATION PROTOCOL" in str(ei.value).upper().replace("_", " ")


def test_tls_alpn_h2_only_s_client(server, certs):
    f = server(h1_only(single(certs)))
    rc, out = s_client(f.port, "-alpn", "h2")
    assert rc != 0
    assert "no application protocol" in out.lower(), out[-2000:]


# ---- resumption ----

@pytest.mark.parametrize("ver", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_session_resumption(server, certs, ver):
    f = server(single(certs))
    ctx = client_ctx(minv=ver, maxv=ver)
    info1, data1 = tls_get(f.port, ctx)
    assert data1.endswith(b"hello tls\n")
    assert info1["session"] is not None
    assert not info1["reused"]
    info2, data2 = tls_get(f.port, ctx, session=info1["session"])
    assert info2["reused"] is True
    assert data2.endswith(b"hello tls\n")


def test_tls_session_resumption_s_client(server, certs, tmp_path):
    f = server(single(certs))
    sess = tmp_path / "sess.pem"
    rc, out = s_client(f.port, "-tls1_2", "-sess_out", str(sess))
    assert sess.exists(), out[-2000:]
    rc, out = s_client(f.port, "-tls1_2", "-sess_in", str(sess))
    assert "Reused, TLSv1.2" in out, out[-2000:]


def test_tls_session_tickets_off(server, certs):
    f = server(single(certs, "      session-tickets: false\n"))
    ctx = client_ctx(minv=ssl.TLSVersion.TLSv1_3)
    info1, data1 = tls_get(f.port, ctx)
    assert data1.endswith(b"hello tls\n")
    # TLS 1.3 resumption needs a ticket; with tickets off there is nothing to resume
    if info1["session"] is not None and info1["session"].has_ticket:
        pytest.fail("server issued a TLS 1.3 ticket although session-tickets is false")


# ---- self-signed ----

def test_tls_self_signed_in_home(server, monkeypatch):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    f = server(tls_conf("      self-signed: true\n"))
    crt = f.tmp / ".local" / "share" / "ferry" / "selfsigned.crt"
    assert crt.is_file()
    assert (crt.parent / "selfsigned.key").is_file()
    info, data = tls_get(f.port, client_ctx())
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"hello tls\n")
    assert info["der"] == pem_der(crt)


def test_tls_self_signed_shorthand_and_data_dir(server, monkeypatch):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    text = ("data-dir: \"{data}\"\nlisteners:\n  - address: 127.0.0.1:{port}\n"
            "    tls: self-signed\nroutes:\n  - respond:\n      body: \"hello tls\\n\"\n")
    f = server(text)
    crt = f.data / "selfsigned.crt"
    assert crt.is_file()
    assert not (f.tmp / ".local" / "share" / "ferry" / "selfsigned.crt").exists()
    info, data = tls_get(f.port, client_ctx())
    assert data.endswith(b"hello tls\n")
    assert info["der"] == pem_der(crt)


def test_tls_self_signed_reused_across_restarts(server, monkeypatch):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    text = ("data-dir: \"{tmp}/../shared-data\"\nlisteners:\n  - address: 127.0.0.1:{port}\n"
            "    tls: self-signed\nroutes:\n  - respond:\n      body: \"x\"\n")
    f1 = server(text)
    d1 = tls_get(f1.port, client_ctx())[0]["der"]
    assert f1.stop() == 0
    f2 = server(text)
    d2 = tls_get(f2.port, client_ctx())[0]["der"]
    assert d1 == d2


# ---- handshake timeout ----

def test_tls_handshake_timeout(server, certs):
    f = server(single(certs, "      handshake-timeout: 1s\n"))
    with socket.create_connection(("127.0.0.1", f.port), timeout=8) as s:
        try:
            got = s.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b""


def test_tls_handshake_timeout_partial_hello(server, certs):
    f = server(single(certs, "      handshake-timeout: 1s\n"))
    with socket.create_connection(("127.0.0.1", f.port), timeout=8) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello, cut short
        try:
            got = s.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b""


def test_tls_plain_http_on_tls_port(server, certs):
    f = server(single(certs))
    with socket.create_connection(("127.0.0.1", f.port), timeout=8) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                data += b
        except ConnectionResetError:
            pass
        assert b"hello tls" not in data


# ---- curl ----

def test_tls_curl_k(server, certs):
    f = server(single(certs))
    p = subprocess.run(["curl", "-sk", "--max-time", "10", f"https://127.0.0.1:{f.port}/"],
                       capture_output=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"hello tls\n"


def test_tls_curl_resolve_sni(sni_server, certs):
    p = subprocess.run(["curl", "-s", "--max-time", "10", "--cacert", str(certs["b"][0]),
                        "--resolve", f"b.test:{sni_server.port}:127.0.0.1",
                        f"https://b.test:{sni_server.port}/"],
                       capture_output=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"hello tls\n"


# ---- certificate errors ----

def run_config(tmp_path, text, timeout=15):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    env = dict(os.environ, HOME=str(tmp_path))
    return subprocess.run([FERRY, "run", "-c", str(cfg)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_tls_missing_cert_file_fails_start(tmp_path, certs):
    from conftest import free_port
    missing = tmp_path / "no-such-cert.pem"
    text = tls_conf(f"      cert: \"{missing}\"\n      key: \"{certs['a'][1]}\"\n").format(
        port=free_port())
    p = run_config(tmp_path, text)
    assert p.returncode != 0
    assert str(missing) in p.stderr


def test_tls_missing_key_file_fails_start(tmp_path, certs):
    from conftest import free_port
    missing = tmp_path / "no-such-key.pem"
    text = tls_conf(f"      cert: \"{certs['a'][0]}\"\n      key: \"{missing}\"\n").format(
        port=free_port())
    p = run_config(tmp_path, text)
    assert p.returncode != 0
    assert str(missing) in p.stderr


def test_tls_key_mismatch_fails_start(tmp_path, certs):
    from conftest import free_port
    text = tls_conf(f"      cert: \"{certs['a'][0]}\"\n      key: \"{certs['b'][1]}\"\n").format(
        port=free_port())
    p = run_config(tmp_path, text)
    assert p.returncode != 0
    assert str(certs["b"][1]) in p.stderr


def test_tls_garbage_cert_file_fails_start(tmp_path, certs):
    from conftest import free_port
    bad = tmp_path / "garbage.crt"
    bad.write_text("not a certificate\n")
    text = tls_conf(f"      cert: \"{bad}\"\n      key: \"{certs['a'][1]}\"\n").format(
        port=free_port())
    p = run_config(tmp_path, text)
    assert p.returncode != 0
    assert str(bad) in p.stderr


@pytest.mark.parametrize("pieces", ["one-write", "separate-records"])
def test_tls_pipelined_requests(server, certs, pieces):
    """Several requests arriving in one read: TLS decrypts one record per SSL_read and keeps
    the rest inside OpenSSL, where epoll cannot see it; all must still be answered."""
    srv = server(single(certs))
    reqs = [f"GET /{i} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() for i in range(5)]
    reqs[-1] = b"GET /last HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw:
        with client_ctx().wrap_socket(raw, server_hostname="localhost") as s:
            if pieces == "one-write":
                s.sendall(b"".join(reqs))
            else:
                # one TLS record per request, all in flight before any response is read
                for r in reqs:
                    s.sendall(r)
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 5
    assert data.count(b"hello tls\n") == 5
    assert data.endswith(b"hello tls\n")
