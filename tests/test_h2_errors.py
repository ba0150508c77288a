"""HTTP/2 protocol errors a client commits on a stream or connection, sent both before Ferry's
response goes out (in the same write as the request) and after the whole response has been
received: each must get the RST_STREAM or GOAWAY code RFC 9113 names, whatever the timing.

Ferry serves a small static file (GET: 200) and answers POST on it at once with 405, while the
request body is still open: the answers come fast, so errors that follow them must still be
seen (the stream is kept and checked by nghttp2 until the client ends it). Frames are built by
hand (hpack for the header blocks); every read has a bounded socket timeout.

Where the RFC names a stream error and Ferry answers with a connection error of the same code,
the test says so: RFC 9113 §5.4 lets an endpoint treat any stream error as a connection error,
and nghttp2 1.52 does for a zero WINDOW_UPDATE increment and for HEADERS or DATA on a stream
the client has closed (half-closed (remote), or closed after its END_STREAM or RST_STREAM:
§5.1 names a connection error STREAM_CLOSED there).
"""
import socket
import ssl
import struct
import time

import hpack
import pytest

SOCK_TIMEOUT = 5.0

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, \
    FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = range(9)
F_END_STREAM, F_ACK, F_END_HEADERS, F_PADDED = 0x1, 0x1, 0x4, 0x8
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SMALL = b"small file\n"

CONFIG = """\
listeners:
  - address: 127.0.0.1:{port}
  - address: 127.0.0.1:{port2}
    tls: self-signed
  - address: 127.0.0.1:{port3}
    protocols: [h2c]
routes:
  - match:
      path: /
    static:
      root: "{docroot}"
data-dir: "{data}"
log:
  level: info
limits:
  keepalive-timeout: 120s
  body-timeout: 120s
"""


@pytest.fixture(params=["h2c", "h2"])
def proto(request):
    return request.param


@pytest.fixture
def ferry(server):
    srv = server(CONFIG, start=False)
    (srv.docroot / "small.txt").write_bytes(SMALL)
    srv.start()
    return srv


def connect(port, tls):
    s = socket.create_connection(("127.0.0.1", port), timeout=SOCK_TIMEOUT)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(s, server_hostname="localhost")
        assert s.selected_alpn_protocol() == "h2"
    return s


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid & 0x7FFFFFFF) + payload


def parse_frames(data):
    """([(type, flags, sid, payload)], bytes used) from a byte stream."""
    out, i = [], 0
    while i + 9 <= len(data):
        ln = int.from_bytes(data[i:i + 3], "big")
        if i + 9 + ln > len(data):
            break
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5:i + 9], "big") & 0x7FFFFFFF,
                    data[i + 9:i + 9 + ln]))
        i += 9 + ln
    return out, i


