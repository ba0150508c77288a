"""Memory held by idle keep-alive connections (issue 19): after one request each, N idle
HTTP/1.1 connections (plain and TLS) must cost the server far less than the buffers it used
while serving them (two 16 KiB chunks, the header array, the arena's first block, OpenSSL's
two record buffers). Measured as the growth of the server's RSS per connection, polled
(bounded) until the idle release has run; the bounds sit halfway between what the server
held before the release existed (h1 14.6 KiB, h1+TLS 50.9 KiB, h2 over TLS 54.9 KiB) and
what it holds now (about 2.4, 15.5 and 41 KiB)."""
import os
import socket
import ssl

import pytest

from conftest import wait_for

N = 1000

CONF = """\
workers: 1
listeners:
  - address: 127.0.0.1:{port}
{tls}routes:
  - respond:
      body: "hello\\n"
"""

pytestmark = pytest.mark.skipif(os.environ.get("FERRY_SANITIZED") == "1",
                                reason="sanitizer builds keep freed memory in quarantine")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def frame(t, f, sid, p):
    return len(p).to_bytes(3, "big") + bytes([t, f]) + sid.to_bytes(4, "big") + p


def one_h2(s):
    """Preface, SETTINGS, one GET on stream 1; frames until stream 1 ends."""
    import hpack
    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "https"),
                                    (":authority", "x"), (":path", "/")])
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
              + frame(1, 0x5, 1, block))
    buf = b""
    for _ in range(1000):
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            ln = int.from_bytes(buf[:3], "big")
            t, f, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            buf = buf[9 + ln:]
            if t == 4 and not f & 1:
                s.sendall(frame(4, 1, 0, b""))
            assert t != 7, "GOAWAY"
            if sid == 1 and t in (0, 1) and f & 1:
                return s
        d = s.recv(65536)
        assert d, "closed before the response ended"
        buf += d
    raise AssertionError("no end of stream 1")


def one(port, ctx):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if ctx:
        s = ctx.wrap_socket(s, server_hostname="localhost")
    if ctx and s.selected_alpn_protocol() == "h2":
        return one_h2(s)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while not got.endswith(b"hello\n"):
        d = s.recv(4096)
        assert d, "closed before the response"
        got += d
    assert got.startswith(b"HTTP/1.1 200")
    return s


@pytest.mark.parametrize("proto,bound_kib", [("h1", 8.0), ("h1-tls", 33.0), ("h2-tls", 48.0)])
def test_idle_keepalive_connections_hold_little(server, proto, bound_kib):
    f = server(CONF.replace("{tls}", "    tls: self-signed\n" if proto != "h1" else ""))
    ctx = None
    if proto != "h1":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2" if proto == "h2-tls" else "http/1.1"])
    pid = f.proc.pid
    for _ in range(8):  # warm: pools and caches every connection shares
        one(f.port, ctx).close()
    before = rss_kib(pid)
    socks = [one(f.port, ctx) for _ in range(N)]
    try:
        per = [None]

        def small():
            per[0] = (rss_kib(pid) - before) / N
            return per[0] <= bound_kib

        try:
            wait_for(small, timeout=10.0, what=f"idle connections under {bound_kib} KiB each")
        except AssertionError as e:
            raise AssertionError(f"{e}: {per[0]:.2f} KiB each") from None
        print(f"{proto}: {per[0]:.2f} KiB per idle connection")
        # they are still open and still served
        for s in socks[:3]:
            if proto == "h2-tls":
                continue  # (stream 1 is used; the h1 rows show the point)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
