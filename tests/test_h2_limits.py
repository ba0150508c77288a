"""HTTP/2 server (src/h2/), black box, part two: the limits (header bytes and count, HPACK bombs,
body size, concurrent streams), abuse (rapid reset, PING/SETTINGS/empty-DATA/CONTINUATION
floods), invalid requests, graceful shutdown and idle GOAWAY, protocol selection (ALPN, h2c
prior knowledge and Upgrade), and the access log. The clients, raw frames and config helpers
are test_h2.py's.
"""
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import pytest

from conftest import FERRY, raw
from test_h2 import (BIG, CANCEL, client_tls_ctx, config, CONTINUATION, curl, curl_url, DATA,
                     ENHANCE_YOUR_CALM, F_ACK, F_END_HEADERS, F_END_STREAM, fill_docroot, frame,
                     GOAWAY, h2client, H2Client, HEADERS, NO_ERROR, PING, PREFACE, proto,
                     PROTOCOL_ERROR, rawconn, REFUSED_STREAM, req_block, RST_STREAM, SETTINGS,
                     settings_frame, SOCK_TIMEOUT, start, Stream, WINDOW_UPDATE)  # noqa: F401 (fixtures)


# ============================== limits ==============================

LIMITS = {"header-bytes": "1k", "header-count": 10, "body-size": "4k"}


def test_h2_header_bytes_over_limit_431(server, proto, h2client):
    srv, port, tls = start(server, proto, limits=LIMITS)
    c = h2client(port, tls)
    r = c.get("/hello", headers=[("x-big", "a" * 1200)])
    assert r.status == 431
    # the connection survives
    r = c.get("/hello")
    assert r.status == 201


def test_h2_settings_max_header_list_size_advertised(server, proto, h2client):
    srv, port, tls = start(server, proto, limits=LIMITS)
    c = h2client(port, tls)
    c.pump(lambda: c.remote_settings_seen)
    assert c.remote_settings.get(h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE) == 1024


