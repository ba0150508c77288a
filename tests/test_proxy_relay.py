"""Reverse proxy relay edge cases, black box: chunked and close-delimited origin responses,
interim 1xx, status codes, timeouts, resets, early responses before the upload ends, slow and
aborting clients, odd headers, health checks, session affinity, mTLS to origins, WebSocket
through the proxy. Shared origins and clients are in proxy_kit.py.

Nothing asserts on durations, only on outcomes (status, bytes, hashes, counts, exit codes,
log lines).
"""
import hashlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import uuid

import h2.config
import h2.connection
import h2.events
import pytest

from conftest import (FERRY as FERRY_BIN, _openssl, bound, conns_to, free_port, http_request,
                      wait_for)
from proxy_kit import (CHUNKED_BODY, client, CLIENTS, curl, dead_url, h1_get_many, H2,
                       _h2_connect, h2_post, nginx, origin_headers, origins, proxy_config,
                       SOCK_TIMEOUT, start, TINY, _ws_frame, _ws_parse,
                       WsEchoOrigin)  # noqa: F401 (fixtures)


def test_chunked_origin_response(server, origins, client):
    """Chunks of 1 B .. 64 KiB (some larger than Ferry's read buffer), then a trailer."""
    o = origins(name="ch")
    srv = start(server, [o.url])
    r = curl(srv, client, "/chunked")
    assert r.rc == 0 and r.status == 200, r
    assert len(r.body) == len(CHUNKED_BODY)
    assert hashlib.sha256(r.body).digest() == hashlib.sha256(CHUNKED_BODY).digest()
    # the origin connection stays usable after a chunked response
    r = curl(srv, client, "/ok")
    assert r.status == 200 and json.loads(r.body)["origin"] == "ch", r


def test_close_delimited_origin_response(server, origins, client):
    """No Content-Length, no chunking: the body ends when the origin closes; the client gets
    all of it, properly ended."""
    o = origins(name="cd")
    srv = start(server, [o.url])
    r = curl(srv, client, "/close-delimited")
    assert r.rc == 0 and r.status == 200, r
    assert r.body == CHUNKED_BODY[:100000]


def test_interim_103_then_200(server, origins, client):
    o = origins(name="hints")
    srv = start(server, [o.url])
    r = curl(srv, client, "/hints")
    assert r.rc == 0 and r.status == 200 and r.body == b"after hints\n", r


@pytest.mark.parametrize("code", [204, 304, 404, 503])
def test_status_codes_relayed(server, origins, code):
    o = origins(name="st")
    srv = start(server, [o.url], upstream={"max-fails": 100})
    for c in ("h1", "h2c"):
        r = curl(srv, c, f"/status/{code}")
        assert r.rc == 0 and r.status == code, (c, r)
        assert r.get("x-status") == str(code)
        if code in (204, 304):
            assert r.body == b""
        else:
            assert r.body == b"st\n"
        # the same connections go on working
        r = curl(srv, c, "/after")
        assert r.status == 200, r


