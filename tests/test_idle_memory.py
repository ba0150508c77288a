"""Memory held by idle keep-alive connections (issue 19). After one request each, N idle
connections (HTTP/1.1 plain and TLS, h2 over TLS) must hold far less than the buffers they used
while serving (two 16 KiB chunks, the header array, the arena's first block, OpenSSL's record
buffers, nghttp2's 16 KiB frame buffer). Asserted on Ferry's own accounting
(ferry_connection_memory_bytes on /metrics: what each connection holds by its codec's count,
deterministic), not on RSS (noisy); the RSS per connection is printed beside it. Also the
per-connection budget, limits.connection-memory: an upload whose buffers pass it is closed
with a named log line and counted."""
import os
import re
import socket
import ssl
import subprocess

import pytest

from conftest import http_request, wait_for

N = 200

CONF = """\
workers: 1
listeners:
  - address: 127.0.0.1:{port}
{tls}routes:
  - match: {{path: /echo}}
    echo: {{}}
  - respond:
      body: "hello\\n"
admin:
  address: 127.0.0.1:{port2}
"""

# bytes per idle connection by Ferry's count (measured: h1 1,360; h1+TLS ~15,450: the SSL
# object and its cipher state, OpenSSL 3.0 allocates ~13.7 KiB per connection, no record
# buffer; h2+TLS 24,500-26,700: the same, plus nghttp2's session, HPACK tables and stream state
# ~10 KiB, its 16 KiB frame buffer's pages given back). Before the idle release each held at
# least two 16 KiB buffers more than its ceiling.
CEILING = {"h1": 2048, "h1-tls": 18 * 1024, "h2-tls": 30 * 1024}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def samples(port):
    st, _, body = http_request(port, "/metrics")
    assert st == 200, st
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r"^([a-z_]+)(\{.*\})? (\S+)$", line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


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


@pytest.mark.parametrize("proto", ["h1", "h1-tls", "h2-tls"])
def test_idle_keepalive_connections_hold_little(server, proto):
    f = server(CONF.replace("{tls}", "    tls: self-signed\n" if proto != "h1" else ""))
    ctx = None
    if proto != "h1":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2" if proto == "h2-tls" else "http/1.1"])
    fam = "h2" if proto == "h2-tls" else "h1"
    lab = f'{{proto="{fam}"}}'
    pid = f.proc.pid
    for _ in range(8):  # warm: pools and caches every connection shares
        one(f.port, ctx).close()
    before = rss_kib(pid)
    socks = [one(f.port, ctx) for _ in range(N)]
    try:
        per = [None]

        def small():
            s = samples(f.ports[1])
            assert s[("ferry_connections_active", lab)] == N
            per[0] = s[("ferry_connection_memory_bytes", lab)] / N
            return per[0] <= CEILING[proto]

        try:
            wait_for(small, timeout=10.0, what=f"idle connections under {CEILING[proto]} B each")
        except AssertionError as e:
            raise AssertionError(f"{e}: {per[0]:.0f} B each") from None
        s = samples(f.ports[1])
        # the busiest connection held its buffers while it was served
        assert s[("ferry_connection_memory_max_bytes", lab)] > per[0] + 16384
        assert s[("ferry_stream_memory_bytes", lab)] == 0  # no request in progress
        # the requests were counted while they ran (h2: the stream struct and its arena)
        assert s[("ferry_stream_memory_max_bytes", lab)] >= 1024
        print(f"{proto}: {per[0]:.0f} B per idle connection by count, "
              f"RSS {(rss_kib(pid) - before) / N:.2f} KiB")
        # they are still open and still served
        for s in socks[:3]:
            if proto == "h2-tls":
                continue  # (stream 1 is used; the h1 rows show the point)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
    # every connection's count goes with it
    wait_for(lambda: samples(f.ports[1])[("ferry_connections_active", lab)] == 0, timeout=10.0,
             what="connections closed")
    assert samples(f.ports[1])[("ferry_connection_memory_bytes", lab)] == 0


def curl_post(port, path, size):
    body = os.urandom(size)
    p = subprocess.run(["curl", "-sS", "--http1.1", "-o", "-", "-w", "\n%{http_code}",
                        "--data-binary", "@-", "-H", "Content-Type: application/octet-stream",
                        f"http://127.0.0.1:{port}{path}"], input=body, capture_output=True,
                       timeout=30)
    return p.returncode, p.stdout, body