class Conn:
    """A raw HTTP/2 client connection; frames are parsed as they come and the server's
    SETTINGS are acknowledged."""

    def __init__(self, port, tls, preface=PREFACE + frame(SETTINGS, 0, 0), http1_head=False):
        self.tls = tls
        self.http1_head = http1_head  # an HTTP/1.1 head (101) comes before the frames
        self.sock = connect(port, tls)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.heads = {}  # frame index -> decoded response header fields
        self.buf = b""
        self.frames = []
        self.closed = False
        if preface:
            self.sock.sendall(preface)

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    def _recv(self):
        try:
            b = self.sock.recv(1 << 16)
        except socket.timeout:
            raise AssertionError(f"no answer within {SOCK_TIMEOUT}s; frames: {self.summary()}")
        except (ConnectionResetError, ssl.SSLError):
            b = b""
        if not b:
            self.closed = True
            return
        self.buf += b
        if self.http1_head:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            assert head.startswith(b"HTTP/1.1 101 "), head
            self.buf, self.http1_head = rest, False
        fs, used = parse_frames(self.buf)
        self.buf = self.buf[used:]
        for f in fs:
            if f[0] == SETTINGS and not f[1] & F_ACK:
                self.send(frame(SETTINGS, F_ACK, 0))
            if f[0] == HEADERS:  # decoded in order: the server's HPACK table evolves
                assert f[1] & F_END_HEADERS, "CONTINUATION not expected from the server"
                block = f[3]
                if f[1] & F_PADDED:
                    block = block[1:len(block) - block[0]]
                if f[1] & 0x20:  # PRIORITY
                    block = block[5:]
                self.heads[len(self.frames)] = dict(self.dec.decode(block, raw=True))
            self.frames.append(f)

    def wait(self, pred, start=0):
        """Index of the first frame at or after `start` for which pred holds, reading as needed
        (bounded: every recv has a timeout and at most 1000 reads); None on EOF."""
        for _ in range(1000):
            for i in range(start, len(self.frames)):
                if pred(self.frames[i]):
                    return i
            start = max(start, len(self.frames))
            if self.closed:
                return None
            self._recv()
        raise AssertionError(f"too many reads; frames: {self.summary()}")

    def until_eof(self):
        for _ in range(1000):
            if self.closed:
                return
            self._recv()
        raise AssertionError("connection not closed")

    def headers(self, sid, fields, end_stream):
        flags = F_END_HEADERS | (F_END_STREAM if end_stream else 0)
        return frame(HEADERS, flags, sid, self.enc.encode(fields))

    def request(self, sid, method, extra=(), end_stream=True):
        return self.headers(sid, [(":method", method),
                                  (":scheme", "https" if self.tls else "http"),
                                  (":authority", "127.0.0.1"), (":path", "/small.txt")] +
                            list(extra), end_stream)

    def summary(self):
        return [(t, fl, sid, len(p) if t not in (RST_STREAM, GOAWAY) else p[:8].hex())
                for t, fl, sid, p in self.frames][-40:]

    def close(self):
        self.sock.close()


@pytest.fixture
def conns():
    made = []

    def make(*a, **kw):
        c = Conn(*a, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def status_of(c, idx):
    return c.heads[idx].get(b":status")


def ends(sid):
    return lambda f: f[2] == sid and f[0] in (HEADERS, DATA) and f[1] & F_END_STREAM


def rst_or_goaway(sid):
    return lambda f: (f[0] == RST_STREAM and f[2] == sid) or f[0] == GOAWAY


# ---- the cases ----
#
# Each case: (request method, request extra fields, stream id, bad frames(conn, sid)) and the
# expected answer per request kind and timing. "get": GET with END_STREAM (the stream is
# half-closed (remote) until the 200 has gone, closed after). "post": POST without END_STREAM
# (405 at once; the stream is open, half-closed (local) after the response).

def bad_second_headers(c, sid):
    # RFC 9113 §8.1: a HEADERS without END_STREAM after the request's HEADERS is malformed
    return c.headers(sid, [("x-trailer", "1")], end_stream=False)


def bad_cl_mismatch(c, sid):
    return frame(DATA, F_END_STREAM, sid, b"abc")  # content-length: 10


def bad_trailer_pseudo(c, sid):
    return c.headers(sid, [(":path", "/other")], end_stream=True)


def bad_wu_zero(c, sid):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 0))


def bad_wu_overflow(c, sid):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 0x7FFFFFFF))


def bad_data_after_rst(c, sid):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)) + frame(DATA, 0, sid, b"x")


def bad_headers_after_rst(c, sid):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)) + \
        c.headers(sid, [("x-trailer", "1")], end_stream=True)


def bad_pad(c, sid):
    # pad length 5 with 2 bytes after it: §6.1, a connection error PROTOCOL_ERROR
    return frame(DATA, F_PADDED, sid, b"\x05ab")


def bad_data_after_end_stream(c, sid):
    return frame(DATA, 0, sid, b"x")


def bad_lower_id(c, sid):
    # §5.1.1: a new stream's id must exceed every id the client used (here 5): stream 3
    return c.request(3, "GET")