def test_h2_hpack_bomb(server, proto, rawconn):
    """One large header indexed once, then referenced many times (HPACK bomb): decoded size
    counts, so the request is refused (431) and memory is not multiplied."""
    srv, port, tls = start(server, proto, limits=LIMITS)
    rc = rawconn(port, tls)
    enc = hpack.Encoder()
    first = enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                        (":path", "/hello"), ("x-bomb", "b" * 500)])
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 1, first))
    f = rc.wait(lambda f: f[2] == 1 and f[0] in (HEADERS, RST_STREAM))
    # then 1 byte per repeat: index of the dynamic entry (62) -> 0xbe
    block = enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                        (":path", "/hello")]) + b"\xbe" * 2000
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 3, block))
    f = rc.wait(lambda f: f[2] == 3 and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    assert f is not None, f"connection closed: {rc.summary()}"
    # what ferry does: a 431 response on the stream
    assert f[0] == HEADERS, f"expected a 431 response, got {rc.summary()}"
    dec = hpack.Decoder()
    statuses = [dict(dec.decode(x[3], raw=True)).get(b":status") for x in rc.frames if x[0] == HEADERS]
    assert statuses[-1] == b"431", statuses


def test_h2_header_count_over_limit_431(server, proto, h2client):
    srv, port, tls = start(server, proto, limits=LIMITS)
    c = h2client(port, tls)
    r = c.get("/hello", headers=[(f"x-h{i}", "v") for i in range(12)])
    assert r.status == 431
    r = c.get("/hello", headers=[(f"x-h{i}", "v") for i in range(5)])
    assert r.status == 201


def test_h2_body_over_limit_content_length_413(server, proto, h2client):
    srv, port, tls = start(server, proto, limits=LIMITS)
    c = h2client(port, tls)
    sid = c.request("/echo", "POST", headers=[("content-length", "5000")], end=False)
    r = c.response(sid)
    assert r.status == 413
    # the connection survives
    assert c.get("/hello").status == 201


def test_h2_body_over_limit_streaming(server, proto, h2client):
    srv, port, tls = start(server, proto, limits=LIMITS)
    c = h2client(port, tls)
    sid = c.request("/echo", "POST", end=False)
    c.send_body(sid, b"y" * 3000, end=False)
    c.pump(lambda: len(c.streams[sid].data) >= 3000)  # echo already answering: 200 started
    c.send_body(sid, b"y" * 3000, end=True)
    r = c.response(sid)
    # the response had started: the stream can only be reset
    assert r.reset is not None, f"expected RST_STREAM, got {r}"
    assert r.reset == CANCEL
    assert c.get("/hello").status == 201


def test_h2_body_over_limit_streaming_before_response(server, proto, h2client):
    """Over the limit in the first DATA frame (no content-length): 413 or RST."""
    srv, port, tls = start(server, proto, limits=LIMITS)
    c = h2client(port, tls)
    sid = c.request("/echo", "POST", end=False)
    c.send_body(sid, b"z" * 6000, end=True)
    r = c.response(sid)
    assert (r.headers and r.status == 413) or r.reset is not None, r
    assert c.get("/hello").status == 201


def test_h2_max_concurrent_streams(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"max-concurrent-streams": 4})
    # advertised
    rc = rawconn(port, tls)
    f = rc.wait(lambda f: f[0] == SETTINGS and not f[1] & F_ACK)
    got = {struct.unpack(">H", f[3][i:i + 2])[0]: struct.unpack(">I", f[3][i + 2:i + 6])[0]
           for i in range(0, len(f[3]), 6)}
    assert got.get(3) == 4, got  # SETTINGS_MAX_CONCURRENT_STREAMS
    # wait until our SETTINGS ACK has been processed and the server's settings are in force
    rc.wait(lambda f: f[0] == SETTINGS and f[1] & F_ACK)
    rc.send(frame(PING, 0, 0, b"12345678"))
    rc.wait(lambda f: f[0] == PING and f[1] & F_ACK)
    # 4 uploads that stay open, then a 5th stream
    for sid in (1, 3, 5, 7):
        rc.send(frame(HEADERS, F_END_HEADERS, sid, req_block("/echo", "POST")))
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 9, req_block("/hello")))
    f = rc.wait(lambda f: f[2] == 9 and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    # What ferry (nghttp2) does once its SETTINGS are acknowledged: a connection error,
    # GOAWAY PROTOCOL_ERROR naming stream 7 as the last processed (RFC 9113 §5.1.2 allows
    # this, or a stream error PROTOCOL_ERROR/REFUSED_STREAM), then close.
    assert f is not None and f[0] == GOAWAY, rc.summary()
    assert rc.goaways()[-1] == (7, PROTOCOL_ERROR), rc.goaways()
    rc.until_close()
    assert not [f for f in rc.frames if f[0] == HEADERS and f[2] == 9]


def test_h2_max_concurrent_streams_before_settings_ack(server, proto, rawconn):
    """Streams opened before the client has seen our SETTINGS: the ones over the limit are
    refused with RST_STREAM REFUSED_STREAM (retryable); the rest are served."""
    srv, port, tls = start(server, proto, http2={"max-concurrent-streams": 4})
    rc = rawconn(port, tls)
    # sent with the preface, before reading anything: 4 slow uploads + 2 more streams
    rc.send(b"".join(frame(HEADERS, F_END_HEADERS, sid, req_block("/echo", "POST"))
                     for sid in (1, 3, 5, 7)) +
            frame(HEADERS, F_END_STREAM | F_END_HEADERS, 9, req_block("/hello")) +
            frame(HEADERS, F_END_STREAM | F_END_HEADERS, 11, req_block("/hello")))
    rc.wait(lambda f: f[2] == 11 and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    rc.wait(lambda f: f[2] == 9 and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    assert rc.resets().get(9) == REFUSED_STREAM and rc.resets().get(11) == REFUSED_STREAM, \
        rc.summary()
    assert not rc.goaways()
    # the open streams still work; after one is closed (reset by us), a new one is accepted
    rc.send(frame(DATA, 0, 3, b"still open"))
    f = rc.wait(lambda f: f[0] == DATA and f[2] == 3 and f[3] == b"still open")
    assert f is not None, rc.summary()
    rc.send(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 13, req_block("/hello")))
    f = rc.wait(lambda f: f[2] == 13 and f[0] in (HEADERS, RST_STREAM))
    assert f is not None and f[0] == HEADERS, rc.summary()


def test_h2_max_concurrent_streams_h2load(server, proto):
    """h2load -m 8 against max-concurrent-streams 8: all succeed. (With -m 32 h2load opens
    32 streams before it reads SETTINGS, and 24 per connection are refused: REFUSED_STREAM,
    which h2load counts as errors without retrying.)"""
    srv, port, tls = start(server, proto, http2={"max-concurrent-streams": 8})
    p = subprocess.run(["h2load", "-n", "400", "-c", "2", "-m", "8",
                        curl_url(port, tls, "/hello")], capture_output=True, timeout=60)
    out = p.stdout.decode()
    assert "400 succeeded, 0 failed, 0 errored" in out, out


# ============================== abuse ==============================

def test_h2_rapid_reset_goaway(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"reset-burst": 20, "reset-rate": 1})
    rc = rawconn(port, tls)
    rc.wait(lambda f: f[0] == SETTINGS and not f[1] & F_ACK)
    out = b""
    for i in range(100):
        sid = 1 + 2 * i
        out += frame(HEADERS, F_END_STREAM | F_END_HEADERS, sid, req_block("/big.bin"))
        out += frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))
    rc.send(out)
    rc.until_close()
    gas = rc.goaways()
    assert gas, f"no GOAWAY; frames {rc.summary()}"
    # the issue asks for ENHANCE_YOUR_CALM past the reset budget
    assert gas[-1][1] == ENHANCE_YOUR_CALM, f"GOAWAY error code {gas[-1][1]}"
    # far fewer than 100 responses were started
    assert len({f[2] for f in rc.frames if f[0] == HEADERS}) < 60


