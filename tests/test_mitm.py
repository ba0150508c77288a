"""Intercepting proxy (issue 7) with real clients: curl through `--proxy` (HTTP, HTTPS over
h1 and h2 on the client side), openssl s_client -proxy for passthrough, Python's ssl for a
client that pins (refuses the forged certificate), against Debian's nginx with its own CA."""
import base64
import hashlib
import os
import re
import socket
import ssl
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY, NginxOrigin, bound, free_port, wait_port

CURL_TIMEOUT = 15
BIG = 300 * 1024


NGINX_SERVERS = """\
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
        location /hdr {{ return 200 "ua=$http_user_agent x=$http_x_test h=$http_x_hooked\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {d}/www;
        location /hdr {{ return 200 "ua=$http_user_agent x=$http_x_test h=$http_x_hooked\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{h1_port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {d}/www;
    }}"""


class Nginx(NginxOrigin):
    """nginx with the origins' CA (conftest's `certs`): plain, TLS h2, TLS h1 only."""

    def __init__(self, d, certs):
        self.port, self.tls_port, self.h1_port = free_port(), free_port(), free_port()
        www = d / "www"
        www.mkdir()
        (www / "index.html").write_text("hello from nginx\n")
        self.big = os.urandom(BIG)
        (www / "big.bin").write_bytes(self.big)
        super().__init__(d, NGINX_SERVERS.format(d=d, port=self.port, tls_port=self.tls_port,
                                                 h1_port=self.h1_port, cert=certs["cert"],
                                                 key=certs["key"]),
                         [self.port, self.tls_port, self.h1_port])


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, certs):
    n = Nginx(tmp_path_factory.mktemp("nginx"), certs)
    yield n
    n.stop()


def mitm(server, certs, extra="", upstream_ca=True, workers=1):
    cfg = f"workers: {workers}\n" \
          "listeners:\n  - address: 127.0.0.1:{port}\n    kind: intercept\n" \
          "intercept:\n  ca-dir: {data}/ca\n"
    if upstream_ca:
        cfg += f"  upstream-ca: {certs['ca']}\n"
    cfg += extra
    srv = server(cfg)
    srv.ca = srv.data / "ca" / "ferry-ca.pem"
    srv.proxy = f"http://127.0.0.1:{srv.port}"
    return srv


def curl(*args, timeout=CURL_TIMEOUT):
    p = subprocess.run(["curl", "-sS", "--max-time", str(timeout), *args],
                       capture_output=True, timeout=timeout + 5)
    return p


def forged_count(srv, host):
    return len(re.findall(rf"forged a certificate for {re.escape(host)}$", srv.log(), re.M))


# ---- CA --------------------------------------------------------------------------------------


def test_mitm_ca_init_show_export(tmp_path):
    d = tmp_path / "ca"
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([FERRY, "ca", "init", "--ca-dir", str(d)], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "created" in r.stdout and "sha256:" in r.stdout
    key = d / "ferry-ca.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    text = subprocess.run(["openssl", "x509", "-in", str(d / "ferry-ca.pem"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "CA:TRUE" in text and "prime256v1" in text and "Certificate Sign" in text
    # init again keeps the same CA
    r2 = subprocess.run([FERRY, "ca", "init", "--ca-dir", str(d)], capture_output=True, text=True,
                        env=env, timeout=30)
    assert r2.returncode == 0 and "already present" in r2.stdout
    fp = re.search(r"sha256:\s+(\S+)", r.stdout).group(1)
    assert fp in r2.stdout
    show = subprocess.run([FERRY, "ca", "show", "--ca-dir", str(d)], capture_output=True,
                          text=True, env=env, timeout=30)
    assert show.returncode == 0 and fp in show.stdout
    out = tmp_path / "out"
    ex = subprocess.run([FERRY, "ca", "export", "--ca-dir", str(d), "--out", str(out)],
                        capture_output=True, text=True, env=env, timeout=30)
    assert ex.returncode == 0, ex.stderr
    for word in ("curl", "--cacert", "update-ca-certificates", "certutil", "Firefox"):
        assert word in ex.stdout
    der = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", str(out / "ferry-ca.der"),
                          "-noout", "-fingerprint", "-sha256"], capture_output=True, text=True,
                         check=True).stdout
    assert fp in der
    assert (out / "ferry-ca.pem").read_text() == (d / "ferry-ca.pem").read_text()


