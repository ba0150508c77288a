"""Reverse proxy to HTTP/2 origins, part two: multiplexing and pools, failures (RST / GOAWAY
mid-response, silence, refused streams), WebSocket to an h2 origin (RFC 8441) and a short load
through an h2c origin. The nginx and python3-h2 origins are test_proxy_h2.py's.
"""
import asyncio
import hashlib
import socket
import subprocess
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest

from conftest import bound, free_port, wait_for
from proxy_kit import (CLIENTS, SOCK_TIMEOUT, _h2_connect, _ws_frame, _ws_parse, curl,
                       h2_get_many, h2_post, start)
from test_proxy_h2 import h2origins, HOLD_LIMIT, nginx2  # noqa: F401 (fixtures)


# =============================================================================================
# 3. multiplexing and pools
# =============================================================================================


@pytest.mark.parametrize("client", ["h1", "h2c"])
def test_many_requests_share_one_origin_connection(server, nginx2, client):
    """40 concurrent requests (h2: one client connection; h1: 8 connections) reach an h2c
    nginx on one connection (one worker; the origin allows 128 streams)."""
    srv = start(server, [nginx2.url("h2c")])
    marker = f"mux{client}{time.time_ns()}"
    paths = [f"/big.bin?{marker}={i}" for i in range(40)]
    if client == "h2c":
        res = h2_get_many(srv.port, False, paths)
        assert all(st == 200 and hashlib.sha256(b).hexdigest() == nginx2.big_sha
                   for st, b in res), [st for st, _ in res]
    else:
        errs = []

        def worker(k):
            import http.client
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=SOCK_TIMEOUT)
            for p in paths[k::8]:
                c.request("GET", p)
                r = c.getresponse()
                if r.status != 200 or hashlib.sha256(r.read()).hexdigest() != nginx2.big_sha:
                    errs.append(p)
            c.close()

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errs
    lines = nginx2.conns("h2c", marker, 40)
    assert len(lines) == 40
    assert len({c for c, _ in lines}) == 1, lines


def test_origin_stream_limit_opens_a_second_connection(server, nginx2):
    """nginx with http2_max_concurrent_streams 1: 6 concurrent requests need more than one
    connection; all succeed."""
    srv = start(server, [nginx2.url("h2c1")])
    marker = f"lim{time.time_ns()}"
    paths = [f"/big.bin?{marker}={i}" for i in range(6)]
    res = h2_get_many(srv.port, False, paths)
    assert all(st == 200 and hashlib.sha256(b).hexdigest() == nginx2.big_sha for st, b in res)
    lines = nginx2.conns("h2c1", marker, 6)
    assert len(lines) == 6
    assert len({c for c, _ in lines}) >= 2, lines


def test_python_origin_stream_limit_two(server, h2origins):
    """An origin announcing MAX_CONCURRENT_STREAMS 2 gets at most 2 streams per connection:
    10 requests that the origin holds until all 10 are there need 5 connections."""
    o = h2origins(max_streams=2)
    srv = start(server, [o.url])
    res = h2_get_many(srv.port, False, ["/hold?n=10"] * 10, timeout=HOLD_LIMIT + 10)
    assert res == [(200, b"held")] * 10, res
    assert o.nconns == 5