RST, GOAWAY_ = "rst", "goaway"
CASES = {
    # name: (bad frames, post extra fields, {(kind, timing): (answer, code)})
    "second_headers": (bad_second_headers, (), {
        ("get", "before"): (GOAWAY_, STREAM_CLOSED),  # §5.1 half-closed (remote); §5.4
        ("get", "after"): (GOAWAY_, STREAM_CLOSED),   # §5.1 closed after END_STREAM
        ("post", "before"): (RST, PROTOCOL_ERROR),    # §8.1 malformed
        ("post", "after"): (RST, PROTOCOL_ERROR)}),
    "content_length_mismatch": (bad_cl_mismatch, (("content-length", "10"),), {
        ("post", "before"): (RST, PROTOCOL_ERROR),    # §8.1.1
        ("post", "after"): (RST, PROTOCOL_ERROR)}),
    "pseudo_header_in_trailers": (bad_trailer_pseudo, (), {
        ("post", "before"): (RST, PROTOCOL_ERROR),    # §8.1.1, §8.3
        ("post", "after"): (RST, PROTOCOL_ERROR)}),
    # §6.9: a stream error PROTOCOL_ERROR; nghttp2 1.52 makes it a connection error (§5.4).
    # After a GET's response the stream is closed, where WINDOW_UPDATE may legitimately still
    # arrive (§5.1) and is only minimally processed: not tested there.
    "window_update_zero": (bad_wu_zero, (), {
        ("get", "before"): (GOAWAY_, PROTOCOL_ERROR),
        ("post", "before"): (GOAWAY_, PROTOCOL_ERROR),
        ("post", "after"): (GOAWAY_, PROTOCOL_ERROR)}),
    "window_overflow": (bad_wu_overflow, (), {
        ("get", "before"): (RST, FLOW_CONTROL_ERROR),  # §6.9.1
        ("post", "before"): (RST, FLOW_CONTROL_ERROR),
        ("post", "after"): (RST, FLOW_CONTROL_ERROR)}),
    "data_after_rst": (bad_data_after_rst, (), {
        ("post", "before"): (GOAWAY_, STREAM_CLOSED),  # §5.1 closed, §6.1
        ("post", "after"): (GOAWAY_, STREAM_CLOSED)}),
    "headers_after_rst": (bad_headers_after_rst, (), {
        ("post", "before"): (GOAWAY_, STREAM_CLOSED),  # §5.1 closed
        ("post", "after"): (GOAWAY_, STREAM_CLOSED)}),
    "invalid_pad_length": (bad_pad, (), {
        ("post", "before"): (GOAWAY_, PROTOCOL_ERROR),  # §6.1
        ("post", "after"): (GOAWAY_, PROTOCOL_ERROR)}),
    # §6.1 / §5.1: stream error STREAM_CLOSED on half-closed (remote), connection error on
    # closed; nghttp2 answers both with the connection error (§5.4)
    "data_after_end_stream": (bad_data_after_end_stream, (), {
        ("get", "before"): (GOAWAY_, STREAM_CLOSED),
        ("get", "after"): (GOAWAY_, STREAM_CLOSED)}),
    "lower_stream_id": (bad_lower_id, (), {
        ("get", "before"): (GOAWAY_, PROTOCOL_ERROR),  # §5.1.1
        ("get", "after"): (GOAWAY_, PROTOCOL_ERROR),
        ("post", "before"): (GOAWAY_, PROTOCOL_ERROR),
        ("post", "after"): (GOAWAY_, PROTOCOL_ERROR)}),
}
PARAMS = [pytest.param(name, kind, timing, id=f"{name}-{kind}-{timing}")
          for name, (_, _, exp) in CASES.items() for (kind, timing) in exp]