def test_connection_memory_budget_closes_named(server):
    f = server(CONF.replace("{tls}", "").replace("routes:", "limits:\n  connection-memory: 64k\n"
                                                 "routes:"))
    # a small upload fits: read buffer, write buffer, header array, arena
    rc, out, body = curl_post(f.port, "/echo", 1024)
    assert rc == 0 and out == body + b"\n200", (rc, out[-200:])
    # a large one makes the codec take its 64 KiB body buffer: past the budget
    rc, out, _ = curl_post(f.port, "/echo", 1 << 20)
    assert rc != 0 or not out.endswith(b"\n200"), "a 1 MiB upload went through a 64k budget"
    wait_for(lambda: "connection memory budget exceeded" in f.log(), timeout=10.0,
             what="the budget's log line")
    s = samples(f.ports[1])
    assert s[("ferry_limit_rejections_total", '{limit="connection-memory"}')] == 1
    assert s[("ferry_connection_memory_max_bytes", '{proto="h1"}')] > 64 * 1024
    # the server goes on serving
    assert http_request(f.port, "/")[0] == 200


GTLS = __import__("shutil").which("gtlsclient")


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (ngtcp2-client) missing")
def test_h3_connection_and_stream_memory_counted(server, tmp_path):
    """HTTP/3: a 1 MiB response held in the QUIC stream's send chunks until acknowledged shows
    in the stream gauge's max and in its connection's; both go back to 0 with the connection
    (ngtcp2's state, the connection struct, datagrams and now the streams' chunks)."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "big").write_bytes(os.urandom(1 << 20))
    f = server(CONF.replace("{tls}", "    protocols: [h1, h3]\n    tls: self-signed\n")
               .replace("  - respond:",
                        "  - match: {{path: /big}}\n    static: {{root: DOCROOT}}\n  - respond:").replace("DOCROOT", str(tmp_path / "www")))
    dl = tmp_path / "dl"
    dl.mkdir()
    p = subprocess.run([GTLS, "--exit-on-all-streams-close", f"--download={dl}", "-q",
                        "--timeout=20s", "127.0.0.1", str(f.port),
                        f"https://127.0.0.1:{f.port}/big"], capture_output=True, timeout=60)
    assert p.returncode == 0 and (dl / "big").stat().st_size == 1 << 20, p.stdout[-2000:]
    lab = '{proto="h3"}'
    s = samples(f.ports[1])
    # at least one 16 KiB chunk of the body was held by the request stream
    assert s[("ferry_stream_memory_max_bytes", lab)] > 16384
    assert (s[("ferry_connection_memory_max_bytes", lab)]
            > s[("ferry_stream_memory_max_bytes", lab)])
    wait_for(lambda: samples(f.ports[1])[("ferry_connections_active", lab)] == 0, timeout=40.0,
             what="the QUIC connection closed")
    s = samples(f.ports[1])
    assert s[("ferry_stream_memory_bytes", lab)] == 0
    assert s[("ferry_connection_memory_bytes", lab)] == 0


def test_websocket_relay_memory_does_not_grow_per_message(server):
    """A WebSocket proxied for many messages holds the same bytes after 4,000 messages as
    after 400: the relay allocates nothing per message from the exchange (the h1 codec took 32
    bytes of its arena for every send, so a long-lived WebSocket or tunnel grew without bound)."""
    from proxy_kit import WsEchoOrigin, _ws_frame, _ws_parse
    o = WsEchoOrigin()
    try:
        f = server(CONF.replace("{tls}", "").replace(
            "routes:", f"upstreams:\n  - name: ws\n    servers: [{o.url}]\nroutes:\n"
            "  - match: {{path: /ws}}\n    proxy: ws"))
        s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
        s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        head, buf = buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head

        def echo(n):
            nonlocal buf
            for i in range(n):
                msg = b"m%06d" % i
                s.sendall(_ws_frame(msg))
                got = []
                while not got:
                    got, buf = _ws_parse(buf + s.recv(4096))
                assert got[0] == (1, msg)

        lab = '{proto="h1"}'
        echo(400)
        before = samples(f.ports[1])[("ferry_connection_memory_bytes", lab)]
        echo(3600)
        after = samples(f.ports[1])[("ferry_connection_memory_bytes", lab)]
        # 3,600 messages at 32 bytes each would be 115,200 bytes more
        assert after - before < 8192, (before, after)
        s.close()
    finally:
        o.stop()
