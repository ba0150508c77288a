"""HTTP/2 server codec (src/h2/h2_server.c), black box, with real clients: curl, nghttp, h2load
and python3-h2 (plus raw frames built by hand for the abuse cases).

Most tests run twice: h2c (prior knowledge on a plain listener) and h2 (TLS, ALPN).
Every socket has a timeout; nothing asserts on durations, only on outcomes (a response, a
frame, an EOF, a log line, an exit code).
"""
import hashlib
import os
import re
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


SOCK_TIMEOUT = 5.0

# frame types and error codes (RFC 9113)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, \
    FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, \
    ENHANCE_YOUR_CALM = range(12)
F_END_STREAM, F_ACK, F_END_HEADERS = 0x1, 0x1, 0x4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

BIG_SIZE = 1 << 20


def big_content():
    """1 MiB, deterministic, not compressible, not periodic at small strides."""
    out = bytearray()
    h = b"ferry"
    while len(out) < BIG_SIZE:
        h = hashlib.sha256(h).digest()
        out += h
    return bytes(out[:BIG_SIZE])


BIG = big_content()
CSS = b"body { color: red; }\n" * 50
CSS_BR = b"\x1b\x00fake-brotli-bytes"  # served as is: ferry does not recompress

# NB: str.format() placeholders: escape literal braces as {{ }}.
BASE = """\
listeners:
  - address: 127.0.0.1:{port}
  - address: 127.0.0.1:{port2}
    tls: self-signed
routes:
  - match:
      path: /echo
    echo: {{}}
  - match:
      path: /hello
    respond:
      status: 201
      headers:
        X-Custom-Header: Value
        content-type: text/plain
      body: "hello h2\\n"
  - match:
      path: /
    static:
      root: "{docroot}"
data-dir: "{data}"
log:
  level: info
  access: "{tmp}/access.log"
"""


def config(limits=None, http2=None, base=BASE):
    text = base
    limits = dict(limits or {})
    limits.setdefault("body-timeout", "5s")
    text += "limits:\n" + "".join(f"  {k}: {v}\n" for k, v in limits.items())
    if http2:
        text += "http2:\n" + "".join(f"  {k}: {v}\n" for k, v in http2.items())
    return text


def fill_docroot(d):
    (d / "index.html").write_bytes(b"<h1>ferry over h2</h1>\n")
    (d / "big.bin").write_bytes(BIG)
    (d / "small.txt").write_bytes(b"small file\n")
    (d / "style.css").write_bytes(CSS)
    (d / "style.css.br").write_bytes(CSS_BR)
    (d / "sub").mkdir(exist_ok=True)
    (d / "sub" / "index.html").write_bytes(b"sub index\n")


@pytest.fixture(params=["h2c", "h2"])
def proto(request):
    return request.param


def start(server, proto=None, cached=False, **kw):
    """Start ferry with config(**kw); returns (srv, port for proto, tls?). `cached`: static
    files up to 2 MiB are served from memory (the buffer path) instead of from the fd."""
    text = config(**kw)
    if cached:
        text = text.replace('      root: "{docroot}"\n',
                            '      root: "{docroot}"\n      file-cache-max-size: 2m\n')
        assert "file-cache-max-size" in text
    srv = server(text, start=False)
    fill_docroot(srv.docroot)
    srv.start()
    if proto is None:
        return srv
    tls = proto == "h2"
    return srv, (srv.ports[1] if tls else srv.ports[0]), tls


def client_tls_ctx(alpn=("h2",)):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def connect(port, tls, timeout=SOCK_TIMEOUT):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls:
        s = client_tls_ctx().wrap_socket(s, server_hostname="localhost")
        assert s.selected_alpn_protocol() == "h2"
    return s


# ---- python-h2 client ----