@pytest.mark.parametrize("name,kind,timing", PARAMS)
def test_h2_error_after_fast_response(ferry, proto, conns, name, kind, timing):
    bad, post_extra, expected = CASES[name]
    answer, code = expected[(kind, timing)]
    tls = proto == "h2"
    c = conns(ferry.ports[1] if tls else ferry.ports[0], tls)
    sid = 5 if name == "lower_stream_id" else 1
    if kind == "get":
        req = c.request(sid, "GET")
    else:
        req = c.request(sid, "POST", post_extra, end_stream=False)
    if timing == "before":
        c.send(req + bad(c, sid))  # one write: nghttp2 reads both before anything is sent
        start = 0
    else:
        c.send(req)
        end = c.wait(ends(sid))
        assert end is not None, f"no complete response: {c.summary()}"
        head = c.wait(lambda f: f[0] == HEADERS and f[2] == sid)
        assert status_of(c, head) == (b"200" if kind == "get" else b"405"), c.summary()
        if kind == "get":
            data = b"".join(f[3] for f in c.frames if f[0] == DATA and f[2] == sid)
            assert data == SMALL
        c.send(bad(c, sid))
        start = end + 1
    i = c.wait(rst_or_goaway(sid), start)
    assert i is not None, f"closed without RST_STREAM or GOAWAY: {c.summary()}"
    t, _, _, p = c.frames[i]
    if answer == RST:
        assert t == RST_STREAM, f"expected RST_STREAM {code} on {sid}, got {c.summary()}"
        assert int.from_bytes(p[:4], "big") == code, c.summary()
        # a stream error: the connection goes on serving
        c.send(c.request(sid + 2, "GET"))
        j = c.wait(lambda f: (f[0] == HEADERS and f[2] == sid + 2) or f[0] == GOAWAY, i + 1)
        assert j is not None and c.frames[j][0] == HEADERS, c.summary()
        assert status_of(c, j) == b"200"
    else:
        assert t == GOAWAY, f"expected GOAWAY {code}, got {c.summary()}"
        assert int.from_bytes(p[4:8], "big") == code, c.summary()
        c.until_eof()


# ---- connection preface (RFC 9113 §3.4: an invalid preface is a connection error
# PROTOCOL_ERROR): GOAWAY, then the connection is closed ----

BAD_MAGIC = {
    "bad_magic": b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
    "http1_request": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "garbage": b"\x16\x03\x01\x00\x05hello, this is not http/2 at all....",
}


def expect_goaway_protocol_error(c):
    i = c.wait(lambda f: f[0] == GOAWAY)
    assert i is not None, f"closed without GOAWAY: {c.summary()}"
    p = c.frames[i][3]
    assert int.from_bytes(p[4:8], "big") == PROTOCOL_ERROR, c.summary()
    assert int.from_bytes(p[0:4], "big") == 0  # no stream was processed
    c.until_eof()


@pytest.mark.parametrize("magic", sorted(BAD_MAGIC))
@pytest.mark.parametrize("listener", ["h2", "h2c-only"])
def test_h2_invalid_preface_magic(ferry, conns, listener, magic):
    """The connection is HTTP/2 from its first byte (ALPN h2, or a listener that serves only
    h2c): anything but the client magic is an invalid preface."""
    tls = listener == "h2"
    c = conns(ferry.ports[1] if tls else ferry.ports[2], tls, preface=BAD_MAGIC[magic])
    expect_goaway_protocol_error(c)


@pytest.mark.parametrize("first", ["ping", "headers", "window_update"])
def test_h2_invalid_preface_not_settings(ferry, proto, conns, first):
    """The magic right, but the first frame is not SETTINGS (also h2c prior knowledge on a
    listener that serves HTTP/1.1 too)."""
    tls = proto == "h2"
    c = conns(ferry.ports[1] if tls else ferry.ports[0], tls, preface=None)
    f = {"ping": frame(PING, 0, 0, b"\0" * 8),
         "headers": c.request(1, "GET"),
         "window_update": frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1000))}[first]
    c.send(PREFACE + f)
    expect_goaway_protocol_error(c)