def test_our_stream_cap_per_origin_connection(server, h2origins):
    """The origin allows 1000 streams; Ferry puts at most 256 on one connection: 300 held
    requests (two client connections of 150) need exactly 2 origin connections."""
    o = h2origins(max_streams=1000)
    srv = start(server, [o.url])
    out = []
    ts = [threading.Thread(target=lambda: out.append(
        h2_get_many(srv.port, False, ["/hold?n=300"] * 150, timeout=HOLD_LIMIT + 10)))
        for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(2 * HOLD_LIMIT + 30)
    assert len(out) == 2 and all(r == [(200, b"held")] * 150 for r in out)
    assert o.nconns == 2


def test_keepalive_zero_keeps_no_idle_h2_connection(server, h2origins):
    o = h2origins()
    srv = start(server, [o.url], upstream={"keepalive": 0})
    for _ in range(3):
        assert curl(srv, "h1", "/info").status == 200
    assert o.nconns == 3


def test_idle_origin_connection_is_reused_then_timed_out(server, h2origins):
    """Sequential requests reuse the idle session; after keepalive-timeout it is closed
    (the origin sees its connection end) and the next request opens a new one.
    (3 s: the session must survive the gaps between the curls on a loaded machine.)"""
    o = h2origins()
    srv = start(server, [o.url], upstream={"keepalive-timeout": "3s"})
    for _ in range(5):
        assert curl(srv, "h1", "/info").status == 200
    assert o.nconns == 1
    wait_for(lambda: o.ended >= 1, 20, "the idle origin connection to be closed")
    assert curl(srv, "h1", "/info").status == 200
    assert o.nconns == 2


def test_origin_rotating_connections_with_goaway(server, nginx2):
    """nginx ends every connection after 20 requests (GOAWAY, then close): with 40 requests in
    flight, streams past each GOAWAY are refused and retried on a new connection; every one of
    2000 requests succeeds."""
    srv = start(server, [nginx2.url("h2c20")])
    p = subprocess.run(["h2load", "-n", "2000", "-c", "4", "-m", "10",
                        f"http://127.0.0.1:{srv.port}/tiny.txt?rot"],
                       capture_output=True, text=True, timeout=60)
    assert "2000 succeeded" in p.stdout and " 0 failed" in p.stdout, p.stdout + srv.log()[-3000:]
    lines = nginx2.conns("h2c20", "rot", 2000)
    assert len({c for c, _ in lines}) >= 100


# =============================================================================================
# 4. failures: RST / GOAWAY mid-response, silence, refused streams
# =============================================================================================


@pytest.mark.parametrize("path", ["/rst", "/goaway"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_origin_dies_mid_response_client_sees_truncation(server, h2origins, client, path):
    """The head (content-length 200000) and 10000 bytes went out, then the origin reset the
    stream / sent GOAWAY and closed: the client never gets a complete 200."""
    o = h2origins()
    srv = start(server, [o.url])
    r = curl(srv, client, path)
    assert r.rc != 0, r  # curl: 18 (partial file), 92 (stream error) or 56
    assert len(r.body) < 200000
    assert "mid" in srv.log() or "reset" in srv.log() or "GOAWAY" in srv.log() or \
        "closed" in srv.log()


@pytest.mark.parametrize("client", ["h1", "h2c"])
def test_reset_before_the_head_is_502(server, h2origins, client):
    """RST_STREAM(INTERNAL_ERROR) before any response byte: retried (GET), then 502."""
    o = h2origins()
    srv = start(server, [o.url])
    r = curl(srv, client, "/zreset")
    assert r.status == 502, r
    assert len([q for q in o.requests if dict(q)[":path"] == "/zreset"]) == 2  # retries: 1
    assert "origin reset the stream" in srv.log()


@pytest.mark.parametrize("client", ["h1", "h2c"])
def test_silent_h2_origin_is_504(server, h2origins, client):
    o = h2origins()
    srv = start(server, [o.url], upstream={"first-byte-timeout": "1s", "retries": 0})
    r = curl(srv, client, "/silent")
    assert r.status == 504, r
    assert "first-byte timeout" in srv.log()


def test_refused_stream_is_retried_on_another_server(server, h2origins):
    bad, good = h2origins(refuse=True), h2origins()
    srv = start(server, [bad.url, good.url], upstream={"max-fails": 100})
    for _ in range(4):
        r = curl(srv, "h1", "/info")
        assert r.status == 200, r
    assert bad.refused >= 1 and len(good.requests) == 4


def test_refused_stream_post_is_retried(server, h2origins):
    """REFUSED_STREAM means "not processed": even a POST whose body was not sent yet goes to
    the next server."""
    bad, good = h2origins(refuse=True), h2origins()
    srv = start(server, [bad.url, good.url])
    ok = 0
    for _ in range(2):
        r = curl(srv, "h1", "/info", "-X", "POST")
        ok += r.status == 200
    assert ok == 2 and bad.refused >= 1


def test_refused_everywhere_is_502(server, h2origins):
    bad = h2origins(refuse=True)
    srv = start(server, [bad.url])
    r = curl(srv, "h2c", "/info")
    assert r.status == 502, r
    assert "refused" in srv.log()


def test_goaway_before_processing_is_retried(server, h2origins):
    """GOAWAY(last_stream_id=0) for the first request on the first connection: the stream was
    not processed, Ferry retries on a new connection (the draining one is not reused)."""
    o = h2origins(goaway_first=True)
    srv = start(server, [o.url], upstream={"retries": 2})
    r = curl(srv, "h1", "/info")
    assert r.status == 200, srv.log()
    assert o.nconns >= 2


def test_client_abort_resets_only_its_origin_stream(server, h2origins):
    """An h2 client cancels a large download: Ferry resets that stream at the origin
    (RST_STREAM) and keeps the origin connection for the next exchanges."""
    o = h2origins()
    srv = start(server, [o.url])
    s, c = _h2_connect(srv.port, False)
    try:
        c.send_headers(1, [(":method", "GET"), (":path", f"/huge?n={32 << 20}"),
                           (":scheme", "http"), (":authority", "x")], end_stream=True)
        s.sendall(c.data_to_send())
        got = 0
        while got < 100000:
            data = s.recv(65536)
            assert data
            for e in c.receive_data(data):
                if isinstance(e, h2.events.DataReceived):
                    got += len(e.data)
                    c.acknowledge_received_data(e.flow_controlled_length, 1)
            s.sendall(c.data_to_send())
        c.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        s.sendall(c.data_to_send())
        deadline = time.time() + bound(5)
        while o.resets == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert o.resets == 1
    finally:
        s.close()
    for _ in range(3):
        assert curl(srv, "h1", "/info").status == 200
    assert o.nconns == 1


def test_request_trailers_from_h1_chunked_client(server, h2origins):
    o = h2origins()
    srv = start(server, [o.url])
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT)
    try:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\nX-Client-Trailer: c1\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    assert data.startswith(b"HTTP/1.1 200"), data
    assert b"x-req-trailers: x-client-trailer=c1" in data.lower(), data


def test_mtls_client_certificate_to_h2_origin(server, certs, h2origins, tmp_path):
    d = tmp_path
    for args in (["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=ferry-h2-client"],
                 ["x509", "-req", "-in", "client.csr", "-CA", str(certs["ca"]), "-CAkey",
                  str(certs["ca"]).replace("ca.pem", "ca.key"), "-CAcreateserial", "-out",
                  "client.pem", "-days", "2", "-extfile", "client.ext"]):
        (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        subprocess.run(["openssl", *args], cwd=d, check=True, timeout=30,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    o = h2origins(tls=True, mtls=True)
    srv = start(server, [o.url], upstream={"ca": str(certs["ca"]), "cert": str(d / "client.pem"),
                                           "key": str(d / "client.key")})
    r = curl(srv, "h2c", "/info")
    assert r.status == 200, r
    assert o.client_cns == ["ferry-h2-client"]
    srv2 = start(server, [o.url], upstream={"ca": str(certs["ca"])})
    assert curl(srv2, "h1", "/info").status == 502


def test_origin_allowing_no_streams_is_502(server, h2origins):
    """MAX_CONCURRENT_STREAMS 0: a 502 that says so, not a loop of new connections."""
    o = h2origins(max_streams=0)
    srv = start(server, [o.url])
    r = curl(srv, "h1", "/info")
    assert r.status == 502, r
    assert "allows no streams" in srv.log()
    assert o.nconns <= 2


def test_active_health_check_over_h2(server, h2origins):
    """health-check probes h2c servers with an HTTP/2 GET: the dead one is marked down (so
    retries: 0 still gets every request through), the live one sees the probes."""
    a = h2origins()
    dead = f"h2c://127.0.0.1:{free_port()}"
    srv = start(server, [dead, a.url],
                upstream={"retries": 0, "health-check": {"path": "/info?probe", "interval": "100ms",
                                                         "timeout": "5s", "fall": 1, "rise": 1}})
    deadline = time.time() + bound(10)
    while "is down (health check" not in srv.log() and time.time() < deadline:
        time.sleep(0.05)
    assert "is down (health check" in srv.log()
    for i in range(10):
        assert curl(srv, "h1", f"/info?n={i}").status == 200
    probes = [r for r in a.requests if dict(r).get(":path") == "/info?probe"]
    assert probes and dict(probes[0])["user-agent"] == "ferry-health-check"


def test_h2_origin_refused_connection_is_502(server):
    srv = start(server, [f"h2c://127.0.0.1:{free_port()}"])
    r = curl(srv, "h2c", "/x")
    assert r.status == 502, r


# =============================================================================================
# 5. WebSocket to an HTTP/2 origin (RFC 8441 extended CONNECT)
# =============================================================================================


def test_websocket_h1_to_h2_origin(server, h2origins):
    """python3-websockets client (HTTP/1.1 Upgrade) -> Ferry -> extended CONNECT on an h2c
    origin: Ferry answers 101 with its own Sec-WebSocket-Accept (the client checks it), the
    frames echo."""
    import websockets
    o = h2origins()
    srv = start(server, [o.url])

    async def run():
        async with websockets.connect(f"ws://127.0.0.1:{srv.port}/ws",
                                      open_timeout=5, close_timeout=5) as ws:
            for m in ["hello", "x" * 100000, b"\x00\x01binary\xff"]:
                await ws.send(m)
                assert await asyncio.wait_for(ws.recv(), 5) == m

    asyncio.run(run())
    d = dict(o.requests[-1])
    assert d[":method"] == "CONNECT" and d[":protocol"] == "websocket"
    assert "sec-websocket-key" not in d


@pytest.mark.parametrize("origin_tls", [False, True], ids=["h2c-origin", "h2-origin"])
@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_websocket_h2_to_h2_origin(server, h2origins, certs, tls, origin_tls):
    o = h2origins(tls=origin_tls)
    srv = start(server, [o.url], upstream={"ca": str(certs["ca"])})
    port = srv.ports[1] if tls else srv.port
    s, c = _h2_connect(port, tls)
    try:
        while not c.remote_settings.enable_connect_protocol:
            c.receive_data(s.recv(65535))
            s.sendall(c.data_to_send())
        c.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"),
                           (":scheme", "https" if tls else "http"), (":path", "/ws"),
                           (":authority", "127.0.0.1"), ("sec-websocket-version", "13")])
        out = _ws_frame(b"hello h2 to h2") + _ws_frame(b"z" * 30000)
        for i in range(0, len(out), 16384):
            c.send_data(1, out[i:i + 16384])
        s.sendall(c.data_to_send())
        status, buf, msgs = None, b"", []
        deadline = time.time() + SOCK_TIMEOUT
        while len(msgs) < 2 and time.time() < deadline:
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
        assert msgs == [(1, b"hello h2 to h2"), (1, b"z" * 30000)]
    finally:
        s.close()


def test_websocket_to_h2_origin_without_connect_protocol_is_502(server, h2origins):
    """No SETTINGS_ENABLE_CONNECT_PROTOCOL from the origin: no tunnel, 502 (no fallback)."""
    import http.client
    o = h2origins(connect_protocol=False)
    srv = start(server, [o.url])
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=SOCK_TIMEOUT)
    conn.request("GET", "/ws", headers={
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    r = conn.getresponse()
    assert r.status == 502
    conn.close()
    assert "ENABLE_CONNECT_PROTOCOL" in srv.log() or "extended CONNECT" in srv.log()


# =============================================================================================
# 6. a short load through an h2c origin: no stall, no error
# =============================================================================================


def test_h2load_through_h2c_origin(server, nginx2):
    srv = start(server, [nginx2.url("h2c")])
    p = subprocess.run(["h2load", "-n", "2000", "-c", "8", "-m", "10",
                        f"http://127.0.0.1:{srv.port}/tiny.txt"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2000 succeeded" in p.stdout and " 0 failed" in p.stdout, p.stdout