def test_conditional_get_304_from_nginx(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/tiny.txt")
    etag = r.get("etag")
    assert r.status == 200 and etag, r
    r = curl(srv, client, "/tiny.txt", "-H", f"If-None-Match: {etag}")
    assert r.rc == 0 and r.status == 304 and r.body == b"", r


def test_idle_timeout_mid_body(server, origins, client):
    """The origin sends a head and 10 of 1000 bytes, then nothing: after idle-timeout the
    client sees an aborted response, not a complete one."""
    o = origins(name="stall")
    srv = start(server, [o.url], upstream={"idle-timeout": "1s"})
    r = curl(srv, client, "/stall")
    assert r.rc != 0 and len(r.body) < 1000, r
    if client in H2:
        assert r.rc in (16, 92), r
    else:
        assert r.rc == 18, r
    assert "idle timeout" in srv.log(), srv.log()


def test_connect_timeout_is_502_with_log(server, origins):
    bh = origins(kind="blackhole")
    srv = start(server, [bh.url], upstream={"connect-timeout": "1s", "retries": 0})
    r = curl(srv, "h1", "/x")
    assert r.rc == 0 and r.status == 502, r
    assert "connect timeout" in srv.log(), srv.log()


def test_connect_timeout_retries_other_server(server, origins):
    bh = origins(kind="blackhole")
    ok = origins(name="ok")
    srv = start(server, [bh.url, ok.url], upstream={"connect-timeout": "1s"})
    for c in ("h1", "h2c"):
        r = curl(srv, c, "/x")
        assert r.rc == 0 and r.status == 200, (c, r)
        assert json.loads(r.body)["origin"] == "ok"


def test_reset_before_response_retried_on_other_server(server, origins):
    """An origin that resets every connection before a response byte: idempotent requests go
    to the other server; with it alone, 502."""
    bad = origins(kind="closer")
    ok = origins(name="ok")
    srv = start(server, [bad.url, ok.url], upstream={"max-fails": 1000})
    for c in ("h1", "h2c"):
        for i in range(4):
            r = curl(srv, c, f"/x{i}")
            assert r.rc == 0 and r.status == 200, (c, i, r)
    srv2 = start(server, [bad.url])
    r = curl(srv2, "h1", "/x")
    assert r.rc == 0 and r.status == 502, r
    assert "before responding" in srv2.log() or "failed" in srv2.log(), srv2.log()


def test_post_not_retried_after_reset(server, origins):
    """A POST whose request reached an origin that then reset is not replayed: 502, and the
    origin that would have answered never sees it."""
    bad = origins(kind="closer")
    ok = origins(name="ok")
    srv = start(server, [bad.url, ok.url])
    r = curl(srv, "h1", "/echo", "--data-binary", "payload")
    if r.status == 200:  # round robin may pick the good server first: then next one is bad
        r = curl(srv, "h1", "/echo", "--data-binary", "payload")
    assert r.rc == 0 and r.status == 502, r
    assert ok.count() <= 1


@pytest.mark.parametrize("path", ["/early-linger", "/early-rst"], ids=["linger", "rst"])
def test_early_response_before_upload_finished(server, origins, client, path):
    """The origin answers 403 before reading a 4 MiB upload (issue 5: "early responses: relay
    it, then finish or reset the upload"). `linger`: it half-closes and drains the upload
    (nginx's lingering close); `rst`: 0.5 s after the 403 it closes with the upload unread,
    so its kernel resets the connection. Either way the client must get the 403, and the proxy
    keeps working. (A reset at the very moment of the 403 is a race that nginx loses too, so
    it is not tested.)"""
    o = origins(name="early")
    srv = start(server, [o.url])
    up = os.urandom(4 << 20)
    if client in H2:
        # python3-h2: curl 7.88.1 turns RST_STREAM(NO_ERROR) after a complete response into
        # error 92 while it is still uploading. The reset (NO_ERROR) after the 403 is correct.
        st, body, reset = h2_post(srv.ports[CLIENTS[client][0]], client == "h2", path, up)
        assert st == 403 and body == b"early no\n", (st, body, reset, srv.log()[-2000:])
        assert reset in (None, 0), reset
    else:
        f = srv.tmp / "up.bin"
        f.write_bytes(up)
        r = curl(srv, client, path, "--data-binary", f"@{f}", "-H", "Expect:")
        assert r.status == 403 and r.body == b"early no\n", (r, srv.log()[-2000:])
    r = curl(srv, client, "/ok")
    assert r.rc == 0 and r.status == 200, r


def test_early_response_origin_connection_reused(server, nginx):
    """nginx `return` answers a POST before reading its body: the response goes to the client
    at once and the rest of the body still goes to the origin, so that its connection is
    reused (before, every such request cost a new origin connection)."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    marker = uuid.uuid4().hex
    body = os.urandom(256 << 10)
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=SOCK_TIMEOUT)
    try:
        for i in range(12):
            c.request("POST", f"/early-return?m={marker}&i={i}", body=body)
            r = c.getresponse()
            assert r.status == 200 and r.read() == b"early ok\n", (i, srv.log()[-2000:])
    finally:
        c.close()
    conns = {c for c, _ in nginx.access_lines(marker, expect=12)}
    assert len(conns) <= 2, conns


@pytest.mark.parametrize("client", ["h1", "h1tls"])
def test_early_response_large_upload_origin_connection_closed(server, nginx, client):
    """More unsent body than FY_PROXY_TRAIL_MAX (1 MiB) after an early response: the client
    gets the whole response at once, the origin connection is closed instead of fed, and the
    proxy goes on working. (h2 clients: test_early_response_before_upload_finished.)"""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    f = srv.tmp / "up.bin"
    f.write_bytes(os.urandom(3 << 20))
    r = curl(srv, client, "/early-return", "--data-binary", f"@{f}", "-H", "Expect:")
    assert r.status == 200 and r.body == b"early ok\n", (r, srv.log()[-2000:])
    r = curl(srv, client, "/tiny.txt")
    assert r.rc == 0 and r.status == 200 and r.body == TINY, r


def test_early_response_trailing_body_every_client(server, nginx, client):
    """A 200 KiB upload answered early, from every client protocol (h1: the body goes on to
    the origin; h2: the stream may be reset with NO_ERROR after the response): the response
    is complete and the next request on the proxy is served."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    up = os.urandom(200 << 10)
    f = srv.tmp / "up.bin"
    f.write_bytes(up)
    for _ in range(2):
        if client in H2:
            st, body, reset = h2_post(srv.ports[CLIENTS[client][0]], client == "h2",
                                      "/early-return", up)
            assert st == 200 and body == b"early ok\n", (st, body, reset, srv.log()[-2000:])
            assert reset in (None, 0), reset
            continue
        r = curl(srv, client, "/early-return", "--data-binary", f"@{f}", "-H", "Expect:")
        assert r.rc == 0 and r.status == 200 and r.body == b"early ok\n", (r, srv.log()[-2000:])
    r = curl(srv, client, "/tiny.txt")
    assert r.rc == 0 and r.status == 200 and r.body == TINY, r


def test_slow_client_gets_everything(server, nginx, client):
    """4 MiB read slowly (tiny receive buffer, pauses): backpressure must not lose or reorder
    anything."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/huge.bin", "--limit-rate", "4M")
    assert r.rc == 0 and r.status == 200, r
    assert hashlib.sha256(r.body).hexdigest() == nginx.huge_sha


def test_slow_raw_h1_reader(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(SOCK_TIMEOUT)
    s.connect(("127.0.0.1", srv.port))
    try:
        s.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        data = bytearray()
        i = 0
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
            i += 1
            if i % 64 == 0:
                time.sleep(0.01)
    finally:
        s.close()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert hashlib.sha256(body).hexdigest() == nginx.huge_sha


def test_client_abort_mid_response(server, nginx, client):
    """Clients that go away in the middle of a 4 MiB response (after 64 KiB of it): the proxy
    drops that origin connection and keeps serving."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    port, tls = srv.ports[CLIENTS[client][0]], client in ("h1tls", "h2")
    for _ in range(3):
        if client in H2:
            s, c = _h2_connect(port, tls)
            c.send_headers(1, [(":method", "GET"), (":path", "/huge.bin"),
                               (":scheme", "https" if tls else "http"), (":authority", "a")],
                           end_stream=True)
            s.sendall(c.data_to_send())
        else:
            s = socket.create_connection(("127.0.0.1", port), timeout=SOCK_TIMEOUT)
            if tls:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                s = ctx.wrap_socket(s)
            s.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        got = 0
        while got < 65536:
            b = s.recv(65536)
            assert b, "closed early"
            got += len(b)
        s.close()
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and hashlib.sha256(r.body).hexdigest() == nginx.big_sha, r


def test_h2_cookie_crumbs_joined(server, origins):
    """RFC 9113 §8.2.3: an h2 client may split Cookie into several fields; to an HTTP/1.1
    origin they must travel as one Cookie header joined by '; '."""
    o = origins(name="ck")
    srv = start(server, [o.url])
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.send_headers(1, [(":method", "GET"), (":path", "/cookies"), (":scheme", "http"),
                       (":authority", "a"), ("cookie", "a=1"), ("cookie", "b=2")],
                   end_stream=True)
    s.sendall(c.data_to_send())
    body, ended = b"", False
    try:
        while not ended:
            d = s.recv(65536)
            if not d:
                break
            for ev in c.receive_data(d):
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    ended = True
            s.sendall(c.data_to_send())
    finally:
        s.close()
    h = {}
    for k, v in json.loads(body)["headers"]:
        h.setdefault(k.lower(), []).append(v)
    assert h["cookie"] == ["a=1; b=2"], h


def test_multiple_x_forwarded_for_fields_kept(server, origins):
    """Two X-Forwarded-For fields from the client are one list; the origin must see all of
    it plus the client address."""
    o = origins(name="xff")
    srv = start(server, [o.url])
    r = curl(srv, "h1", "/headers", "-H", "X-Forwarded-For: 1.1.1.1", "-H",
             "X-Forwarded-For: 2.2.2.2")
    h = origin_headers(r)
    assert ", ".join(h["x-forwarded-for"]) == "1.1.1.1, 2.2.2.2, 127.0.0.1", h


def test_repeated_headers_and_odd_targets_pass_through(server, origins):
    o = origins(name="rep")
    srv = start(server, [o.url])
    r = curl(srv, "h2c", "/a%20b/c?x=%2F&y=1", "-H", "X-Multi: one", "-H", "X-Multi: two")
    assert r.status == 200, r
    assert json.loads(r.body)["path"] == "/a%20b/c?x=%2F&y=1"
    assert origin_headers(r)["x-multi"] in (["one", "two"], ["one, two"])


def test_pool_keepalive_timeout(server, nginx):
    # 3 s: the pooled connection must outlive the gap between two curls on a loaded machine;
    # then wait until Ferry has closed it (rather than sleeping past the timeout)
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"], upstream={"keepalive-timeout": "3s"})
    marker = uuid.uuid4().hex
    assert curl(srv, "h1", f"/tiny.txt?m={marker}&i=0").status == 200
    assert curl(srv, "h1", f"/tiny.txt?m={marker}&i=1").status == 200
    wait_for(lambda: conns_to(srv.proc.pid, nginx.port) == 0, 20,
             "the idle pooled connection to be closed")
    assert curl(srv, "h1", f"/tiny.txt?m={marker}&i=2").status == 200
    lines = nginx.access_lines(marker, expect=3)
    assert len(lines) == 3
    assert lines[0][0] == lines[1][0] and lines[2][0] != lines[1][0], lines


def test_least_time_skews_to_the_faster_without_starving(server, origins):
    """least-time: most requests go to the faster server, the slower one keeps getting probes
    (never starved), and every request succeeds."""
    slow = origins(name="slow", delay=0.05)
    fast = origins(name="fast")
    srv = start(server, [slow.url, fast.url], upstream={"balance": "least-time"})
    res = []
    for batch in range(3):
        res += h1_get_many(srv.port, [f"/slow-lt{batch}-{i}" for i in range(40)])  # delayed on `slow` only
        time.sleep(1.1)  # a second without a pick: the slow server is probed again
    assert [s for s, _, _ in res] == [200] * 120
    assert slow.count() + fast.count() == 120
    assert fast.count() >= 90, (slow.count(), fast.count())
    assert slow.count() >= 3, (slow.count(), fast.count())  # probed in every batch


def test_active_health_check_takes_a_dead_server_out(server, origins):
    """With health-check on, a server that refuses connections is marked down by the probes,
    so requests go to the healthy one even with retries: 0; the log says so."""
    a = origins(name="a")
    dead = dead_url()
    srv = start(server, [dead, a.url],
                upstream={"retries": 0, "health-check": {"path": "/health", "interval": "100ms",
                                                         "timeout": "5s", "fall": 1, "rise": 1}})
    deadline = time.time() + bound(10)
    while "is down (health check" not in srv.log() and time.time() < deadline:
        time.sleep(0.05)
    assert "is down (health check" in srv.log()
    res = h1_get_many(srv.port, [f"/hc{i}" for i in range(10)])
    assert [s for s, _, _ in res] == [200] * 10
    assert a.count() >= 10  # the probes and all ten requests


def test_active_health_check_brings_a_server_back(server, origins):
    """A server that answers the probe path with 500 is taken out, and comes back once the
    probes pass again."""
    a = origins(name="a")
    b = origins(name="b", status=500)
    srv = start(server, [a.url, b.url],
                upstream={"health-check": {"path": "/hc", "interval": "100ms", "fall": 1,
                                           "rise": 1, "timeout": "5s"}})
    # (timeout 5s: with fall 1, one slow probe of the healthy `a` on a loaded machine would
    # take it out; the waits name b, so that such a mark cannot stand in for b's)
    bname = b.url.split("//", 1)[1]
    deadline = time.time() + bound(10)
    while f"{bname} is down (health check" not in srv.log() and time.time() < deadline:
        time.sleep(0.05)
    assert f"{bname} is down (health check: unexpected status)" in srv.log(), srv.log()[-3000:]
    b.status = 200
    deadline = time.time() + bound(10)
    while f"{bname} is up (health check)" not in srv.log() and time.time() < deadline:
        time.sleep(0.05)
    assert f"{bname} is up (health check)" in srv.log(), srv.log()[-3000:]
    before = b.count()
    res = h1_get_many(srv.port, [f"/back{i}" for i in range(10)])
    assert [s for s, _, _ in res] == [200] * 10
    assert b.count() > before  # it serves requests again


def test_interim_103_relayed_to_h1_client(server, origins):
    """103 Early Hints from the origin reach an HTTP/1.1 client before the final 200."""
    o = origins(name="hints")
    srv = start(server, [o.url])
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(b"GET /hints HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    assert data.startswith(b"HTTP/1.1 103 Early Hints\r\n"), data[:200]
    hints, _, rest = data.partition(b"\r\n\r\n")
    assert b"link: </a.css>; rel=preload" in hints.lower()
    assert b"keep-alive" not in hints.lower()  # hop-by-hop: not relayed in the interim head
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
    assert rest.endswith(b"after hints\n")


def test_interim_103_relayed_to_h2_client(server, origins):
    """Over h2 the hints are an extra HEADERS frame with :status 103 before the response."""
    o = origins(name="hints")
    srv = start(server, [o.url])
    r = curl(srv, "h2c", "/hints", "-v")
    assert r.rc == 0 and r.status == 200 and r.body == b"after hints\n", r
    assert "< HTTP/2 103" in r.stderr, r.stderr[-2000:]
    assert "< link: </a.css>; rel=preload" in r.stderr.lower()


# ---- session affinity and mTLS ----

def test_sticky_cookie_pins_a_client(server, origins):
    """sticky cookie: the first response sets the cookie; requests carrying it go to the same
    server every time, and a client without it is balanced as usual."""
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url], upstream={"sticky": {"cookie": "fsrv"}})
    st, h, _ = http_request(srv.port, "/first")
    assert st == 200
    cookie = h["set-cookie"]
    assert cookie.startswith("fsrv=") and "HttpOnly" in cookie
    pinned = a if a.count() == 1 else b
    value = cookie.split(";")[0]
    for i in range(10):
        st, h, _ = http_request(srv.port, f"/again{i}", headers={"Cookie": f"x=1; {value}; y=2"})
        assert st == 200
        assert "set-cookie" not in h  # already pinned: no new cookie
    assert pinned.count() == 11
    # a bogus id is ignored: balanced, and re-pinned with a fresh cookie
    st, h, _ = http_request(srv.port, "/bogus", headers={"Cookie": "fsrv=0123456789abcdef"})
    assert st == 200 and h["set-cookie"].startswith("fsrv=")