@pytest.mark.parametrize("listener", ["h2", "h2c-only"])
def test_h2_preface_split_then_bad(ferry, conns, listener):
    """A preface that starts right and goes wrong in a later read."""
    tls = listener == "h2"
    c = conns(ferry.ports[1] if tls else ferry.ports[2], tls, preface=PREFACE[:10])
    if tls:
        # the h2 codec runs from the handshake on: its SETTINGS come, no GOAWAY yet
        i = c.wait(lambda f: f[0] in (SETTINGS, GOAWAY))
        assert i is not None and c.frames[i][0] == SETTINGS, c.summary()
    c.send(b"XXXXXXXXXXXXXX")
    expect_goaway_protocol_error(c)


# ---- what nghttp2 forgets, and the bound on draining ----

EVICT_CONFIG = CONFIG + "http2:\n  max-concurrent-streams: 1\n"


@pytest.mark.parametrize("bad", ["data", "headers"])
def test_h2_frame_on_closed_stream_nghttp2_forgot(server, proto, conns, bad):
    """nghttp2 keeps closed streams (and checks frames on them) only up to
    max-concurrent-streams minus the open ones: with 1 allowed and stream 3 open, stream 1 is
    forgotten at once. A frame on it after the client's END_STREAM is still a connection error
    STREAM_CLOSED (§5.1 closed)."""
    srv = server(EVICT_CONFIG, start=False)
    (srv.docroot / "small.txt").write_bytes(SMALL)
    srv.start()
    tls = proto == "h2"
    c = conns(srv.ports[1] if tls else srv.ports[0], tls)
    c.send(c.request(1, "GET"))
    assert c.wait(ends(1)) is not None, c.summary()
    # stream 3: a POST answered 405 at once, kept open (draining) since its body is not done
    c.send(c.request(3, "POST", end_stream=False))
    end3 = c.wait(ends(3))
    assert end3 is not None and status_of(c, c.wait(lambda f: f[0] == HEADERS and f[2] == 3)) \
        == b"405", c.summary()
    f = frame(DATA, 0, 1, b"x") if bad == "data" else \
        c.headers(1, [("x-trailer", "1")], end_stream=True)
    c.send(f)
    i = c.wait(rst_or_goaway(1), end3 + 1)
    assert i is not None and c.frames[i][0] == GOAWAY, c.summary()
    assert int.from_bytes(c.frames[i][3][4:8], "big") == STREAM_CLOSED, c.summary()
    c.until_eof()


def test_h2_lower_stream_id_inside_gap(ferry, proto, conns):
    """Streams 1 and 7 used: 3 and 5 were skipped (closed, §5.1.1); HEADERS on 5 is a
    connection error PROTOCOL_ERROR."""
    tls = proto == "h2"
    c = conns(ferry.ports[1] if tls else ferry.ports[0], tls)
    c.send(c.request(1, "GET"))
    assert c.wait(ends(1)) is not None
    c.send(c.request(7, "GET"))
    end = c.wait(ends(7))
    assert end is not None
    c.send(c.request(5, "GET"))
    i = c.wait(lambda f: f[0] in (GOAWAY, HEADERS) and f[2] in (0, 5), end + 1)
    assert i is not None and c.frames[i][0] == GOAWAY, c.summary()
    p = c.frames[i][3]
    assert int.from_bytes(p[4:8], "big") == PROTOCOL_ERROR
    assert int.from_bytes(p[0:4], "big") == 7  # the last stream served
    c.until_eof()