def test_h2_rapid_reset_under_budget_is_fine(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"reset-burst": 20, "reset-rate": 1})
    rc = rawconn(port, tls)
    out = b""
    for i in range(10):
        sid = 1 + 2 * i
        out += frame(HEADERS, F_END_STREAM | F_END_HEADERS, sid, req_block("/big.bin"))
        out += frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))
    out += frame(HEADERS, F_END_STREAM | F_END_HEADERS, 21, req_block("/hello"))
    rc.send(out)
    f = rc.wait(lambda f: f[2] == 21 and f[0] == DATA and f[1] & F_END_STREAM)
    assert f is not None, rc.summary()
    assert not rc.goaways()


def test_h2_ping_flood_goaway(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"max-glitches": 50})
    rc = rawconn(port, tls)
    rc.wait(lambda f: f[0] == SETTINGS and not f[1] & F_ACK)
    rc.send(b"".join(frame(PING, 0, 0, struct.pack(">Q", i)) for i in range(200)))
    rc.until_close()
    gas = rc.goaways()
    assert gas and gas[-1][1] == ENHANCE_YOUR_CALM, \
        f"GOAWAYs {gas}; frames {rc.summary()}"


def test_h2_ping_flood_slow_goaway(server, proto, rawconn):
    """PINGs sent one at a time (each ACK read before the next) still count: past
    max-glitches, GOAWAY ENHANCE_YOUR_CALM."""
    srv, port, tls = start(server, proto, http2={"max-glitches": 50})
    rc = rawconn(port, tls)
    for i in range(80):
        if not rc.send(frame(PING, 0, 0, struct.pack(">Q", i))):
            break
        f = rc.wait(lambda f: f[0] in (PING, GOAWAY) and (f[0] == GOAWAY or f[3] ==
                                                            struct.pack(">Q", i)))
        if f is None or f[0] == GOAWAY:
            break
    rc.until_close()
    gas = rc.goaways()
    assert gas and gas[-1][1] == ENHANCE_YOUR_CALM, f"GOAWAYs {gas}"
    acks = [f for f in rc.frames if f[0] == PING and f[1] & F_ACK]
    assert 40 <= len(acks) <= 51


def test_h2_empty_data_flood_goaway(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"max-glitches": 50})
    rc = rawconn(port, tls)
    rc.wait(lambda f: f[0] == SETTINGS and not f[1] & F_ACK)
    out = frame(HEADERS, F_END_HEADERS, 1, req_block("/echo", "POST"))
    out += frame(DATA, 0, 1, b"") * 200
    rc.send(out)
    rc.until_close()
    gas = rc.goaways()
    assert gas, f"no GOAWAY; {rc.summary()}"
    assert gas[-1][1] == ENHANCE_YOUR_CALM, gas