def test_sticky_cookie_falls_back_when_the_server_is_gone(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url],
                upstream={"sticky": {"cookie": "fsrv"}, "max-fails": 1, "fail-timeout": "30s"})
    st, h, _ = http_request(srv.port, "/first")
    value = h["set-cookie"].split(";")[0]
    pinned, other = (a, b) if a.count() == 1 else (b, a)
    pinned.stop()
    # the pinned server refuses: retried elsewhere, then ejected and replaced for this client
    for i in range(3):
        st, h, _ = http_request(srv.port, f"/after{i}", headers={"Cookie": value})
        assert st == 200
    assert other.count() == 3


def test_sticky_header_same_value_same_server(server, origins):
    a, b, c = origins(name="a"), origins(name="b"), origins(name="c")
    srv = start(server, [a.url, b.url, c.url], upstream={"sticky": {"header": "x-user"}})
    for user in ("alice", "bob", "carol", "dave"):
        before = (a.count(), b.count(), c.count())
        for i in range(5):
            st, _, _ = http_request(srv.port, f"/u{i}", headers={"X-User": user})
            assert st == 200
        after = (a.count(), b.count(), c.count())
        grown = [x - y for x, y in zip(after, before)]
        assert sorted(grown) == [0, 0, 5], (user, grown)  # all five on one server


