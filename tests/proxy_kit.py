"""What the reverse-proxy tests share (test_proxy.py, test_proxy_relay.py, test_proxy_h2.py,
test_proxy_matrix.py, test_h2_body_relay.py): Debian's nginx as an origin (plain and TLS, for
static files and connection counting), small Python stdlib origins in this process (echo,
header reports, dying, silent, failing and slow origins), the proxy config builder, and the
clients: curl for h1, h1+TLS, h2c (prior knowledge) and h2 (TLS, ALPN), raw h2 and h1
sockets, WebSocket frames.

Every socket and subprocess has a timeout; every origin is stopped by its fixture.
"""
import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events
import pytest

from conftest import NginxOrigin, bound, free_port

CURL_TIMEOUT = 10
SOCK_TIMEOUT = 10.0
BIG_SIZE = 256 * 1024
HUGE_SIZE = 4 << 20
TINY = b"tiny file from nginx\n"
DIE_LENGTH = 100000
CHUNKED_BODY = hashlib.sha256(b"x").digest() * 8192  # 256 KiB
CHUNKED_BODY = bytes(b ^ (i * 7 & 0xFF) for i, b in enumerate(CHUNKED_BODY))
CHUNK_SIZES = [1, 17, 4096, 16383, 16384, 16385, 3, 65536, 700, 20000]

# ---------------------------------------------------------------------------------------------
# nginx origin (plain + TLS), one per module; `certs` (the origins' CA) comes from conftest
# ---------------------------------------------------------------------------------------------

NGINX_SERVERS = """\
    keepalive_timeout 60s;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
        # answers before reading the request body (then discards it, keeping the connection)
        location /early-return {{ client_max_body_size 0; return 200 "early ok\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{tls_port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {d}/www;
    }}"""


class Nginx(NginxOrigin):
    def __init__(self, d, certs):
        self.port = free_port()
        self.tls_port = free_port()
        www = d / "www"
        www.mkdir()
        (www / "tiny.txt").write_bytes(TINY)
        self.big = os.urandom(BIG_SIZE)
        (www / "big.bin").write_bytes(self.big)
        self.big_sha = hashlib.sha256(self.big).hexdigest()
        self.huge = os.urandom(HUGE_SIZE)
        (www / "huge.bin").write_bytes(self.huge)
        self.huge_sha = hashlib.sha256(self.huge).hexdigest()
        super().__init__(d, NGINX_SERVERS.format(d=d, port=self.port, tls_port=self.tls_port,
                                                 cert=certs["cert"], key=certs["key"]),
                         [self.port, self.tls_port], log_format="$connection $request")

    def access_lines(self, marker, expect=None):
        """(connection serial, request line) of the logged requests whose line holds marker.
        nginx writes the line after the response has gone out: with `expect`, wait (bounded)
        for that many lines."""
        deadline = time.time() + bound(5)
        while True:
            out = []
            for line in self.access_log.read_text(errors="replace").splitlines():
                conn, _, req = line.partition(" ")
                if marker in req:
                    out.append((conn, req))
            if expect is None or len(out) >= expect or time.time() > deadline:
                return out
            time.sleep(0.05)


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, certs):
    n = Nginx(tmp_path_factory.mktemp("nginx"), certs)
    yield n
    n.stop()


# ---------------------------------------------------------------------------------------------
# Python origins
# ---------------------------------------------------------------------------------------------


def read_chunked(rfile):
    body = bytearray()
    while True:
        line = rfile.readline(1024)
        if not line:
            raise EOFError("EOF in chunked body")
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            while rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(body)
        body += rfile.read(size)
        rfile.readline(16)


class OriginHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 15  # a kept-alive connection Ferry forgets does not hold a thread for ever

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        with self.server.origin.lock:
            self.server.origin.conns.add(self.connection)

    def finish(self):
        with self.server.origin.lock:
            self.server.origin.conns.discard(self.connection)
        super().finish()

    def _serve(self):
        o = self.server.origin
        if self.path.startswith("/early"):
            # answer at once, without reading the (large) request body, and close
            data = b"early no\n"
            self.send_response(403)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            self.close_connection = True
            if self.path.startswith("/early-linger"):
                # a well-behaved server: half-close, then drain the upload before closing
                self.connection.shutdown(socket.SHUT_WR)
                self.connection.settimeout(3)
                try:
                    while self.connection.recv(1 << 16):
                        pass
                except OSError:
                    pass
            elif self.path.startswith("/early-rst"):
                # no lingering: a moment later it closes with the upload unread (a reset)
                time.sleep(0.5)
            with o.lock:
                o.requests.append({"method": self.command, "path": self.path, "headers": [],
                                   "chunked": False, "body_len": -1})
            return
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        if chunked:
            body = read_chunked(self.rfile)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with o.lock:
            o.requests.append({"method": self.command, "path": self.path,
                               "headers": list(self.headers.items()), "chunked": chunked,
                               "body_len": len(body), "t": time.time()})
        if o.delay and self.path.startswith("/slow"):
            time.sleep(o.delay)
        if self.path.startswith("/die"):
            # announce 100000 bytes, send 10, close
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\n\r\n0123456789" % DIE_LENGTH)
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path.startswith("/chunked"):
            # CHUNKED_BODY in chunks of varied sizes, then a trailer
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Trailer")
            self.end_headers()
            pos, k = 0, 0
            while pos < len(CHUNKED_BODY):
                n = CHUNK_SIZES[k % len(CHUNK_SIZES)]
                piece = CHUNKED_BODY[pos:pos + n]
                self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                pos, k = pos + n, k + 1
            self.wfile.write(b"0\r\nX-Trailer: t\r\n\r\n")
            return
        if self.path.startswith("/close-delimited"):
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Connection: close\r\n\r\n" + CHUNKED_BODY[:100000])
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path.startswith("/hints"):
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n"
                             b"Keep-Alive: timeout=5\r\n\r\n")
            self.wfile.flush()
            data = b"after hints\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.startswith("/stall"):
            # a head, 10 of 1000 bytes, then silence (the idle timeout must fire)
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
            self.wfile.flush()
            time.sleep(4)
            self.close_connection = True
            return
        m = re.match(r"/status/(\d+)", self.path)
        if m:
            code = int(m.group(1))
            self.send_response(code)
            if code not in (204, 304):
                self.send_header("Content-Length", "3")
            self.send_header("X-Status", str(code))
            self.end_headers()
            if code not in (204, 304) and self.command != "HEAD":
                self.wfile.write(b"st\n")
            return
        if self.path.startswith("/echo"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Sha256", hashlib.sha256(body).hexdigest())
            self.send_header("X-Was-Chunked", "yes" if chunked else "no")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        if self.path.startswith("/hop"):
            data = b"hop\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close, X-Origin-Secret")
            self.send_header("Keep-Alive", "timeout=5, max=100")
            self.send_header("X-Origin-Secret", "1")
            self.send_header("Proxy-Connection", "keep-alive")
            self.send_header("X-Kept", "yes")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True
            return
        data = json.dumps({"origin": o.name, "method": self.command, "path": self.path,
                           "headers": list(self.headers.items())}).encode()
        self.send_response(o.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Origin", o.name)
        self.send_header("X-Remove-Me", "1")
        self.send_header("X-Replace-Me", "origin")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class PyOrigin:
    def __init__(self, name, status=200, delay=0.0, port=0):
        self.name = name
        self.status = status
        self.delay = delay
        self.lock = threading.Lock()
        self.requests = []
        self.conns = set()
        self.httpd = _Server(("127.0.0.1", port), OriginHandler)
        self.httpd.origin = self
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def count(self):
        with self.lock:
            return len(self.requests)

    def last(self):
        with self.lock:
            return self.requests[-1]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:  # kept-alive connections: end them too
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(timeout=5)


class SilentOrigin:
    """Accepts connections and never answers."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.ls.settimeout(0.1)
        self.port = self.ls.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.conns = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                c, _ = self.ls.accept()
                self.conns.append(c)
            except socket.timeout:
                continue
            except OSError:
                return

    def stop(self):
        self.done.set()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()
        self.ls.close()


class CloserOrigin(SilentOrigin):
    """Accepts, reads the request, and resets the connection without a response byte."""

    def _run(self):
        while not self.done.is_set():
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(c)
            c.settimeout(2)
            try:
                c.recv(65536)
            except OSError:
                pass
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()


class BlackholeOrigin:
    """A port whose accept queue is full: SYNs are dropped, connect() never completes."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(0)
        self.port = self.ls.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.fill = []
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            try:
                f.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self.fill.append(f)
        time.sleep(0.1)

    def stop(self):
        for f in self.fill:
            f.close()
        self.ls.close()


@pytest.fixture
def origins():
    started = []
    kinds = {"silent": SilentOrigin, "closer": CloserOrigin, "blackhole": BlackholeOrigin}

    def make(kind="py", **kw):
        o = kinds[kind]() if kind in kinds else PyOrigin(**kw)
        started.append(o)
        return o

    yield make
    for o in started:
        o.stop()


def dead_url():
    """A loopback port nothing listens on (connect is refused)."""
    return f"http://127.0.0.1:{free_port()}"


# ---------------------------------------------------------------------------------------------
# Ferry config
# ---------------------------------------------------------------------------------------------

LISTENERS = """\
workers: 1
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h2c]
  - address: 127.0.0.1:{port2}
    protocols: [h1, h2]
    tls: self-signed
data-dir: "{data}"
"""


def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    if re.fullmatch(r"[A-Za-z0-9._/-]+", s) and s not in ("true", "false", "yes", "no", "on",
                                                            "off", "null"):
        return s
    return json.dumps(s)


def _emit(obj, ind=0):
    pad = "  " * ind
    out = ""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                out += f"{pad}{k}:\n" + _emit(v, ind + 1)
            else:
                out += f"{pad}{k}: {_scalar(v)}\n"
    else:
        for item in obj:
            if isinstance(item, dict):
                sub = _emit(item, ind + 1)
                out += pad + "- " + sub[len(pad) + 2:]
            else:
                out += f"{pad}- {_scalar(item)}\n"
    return out


def proxy_config(servers, upstream=None, proxy=None, routes=None, extra_upstreams=None):
    """Ferry config: the listeners above, upstream `up` over `servers` (URLs or (url, weight))
    with `upstream` options, and one route `/` proxying to it with `proxy` options (or
    `routes` given in full)."""
    srvs = [s if isinstance(s, str) else {"url": s[0], "weight": s[1]} for s in servers]
    ups = [dict({"name": "up", "servers": srvs}, **(upstream or {}))] + (extra_upstreams or [])
    if routes is None:
        routes = [{"match": {"path": "/"}, "proxy": dict({"upstream": "up"}, **(proxy or {}))}]
    body = _emit({"upstreams": ups, "routes": routes, "log": {"level": "info"}})
    return LISTENERS + body.replace("{", "{{").replace("}", "}}")


def start(server, servers, **kw):
    return server(proxy_config(servers, **kw))


# ---------------------------------------------------------------------------------------------
# curl client
# ---------------------------------------------------------------------------------------------

CLIENTS = {
    "h1": (0, "http", ["--http1.1"], "1.1"),
    "h1tls": (1, "https", ["--http1.1", "-k"], "1.1"),
    "h2c": (0, "http", ["--http2-prior-knowledge"], "2"),
    "h2": (1, "https", ["--http2", "-k"], "2"),
}
H2 = ("h2c", "h2")


class CurlResult:
    def __init__(self, rc, status, version, headers, body, stderr):
        self.rc, self.status, self.version = rc, status, version
        self.headers, self.body, self.stderr = headers, body, stderr

    def all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def get(self, name):
        vals = self.all(name)
        assert len(vals) <= 1, f"{name} repeated: {vals}"
        return vals[0] if vals else None

    def names(self):
        return {k.lower() for k, _ in self.headers}

    def __repr__(self):
        return (f"<curl rc={self.rc} status={self.status} v={self.version} "
                f"headers={self.headers} body={self.body[:200]!r} err={self.stderr[-300:]!r}>")


_seq = iter(range(1 << 30))


def curl(srv, client, path, *args, input=None, timeout=CURL_TIMEOUT):
    idx, scheme, flags, _ = CLIENTS[client]
    url = f"{scheme}://127.0.0.1:{srv.ports[idx]}{path}"
    n = next(_seq)
    hfile, bfile = srv.tmp / f"curl{n}.h", srv.tmp / f"curl{n}.b"
    cmd = ["curl", "-sS", "--max-time", str(timeout), "-D", str(hfile), "-o", str(bfile),
           "-w", "%{http_code} %{http_version}", *flags, *args, url]
    p = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout + 10)
    code, _, version = p.stdout.decode().partition(" ")
    headers = []
    raw = hfile.read_bytes().decode("latin-1") if hfile.exists() else ""
    blocks = [b for b in re.split(r"\r?\n\r?\n", raw) if b.startswith("HTTP/")]
    if blocks:
        for line in blocks[-1].splitlines()[1:]:
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
    body = bfile.read_bytes() if bfile.exists() else b""
    return CurlResult(p.returncode, int(code or 0), version, headers, body,
                      p.stderr.decode(errors="replace"))


