"""Hardening (issue 12): path normalisation before routing, dotfiles in static roots, TLS
defaults (AEAD only, ALPN http/1.0, plain HTTP on a TLS port), header case on HTTP/1.1
responses, and the embedded demo config."""
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import http_request, raw

CURL = shutil.which("curl")
GTLS = shutil.which("gtlsclient")
OPENSSL = shutil.which("openssl")


class PathOrigin(BaseHTTPRequestHandler):
    """Answers with the request target exactly as it arrived."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = f"origin saw {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Origin-Case", "Kept")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def origin():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), PathOrigin)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def path_config(origin_port, extra=""):
    return f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: self-signed
  - address: 127.0.0.1:{{port2}}
routes:
  - match: {{{{path: /public}}}}
    respond: {{{{body: "public\\n", headers: {{{{x-route: public}}}}}}}}
  - match: {{{{path: /admin}}}}
    respond: {{{{body: "admin\\n", headers: {{{{x-route: admin}}}}}}}}
  - match: {{{{path: /api}}}}
    proxy: {{{{upstream: up}}}}
  - match: {{{{path: /raw}}}}
    proxy: {{{{upstream: up, forward-path: original}}}}
  - respond: {{{{body: "default\\n"}}}}
upstreams:
  - name: up
    servers: [http://127.0.0.1:{origin_port}]
{extra}
"""