class Stream:
    def __init__(self, sid):
        self.id = sid
        self.headers = None  # list of (name, value) str
        self.informational = []
        self.data = bytearray()
        self.trailers = None
        self.ended = False
        self.reset = None  # error code of a RST_STREAM from the server

    @property
    def done(self):
        return self.ended or self.reset is not None

    @property
    def status(self):
        return int(self.hdr(":status"))

    def hdr(self, name):
        vals = [v for n, v in self.headers or [] if n == name]
        assert len(vals) <= 1, f"{name} repeated: {vals}"
        return vals[0] if vals else None

    def __repr__(self):
        return (f"<Stream {self.id} headers={self.headers} len={len(self.data)} "
                f"ended={self.ended} reset={self.reset}>")


class H2Client:
    """python-h2 over a blocking socket. `auto_ack=False` leaves receive flow control to the
    test (no WINDOW_UPDATE unless `ack()` is called)."""

    def __init__(self, port, tls=False, settings=None, validate=True, auto_ack=True,
                 timeout=SOCK_TIMEOUT):
        self.sock = connect(port, tls, timeout)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                        validate_outbound_headers=validate,
                                        normalize_outbound_headers=validate,
                                        validate_inbound_headers=True)
        self.conn = h2.connection.H2Connection(cfg)
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.auto_ack = auto_ack
        self.streams = {}
        self.goaway = None  # h2.events.ConnectionTerminated
        self.remote_settings = {}
        self.remote_settings_seen = False
        self.closed = False
        self.pings_acked = 0
        self.conn.initiate_connection()
        self.flush()

    def flush(self):
        d = self.conn.data_to_send()
        if d:
            self.sock.sendall(d)

    def request(self, path, method="GET", headers=(), body=None, end=True, authority=None):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", method), (":scheme", "https" if isinstance(self.sock, ssl.SSLSocket)
                                    else "http"),
              (":authority", authority or "127.0.0.1"), (":path", path)] + list(headers)
        self.streams[sid] = Stream(sid)
        self.conn.send_headers(sid, hs, end_stream=end and body is None)
        self.flush()
        if body is not None:
            self.send_body(sid, body, end=end)
        return sid

    def send_body(self, sid, body, end=True):
        """Send body respecting flow control (pumping for WINDOW_UPDATEs)."""
        view = memoryview(body)
        while view:
            win = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if win <= 0:
                self.pump(lambda: self.conn.local_flow_control_window(sid) > 0 or
                          self.streams[sid].done)
                if self.streams[sid].done:
                    return
                continue
            n = min(win, len(view))
            self.conn.send_data(sid, bytes(view[:n]))
            view = view[n:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def ack(self, sid, n):
        self.conn.acknowledge_received_data(n, sid)
        self.flush()

    def _event(self, ev):
        if isinstance(ev, h2.events.ResponseReceived):
            self.streams[ev.stream_id].headers = list(ev.headers)
        elif isinstance(ev, h2.events.InformationalResponseReceived):
            self.streams[ev.stream_id].informational.append(list(ev.headers))
        elif isinstance(ev, h2.events.DataReceived):
            self.streams[ev.stream_id].data += ev.data
            if self.auto_ack and ev.flow_controlled_length:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            self.streams[ev.stream_id].trailers = list(ev.headers)
        elif isinstance(ev, h2.events.StreamEnded):
            self.streams[ev.stream_id].ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if ev.stream_id in self.streams and ev.remote_reset:
                self.streams[ev.stream_id].reset = ev.error_code
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = ev
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            self.remote_settings_seen = True
            for k, v in ev.changed_settings.items():
                self.remote_settings[int(k)] = v.new_value
        elif isinstance(ev, h2.events.PingAckReceived):
            self.pings_acked += 1

    def pump(self, until, timeout=10.0):
        """Read and process until until() is true; fails on timeout or EOF before that."""
        deadline = time.monotonic() + timeout
        while not until():
            if self.closed:
                raise AssertionError("connection closed before the condition was met")
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting; streams: %r" % self.streams)
            try:
                b = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, ssl.SSLError):
                b = b""
            if not b:
                self.closed = True
                continue
            for ev in self.conn.receive_data(b):
                self._event(ev)
            self.flush()

    def read_until_close(self, timeout=10.0):
        """Process everything until the server closes (GOAWAY events are recorded)."""
        try:
            self.pump(lambda: self.closed, timeout)
        except h2.exceptions.ProtocolError:
            pass

    def response(self, sid, timeout=10.0):
        self.pump(lambda: self.streams[sid].done, timeout)
        return self.streams[sid]

    def get(self, path, **kw):
        return self.response(self.request(path, **kw))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