def test_mitm_ca_errors(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([FERRY, "ca", "show", "--ca-dir", str(tmp_path / "none")],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1 and "ferry ca init" in r.stderr
    r = subprocess.run([FERRY, "ca", "frobnicate"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "frobnicate" in r.stderr
    d = tmp_path / "ca"
    subprocess.run([FERRY, "ca", "init", "--ca-dir", str(d)], check=True, env=env,
                   capture_output=True)
    os.chmod(d / "ferry-ca.key", 0o644)
    r = subprocess.run([FERRY, "ca", "show", "--ca-dir", str(d)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 1 and "chmod 600" in r.stderr


def test_mitm_ca_default_dir_is_data_dir(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg"))
    r = subprocess.run([FERRY, "ca", "init"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "xdg" / "ferry" / "ferry-ca.key").exists()


# ---- explicit proxy --------------------------------------------------------------------------


def test_mitm_http_absolute_form(server, certs, nginx):
    srv = mitm(server, certs)
    r = curl("-x", srv.proxy, f"http://127.0.0.1:{nginx.port}/big.bin")
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(r.stdout).digest() == hashlib.sha256(nginx.big).digest()
    r = curl("-x", srv.proxy, "-A", "agent/1", "-H", "X-Test: yes",
             f"http://127.0.0.1:{nginx.port}/hdr")
    assert r.stdout == b"ua=agent/1 x=yes h=\n"


@pytest.mark.parametrize("http", ["--http1.1", "--http2"])
def test_mitm_https_intercepted(server, certs, nginx, http):
    srv = mitm(server, certs)
    r = curl("-v", http, "-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/big.bin")
    assert r.returncode == 0, r.stderr.decode()
    assert hashlib.sha256(r.stdout).digest() == hashlib.sha256(nginx.big).digest()
    err = r.stderr.decode()
    assert "Ferry interception CA" in err  # the issuer curl saw: our forged leaf
    assert ("using HTTP/2" in err) == (http == "--http2")
    r = curl(http, "-x", srv.proxy, "--cacert", str(srv.ca), "-H", "X-Test: 1",
             f"https://localhost:{nginx.tls_port}/hdr", "-A", "a/2")
    assert r.stdout == b"ua=a/2 x=1 h=\n"


def test_mitm_alpn_mirrors_h1_only_origin(server, certs, nginx):
    """An origin without h2: the client is offered http/1.1 only, even when it wants h2."""
    srv = mitm(server, certs)
    r = curl("-v", "--http2", "-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://localhost:{nginx.h1_port}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from nginx\n"
    err = r.stderr.decode()
    assert "ALPN: server accepted http/1.1" in err or "ALPN, server accepted to use http/1.1" in err


def test_mitm_ip_host_without_sni(server, certs, nginx):
    srv = mitm(server, certs)
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://127.0.0.1:{nginx.tls_port}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from nginx\n"
    assert forged_count(srv, "127.0.0.1") == 1


def test_mitm_origin_untrusted_gives_502_page(server, certs, nginx):
    srv = mitm(server, certs, upstream_ca=False)  # system store: the origin's CA is unknown
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca), "-w", "\n%{http_code}",
             f"https://localhost:{nginx.tls_port}/index.html")
    body, _, code = r.stdout.decode().rpartition("\n")
    assert code == "502"
    assert "not trusted" in body and "localhost" in body
    assert "hello from nginx" not in body


def test_mitm_insecure_host(server, certs, nginx):
    srv = mitm(server, certs, upstream_ca=False, extra="  insecure: [localhost]\n")
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from nginx\n"


def test_mitm_origin_down_502(server, certs):
    srv = mitm(server, certs)
    dead = free_port()
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca), "-w", "\n%{http_connect}",
             f"https://localhost:{dead}/")
    # the CONNECT itself is refused, once the origin connect failed (issue 12)
    assert r.stdout.decode().endswith("\n502"), r
    assert f"cannot connect to localhost:{dead}: Connection refused" in srv.log()


def test_mitm_plain_bytes_inside_connect_are_relayed(server, certs, nginx):
    srv = mitm(server, certs)
    r = curl("-p", "-x", srv.proxy, f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from nginx\n"


def s_client_issuer(proxy_port, host, port):
    p = subprocess.run(["openssl", "s_client", "-proxy", f"127.0.0.1:{proxy_port}", "-connect",
                        f"{host}:{port}", "-servername", host],
                       input=b"", capture_output=True, timeout=20)
    m = re.search(rb"issuer=(.*)", p.stdout)
    assert m, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    return m.group(1).decode()


def test_mitm_passthrough_keeps_origin_certificate(server, certs, nginx):
    srv = mitm(server, certs, extra="  passthrough: [\"*.example.com\", localhost]\n")
    assert "Origin Test CA" in s_client_issuer(srv.port, "localhost", nginx.tls_port)
    # a host not listed is intercepted
    assert "Ferry interception CA" in s_client_issuer(srv.port, "127.0.0.1", nginx.tls_port)
    r = curl("-x", srv.proxy, "--cacert", str(certs["ca"]),
             f"https://localhost:{nginx.tls_port}/index.html")
    assert r.stdout == b"hello from nginx\n"


def pinning_client(proxy_port, host, port, cafile):
    """A client that trusts only the origin's CA (like an app pinning its certificate)."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        assert b, "proxy closed"
        head += b
    assert head.startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context(cafile=str(cafile))
    try:
        with ctx.wrap_socket(s, server_hostname=host) as t:
            t.sendall(f"GET /index.html HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                      .encode())
            data = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                data += b
            return data
    except ssl.SSLCertVerificationError:
        return None
    finally:
        s.close()


def test_mitm_pinning_bypass(server, certs, nginx):
    srv = mitm(server, certs, extra="  pinning-failures: 2\n  pinning-ttl: 1h\n")
    for _ in range(2):
        assert pinning_client(srv.port, "localhost", nginx.tls_port, certs["ca"]) is None
    deadline = time.time() + bound(5)
    while "certificate pinning" not in srv.log() and time.time() < deadline:
        time.sleep(0.05)
    assert "passing it through undecrypted" in srv.log()
    data = pinning_client(srv.port, "localhost", nginx.tls_port, certs["ca"])
    assert data is not None and data.endswith(b"hello from nginx\n")
    assert "Origin Test CA" in s_client_issuer(srv.port, "localhost", nginx.tls_port)


def test_mitm_leaf_issued_once_per_host(server, certs, nginx):
    srv = mitm(server, certs, workers=2)
    for _ in range(4):
        r = curl("-x", srv.proxy, "--cacert", str(srv.ca),
                 f"https://localhost:{nginx.tls_port}/index.html")
        assert r.stdout == b"hello from nginx\n"
    assert forged_count(srv, "localhost") == 1


def test_mitm_cert_cache_limit(server, certs, nginx):
    srv = mitm(server, certs, extra="  cert-cache: 1\n")
    for host in ("localhost", "127.0.0.1", "localhost"):
        r = curl("-x", srv.proxy, "--cacert", str(srv.ca),
                 f"https://{host}:{nginx.tls_port}/index.html")
        assert r.stdout == b"hello from nginx\n"
    assert forged_count(srv, "localhost") == 2  # evicted by 127.0.0.1, forged again


def test_mitm_max_origins_evicts_idle(server, certs, nginx):
    srv = mitm(server, certs, extra="  max-origins: 1\n")
    for url in (f"http://127.0.0.1:{nginx.port}/index.html",
                f"http://localhost:{nginx.port}/index.html",
                f"http://127.0.0.1:{nginx.port}/index.html"):
        r = curl("-x", srv.proxy, url)
        assert r.stdout == b"hello from nginx\n", r.stderr


def test_mitm_allow_refuses_other_clients(server, certs, nginx):
    srv = mitm(server, certs, extra="  allow: [10.0.0.0/8]\n")
    r = curl("-x", srv.proxy, "-w", "%{http_code}", "-o", "/dev/null",
             f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.stdout == b"403"
    r = curl("-x", srv.proxy, "-w", "%{http_code}", "-o", "/dev/null", "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/index.html")
    assert r.returncode != 0  # CONNECT refused with 403


def test_mitm_proxy_auth(server, certs, nginx):
    srv = mitm(server, certs, extra="  auth: \"alice:s3cret\"\n")
    r = curl("-x", srv.proxy, "-D", "-", "-o", "/dev/null",
             f"http://127.0.0.1:{nginx.port}/index.html")
    assert b" 407 " in r.stdout and b"proxy-authenticate: Basic" in r.stdout.lower().replace(
        b"basic", b"Basic")
    r = curl("-x", srv.proxy, "--proxy-user", "alice:wrong",
             "-w", "%{http_code}", "-o", "/dev/null", f"http://127.0.0.1:{nginx.port}/")
    assert r.stdout == b"407"
    r = curl("-x", srv.proxy, "--proxy-user", "alice:s3cret",
             f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.stdout == b"hello from nginx\n"
    r = curl("-x", srv.proxy, "--proxy-user", "alice:s3cret", "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/index.html")
    assert r.stdout == b"hello from nginx\n"


def test_mitm_info_page_serves_ca(server, certs):
    srv = mitm(server, certs)
    r = curl(f"{srv.proxy}/ferry-ca.pem")
    assert r.returncode == 0
    assert r.stdout.decode() == srv.ca.read_text()
    r = curl(f"{srv.proxy}/")
    assert b"ferry-ca.pem" in r.stdout


def test_mitm_oneliner(tmp_path, certs, nginx):
    port = free_port()
    env = dict(os.environ, HOME=str(tmp_path))
    p = subprocess.Popen([FERRY, "mitm", "--listen", f"127.0.0.1:{port}", "--ca-dir",
                          str(tmp_path / "ca"), "--upstream-ca", str(certs["ca"]),
                          "--workers", "1", "--har", str(tmp_path / "o.har")], env=env,
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        wait_port(port, proc=p)
        r = curl("-x", f"http://127.0.0.1:{port}", "--cacert", str(tmp_path / "ca/ferry-ca.pem"),
                 f"https://localhost:{nginx.tls_port}/index.html")
        assert r.stdout == b"hello from nginx\n", r.stderr
    finally:
        p.terminate()
        out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert b"intercepting proxy on http://127.0.0.1:" in out
    import json
    entries = json.loads((tmp_path / "o.har").read_text())["log"]["entries"]
    assert [e["request"]["url"] for e in entries] == [
        f"https://localhost:{nginx.tls_port}/index.html"]


def test_mitm_bad_flags(tmp_path):
    r = subprocess.run([FERRY, "mitm", "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "--bogus" in r.stderr


def test_mitm_config_errors(tmp_path):
    cfg = tmp_path / "f.yaml"
    cfg.write_text("listeners:\n  - address: 127.0.0.1:1\n    kind: intercept\n"
                   "    tls: self-signed\nintercept:\n  allow: [10.0.0.300/8]\n"
                   "  auth: nopassword\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       env=dict(os.environ, HOME=str(tmp_path)))
    assert r.returncode == 1
    assert re.search(r"f\.yaml:\d+:\d+: listeners\[0\]\.tls: intercept, socks5 and transparent listeners take plain TCP", r.stderr)
    assert re.search(r"f\.yaml:\d+:\d+: intercept\.allow: bad CIDR '10\.0\.0\.300/8'", r.stderr)
    assert re.search(r"intercept\.auth: expected user:password", r.stderr)


# ---- HAR capture -----------------------------------------------------------------------------


def test_mitm_har_capture(server, certs, nginx, tmp_path):
    import json
    har = tmp_path / "flows.har"
    srv = mitm(server, certs, extra=f"  capture: {{{{har: {har}}}}}\n")
    assert json.loads(har.read_text())["log"]["entries"] == []  # valid before any flow
    urls = [f"http://127.0.0.1:{nginx.port}/index.html",
            f"https://localhost:{nginx.tls_port}/big.bin",
            f"https://localhost:{nginx.h1_port}/missing"]
    for i, (url, http) in enumerate(zip(urls, ["--http1.1", "--http2", "--http1.1"])):
        r = curl(http, "-x", srv.proxy, "--cacert", str(srv.ca), "-A", f"agent-{i}", url)
        assert r.returncode == 0, r.stderr
        deadline = time.time() + bound(5)
        while True:  # written when the flow completes; the file is valid JSON after each
            log = json.loads(har.read_text())["log"]
            if len(log["entries"]) == i + 1 or time.time() > deadline:
                break
            time.sleep(0.02)
        assert log["version"] == "1.2" and log["creator"]["name"] == "ferry"
        assert len(log["entries"]) == i + 1
    e = log["entries"]
    assert [x["request"]["url"] for x in e] == urls
    assert [x["response"]["status"] for x in e] == [200, 200, 404]
    assert [x["request"]["httpVersion"] for x in e] == ["HTTP/1.1", "HTTP/2.0", "HTTP/1.1"]
    assert e[1]["response"]["content"]["size"] == len(nginx.big)
    ua = [h["value"] for h in e[0]["request"]["headers"] if h["name"].lower() == "user-agent"]
    assert ua == ["agent-0"]
    for x in e:
        for k in ("startedDateTime", "time", "cache", "timings"):
            assert k in x
    assert not any(x["request"]["method"] == "CONNECT" for x in e)
    assert e[0]["response"]["content"]["text"] == "hello from nginx\n"
    big = e[1]["response"]["content"]  # binary: base64, cut at the 64k default
    assert big["encoding"] == "base64" and "body-cap" in big["comment"]
    assert base64.b64decode(big["text"]) == nginx.big[:65536]


def test_mitm_har_request_body_and_cap(server, certs, nginx, tmp_path):
    import json
    har = tmp_path / "flows.har"
    srv = mitm(server, certs, extra=f"  capture: {{{{har: {har}, body-cap: 10}}}}\n")
    r = curl("-x", srv.proxy, "--data-binary", "0123456789abcdef", "-H",
             "Content-Type: text/plain", f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.returncode == 0
    deadline = time.time() + bound(5)
    while not json.loads(har.read_text())["log"]["entries"] and time.time() < deadline:
        time.sleep(0.02)
    e = json.loads(har.read_text())["log"]["entries"][0]
    assert e["request"]["postData"] == {"mimeType": "text/plain", "text": "0123456789"}
    assert e["request"]["bodySize"] == 16
    assert e["response"]["status"] == 405  # nginx refuses POST to a static file


def leaf_serial(proxy_port, host, port):
    p = subprocess.run(["openssl", "s_client", "-proxy", f"127.0.0.1:{proxy_port}", "-connect",
                        f"{host}:{port}", "-servername", host],
                       input=b"", capture_output=True, timeout=20)
    pem = re.search(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", p.stdout, re.S)
    assert pem, p.stdout
    return subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem.group(0),
                          capture_output=True, check=True).stdout


def test_mitm_cert_disk_cache_survives_restart(server, certs, nginx):
    srv = mitm(server, certs, extra="  cert-disk-cache: true\n")
    first = leaf_serial(srv.port, "localhost", nginx.tls_port)
    assert forged_count(srv, "localhost") == 1
    assert stat.S_IMODE((srv.data / "ca" / "leaves" / "leaf-key.pem").stat().st_mode) == 0o600
    assert srv.stop() == 0
    srv.start()
    assert leaf_serial(srv.port, "localhost", nginx.tls_port) == first
    assert forged_count(srv, "localhost") == 0  # the log restarted: nothing signed again


# ---- limits ----------------------------------------------------------------------------------


def _closed_within(sock, seconds):
    """True when the peer closes the socket before `seconds` pass (bounded wait)."""
    sock.settimeout(seconds)
    try:
        while True:
            b = sock.recv(4096)
            if not b:
                return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def _connect(port, target):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        assert b, f"the proxy closed before its CONNECT answer: {head!r}"
        head += b
    assert head.startswith(b"HTTP/1.1 200")
    return s


def test_mitm_connect_timeout_closes_silent_tunnel(server, certs, nginx):
    srv = mitm(server, certs, extra="  connect-timeout: 300ms\n")
    s = _connect(srv.port, f"localhost:{nginx.tls_port}")  # then never says a word
    assert _closed_within(s, 15)
    s.close()
    assert "peek timeout" in srv.log()


def test_mitm_tunnel_idle_timeout(server, certs, nginx):
    # 2 s: the relay must not go idle between the CONNECT's 200 and the GET on a loaded machine
    srv = mitm(server, certs, extra="  tunnel-idle-timeout: 2s\n")
    s = _connect(srv.port, f"127.0.0.1:{nginx.port}")
    s.sendall(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")  # plain bytes: relayed
    data = b""
    while b"hello from nginx\n" not in data:
        b = s.recv(4096)
        assert b, f"tunnel closed before the response: {data!r}"
        data += b
    assert _closed_within(s, 15)  # nginx keeps the connection; the idle relay is closed
    s.close()
    assert "relay timeout" in srv.log()


def test_mitm_max_origins_all_in_use_502(server, certs, nginx):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    release = threading.Event()
    arrived = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            arrived.set()
            release.wait(20)
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    slow = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    try:
        srv = mitm(server, certs, extra="  max-origins: 1\n")
        results = {}
        t = threading.Thread(target=lambda: results.update(
            a=curl("-x", srv.proxy, f"http://127.0.0.1:{slow.server_address[1]}/")))
        t.start()
        # only once the slow request holds the slot: before, a request to the other origin
        # could hold it and the slow one would be the one refused
        assert arrived.wait(15), results
        deadline = time.time() + bound(10)
        while time.time() < deadline:
            # the slow origin holds the only origin slot once its request is in flight
            r = curl("-x", srv.proxy, "-o", "/dev/null", "-w", "%{http_code}",
                     f"http://localhost:{nginx.port}/index.html")
            if r.stdout == b"502":
                break
            time.sleep(0.05)
        assert r.stdout == b"502", srv.log()[-3000:]
        assert "too many origins in use" in srv.log()
        release.set()
        t.join(20)
        assert results["a"].stdout == b"ok"
    finally:
        release.set()
        slow.shutdown()


def test_mitm_request_to_itself_is_508(server, certs):
    srv = mitm(server, certs)
    r = curl("-x", srv.proxy, "-o", "/dev/null", "-w", "%{http_code}",
             f"http://127.0.0.1:{srv.port}/anything")
    assert r.stdout == b"508"
    r = curl("-x", srv.proxy, "-o", "/dev/null", "-w", "%{http_code}",
             f"http://localhost:{srv.port}/anything")
    assert r.stdout == b"508"


def test_mitm_connect_to_itself_does_not_loop(server, certs):
    srv = mitm(server, certs)
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca), "-w", "\n%{http_connect}",
             f"https://127.0.0.1:{srv.port}/")
    assert r.stdout.decode().endswith("\n508"), r  # the CONNECT is refused (issue 12)
    assert "addressed to this proxy itself" in srv.log()
    r = curl("-p", "-x", srv.proxy, f"http://127.0.0.1:{srv.port}/")  # plain: relay refused
    assert r.returncode != 0
    assert "Too many open files" not in srv.log()