def curl(*args):
    p = subprocess.run([CURL, "-sk", "--path-as-is", "--max-time", "20", *args],
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout


# ---- 1. paths are normalised before routing, for every protocol ----

PATH_CASES = [
    ("/public/../admin", b"admin\n"),
    ("/public/%2e%2e/admin", b"admin\n"),
    ("/public/.%2E/admin/", b"admin\n"),
    ("//admin", b"admin\n"),
    ("/public/./x/../../admin", b"admin\n"),
    ("/%61dmin", b"admin\n"),
    ("/public/x/..", b"public\n"),
]


@pytest.mark.parametrize("path,want", PATH_CASES)
def test_path_normalised_before_routing_h1(server, origin, path, want):
    srv = server(path_config(origin))
    st, _, body = http_request(srv.ports[1], path)
    assert (st, body) == (200, want)
    st, _, body = http_request(srv.port, path, tls=True)
    assert (st, body) == (200, want)


@pytest.mark.skipif(CURL is None, reason="curl missing")
@pytest.mark.parametrize("path,want", PATH_CASES)
def test_path_normalised_before_routing_h2(server, origin, path, want):
    srv = server(path_config(origin))
    rc, out = curl("--http2", "-w", "|%{http_version}", f"https://127.0.0.1:{srv.port}{path}")
    assert rc == 0 and out == want + b"|2", out
    rc, out = curl("--http2-prior-knowledge", "-w", "|%{http_version}",
                   f"http://127.0.0.1:{srv.ports[1]}{path}")
    assert rc == 0 and out == want + b"|2", out


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (Debian ngtcp2-client) missing")
def test_path_normalised_before_routing_h3(server, origin, tmp_path):
    srv = server(path_config(origin))
    dl = tmp_path / "dl"
    dl.mkdir()
    for path, want in PATH_CASES:
        p = subprocess.run([GTLS, "--exit-on-all-streams-close", f"--download={dl}",
                            "--no-quic-dump", "--timeout=20s", "127.0.0.1", str(srv.port),
                            f"https://127.0.0.1:{srv.port}{path}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode(errors="replace")
        assert p.returncode == 0, out[-2000:]
        # the request really went out un-normalised (the client sent what we asked)...
        sent = re.findall(r"\[:path: ([^\]]*)\]", out)
        assert sent and sent[0] == path, (sent, out[-2000:])
        # ...and the answer is the /admin (or /public) route's
        route = re.findall(r"\[x-route: ([^\]]*)\]", out)
        assert re.findall(r"\[:status: (\d+)\]", out) == ["200"], out[-2000:]
        assert route == [want.decode().strip()], (path, out[-2000:])


@pytest.mark.parametrize("path,status", [
    ("/a/../../etc/passwd", 400),
    ("/../admin", 400),
    ("/%2e%2e/admin", 400),
    ("/public%2fx", 400),
    ("/public%5Cx", 400),
    ("/public/%zz", 400),
])
def test_path_rejected(server, origin, path, status):
    srv = server(path_config(origin))
    st, _, _ = http_request(srv.ports[1], path)
    assert st == status


def test_path_origin_gets_normalised_path_and_query_untouched(server, origin):
    srv = server(path_config(origin))
    st, _, body = http_request(srv.ports[1], "/public/../api/./x//y/%7euser/%c3%a9?q=/../%2e&b")
    assert st == 200
    assert body == b"origin saw /api/x/y/~user/%C3%A9?q=/../%2e&b\n"
    # forward-path: original sends the bytes the client sent (after matching the normalised one)
    st, _, body = http_request(srv.ports[1], "/raw/./x//y/%7euser?q=/../")
    assert st == 200 and body == b"origin saw /raw/./x//y/%7euser?q=/../\n"


def test_path_encoded_slash_options(server, origin):
    srv = server(path_config(origin, "limits: {{encoded-slash: keep, merge-slashes: false}}"))
    st, _, body = http_request(srv.ports[1], "/api/a%2fb//c")
    assert st == 200 and body == b"origin saw /api/a%2Fb//c\n"
    st, _, body = http_request(srv.ports[1], "/public%2f..%2f..%2fadmin")
    assert st == 200 and body == b"default\n"  # one segment "public%2F..%2F..%2Fadmin"
    srv2 = server(path_config(origin, "limits: {{encoded-slash: decode}}"))
    st, _, body = http_request(srv2.ports[1], "/public%2f..%2fadmin")
    assert st == 200 and body == b"admin\n"
    st, _, body = http_request(srv2.ports[1], "/api/a%2fb")
    assert st == 200 and body == b"origin saw /api/a/b\n"


# ---- 2. dotfiles are not served unless asked for ----

def make_dotfiles(root):
    (root / ".env").write_text("SECRET=1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "sub").mkdir()
    (root / "sub" / ".htpasswd").write_text("u:p\n")
    (root / ".well-known").mkdir()
    (root / ".well-known" / "security.txt").write_text("Contact: x\n")
    (root / ".well-known" / ".private").write_text("no\n")
    (root / "page.txt").write_text("page\n")


DOT_CASES = [("/.env", 404), ("/.git/config", 404), ("/sub/.htpasswd", 404),
             ("/%2eenv", 404), ("/sub/../.env", 404), ("/.well-known/.private", 404),
             ("/.well-known/security.txt", 200), ("/page.txt", 200)]


def test_static_dotfiles_hidden_by_default(server):
    srv = server("""
workers: 1
listeners: [{{address: "127.0.0.1:{port}"}}]
routes:
  - static: {{root: {docroot}}}
""", start=False)
    make_dotfiles(srv.docroot)
    srv.start()
    for path, want in DOT_CASES:
        st, _, body = http_request(srv.port, path)
        assert st == want, (path, st, body)


def test_serve_dotfiles_hidden_by_default(server, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    make_dotfiles(site)
    probe = server("workers: 1\n", start=False)  # only for a free port
    port = probe.port
    srv = server(args=["serve", str(site), "--listen", f"127.0.0.1:{port}"], start=False)
    srv.start(wait_ports=[port])
    for path, want in DOT_CASES:
        st, _, body = http_request(port, path)
        assert st == want, (path, st, body)


def test_static_dotfiles_allow(server):
    srv = server("""
workers: 1
listeners: [{{address: "127.0.0.1:{port}"}}]
routes:
  - static: {{root: {docroot}, dotfiles: allow}}
""", start=False)
    make_dotfiles(srv.docroot)
    srv.start()
    for path in ("/.env", "/.git/config", "/sub/.htpasswd", "/.well-known/.private"):
        st, _, _ = http_request(srv.port, path)
        assert st == 200, path


# ---- 4. header case on HTTP/1.1 responses ----

CANON = re.compile(r"^(ETag|WWW-Authenticate|[A-Z][a-z0-9]*(-[A-Z][a-z0-9]*)*)$")


def head_names(raw_head):
    lines = raw_head.decode("latin-1").split("\r\n")[1:]
    return [l.split(":", 1)[0] for l in lines if l]


def test_h1_response_header_case(server, origin):
    srv = server(path_config(origin), start=False)
    (srv.docroot / "f.txt").write_text("file\n")
    srv.text = srv.text.replace('  - respond: {body: "default\\n"}',
                                f'  - static: {{root: {srv.docroot}}}')
    srv.start()
    resp = raw(srv.ports[1], b"GET /f.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = resp.split(b"\r\n\r\n")[0]
    names = head_names(head)
    for want in ("Server", "Date", "Content-Type", "Content-Length", "ETag", "Last-Modified"):
        assert want in names, (want, head)
    assert all(CANON.match(n) for n in names), head
    # a 304 and a respond route with a config-given lowercase name
    etag = re.search(rb"\r\nETag: (\S+)", head).group(1)
    resp = raw(srv.ports[1], b"GET /f.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"If-None-Match: " + etag + b"\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 304 "), resp
    assert all(CANON.match(n) for n in head_names(resp.split(b"\r\n\r\n")[0])), resp
    resp = raw(srv.ports[1], b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b"\r\nX-Route: admin\r\n" in resp, resp
    # a 405 from the static handler names Allow
    resp = raw(srv.ports[1], b"POST /f.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
               b"Connection: close\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET, HEAD\r\n" in resp, resp


def test_h1_proxied_origin_header_case_kept(server, origin):
    """h1 -> h1: names with capitals arrive as the origin spelled them."""
    srv = server(path_config(origin))
    resp = raw(srv.ports[1], b"GET /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b"\r\nX-Origin-Case: Kept\r\n" in resp, resp
    assert b"\r\nContent-Length: " in resp, resp


# ---- 3. TLS defaults: AEAD only, ALPN http/1.0, plain HTTP on a TLS port ----

TLS_CONFIG = """
workers: 1
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    tls: self-signed
  - address: 127.0.0.1:{port2}
    tls: {{self-signed: true, ciphers: "ECDHE-ECDSA-AES128-SHA"}}
routes:
  - respond: {{body: "tls ok\\n"}}
"""


def s_client(port, *args, data=b""):
    p = subprocess.run([OPENSSL, "s_client", "-connect", f"127.0.0.1:{port}", "-ign_eof",
                        *args], input=data, capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


@pytest.mark.skipif(OPENSSL is None, reason="openssl missing")
@pytest.mark.parametrize("cipher", ["AES128-SHA", "ECDHE-RSA-AES128-SHA", "ECDHE-ECDSA-AES128-SHA",
                                    "ECDHE-ECDSA-AES128-SHA256", "AES128-GCM-SHA256"])
def test_tls12_cbc_and_rsa_kx_refused_by_default(server, cipher):
    srv = server(TLS_CONFIG)
    rc, out = s_client(srv.port, "-tls1_2", "-cipher", cipher)
    assert rc != 0 and "handshake failure" in out.lower(), out[-2000:]


@pytest.mark.skipif(OPENSSL is None, reason="openssl missing")
@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305",
                                    "ECDHE-ECDSA-AES256-GCM-SHA384"])
def test_tls12_aead_accepted(server, cipher):
    srv = server(TLS_CONFIG)
    rc, out = s_client(srv.port, "-tls1_2", "-cipher", cipher,
                       data=b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert rc == 0 and f"Cipher is {cipher}" in out and "tls ok" in out, out[-2000:]


@pytest.mark.skipif(OPENSSL is None, reason="openssl missing")
def test_tls12_ciphers_configurable(server):
    """`tls.ciphers` still overrides the default: a listener may ask for a CBC suite."""
    srv = server(TLS_CONFIG)
    rc, out = s_client(srv.ports[1], "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA",
                       data=b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert rc == 0 and "Cipher is ECDHE-ECDSA-AES128-SHA" in out and "tls ok" in out, out[-2000:]
    rc, out = s_client(srv.ports[1], "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert rc != 0, out[-2000:]


@pytest.mark.skipif(OPENSSL is None, reason="openssl missing")
def test_tls_alpn_http10_accepted(server):
    srv = server(TLS_CONFIG)
    rc, out = s_client(srv.port, "-alpn", "http/1.0",
                       data=b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    assert rc == 0, out[-2000:]
    assert "ALPN protocol: http/1.0" in out, out[-2000:]
    assert "HTTP/1.1 200 OK" in out and "tls ok" in out, out[-2000:]
    # with something we speak in the list, that wins
    rc, out = s_client(srv.port, "-alpn", "http/1.0,http/1.1",
                       data=b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert rc == 0 and "ALPN protocol: http/1.1" in out and "tls ok" in out, out[-2000:]


@pytest.mark.parametrize("req", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"G",  # only the first byte: decided on it
    b"get / HTTP/1.1\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
])
def test_plain_http_to_tls_port_gets_400(server, req):
    srv = server(TLS_CONFIG)
    resp = raw(srv.port, req)
    assert resp.startswith(b"HTTP/1.1 400 Bad Request\r\n"), resp
    assert resp.endswith(b"\r\n\r\nplain HTTP request sent to an HTTPS port\r\n"), resp
    # and TLS on the same port still works afterwards
    st, _, body = http_request(srv.port, "/", tls=True)
    assert st == 200 and body == b"tls ok\n"


# ---- 5. the embedded demo: /proxy/ is marked, the page links it, :8888 reaches :8443 ----

def _port_is_free(port):
    import socket
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.skipif(CURL is None, reason="curl missing")
def test_demo_proxy_marker_links_and_intercept_to_own_tls_site(server, monkeypatch):
    from test_cli import read_stdout_until
    busy = [p for p in (8080, 8443, 8888) if not _port_is_free(p)]
    if busy:  # as tests/test_cli.py::test_cli_default_embedded
        pytest.fail(f"the embedded default listens on 127.0.0.1:8080, :8443 and :8888, but "
                    f"{busy} is in use on this machine: free it to run this test")
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("FERRY_DEMO_DIR", raising=False)
    f = server(args=[], start=False)
    f.start(wait_ports=[8080, 8443, 8888])
    out = read_stdout_until(f.proc, ["ferry: reverse proxy under /proxy/",
                                     "intercepting proxy on http://127.0.0.1:8888/"])
    assert "ferry: reverse proxy under /proxy/ to upstream demo" in out, out
    assert "intercepting proxy on http://127.0.0.1:8888/" in out, out
    # the direct page: no proxy marker; links /proxy/ and explains :8888 and HTTP/3
    st, h, page = http_request(8080, "/")
    assert st == 200 and "via" not in h and "x-ferry-demo" not in h, h
    for needle in (b'href="/proxy/"', b"curl -x http://127.0.0.1:8888", b"nextHopProtocol",
                   b"HTTP/3", b'href="https://127.0.0.1:8443/"'):
        assert needle in page, needle
    # through the reverse proxy: the same bytes, marked
    st, h, body = http_request(8080, "/proxy/")
    assert st == 200 and body == page
    assert h.get("via") == "1.1 ferry" and h.get("x-ferry-demo") == "reverse-proxy", h
    # the intercepting proxy reaches the demo's own self-signed TLS site with only --cacert
    ca = f.tmp / ".local" / "share" / "ferry" / "ferry-ca.pem"
    assert ca.is_file()
    p = subprocess.run([CURL, "-s", "--max-time", "20", "-x", "http://127.0.0.1:8888",
                        "--cacert", str(ca), "-w", "|%{http_code}", "https://127.0.0.1:8443/"],
                       capture_output=True, timeout=30)
    assert p.returncode == 0 and p.stdout == page + b"|200", (p.returncode, p.stdout[-300:])
    p = subprocess.run([CURL, "-s", "--max-time", "20", "-x", "http://127.0.0.1:8888",
                        "--cacert", str(ca), "https://localhost:8443/health"],
                       capture_output=True, timeout=30)
    assert p.stdout == b"ok\n", p
    # the proxy's own page (opened directly) offers the CA, as the demo page says
    st, _, body = http_request(8888, "/")
    assert st == 200 and b"/ferry-ca.pem" in body