def test_h2_settings_flood(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"max-glitches": 50})
    rc = rawconn(port, tls)
    rc.wait(lambda f: f[0] == SETTINGS and not f[1] & F_ACK)
    rc.send(settings_frame(initial_window_size=65535) * 300)
    rc.until_close()
    gas = rc.goaways()
    assert gas, f"no GOAWAY before close; {rc.summary()}"
    assert gas[-1][1] == ENHANCE_YOUR_CALM, gas


def test_h2_continuation_flood(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"max-continuations": 8})
    rc = rawconn(port, tls)
    rc.wait(lambda f: f[0] == SETTINGS and not f[1] & F_ACK)
    block = req_block("/hello")
    out = frame(HEADERS, 0, 1, block)
    # CONTINUATIONs carrying a valid, small header each: only their number is abusive
    for i in range(100):
        out += frame(CONTINUATION, 0, 1, b"\x00\x01x\x01y")  # literal, not indexed: x: y
    rc.send(out)
    rc.until_close()
    # no response to the flooded request
    assert not [f for f in rc.frames if f[0] == HEADERS and f[2] == 1]
    gas = rc.goaways()
    if gas:
        assert gas[-1][1] != NO_ERROR, gas


def test_h2_continuation_within_limit_works(server, proto, rawconn):
    srv, port, tls = start(server, proto, http2={"max-continuations": 8})
    rc = rawconn(port, tls)
    block = req_block("/hello")
    out = frame(HEADERS, F_END_STREAM, 1, block)
    for i in range(4):
        out += frame(CONTINUATION, 0, 1, b"\x00\x01x\x01y")
    out += frame(CONTINUATION, F_END_HEADERS, 1, b"\x00\x01z\x01w")
    rc.send(out)
    f = rc.wait(lambda f: f[2] == 1 and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    assert f is not None and f[0] == HEADERS, rc.summary()
    assert dict(hpack.Decoder().decode(f[3], raw=True))[b":status"] == b"201"


# ============================== invalid requests ==============================

BAD_HEADERS = {
    "missing_path": [(":method", "GET"), (":scheme", "http"), (":authority", "a")],
    "uppercase_name": [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                       (":path", "/hello"), ("X-Upper", "1")],
    "connection_header": [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                          (":path", "/hello"), ("connection", "keep-alive")],
    "path_without_slash": [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                           (":path", "hello")],
    "duplicate_method": [(":method", "GET"), (":method", "POST"), (":scheme", "http"),
                         (":authority", "a"), (":path", "/hello")],
    "pseudo_after_regular": [(":method", "GET"), (":scheme", "http"), ("x-a", "1"),
                             (":authority", "a"), (":path", "/hello")],
    "unknown_pseudo": [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                       (":path", "/hello"), (":bogus", "1")],
    "te_not_trailers": [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                        (":path", "/hello"), ("te", "gzip")],
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_h2_invalid_request_headers_stream_error(server, proto, rawconn, case):
    srv, port, tls = start(server, proto)
    rc = rawconn(port, tls)
    enc = hpack.Encoder()
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 1, enc.encode(BAD_HEADERS[case])))
    f = rc.wait(lambda f: f[2] == 1 and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    assert f is not None, f"connection closed: {rc.summary()}"
    if case == "path_without_slash" and f[0] == HEADERS:
        # nghttp2 passes it; ferry answers 400 itself (still a clean stream-level error)
        assert dict(hpack.Decoder().decode(f[3], raw=True))[b":status"] == b"400"
    else:
        assert f[0] == RST_STREAM, f"expected RST_STREAM, got {rc.summary()}"
        assert int.from_bytes(f[3][:4], "big") == PROTOCOL_ERROR
    # the connection survives: another stream afterwards works
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 3,
                  enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                              (":path", "/hello")])))
    f = rc.wait(lambda f: f[2] == 3 and f[0] == DATA and f[1] & F_END_STREAM)
    assert f is not None and f[3] == b"hello h2\n", rc.summary()
    assert not rc.goaways()


@pytest.mark.parametrize("sent", [3, 20])
def test_h2_content_length_mismatch(server, proto, rawconn, sent):
    srv, port, tls = start(server, proto)
    rc = rawconn(port, tls)
    enc = hpack.Encoder()
    rc.send(frame(HEADERS, F_END_HEADERS, 1,
                  enc.encode([(":method", "POST"), (":scheme", "http"), (":authority", "a"),
                              (":path", "/echo"), ("content-length", "10")])))
    rc.send(frame(DATA, F_END_STREAM, 1, b"d" * sent))
    f = rc.wait(lambda f: f[2] == 1 and f[0] == RST_STREAM or f[0] == GOAWAY)
    assert f is not None and f[0] == RST_STREAM, rc.summary()
    assert int.from_bytes(f[3][:4], "big") == PROTOCOL_ERROR
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 3,
                  enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                              (":path", "/hello")])))
    f = rc.wait(lambda f: f[2] == 3 and f[0] == DATA and f[1] & F_END_STREAM)
    assert f is not None, rc.summary()


