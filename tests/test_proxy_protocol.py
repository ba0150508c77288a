"""PROXY protocol on HTTP listeners (`accept-proxy`, server_listen.c): a trusted front's v1/v2
header, read before TLS and HTTP, makes its source address the client's address for the CIDR
lists, the X-Forwarded-For sent to origins and the access log. Real peers: python sockets
writing the header bytes, curl --haproxy-protocol (v1) and HAProxy 2.6 `send-proxy` /
`send-proxy-v2` in front of h1, h2c and TLS (h1, h2) listeners. Peers outside the list are
direct clients whose PROXY bytes are not believed; a trusted peer without a valid header is
closed with a named log line."""
import shutil
import socket
import ssl
import struct
import subprocess
from http.server import BaseHTTPRequestHandler

import pytest

from conftest import http_origin, wait_for, free_port

CURL = shutil.which("curl")
HAPROXY = shutil.which("haproxy")

V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


class Echo(BaseHTTPRequestHandler):
    """Answers with the X-Forwarded-For it was sent."""

    def do_GET(self):
        body = ("xff=%s\n" % self.headers.get("X-Forwarded-For", "")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def origin():
    with http_origin(Echo) as port:
        yield port


def cfg(origin_port, trusted="[127.0.0.1/32]", extra_listener="", top=""):
    return f"""
workers: 1
data-dir: {{data}}
log:
  access: {{tmp}}/access.log
  access-format: combined
limits:
  header-timeout: 1s
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2c]
    accept-proxy: {trusted}
{extra_listener}
  - address: 127.0.0.1:{{port2}}
    protocols: [h1, h2]
    tls: {{{{self-signed: true}}}}
    accept-proxy: {trusted}
{extra_listener}
{top}
upstreams:
  - name: app
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - proxy: app
"""


def v1(src, dst="127.0.0.1", sport=40000, dport=80):
    fam = "TCP6" if ":" in src else "TCP4"
    return f"PROXY {fam} {src} {dst} {sport} {dport}\r\n".encode()


def v2(src, dst, sport=40000, dport=80, tlv=b""):
    if ":" in src:
        addr = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
        fam = 0x21
    else:
        addr = socket.inet_aton(src) + socket.inet_aton(dst)
        fam = 0x11
    addr += struct.pack("!HH", sport, dport) + tlv
    return V2_SIG + bytes([0x21, fam]) + struct.pack("!H", len(addr)) + addr


def v2_local():
    return V2_SIG + bytes([0x20, 0x00]) + struct.pack("!H", 0)


def exchange(port, data, src="127.0.0.1", tls=False, split=False, timeout=5.0):
    """Connect from `src`, write `data` (the header, then the request unless tls), return
    every byte the server sends until it closes."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    try:
        if split:  # the header in two writes: the reader must wait for the rest
            s.sendall(data[:7])
            s.sendall(data[7:])
        else:
            s.sendall(data)
        req = (f"GET /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
               .encode())
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname="localhost")
        try:
            s.sendall(req)
        except (ConnectionResetError, BrokenPipeError):
            return b""  # closed on the header already
        out = []
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                break
            if not b:
                break
            out.append(b)
        return b"".join(out)
    finally:
        s.close()


def closed(s):
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def access_has(srv, addr):
    p = srv.tmp / "access.log"
    return p.exists() and any(l.startswith(addr + " ") for l in p.read_text().splitlines())


def test_v1_and_v2_addresses_reach_origin_and_access_log(server, origin):
    srv = server(cfg(origin))
    r = exchange(srv.port, v1("203.0.113.7"))
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"xff=203.0.113.7\n"), r
    r = exchange(srv.port, v1("203.0.113.8"), split=True)
    assert r.endswith(b"xff=203.0.113.8\n"), r
    r = exchange(srv.port, v2("198.51.100.20", "127.0.0.1"))
    assert r.endswith(b"xff=198.51.100.20\n"), r
    # v2 with a TLV after the addresses (skipped), IPv6 source
    r = exchange(srv.port, v2("2001:db8::9", "2001:db8::1", tlv=b"\x04\x00\x02ab"))
    assert r.endswith(b"xff=2001:db8::9\n"), r
    # v2 LOCAL (a front's health check): the front's own address stays
    r = exchange(srv.port, v2_local())
    assert r.endswith(b"xff=127.0.0.1\n"), r
    wait_for(lambda: access_has(srv, "203.0.113.7") and access_has(srv, "2001:db8::9"),
             what="PROXY addresses in the access log")


def test_tls_after_header_h1(server, origin):
    srv = server(cfg(origin))
    r = exchange(srv.ports[1], v2("192.0.2.33", "127.0.0.1"), tls=True)
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"xff=192.0.2.33\n"), r
    r = exchange(srv.ports[1], v1("192.0.2.34"), tls=True)
    assert r.endswith(b"xff=192.0.2.34\n"), r


def test_cidr_deny_on_proxy_source(server, origin):
    srv = server(cfg(origin, extra_listener="    cidr: no-doc",
                     top="cidr-lists:\n  - name: no-doc\n    deny: [203.0.113.0/24]\n"))
    r = exchange(srv.port, v1("203.0.113.50"))
    assert r.startswith(b"HTTP/1.1 403"), r
    r = exchange(srv.port, v1("198.51.100.50"))
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"xff=198.51.100.50\n"), r
    r = exchange(srv.ports[1], v2("203.0.113.51", "127.0.0.1"), tls=True)
    assert r.startswith(b"HTTP/1.1 403"), r


def test_untrusted_peer_header_not_believed(server, origin):
    srv = server(cfg(origin))
    # 127.0.0.2 is not in accept-proxy: it is a direct client, and its PROXY line is just a
    # bad request line, never an address
    r = exchange(srv.port, v1("203.0.113.7"), src="127.0.0.2")
    assert r.startswith(b"HTTP/1.1 400"), r
    assert b"203.0.113.7" not in r
    r = exchange(srv.port, b"", src="127.0.0.2")
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"xff=127.0.0.2\n"), r
    assert not access_has(srv, "203.0.113.7")


def test_bad_missing_truncated_header_closes_with_log(server, origin):
    srv = server(cfg(origin))
    # garbage after the v1 signature
    assert exchange(srv.port, b"PROXY TCP4 garbage here\r\n") == b""
    # a trusted front that sends plain HTTP: must send the header, so closed
    assert exchange(srv.port, b"") == b""
    # a bad v2 version/command byte
    assert exchange(srv.port, V2_SIG + b"\x31\x11\x00\x0c" + b"\x00" * 12) == b""
    wait_for(lambda: srv.log().count("accept-proxy: bad PROXY protocol header from 127.0.0.1")
             >= 3, what="bad-header log lines")
    # truncated, then the peer shuts its side: closed before the header completed
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(b"PROXY TCP4 203.0.113.7 ")
    s.shutdown(socket.SHUT_WR)
    assert closed(s)
    s.close()
    wait_for(lambda: "connection closed before the PROXY header from 127.0.0.1" in srv.log(),
             what="truncated-header log line")
    # truncated and silent: limits.header-timeout closes it
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(V2_SIG[:6])
    assert closed(s)
    s.close()
    wait_for(lambda: "no PROXY protocol header within limits.header-timeout" in srv.log(),
             what="timeout log line")
    # the listener still serves
    assert exchange(srv.port, v1("203.0.113.9")).endswith(b"xff=203.0.113.9\n")


@pytest.mark.skipif(not CURL, reason="curl not installed")
def test_curl_haproxy_protocol(server, origin):
    srv = server(cfg(origin, trusted="[127.0.0.0/8]"))
    # curl 7.88 writes a v1 header with its own connection's addresses: bind it to 127.0.0.6
    for args in ([f"http://127.0.0.1:{srv.port}/c"],
                 ["--http2-prior-knowledge", f"http://127.0.0.1:{srv.port}/c"],
                 ["-k", "--http1.1", f"https://127.0.0.1:{srv.ports[1]}/c"],
                 ["-k", "--http2", f"https://127.0.0.1:{srv.ports[1]}/c"]):
        r = subprocess.run([CURL, "-sS", "--haproxy-protocol", "--interface", "127.0.0.6",
                            "-w", "\\n%{http_version}", *args],
                           capture_output=True, timeout=20)
        assert r.returncode == 0, (args, r.stderr)
        body, _, ver = r.stdout.rpartition(b"\n")
        assert body == b"xff=127.0.0.6\n", (args, r.stdout)
        if "--http1.1" not in args and args[0] != f"http://127.0.0.1:{srv.port}/c":
            assert ver == b"2", (args, r.stdout)
    # without the header, a trusted peer is refused
    r = subprocess.run([CURL, "-sS", f"http://127.0.0.1:{srv.port}/c"], capture_output=True,
                       timeout=20)
    assert r.returncode != 0
    assert "accept-proxy: bad PROXY protocol header from 127.0.0.1" in srv.log()


@pytest.mark.skipif(not (CURL and HAPROXY), reason="curl or haproxy not installed")
@pytest.mark.parametrize("send", ["send-proxy", "send-proxy-v2"])
def test_haproxy_front(server, origin, tmp_path, send):
    srv = server(cfg(origin))
    plain, tls = free_port(), free_port()
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(f"""
global
  maxconn 100
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fplain
  bind 127.0.0.1:{plain}
  default_backend bplain
frontend ftls
  bind 127.0.0.1:{tls}
  default_backend btls
backend bplain
  server f 127.0.0.1:{srv.port} {send}
backend btls
  server f 127.0.0.1:{srv.ports[1]} {send}
""")
    hp = subprocess.Popen([HAPROXY, "-f", str(conf), "-db"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    try:
        def up():
            for p in (plain, tls):
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=1).close()
                except OSError:
                    return False
            return True
        wait_for(up, what="haproxy to listen", proc=hp)
        for args, ver in (([f"http://127.0.0.1:{plain}/h"], b"1.1"),
                          (["--http2-prior-knowledge", f"http://127.0.0.1:{plain}/h"], b"2"),
                          (["-k", "--http1.1", f"https://127.0.0.1:{tls}/h"], b"1.1"),
                          (["-k", "--http2", f"https://127.0.0.1:{tls}/h"], b"2")):
            r = subprocess.run([CURL, "-sS", "--interface", "127.0.0.7", "-w",
                                "\\n%{http_version}", *args], capture_output=True, timeout=20)
            assert r.returncode == 0, (args, r.stderr)
            body, _, v = r.stdout.rpartition(b"\n")
            assert (body, v) == (b"xff=127.0.0.7\n", ver), (args, r.stdout)
    finally:
        hp.terminate()
        hp.wait(timeout=10)
    wait_for(lambda: access_has(srv, "127.0.0.7"), what="the client address in the access log")


def test_rate_limit_key_and_trusted_walk_use_proxy_source(server, origin):
    srv = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    accept-proxy: [127.0.0.1]
upstreams:
  - name: app
    servers: [http://127.0.0.1:{origin}]
routes:
  - match: {{{{path: /limited}}}}
    rate-limit: {{{{rate: 1/h, burst: 1, key: [client-address]}}}}
    proxy: app
  - match: {{{{path: /walk}}}}
    cidr: {{{{allow: [203.0.113.0/24], trusted-proxies: [10.0.0.0/8]}}}}
    proxy: app
""")

    def get(path, src, xff=None):
        h = f"X-Forwarded-For: {xff}\r\n" if xff else ""
        req = (f"GET {path} HTTP/1.1\r\nHost: x\r\n{h}Connection: close\r\n\r\n").encode()
        return _raw_after(srv.port, v1(src), req)

    # one token per PROXY source address, not per front (every conn comes from 127.0.0.1)
    assert get("/limited", "198.51.100.1").startswith(b"HTTP/1.1 200")
    assert get("/limited", "198.51.100.1").startswith(b"HTTP/1.1 429")
    assert get("/limited", "198.51.100.2").startswith(b"HTTP/1.1 200")
    # trusted-proxies starts its walk at the PROXY source: 10.0.0.5 is a trusted hop, so its
    # X-Forwarded-For names the client; from an untrusted source the header is not believed
    r = get("/walk", "10.0.0.5", xff="203.0.113.9")
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"xff=203.0.113.9, 10.0.0.5\n"), r
    assert get("/walk", "198.51.100.3", xff="203.0.113.9").startswith(b"HTTP/1.1 403")
    assert get("/walk", "203.0.113.4").startswith(b"HTTP/1.1 200")


def _raw_after(port, header, req):
    """`header` then `req` in one write from 127.0.0.1; everything until close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(header + req)
        out = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            out.append(b)
        return b"".join(out)


def test_reload_changes_accept_proxy(server, origin):
    import signal
    text = cfg(origin)
    srv = server(text)
    assert exchange(srv.port, v1("203.0.113.7")).endswith(b"xff=203.0.113.7\n")
    # the next generation trusts no one: the same peer is a direct client (slot kept)
    (srv.tmp / "ferry.yaml").write_text(srv.text.replace("accept-proxy: [127.0.0.1/32]",
                                                         "accept-proxy: []"))
    srv.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: generation 2 active on all workers" in srv.log(), 30,
             "the reload", srv.proc)
    r = exchange(srv.port, b"")
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"xff=127.0.0.1\n"), r
    assert exchange(srv.port, v1("203.0.113.7")).startswith(b"HTTP/1.1 400")