def test_sticky_needs_exactly_one_key(server):
    srv = server(args=None, start=False)
    cfg = srv.tmp / "bad.yaml"
    cfg.write_text(proxy_config(["http://127.0.0.1:1"],
                                upstream={"sticky": {"cookie": "a", "header": "b"}}).format(
        port=1, port2=2, data=srv.tmp))
    p = subprocess.run([FERRY_BIN, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 1 and "sticky: needs exactly one of cookie, header" in p.stderr


class MtlsOrigin:
    """An HTTPS origin that demands a client certificate signed by the test CA and answers
    with the client certificate's CN."""

    def __init__(self, certs):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs["cert"], certs["key"])
        ctx.load_verify_locations(certs["ca"])
        ctx.verify_mode = ssl.CERT_REQUIRED
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self.ctx = ctx
        self.results = []
        self.stopped = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            c.settimeout(5)
            try:
                s = self.ctx.wrap_socket(c, server_side=True)
                s.recv(65536)
                cn = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
                body = f"hello {cn}\n".encode()
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                          % len(body) + body)
                s.close()
                self.results.append("ok")
            except (ssl.SSLError, OSError) as e:
                self.results.append(f"refused: {e}")
                c.close()

    def stop(self):
        self.stopped = True
        self.thread.join(timeout=5)
        self.sock.close()