@pytest.mark.parametrize("window", [None, 16384])
def test_h2_early_response_drain_is_bounded(server, proto, conns, window):
    """After a 405 to a POST whose body is still coming, the body is read (and checked) but
    its stream window is not reopened: once the client has used it up (http2
    initial-window-size, default 64k), RST_STREAM NO_ERROR asks it to stop (§8.1), and the
    connection goes on."""
    text = CONFIG + (f"http2:\n  initial-window-size: {window}\n" if window else "")
    srv = server(text, start=False)
    (srv.docroot / "small.txt").write_bytes(SMALL)
    srv.start()
    tls = proto == "h2"
    c = conns(srv.ports[1] if tls else srv.ports[0], tls)
    c.send(c.request(1, "POST", end_stream=False))
    end = c.wait(ends(1))
    assert end is not None and status_of(c, c.wait(lambda f: f[0] == HEADERS)) == b"405"
    left = window or 65536
    while left > 1:  # all of the stream window but one byte
        n = min(left - 1, 16384)
        c.send(frame(DATA, 0, 1, b"z" * n))
        left -= n
    # two PING round trips: whatever those DATA made the server send has come before the
    # second PING's ACK; no RST_STREAM yet
    for k in (1, 2):
        c.send(frame(PING, 0, 0, bytes([k]) * 8))
        assert c.wait(lambda f: f[0] == PING and f[1] & F_ACK and f[3] == bytes([k]) * 8,
                      end + 1) is not None, c.summary()
    assert not [f for f in c.frames[end + 1:] if rst_or_goaway(1)(f)], c.summary()
    c.send(frame(DATA, 0, 1, b"z"))  # the last byte of the window
    i = c.wait(rst_or_goaway(1), end + 1)
    assert i is not None and c.frames[i][0] == RST_STREAM, c.summary()
    assert int.from_bytes(c.frames[i][3][:4], "big") == NO_ERROR
    # no WINDOW_UPDATE reopened stream 1
    assert not [f for f in c.frames if f[0] == WINDOW_UPDATE and f[2] == 1], c.summary()
    c.send(c.request(3, "GET"))
    j = c.wait(lambda f: (f[0] == HEADERS and f[2] == 3) or f[0] == GOAWAY, i + 1)
    assert j is not None and c.frames[j][0] == HEADERS and status_of(c, j) == b"200"


@pytest.mark.parametrize("bad", ["headers_on_1", "lower_id"])
def test_h2_errors_after_h2c_upgrade(ferry, conns, bad):
    """After `Upgrade: h2c` the request is stream 1 (its client side closed): HEADERS on it
    again is GOAWAY STREAM_CLOSED (§5.1), and ids go on from 1 (5 then 3: PROTOCOL_ERROR)."""
    up = (b"GET /small.txt HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
          b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
    c = conns(ferry.ports[0], False, preface=up + PREFACE + frame(SETTINGS, 0, 0),
              http1_head=True)
    end = c.wait(ends(1))
    assert end is not None, c.summary()
    if bad == "headers_on_1":
        c.send(c.request(3, "GET"))  # stream 1 was used, not skipped
        end = c.wait(ends(3))
        assert end is not None, c.summary()
        c.send(c.request(1, "GET"))
        code = STREAM_CLOSED
    else:
        c.send(c.request(5, "GET"))
        end = c.wait(ends(5))
        assert end is not None, c.summary()
        c.send(c.request(3, "GET"))
        code = PROTOCOL_ERROR
    i = c.wait(lambda f: f[0] == GOAWAY or (f[0] == HEADERS and f[2] in (1, 3)), end + 1)
    assert i is not None and c.frames[i][0] == GOAWAY, c.summary()
    assert int.from_bytes(c.frames[i][3][4:8], "big") == code, c.summary()
    c.until_eof()


def test_h2_padding_only_data_on_drained_stream_is_a_glitch(server, proto, conns):
    """nghttp2 gives padding back as window by itself, so DATA frames of nothing but padding
    would not use up a drained stream's window: they count as empty DATA (max-glitches)."""
    srv = server(CONFIG + "http2:\n  max-glitches: 10\n", start=False)
    (srv.docroot / "small.txt").write_bytes(SMALL)
    srv.start()
    tls = proto == "h2"
    c = conns(srv.ports[1] if tls else srv.ports[0], tls)
    c.send(c.request(1, "POST", end_stream=False))
    end = c.wait(ends(1))
    assert end is not None, c.summary()
    c.send(frame(DATA, F_PADDED, 1, b"\xff" + b"\0" * 255) * 20)
    i = c.wait(rst_or_goaway(1), end + 1)
    assert i is not None and c.frames[i][0] == GOAWAY, c.summary()
    assert int.from_bytes(c.frames[i][3][4:8], "big") == 11  # ENHANCE_YOUR_CALM
    c.until_eof()