@pytest.fixture
def h2client():
    made = []

    def make(*a, **kw):
        c = H2Client(*a, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


# ---- raw frames ----

def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid & 0x7FFFFFFF) + payload


def settings_frame(**kv):
    ids = {"header_table_size": 1, "enable_push": 2, "max_concurrent_streams": 3,
           "initial_window_size": 4, "max_frame_size": 5, "max_header_list_size": 6}
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", ids[k], v) for k, v in kv.items()))


def req_block(path="/hello", method="GET", extra=()):
    return hpack.Encoder().encode([(":method", method), (":scheme", "http"),
                                   (":authority", "127.0.0.1"), (":path", path)] + list(extra))


def parse_frames(data):
    """[(type, flags, sid, payload)] from a byte stream (ignores a trailing partial frame)."""
    out, i = [], 0
    while i + 9 <= len(data):
        ln = int.from_bytes(data[i:i + 3], "big")
        if i + 9 + ln > len(data):
            break
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5:i + 9], "big") & 0x7FFFFFFF,
                    data[i + 9:i + 9 + ln]))
        i += 9 + ln
    return out


class RawConn:
    """A raw HTTP/2 connection: preface + SETTINGS sent, frames parsed as they come."""

    def __init__(self, port, tls=False, timeout=SOCK_TIMEOUT, settings=b""):
        self.sock = connect(port, tls, timeout)
        self.buf = b""
        self.frames = []
        self.closed = False
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))

    def send(self, data):
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            return False

    def _recv(self):
        try:
            b = self.sock.recv(1 << 16)
        except socket.timeout:
            return False
        except (ConnectionResetError, ssl.SSLError):
            b = b""
        if not b:
            self.closed = True
            return False
        self.buf += b
        fs = parse_frames(self.buf)
        used = sum(9 + len(f[3]) for f in fs)
        self.buf = self.buf[used:]
        for f in fs:
            # acknowledge the server's SETTINGS so that it never waits on us
            if f[0] == SETTINGS and not f[1] & F_ACK:
                self.send(frame(SETTINGS, F_ACK, 0))
        self.frames += fs
        return True

    def wait(self, pred, timeout=10.0):
        """Read until pred(frame) holds for a received frame; returns it (or None on EOF)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for f in self.frames[seen:]:
                if pred(f):
                    return f
            seen = len(self.frames)
            if self.closed:
                return None
            assert time.monotonic() < deadline, f"timed out; frames: {self.summary()}"
            self._recv()

    def until_close(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not self.closed:
            assert time.monotonic() < deadline, f"connection still open; frames: {self.summary()}"
            self._recv()
        return self.frames

    def goaways(self):
        return [(int.from_bytes(p[0:4], "big") & 0x7FFFFFFF, int.from_bytes(p[4:8], "big"))
                for t, _, _, p in self.frames if t == GOAWAY]

    def resets(self):
        return {sid: int.from_bytes(p[:4], "big") for t, _, sid, p in self.frames
                if t == RST_STREAM}

    def summary(self):
        return [(t, fl, sid, len(p)) for t, fl, sid, p in self.frames][-40:]

    def close(self):
        self.sock.close()


@pytest.fixture
def rawconn():
    made = []

    def make(*a, **kw):
        c = RawConn(*a, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def curl(*args, timeout=15):
    p = subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True,
                       timeout=timeout)
    return p


def curl_url(port, tls, path):
    return f"https://127.0.0.1:{port}{path}" if tls else f"http://127.0.0.1:{port}{path}"


def curl_h2_flags(tls):
    return ["-k", "--http2"] if tls else ["--http2-prior-knowledge"]


# ============================== routes over h2 ==============================

def test_h2_respond_route(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    r = c.get("/hello")
    assert r.status == 201
    assert r.hdr("x-custom-header") == "Value"  # the configured name, lowercased on the wire
    assert r.hdr("content-type") == "text/plain"
    assert r.hdr("content-length") == str(len(b"hello h2\n"))
    assert r.hdr("server") == "ferry"
    assert r.hdr("date")
    assert all(n == n.lower() for n, _ in r.headers)
    for n in ("connection", "keep-alive", "transfer-encoding"):
        assert r.hdr(n) is None
    assert bytes(r.data) == b"hello h2\n"
    # the same connection serves more
    r2 = c.get("/hello", method="HEAD")
    assert r2.status == 201 and r2.data == b"" and r2.hdr("content-length") == "9"


def test_h2_curl_respond(server, proto):
    srv, port, tls = start(server, proto)
    p = curl(*curl_h2_flags(tls), "-i", curl_url(port, tls, "/hello"))
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert out.startswith("HTTP/2 201"), out
    assert "x-custom-header: Value\r\n" in out
    assert out.endswith("\r\n\r\nhello h2\n")


def test_h2_static(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    r = c.get("/")
    assert r.status == 200 and bytes(r.data) == b"<h1>ferry over h2</h1>\n"
    assert r.hdr("content-type").startswith("text/html")
    assert r.hdr("content-length") == str(len(r.data))
    etag = r.hdr("etag")
    assert etag
    # directory index below
    r = c.get("/sub/")
    assert r.status == 200 and bytes(r.data) == b"sub index\n"
    # conditional: 304 without a body
    r = c.get("/", headers=[("if-none-match", etag)])
    assert r.status == 304 and r.data == b"" and r.ended
    assert r.hdr("etag") == etag
    # range
    r = c.get("/big.bin", headers=[("range", "bytes=100-1099")])
    assert r.status == 206
    assert r.hdr("content-range") == f"bytes 100-1099/{BIG_SIZE}"
    assert r.hdr("content-length") == "1000"
    assert bytes(r.data) == BIG[100:1100]
    # 404
    r = c.get("/nope.txt")
    assert r.status == 404
    assert r.hdr("content-length") == str(len(r.data))
    # precompressed
    r = c.get("/style.css", headers=[("accept-encoding", "gzip, br")])
    assert r.status == 200 and r.hdr("content-encoding") == "br"
    assert bytes(r.data) == CSS_BR
    assert r.hdr("vary") and "accept-encoding" in r.hdr("vary").lower()
    r = c.get("/style.css")
    assert r.status == 200 and r.hdr("content-encoding") is None and bytes(r.data) == CSS
    # HEAD: content-length, no DATA (the HEADERS frame ends the stream)
    r = c.get("/big.bin", method="HEAD")
    assert r.status == 200 and r.hdr("content-length") == str(BIG_SIZE)
    assert r.data == b"" and r.ended
    # full download
    r = c.get("/big.bin")
    assert r.status == 200 and hashlib.sha256(r.data).digest() == hashlib.sha256(BIG).digest()


def test_h2_head_has_no_data_frames(server, proto, rawconn):
    srv, port, tls = start(server, proto)
    rc = rawconn(port, tls)
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 1, req_block("/big.bin", "HEAD")))
    f = rc.wait(lambda f: f[0] == HEADERS and f[2] == 1)
    assert f is not None
    assert f[1] & F_END_STREAM, "HEAD response HEADERS frame must end the stream"
    hdrs = dict(hpack.Decoder().decode(f[3], raw=True))
    assert hdrs[b":status"] == b"200" and hdrs[b"content-length"] == str(BIG_SIZE).encode()
    # a second request on the connection proves we waited long enough to see stray DATA
    rc.send(frame(HEADERS, F_END_STREAM | F_END_HEADERS, 3, req_block("/hello")))
    rc.wait(lambda f: f[2] == 3 and f[1] & F_END_STREAM)
    assert not [f for f in rc.frames if f[0] == DATA and f[2] == 1]


def test_h2_curl_static_304_and_range(server, proto):
    srv, port, tls = start(server, proto)
    url = curl_url(port, tls, "/big.bin")
    p = curl(*curl_h2_flags(tls), "-r", "0-9", "-D", "-", "-o", os.devnull, url)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(b"HTTP/2 206")
    p = curl(*curl_h2_flags(tls), "-D", "-", "-o", os.devnull, url)
    etag = re.search(rb"etag: (\S+)", p.stdout).group(1).decode()
    p = curl(*curl_h2_flags(tls), "-D", "-", "-H", f"if-none-match: {etag}", url)
    assert p.stdout.startswith(b"HTTP/2 304"), p.stdout


@pytest.mark.parametrize("size", [0, 1, 64 * 1024, 3 * 1024 * 1024])
def test_h2_echo_sizes(server, proto, h2client, size):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    body = (BIG * 4)[:size]
    sid = c.request("/echo", "POST", headers=[("content-length", str(size))], body=body)
    r = c.response(sid, timeout=15)
    assert r.status == 200
    assert len(r.data) == size
    assert hashlib.sha256(r.data).digest() == hashlib.sha256(body).digest()


def test_h2_echo_streaming_without_length(server, proto, h2client):
    """No content-length: DATA frames as they come, echoed as they come (h2 has no chunks)."""
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    sid = c.request("/echo", "POST", end=False)
    c.send_body(sid, b"first piece;", end=False)
    # the response starts before the request body ends
    c.pump(lambda: len(c.streams[sid].data) >= 12)
    assert c.streams[sid].status == 200
    assert c.streams[sid].hdr("content-length") is None
    c.send_body(sid, b"second piece", end=True)
    r = c.response(sid)
    assert bytes(r.data) == b"first piece;second piece"


def test_h2_curl_echo_upload(server, proto, tmp_path):
    srv, port, tls = start(server, proto)
    f = tmp_path / "up.bin"
    f.write_bytes(BIG)
    p = curl(*curl_h2_flags(tls), "--data-binary", f"@{f}", curl_url(port, tls, "/echo"))
    assert p.returncode == 0, p.stderr
    assert hashlib.sha256(p.stdout).digest() == hashlib.sha256(BIG).digest()


def test_h2_nghttp_post_echo(server, proto, tmp_path):
    """The plainest upload: HEADERS, then one DATA frame with END_STREAM. The echoed response
    must end (END_STREAM), not just carry content-length bytes."""
    srv, port, tls = start(server, proto)
    f = tmp_path / "abc.txt"
    f.write_bytes(b"abc")
    p = subprocess.run(["nghttp", "-v", "-t", "5", "-d", str(f), curl_url(port, tls, "/echo")],
                       capture_output=True, timeout=15)
    out = p.stdout.decode()
    assert p.returncode == 0, out[-2000:] + p.stderr.decode()
    assert re.search(r"recv DATA frame <length=3, flags=0x01", out) or \
        re.search(r"recv DATA frame <length=0, flags=0x01", out), out[-2000:]
    assert "abc" in out


def test_h2_options_star(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls, validate=False)  # python-h2 would not send :path '*'
    r = c.get("*", method="OPTIONS")
    assert r.status in (200, 204), r
    assert "GET" in r.hdr("allow")
    assert r.data == b""


# ============================== multiplexing ==============================

def test_h2_h2load_multiplexed(server, proto):
    srv, port, tls = start(server, proto)
    p = subprocess.run(["h2load", "-n", "2000", "-c", "4", "-m", "32",
                        curl_url(port, tls, "/hello")], capture_output=True, timeout=60)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode()
    assert re.search(r"requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, "
                     r"0 errored", out), out
    assert "status codes: 0 2xx" not in out
    if tls:
        assert "Application protocol: h2" in out


def test_h2_nghttp_many_urls_one_connection(server, proto):
    srv, port, tls = start(server, proto)
    # distinct URLs (nghttp drops duplicates)
    paths = [f"{x}?n={i}" for i in range(3)
             for x in ("/hello", "/", "/small.txt", "/style.css", "/big.bin", "/nope", "/sub/")]
    # -m 20: the same URL 20 times, concurrently, on one connection
    p = subprocess.run(["nghttp", "-n", "-s", "-m", "20", "-v", curl_url(port, tls, "/hello")],
                       capture_output=True, timeout=30)
    out = p.stdout.decode()
    assert p.returncode == 0, out[-3000:] + p.stderr.decode()
    assert len(re.findall(r"recv HEADERS frame", out)) == 20
    assert out.count(":status: 201") == 20
    # several different URLs on one connection (nghttp uses one connection per authority)
    p = subprocess.run(["nghttp", "-n", "-s", "-v"] + [curl_url(port, tls, x) for x in paths],
                       capture_output=True, timeout=30)
    out = p.stdout.decode()
    assert p.returncode == 0, out[-3000:] + p.stderr.decode()
    # one connection: a single client SETTINGS (plus its ACK of ours)
    assert len(re.findall(r"send SETTINGS frame <length=\d+, flags=0x00", out)) == 1, out
    statuses = re.findall(r":status: (\d+)", out)
    assert len(statuses) == len(paths)
    assert sorted(statuses) == sorted(["201", "200", "200", "200", "200", "404", "200"] * 3)


def test_h2_fifty_streams_at_once(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    c.pump(lambda: c.remote_settings_seen)
    sids = []
    for i in range(50):
        kind = i % 3
        if kind == 0:
            sids.append((c.request(f"/hello?i={i}"), kind, None))
        elif kind == 1:
            sids.append((c.request("/big.bin", headers=[("range", f"bytes={i}-{i * 1000}")]),
                         kind, i))
        else:
            body = f"stream {i} ".encode() * (i + 1)
            sids.append((c.request("/echo", "POST", body=body), kind, body))
    c.pump(lambda: all(c.streams[s].done for s, _, _ in sids), timeout=15)
    for sid, kind, x in sids:
        r = c.streams[sid]
        assert r.ended, r
        if kind == 0:
            assert r.status == 201 and bytes(r.data) == b"hello h2\n"
        elif kind == 1:
            assert r.status == 206 and bytes(r.data) == BIG[x:x * 1000 + 1]
        else:
            assert r.status == 200 and bytes(r.data) == x


# ============================== flow control ==============================

@pytest.mark.parametrize("source", ["fd", "cached"])
def test_h2_tiny_client_window_download(server, proto, h2client, source):
    srv, port, tls = start(server, proto, cached=source == "cached")
    c = h2client(port, tls, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1024},
                 auto_ack=False)
    sid = c.request("/big.bin")
    r = c.streams[sid]
    acked = 0
    deadline = time.monotonic() + 15
    while not r.done:
        assert time.monotonic() < deadline, f"stalled at {len(r.data)} bytes"
        got = len(r.data)
        c.pump(lambda: len(r.data) > got or r.done)
        # the server never exceeds the window we gave it
        assert len(r.data) - acked <= 1024, "server sent more than the stream window"
        c.ack(sid, len(r.data) - acked)
        acked = len(r.data)
    assert r.ended and r.status == 200
    assert bytes(r.data) == BIG


@pytest.mark.parametrize("source", ["fd", "cached"])
def test_h2_stalled_stream_does_not_block_others(server, proto, h2client, source):
    srv, port, tls = start(server, proto, cached=source == "cached")
    c = h2client(port, tls, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1024},
                 auto_ack=False)
    a = c.request("/big.bin")  # never acknowledged: stalls after 1 KiB
    c.pump(lambda: len(c.streams[a].data) >= 1024)
    b = c.request("/small.txt")
    c.pump(lambda: c.streams[b].done)
    assert c.streams[b].status == 200 and bytes(c.streams[b].data) == b"small file\n"
    c.ack(b, len(c.streams[b].data))
    e = c.request("/hello")
    c.pump(lambda: c.streams[e].done)
    assert bytes(c.streams[e].data) == b"hello h2\n"
    assert not c.streams[a].done and len(c.streams[a].data) == 1024
    # and A resumes when given window
    c.auto_ack = True
    c.ack(a, 1024)
    c.conn.increment_flow_control_window(1 << 20, a)
    c.flush()
    c.pump(lambda: c.streams[a].done, timeout=15)
    assert bytes(c.streams[a].data) == BIG


def test_h2_upload_larger_than_stream_window(server, proto, h2client):
    srv, port, tls = start(server, proto, http2={"initial-window-size": "64k"})
    c = h2client(port, tls)
    c.pump(lambda: c.remote_settings_seen)
    assert c.remote_settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == 65536
    body = BIG
    sid = c.request("/echo", "POST", headers=[("content-length", str(len(body)))], body=body)
    r = c.response(sid, timeout=15)
    assert r.status == 200 and bytes(r.data) == body


def test_h2_upload_without_reading_response(server, proto, h2client):
    """The client sends 1 MiB but does not acknowledge the echoed DATA: the server must stop
    reading (window not reopened) instead of buffering without bound, and everything still
    completes once the client reads."""
    srv, port, tls = start(server, proto, http2={"initial-window-size": "16k"})
    c = h2client(port, tls, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 4096},
                 auto_ack=False)
    c.pump(lambda: c.remote_settings_seen)
    sid = c.request("/echo", "POST", end=False)
    sent = 0
    # send what the windows allow, without acknowledging anything we receive
    for _ in range(200):
        win = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
        if win <= 0:
            try:
                c.pump(lambda: c.conn.local_flow_control_window(sid) > 0, timeout=1.5)
            except AssertionError:
                break  # the server stopped opening the window: backpressure
            continue
        c.conn.send_data(sid, BIG[sent:sent + win])
        sent += win
        c.flush()
        if sent >= len(BIG) - 20000:
            break
    assert sent < len(BIG) - 20000, "server kept reading a body whose echo nobody read"
    # now read everything and finish
    c.auto_ack = True
    c.ack(sid, len(c.streams[sid].data))
    c.send_body(sid, BIG[sent:], end=True)
    r = c.response(sid, timeout=15)
    assert bytes(r.data) == BIG


# ============================== trailers ==============================

def test_h2_request_trailers_echoed(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    sid = c.request("/echo", "POST", end=False)
    c.send_body(sid, b"body with trailers", end=False)
    c.conn.send_headers(sid, [("x-checksum", "abc123"), ("x-other", "2")], end_stream=True)
    c.flush()
    r = c.response(sid)
    assert r.status == 200 and bytes(r.data) == b"body with trailers"
    assert r.trailers is not None, "no response trailers"
    t = dict(r.trailers)
    assert t.get("x-checksum") == "abc123" and t.get("x-other") == "2"


def test_h2_trailers_without_data(server, proto, h2client):
    srv, port, tls = start(server, proto)
    c = h2client(port, tls)
    sid = c.request("/echo", "POST", end=False)
    c.conn.send_headers(sid, [("x-only", "trailer")], end_stream=True)
    c.flush()
    r = c.response(sid)
    assert r.status == 200 and r.data == b""
    assert dict(r.trailers or []).get("x-only") == "trailer"