def origin_headers(res):
    """The request headers the Python origin reported, as {lower name: [values]}."""
    d = {}
    for k, v in json.loads(res.body)["headers"]:
        d.setdefault(k.lower(), []).append(v)
    return d


def h2_get_many(port, tls, paths, timeout=SOCK_TIMEOUT):
    """All `paths` as concurrent GET streams on one HTTP/2 connection (python3-h2);
    returns [(status, body)] in order. A reset stream gives (None, partial body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(s)
        assert s.selected_alpn_protocol() == "h2"
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    sids = []
    for p in paths:
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "GET"), (":path", p),
                             (":scheme", "https" if tls else "http"),
                             (":authority", f"127.0.0.1:{port}")], end_stream=True)
        sids.append(sid)
    s.sendall(c.data_to_send())
    status, bodies, done = {}, {sid: bytearray() for sid in sids}, set()
    try:
        while len(done) < len(sids):
            data = s.recv(1 << 16)
            if not data:
                break
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status[ev.stream_id] = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    bodies[ev.stream_id] += ev.data
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    done.add(ev.stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    status.pop(ev.stream_id, None)
                    done.add(ev.stream_id)
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    done.update(sids)
            s.sendall(c.data_to_send())
    finally:
        s.close()
    return [(status.get(sid), bytes(bodies[sid])) for sid in sids]


def _h2_connect(port, tls, timeout=SOCK_TIMEOUT):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(s)
        assert s.selected_alpn_protocol() == "h2"
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    return s, c


def h2_post(port, tls, path, data, timeout=SOCK_TIMEOUT):
    """POST `data` on one h2 stream as fast as flow control allows, reading all the while;
    stops sending when the stream ends or is reset. Returns (status, body, reset_code)."""
    s, c = _h2_connect(port, tls)
    c.send_headers(1, [(":method", "POST"), (":path", path),
                       (":scheme", "https" if tls else "http"), (":authority", f"127.0.0.1:{port}"),
                       ("content-length", str(len(data)))])
    s.sendall(c.data_to_send())
    status, body, reset, sent, closed = None, bytearray(), None, 0, False
    deadline = time.time() + timeout
    try:
        while not closed and time.time() < deadline:
            w = 0
            if sent < len(data) and c.streams.get(1) and c.streams[1].open:
                w = min(c.local_flow_control_window(1), c.max_outbound_frame_size,
                        len(data) - sent)
                if w > 0:
                    c.send_data(1, data[sent:sent + w], end_stream=sent + w == len(data))
                    sent += w
                    s.sendall(c.data_to_send())
            s.settimeout(0.01 if w > 0 else 1.0)
            try:
                got = s.recv(1 << 16)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            if not got:
                break
            for ev in c.receive_data(got):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    closed = True
                elif isinstance(ev, h2.events.StreamReset):
                    reset, closed = ev.error_code, True
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    closed = True
            s.sendall(c.data_to_send())
    finally:
        s.close()
    return status, bytes(body), reset


def h1_get_many(port, paths, timeout=SOCK_TIMEOUT):
    """Sequential GETs on one keep-alive HTTP/1.1 connection; returns [(status, headers, body)]."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    out = []
    try:
        for p in paths:
            c.request("GET", p)
            r = c.getresponse()
            out.append((r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()))
    finally:
        c.close()
    return out