def test_mtls_client_certificate_to_origin(server, certs, tmp_path):
    d = tmp_path
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=ferry-client", cwd=d)
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", "client.csr", "-CA", str(certs["ca"]), "-CAkey",
             str(certs["ca"]).replace("ca.pem", "ca.key"), "-CAcreateserial", "-out",
             "client.pem", "-days", "2", "-extfile", "client.ext", cwd=d)
    o = MtlsOrigin(certs)
    try:
        srv = start(server, [o.url], upstream={"ca": str(certs["ca"]),
                                               "cert": str(d / "client.pem"),
                                               "key": str(d / "client.key")})
        st, _, body = http_request(srv.port, "/m")
        assert st == 200 and body == b"hello ferry-client\n"
        # without the client certificate the origin refuses the handshake: 502
        srv2 = start(server, [o.url], upstream={"ca": str(certs["ca"])})
        st, _, _ = http_request(srv2.port, "/m")
        assert st == 502
        assert any(r.startswith("refused") for r in o.results)
    finally:
        o.stop()


# ---- WebSocket through the proxy (HTTP/1.1 Upgrade to the origin) ----

@pytest.fixture
def ws_origin():
    o = WsEchoOrigin()
    yield o
    o.stop()


def test_websocket_h1_to_h1(server, ws_origin):
    """python3-websockets client -> Ferry (HTTP/1.1 Upgrade, 101) -> python3-websockets echo:
    text, a 100 KB message and binary frames come back exactly; the close handshake passes."""
    import asyncio
    import websockets
    srv = start(server, [ws_origin.url])

    async def run():
        async with websockets.connect(f"ws://127.0.0.1:{srv.port}/chat",
                                      open_timeout=5, close_timeout=5) as ws:
            for m in ["hello", "x" * 100000, b"\x00\x01binary\xff"]:
                await ws.send(m)
                assert await asyncio.wait_for(ws.recv(), 5) == m

    asyncio.run(run())