def test_h2_connect_refused(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls, validate=False)
    sid = c.conn.get_next_available_stream_id()
    c.streams[sid] = Stream(sid)
    c.conn.send_headers(sid, [(":method", "CONNECT"), (":authority", "example.com:443")])
    c.flush()
    r = c.response(sid)
    assert (r.headers and r.status == 405) or r.reset is not None, r
    assert c.get("/hello").status == 201


def test_h2_authority_and_host(server, h2client):
    """Host routing uses :authority; a Host header alone is accepted too."""
    text = config().replace("  - match:\n      path: /hello\n",
                            "  - match:\n      host: only.test\n      path: /hello\n", 1)
    srv = server(text, start=False)
    fill_docroot(srv.docroot)
    srv.start()
    c = H2Client(srv.port)
    try:
        assert c.get("/hello", authority="only.test").status == 201
        assert c.get("/hello", authority="other.test").status == 404
    finally:
        c.close()


# ============================== graceful ==============================

@pytest.mark.parametrize("source", ["fd", "cached"])
def test_h2_sigterm_graceful(server, proto, rawconn, source):
    """SIGTERM with a download in flight (stalled on our window): GOAWAY NO_ERROR naming the
    stream, the response still completes once we open the window, then ferry exits 0.
    (Raw frames: python-h2 refuses every frame after a GOAWAY.)"""
    srv, port, tls = start(server, proto, cached=source == "cached")
    rc = rawconn(port, tls)
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 1, req_block("/big.bin")))
    got = lambda: sum(len(f[3]) for f in rc.frames if f[0] == DATA and f[2] == 1)  # noqa
    # the default stream window (65535) is used up, then the server waits for us
    rc.wait(lambda f: got() >= 65535)
    srv.proc.send_signal(signal.SIGTERM)
    rc.wait(lambda f: f[0] == GOAWAY)
    last, code = rc.goaways()[0]
    assert code == NO_ERROR and last == 1
    # open the windows: the in-flight response completes
    inc = struct.pack(">I", 8 << 20)
    rc.send(frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, 1, inc))
    f = rc.wait(lambda f: f[0] in (DATA, RST_STREAM) and f[2] == 1 and
                (f[0] == RST_STREAM or f[1] & F_END_STREAM), timeout=15)
    assert f is not None and f[0] == DATA, f"stream not completed: {rc.summary()}"
    body = b"".join(f[3] for f in rc.frames if f[0] == DATA and f[2] == 1)
    assert body == BIG
    rc.until_close()
    assert srv.proc.wait(timeout=15) == 0


def test_h2_keepalive_idle_goaway(server, proto, h2client):
    srv, port, tls = start(server, proto, limits={"keepalive-timeout": "1s"})
    c = h2client(port, tls)
    assert c.get("/hello").status == 201
    c.read_until_close(timeout=10)
    assert c.goaway is not None, "closed without GOAWAY"
    assert c.goaway.error_code == NO_ERROR
    assert c.goaway.last_stream_id == 1


def test_h2_keepalive_idle_without_requests(server, proto, rawconn):
    srv, port, tls = start(server, proto, limits={"keepalive-timeout": "1s"})
    rc = rawconn(port, tls)
    rc.until_close()
    gas = rc.goaways()
    assert gas == [(0, NO_ERROR)], gas


# ============================== protocol selection ==============================

H1_ONLY = """\
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1]
  - address: 127.0.0.1:{port2}
    protocols: [h1]
    tls: self-signed
routes:
  - respond:
      body: "h1 only\\n"
data-dir: "{data}"
"""