@pytest.fixture(params=list(CLIENTS))
def client(request):
    return request.param


# =============================================================================================
# 1. every client protocol to an http:// nginx origin
# =============================================================================================



def _ws_frame(payload, opcode=1):
    mask = os.urandom(4)
    n = len(payload)
    hdr = bytes([0x80 | opcode])
    if n < 126:
        hdr += bytes([0x80 | n])
    elif n < 65536:
        hdr += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        hdr += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _ws_parse(buf):
    out = []
    while len(buf) >= 2:
        n, o = buf[1] & 0x7f, 2
        if n == 126:
            n, o = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            n, o = struct.unpack("!Q", buf[2:10])[0], 10
        if len(buf) < o + n:
            break
        out.append((buf[0] & 0x0f, buf[o:o + n]))
        buf = buf[o + n:]
    return out, buf


class WsEchoOrigin:
    """python3-websockets echo server in its own thread and event loop."""

    def __init__(self):
        import asyncio
        import websockets
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def echo(ws, path=None):
            async for m in ws:
                await ws.send(m)

        async def main():
            self.stop_fut = self.loop.create_future()
            async with websockets.serve(echo, "127.0.0.1", self.port):
                ready.set()
                await self.stop_fut

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),),
                                       daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def stop(self):
        self.loop.call_soon_threadsafe(self.stop_fut.set_result, None)
        self.thread.join(timeout=10)