def test_websocket_h1_upgrade_refused_by_origin_is_relayed(server, origins):
    """An origin that answers the Upgrade with a plain response: relayed as is (no tunnel)."""
    o = origins(name="plain")
    srv = start(server, [o.url])
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=SOCK_TIMEOUT)
    conn.request("GET", "/nows", headers={
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("upgrade") is None
    r.read()
    # no tunnel was opened: the connection still serves plain requests
    conn.request("GET", "/after")
    r = conn.getresponse()
    assert r.status == 200
    r.read()
    conn.close()


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_websocket_h2_extended_connect_to_h1_origin(server, ws_origin, tls):
    """RFC 8441 extended CONNECT from an h2 client becomes an HTTP/1.1 Upgrade to the origin
    (Ferry supplies the Sec-WebSocket-Key h2 clients do not send); 200 to the client, then
    WebSocket frames both ways inside DATA."""
    import h2.events
    srv = start(server, [ws_origin.url])
    port = srv.ports[1] if tls else srv.port
    s, c = _h2_connect(port, tls)
    try:
        while not c.remote_settings.enable_connect_protocol:
            c.receive_data(s.recv(65535))
            s.sendall(c.data_to_send())
        c.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"),
                           (":scheme", "https" if tls else "http"), (":path", "/chat"),
                           (":authority", "127.0.0.1"), ("sec-websocket-version", "13")])
        out = _ws_frame(b"hello over h2") + _ws_frame(b"y" * 30000)
        for i in range(0, len(out), 16384):  # DATA frames of at most the default max size
            c.send_data(1, out[i:i + 16384])
        s.sendall(c.data_to_send())
        status, buf, msgs = None, b"", []
        while len(msgs) < 2:
            data = s.recv(65535)
            assert data, "connection closed"
            for e in c.receive_data(data):
                if isinstance(e, h2.events.ResponseReceived):
                    status = dict(e.headers)[b":status"]
                if isinstance(e, h2.events.DataReceived):
                    buf += e.data
                    c.acknowledge_received_data(e.flow_controlled_length, 1)
            s.sendall(c.data_to_send())
            got, buf = _ws_parse(buf)
            msgs += got
        assert status == b"200"
        assert msgs == [(1, b"hello over h2"), (1, b"y" * 30000)]
    finally:
        s.close()