def test_h2_tls_h1_only_refuses_alpn_h2(server):
    srv = server(H1_ONLY)
    raw_s = socket.create_connection(("127.0.0.1", srv.ports[1]), timeout=SOCK_TIMEOUT)
    try:
        with pytest.raises(ssl.SSLError) as ei:
            s = client_tls_ctx(("h2",)).wrap_socket(raw_s, server_hostname="localhost")
            # if the handshake completed anyway, h2 must not have been selected
            assert s.selected_alpn_protocol() != "h2"
            s.close()
            raise ssl.SSLError("handshake completed without ALPN h2")
        assert "alpn" in str(ei.value).lower() or "no application protocol" in \
            str(ei.value).lower() or "without ALPN" in str(ei.value), ei.value
    finally:
        raw_s.close()
    # offering both: http/1.1 is chosen and works
    info = subprocess.run(["curl", "-sk", "--http2", "-w", "%{http_version}", "-o", os.devnull,
                           f"https://127.0.0.1:{srv.ports[1]}/"], capture_output=True, timeout=15)
    assert info.stdout == b"1.1"


def test_h2_plain_h1_only_answers_preface_505(server):
    srv = server(H1_ONLY)
    out = raw(srv.port, PREFACE + frame(SETTINGS, 0, 0))
    assert out.startswith(b"HTTP/1.1 505 "), out[:200]
    # and h2c prior knowledge fails with curl
    p = curl("--http2-prior-knowledge", f"http://127.0.0.1:{srv.port}/")
    assert p.returncode != 0


def test_h2_curl_tls_negotiates_h2(server):
    srv = start(server)
    p = curl("-sk", "--http2", "-w", "%{http_version}", "-o", os.devnull,
             f"https://127.0.0.1:{srv.ports[1]}/hello")
    assert p.stdout == b"2", p


def test_h2_curl_plain_default_is_h1(server):
    srv = start(server)
    p = curl("-s", "-w", "%{http_version}", "-o", os.devnull, f"http://127.0.0.1:{srv.port}/hello")
    assert p.stdout == b"1.1", p


def test_h2_h2c_upgrade(server):
    """`Upgrade: h2c` from HTTP/1.1 (the issue: h2c by prior knowledge *and* by upgrade)."""
    srv = start(server)
    p = curl("-s", "--http2", "-w", "%{http_version}", "-o", os.devnull,
             f"http://127.0.0.1:{srv.port}/hello")
    assert p.stdout == b"2", f"curl --http2 over plain got HTTP/{p.stdout.decode()}"


def test_h2_tls_default_protocols_offer_h2(server):
    srv = start(server)
    raw_s = socket.create_connection(("127.0.0.1", srv.ports[1]), timeout=SOCK_TIMEOUT)
    s = client_tls_ctx(("h2", "http/1.1")).wrap_socket(raw_s, server_hostname="localhost")
    assert s.selected_alpn_protocol() == "h2"
    s.close()


def test_h2_h2_without_tls_check_fails(server, tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("listeners:\n  - address: 127.0.0.1:8080\n    protocols: [h2]\n")
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, timeout=15)
    assert p.returncode != 0
    err = p.stderr.decode() + p.stdout.decode()
    assert "protocols" in err and "tls" in err, err


def test_h2_h2c_only_listener(server, h2client):
    """`protocols: [h2c]`: prior knowledge works; an HTTP/1.1 request does not get served."""
    text = config().replace("  - address: 127.0.0.1:{port}\n",
                            "  - address: 127.0.0.1:{port}\n    protocols: [h2c]\n", 1)
    srv = server(text, start=False)
    fill_docroot(srv.docroot)
    srv.start()
    c = h2client(srv.port)
    assert c.get("/hello").status == 201
    out = raw(srv.port, b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n")
    assert b"hello h2" not in out


# ============================== access log ==============================

def test_h2_access_log_says_http2(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    assert c.get("/hello?q=1").status == 201
    assert c.get("/nope").status == 404
    c.close()
    logf = srv.tmp / "access.log"
    deadline = time.monotonic() + 10
    text = ""
    while time.monotonic() < deadline:
        text = logf.read_text() if logf.exists() else ""
        if text.count("\n") >= 2:
            break
        time.sleep(0.1)
    # JSON is the access log's default format
    recs = [(r["method"], r["target"], r["proto"], r["status"], r["bytes"])
            for r in map(json.loads, text.splitlines())]
    assert ("GET", "/hello?q=1", "HTTP/2.0", 201, 9) in recs, text
    assert any(r[:4] == ("GET", "/nope", "HTTP/2.0", 404) for r in recs), text
