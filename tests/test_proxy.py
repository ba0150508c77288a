"""Reverse proxy (src/handler/proxy.c, src/upstream/), black box, with real clients (curl,
h2load, http.client) and real origins Ferry did not write: Debian's nginx (plain and TLS, for
static files and connection counting) and small Python stdlib origins in this process (echo,
header reports, dying, silent, failing and slow origins).

Client side: h1, h1+TLS, h2c (prior knowledge) and h2 (TLS, ALPN). Origin side: http:// and
https:// (HTTP/1.1) only, as this first version supports.

Every socket and subprocess has a timeout; every origin is stopped by its fixture. Nothing
asserts on durations, only on outcomes (status, bytes, hashes, counts, exit codes, log lines).
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
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events
import pytest

from conftest import (FERRY as FERRY_BIN, bound, conns_to, free_port, http_request, wait_for,
                      wait_port)

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
# certificates: a CA and a leaf for localhost / 127.0.0.1 signed by it
# ---------------------------------------------------------------------------------------------


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, timeout=30,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=Ferry Proxy Test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "leaf.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "basicConstraints=CA:FALSE\n"
                                "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext", cwd=d)
    return {"ca": d / "ca.pem", "cert": d / "leaf.pem", "key": d / "leaf.key"}


# ---------------------------------------------------------------------------------------------
# nginx origin (plain + TLS), one per module
# ---------------------------------------------------------------------------------------------

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
error_log {d}/err;
pid {d}/pid;
events {{ worker_connections 1024; }}
http {{
    log_format conn '$connection $request';
    access_log {d}/access.log conn;
    client_body_temp_path {d}/tmp_body;
    proxy_temp_path {d}/tmp_proxy;
    fastcgi_temp_path {d}/tmp_fastcgi;
    uwsgi_temp_path {d}/tmp_uwsgi;
    scgi_temp_path {d}/tmp_scgi;
    default_type application/octet-stream;
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
    }}
}}
"""


class Nginx:
    def __init__(self, d, certs):
        self.d = d
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
        self.access_log = d / "access.log"
        (d / "nginx.conf").write_text(NGINX_CONF.format(
            d=d, port=self.port, tls_port=self.tls_port, cert=certs["cert"], key=certs["key"]))
        self.proc = subprocess.Popen(["/usr/sbin/nginx", "-p", str(d), "-c", str(d / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_port(self.port, proc=self.proc)
            wait_port(self.tls_port, proc=self.proc)
        except TimeoutError:
            self.stop()
            raise AssertionError("nginx did not start: " + self.error_log())

    def error_log(self):
        try:
            return (self.d / "err").read_text(errors="replace")
        except FileNotFoundError:
            return ""

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

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


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


def test_nginx_tiny_get(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/tiny.txt")
    assert r.rc == 0 and r.status == 200, r
    assert r.version == CLIENTS[client][3], r
    assert r.body == TINY
    assert r.get("content-length") in (None, str(len(TINY)))


def test_nginx_256k_get(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and r.status == 200, r
    assert len(r.body) == BIG_SIZE
    assert hashlib.sha256(r.body).hexdigest() == nginx.big_sha


def test_nginx_head(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/big.bin", "-I")
    assert r.rc == 0 and r.status == 200, r
    assert r.get("content-length") == str(BIG_SIZE), r
    # with -I curl writes the head as the output: nothing may follow it
    assert r.body.startswith(b"HTTP/") and r.body.endswith(b"\r\n\r\n"), r.body[-200:]
    assert r.body.count(b"\r\n\r\n") == 1 and len(r.body) < 4096
    # and the connection is still good for a GET afterwards (h1 framing of a HEAD response)
    r2 = curl(srv, client, "/tiny.txt")
    assert r2.status == 200 and r2.body == TINY, r2


def test_nginx_404_relayed(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/no-such-file")
    assert r.rc == 0 and r.status == 404, r
    assert b"404" in r.body


def test_nginx_many_on_one_client_connection(server, nginx, client):
    """Several URLs on one client connection: small and big responses interleaved (h1:
    sequential keep-alive; h2: all streams at once, multiplexed)."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    idx, scheme, flags, _ = CLIENTS[client]
    if client in H2:
        # python3-h2, not curl: curl 7.88.1 cannot reuse a prior-knowledge h2c connection
        # (error 16 on the second URL against nginx too)
        paths = [("/big.bin" if i % 2 else "/tiny.txt") + f"?i={i}" for i in range(12)]
        res = h2_get_many(srv.ports[idx], client == "h2", paths)
        for i, (st, body) in enumerate(res):
            assert st == 200, (i, st)
            if i % 2:
                assert hashlib.sha256(body).hexdigest() == nginx.big_sha, i
            else:
                assert body == TINY, i
        return
    base = f"{scheme}://127.0.0.1:{srv.ports[idx]}"
    out = srv.tmp / "many"
    out.mkdir()
    args = []
    for i in range(6):
        name = "big.bin" if i % 2 else "tiny.txt"
        args += [f"{base}/{name}?i={i}", "-o", str(out / f"{i}")]
    p = subprocess.run(["curl", "-sS", "--max-time", "20", *flags, *args], capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    for i in range(6):
        data = (out / f"{i}").read_bytes()
        if i % 2:
            assert hashlib.sha256(data).hexdigest() == nginx.big_sha, i
        else:
            assert data == TINY, i


# =============================================================================================
# 2. https:// nginx origin
# =============================================================================================


def test_https_origin_verified_with_ca(server, nginx, certs, client):
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"], upstream={"ca": str(certs["ca"])})
    r = curl(srv, client, "/tiny.txt")
    assert r.rc == 0 and r.status == 200 and r.body == TINY, r
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and r.status == 200, r
    assert hashlib.sha256(r.body).hexdigest() == nginx.big_sha


def test_https_origin_by_name_and_sni(server, nginx, certs):
    """URL by name (localhost), and URL by IP with `sni: localhost`: both verified."""
    srv = start(server, [f"https://localhost:{nginx.tls_port}"], upstream={"ca": str(certs["ca"])})
    r = curl(srv, "h1", "/tiny.txt")
    assert r.status == 200 and r.body == TINY, (r, srv.log())
    srv2 = start(server, [f"https://127.0.0.1:{nginx.tls_port}"],
                 upstream={"ca": str(certs["ca"]), "sni": "localhost"})
    r = curl(srv2, "h2c", "/tiny.txt")
    assert r.status == 200 and r.body == TINY, (r, srv2.log())


def test_https_origin_untrusted_is_502(server, nginx):
    """No `ca`, not insecure: the system store does not know our CA → 502, and the log says
    the TLS handshake failed."""
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"])
    for c in ("h1", "h2c"):
        r = curl(srv, c, "/tiny.txt")
        assert r.rc == 0 and r.status == 502, r
        assert r.body != TINY
    log = srv.log()
    assert re.search(r"upstream up: 127\.0\.0\.1:%d: .*TLS handshake failed" % nginx.tls_port,
                     log), log


def test_https_origin_wrong_name_is_502(server, nginx, certs):
    """Trusted CA but the certificate does not name the SNI we verify → 502."""
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"],
                upstream={"ca": str(certs["ca"]), "sni": "wrong.example"})
    r = curl(srv, "h1", "/tiny.txt")
    assert r.rc == 0 and r.status == 502, r
    assert "TLS handshake failed" in srv.log()


def test_https_origin_insecure(server, nginx, client):
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"], upstream={"insecure": True})
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and r.status == 200, r
    assert hashlib.sha256(r.body).hexdigest() == nginx.big_sha


# =============================================================================================
# 3. request bodies
# =============================================================================================


@pytest.mark.parametrize("size", [64 * 1024, 1 << 20], ids=["64k", "1m"])
def test_post_echo(server, origins, client, size):
    o = origins(name="echo")
    srv = start(server, [o.url])
    data = os.urandom(size)
    f = srv.tmp / "post.bin"
    f.write_bytes(data)
    r = curl(srv, client, "/echo", "--data-binary", f"@{f}",
             "-H", "Content-Type: application/octet-stream")
    assert r.rc == 0 and r.status == 200, r
    want = hashlib.sha256(data).hexdigest()
    assert r.get("x-sha256") == want, r  # what the origin received
    assert len(r.body) == size
    assert hashlib.sha256(r.body).hexdigest() == want  # and what came back
    assert o.last()["method"] == "POST" and o.last()["body_len"] == size


def test_post_chunked_from_h1_client(server, origins):
    o = origins(name="echo")
    srv = start(server, [o.url])
    data = os.urandom(64 * 1024 + 7)
    f = srv.tmp / "post.bin"
    f.write_bytes(data)
    r = curl(srv, "h1", "/echo", "-H", "Transfer-Encoding: chunked", "--data-binary", f"@{f}")
    assert r.rc == 0 and r.status == 200, r
    assert r.get("x-sha256") == hashlib.sha256(data).hexdigest(), r
    assert r.body == data
    assert r.get("x-was-chunked") == "yes"  # unknown length stays chunked to the origin
    assert o.last()["body_len"] == len(data)


@pytest.mark.parametrize("client", ["h1", "h1tls", "h2c", "h2"])
def test_post_streamed_without_length(server, origins, client):
    """curl -T - (stdin, unknown length): chunked over h1, DATA frames without content-length
    over h2; the origin receives the whole body."""
    o = origins(name="echo")
    srv = start(server, [o.url])
    data = os.urandom(200 * 1024 + 3)
    r = curl(srv, client, "/echo", "-T", "-", "-X", "POST", input=data)
    assert r.rc == 0 and r.status == 200, r
    assert r.get("x-sha256") == hashlib.sha256(data).hexdigest(), r
    assert r.body == data


def test_put_and_delete_methods(server, origins):
    o = origins(name="m")
    srv = start(server, [o.url])
    r = curl(srv, "h2c", "/echo/put", "-X", "PUT", "--data-binary", "abc")
    assert r.status == 200 and r.body == b"abc", r
    assert o.last()["method"] == "PUT"
    r = curl(srv, "h1", "/thing", "-X", "DELETE")
    assert r.status == 200, r
    assert json.loads(r.body)["method"] == "DELETE"


# =============================================================================================
# 4. headers
# =============================================================================================


def test_forwarded_headers_and_host(server, origins, client):
    o = origins(name="hdr")
    srv = start(server, [o.url])
    idx, scheme, _, _ = CLIENTS[client]
    authority = f"127.0.0.1:{srv.ports[idx]}"
    r = curl(srv, client, "/headers", "-H", "X-Forwarded-For: 10.1.2.3",
             "-H", "X-Forwarded-Proto: gopher", "-H", "X-Forwarded-Host: evil.example")
    assert r.status == 200, r
    h = origin_headers(r)
    assert h["host"] == [authority], h
    assert h["x-forwarded-for"] == ["10.1.2.3, 127.0.0.1"], h
    assert h["x-forwarded-proto"] == [scheme], h
    assert h["x-forwarded-host"] == [authority], h


def test_preserve_host_false(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url], proxy={"preserve-host": False})
    for c in ("h1", "h2"):
        r = curl(srv, c, "/headers", "-H", "Host: client.example")
        assert r.status == 200, r
        h = origin_headers(r)
        assert h["host"] == [f"127.0.0.1:{o.port}"], (c, h)


def test_preserve_host_custom_host(server, origins):
    """preserve-host (default): the client's own Host (any name) reaches the origin."""
    o = origins(name="hdr")
    srv = start(server, [o.url])
    r = curl(srv, "h1", "/headers", "-H", "Host: client.example:8080")
    h = origin_headers(r)
    assert h["host"] == ["client.example:8080"], h
    assert h["x-forwarded-host"] == ["client.example:8080"], h


def test_forwarded_off(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url], proxy={"forwarded": False})
    r = curl(srv, "h1", "/headers")
    h = origin_headers(r)
    assert "x-forwarded-for" not in h and "x-forwarded-proto" not in h, h
    assert "x-forwarded-host" not in h, h


def test_hop_by_hop_request_headers_removed(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url])
    st, _, body = http_request(srv.port, "/headers", headers={
        "Connection": "close, X-Secret",
        "X-Secret": "1",
        "Keep-Alive": "timeout=5",
        "Proxy-Connection": "keep-alive",
        "TE": "trailers",
        "Proxy-Authorization": "Basic Zm9vOmJhcg==",
        "X-Normal": "kept",
    })
    assert st == 200
    h = {k.lower(): v for k, v in json.loads(body)["headers"]}
    for gone in ("x-secret", "keep-alive", "proxy-connection", "te", "proxy-authorization"):
        assert gone not in h, (gone, h)
    assert h.get("connection", "keep-alive").lower() != "close, x-secret", h
    assert "x-secret" not in h.get("connection", "").lower(), h
    assert h["x-normal"] == "kept"


@pytest.mark.parametrize("client", ["h1", "h2c", "h2"])
def test_hop_by_hop_response_headers_removed(server, origins, client):
    """The origin sends Connection: close, X-Origin-Secret / Keep-Alive / Proxy-Connection /
    X-Origin-Secret: none reaches the client (over h2 any of them is a protocol error)."""
    o = origins(name="hop")
    srv = start(server, [o.url])
    r = curl(srv, client, "/hop")
    assert r.rc == 0 and r.status == 200 and r.body == b"hop\n", r
    names = r.names()
    for gone in ("keep-alive", "x-origin-secret", "proxy-connection"):
        assert gone not in names, (gone, r)
    if client in H2:
        assert "connection" not in names, r
    assert r.get("x-kept") == "yes"
    # the origin closed its connection: the next request still works (fresh connection)
    r = curl(srv, client, "/hop")
    assert r.status == 200 and r.body == b"hop\n", r


def test_set_and_remove_headers_both_ways(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url], proxy={
        "set-headers": {"X-Set": "by-ferry", "X-Replace": "new"},
        "remove-headers": ["X-Drop"],
        "response-set-headers": {"X-Replace-Me": "ferry", "X-Added": "yes"},
        "response-remove-headers": ["X-Remove-Me"],
        "via": True,
    })
    for c in ("h1", "h2"):
        r = curl(srv, c, "/headers", "-H", "X-Replace: old", "-H", "X-Drop: 1",
                 "-H", "X-Keep: 1")
        assert r.status == 200, r
        h = origin_headers(r)
        assert h["x-set"] == ["by-ferry"], h
        assert h["x-replace"] == ["new"], h
        assert "x-drop" not in h, h
        assert h["x-keep"] == ["1"], h
        assert h["via"] == ["1.1 ferry"], h
        assert r.all("x-replace-me") == ["ferry"], r
        assert r.get("x-added") == "yes", r
        assert "x-remove-me" not in r.names(), r
        assert r.get("x-origin") == "hdr", r
        assert r.get("via") == "1.1 ferry", r


def test_strip_and_add_prefix(server, origins):
    o = origins(name="pfx")
    routes = [
        {"match": {"path": "/api"},
         "proxy": {"upstream": "up", "strip-prefix": "/api", "add-prefix": "/v1"}},
        {"match": {"path": "/static"}, "proxy": {"upstream": "up", "strip-prefix": "/static/"}},
        {"match": {"path": "/"}, "proxy": {"upstream": "up", "add-prefix": "/root/"}},
    ]
    srv = server(proxy_config([o.url], routes=routes))
    cases = [
        ("/api/users?x=1", "/v1/users?x=1"),
        ("/api/a/b/c", "/v1/a/b/c"),
        ("/static/css/site.css", "/css/site.css"),
        ("/static", "/"),
        ("/other/page?q=2", "/root/other/page?q=2"),
    ]
    for c in ("h1", "h2c"):
        for sent, want in cases:
            r = curl(srv, c, sent)
            assert r.status == 200, (sent, r)
            assert json.loads(r.body)["path"] == want, (c, sent, r.body)


def test_proxy_shorthand_route(server, origins):
    o = origins(name="short")
    routes = [{"match": {"path": "/"}, "proxy": "up"}]
    srv = server(proxy_config([o.url], routes=routes))
    r = curl(srv, "h1", "/x")
    assert r.status == 200 and json.loads(r.body)["origin"] == "short", r


# =============================================================================================
# 5. resilience
# =============================================================================================


def test_retry_to_the_healthy_server(server, origins):
    o = origins(name="ok")
    srv = start(server, [dead_url(), o.url])
    for c in ("h1", "h2c"):
        for i in range(10):
            r = curl(srv, c, f"/r{i}")
            assert r.rc == 0 and r.status == 200, (c, i, r, srv.log()[-2000:])
            assert json.loads(r.body)["origin"] == "ok"
    assert o.count() == 20
    assert "refused" in srv.log()


def test_retry_on_one_keepalive_connection(server, origins):
    o = origins(name="ok")
    srv = start(server, [dead_url(), o.url])
    res = h1_get_many(srv.port, [f"/k{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20


def test_single_dead_server_is_502(server):
    url = dead_url()
    srv = start(server, [url])
    for c in ("h1", "h2c", "h2"):
        r = curl(srv, c, "/x")
        assert r.rc == 0 and r.status == 502, (c, r)
    port = url.rsplit(":", 1)[1]
    assert re.search(r"upstream up: 127\.0\.0\.1:%s: .*refused" % port, srv.log()), srv.log()


def test_never_answering_origin_is_504(server, origins):
    o = origins(kind="silent")
    srv = start(server, [o.url], upstream={"first-byte-timeout": "1s", "retries": 0})
    for c in ("h1", "h2c"):
        r = curl(srv, c, "/x")
        assert r.rc == 0 and r.status == 504, (c, r)
    assert "first-byte timeout" in srv.log(), srv.log()


def test_never_answering_origin_post_is_504(server, origins):
    o = origins(kind="silent")
    srv = start(server, [o.url], upstream={"first-byte-timeout": "1s"})
    r = curl(srv, "h2c", "/x", "--data-binary", "hello")
    assert r.rc == 0 and r.status == 504, r


def test_origin_dies_mid_response(server, origins, client):
    """Content-Length: 100000, 10 bytes, close: the client must see an aborted response
    (h1: curl 18, connection closed short; h2: RST_STREAM, curl 92/16), never a complete 200."""
    o = origins(name="die")
    srv = start(server, [o.url])
    r = curl(srv, client, "/die")
    assert r.rc != 0, r
    assert len(r.body) < DIE_LENGTH, r
    if client in H2:
        assert r.rc in (16, 92), r
    else:
        assert r.rc == 18, r
    assert "mid-response" in srv.log()
    # the proxy is fine afterwards
    r = curl(srv, client, "/ok")
    assert r.rc == 0 and r.status == 200, r


def test_origin_dies_mid_response_raw_h1(server, origins):
    """Byte level: the announced length is passed on and the connection is closed short."""
    o = origins(name="die")
    srv = start(server, [o.url])
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(b"GET /die HTTP/1.1\r\nHost: a\r\n\r\n")
        data = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        except ConnectionResetError:
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), data[:300]
    m = re.search(rb"(?i)content-length: *(\d+)", head)
    if m:
        assert int(m.group(1)) == DIE_LENGTH
        assert len(body) < DIE_LENGTH
    else:  # chunked: must not carry the terminating 0-chunk
        assert b"\r\n0\r\n\r\n" not in body, data


def test_ejection_and_recovery(server, origins):
    bad = origins(name="bad", status=500)
    good = origins(name="good")
    srv = start(server, [bad.url, good.url],
                upstream={"max-fails": 2, "fail-timeout": "5s"})
    # (5 s: the bad server must stay out for the rest of these 20 on a loaded machine)
    res = h1_get_many(srv.port, [f"/e{i}" for i in range(20)])
    statuses = [s for s, _, _ in res]
    # 5xx is relayed (never retried), but after max-fails the bad server sits out
    assert statuses.count(500) == bad.count()
    assert bad.count() <= 3, (bad.count(), good.count())
    assert good.count() >= 17
    assert "ejected" in srv.log(), srv.log()
    # recovery: the server is healthy again and comes back after fail-timeout
    bad.status = 200
    before = bad.count()
    deadline = time.time() + bound(30)  # until fail-timeout is over and it is picked again
    while bad.count() == before and time.time() < deadline:
        assert [s for s, _, _ in h1_get_many(srv.port, ["/g"])] == [200]
        time.sleep(0.1)
    assert bad.count() > before, "the ejected server never came back"
    before = bad.count()
    res = h1_get_many(srv.port, [f"/f{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20
    assert bad.count() - before >= 5, (bad.count() - before)


def test_ejection_of_refusing_server(server, origins):
    """Connect errors count too: with one dead server out of two and retries 0, the dead one is
    ejected after max-fails and later requests all succeed."""
    good = origins(name="good")
    srv = start(server, [dead_url(), good.url],
                upstream={"max-fails": 2, "fail-timeout": "10s", "retries": 0})
    res = h1_get_many(srv.port, [f"/d{i}" for i in range(20)])
    statuses = [s for s, _, _ in res]
    assert statuses.count(502) <= 2, statuses
    assert statuses[-10:] == [200] * 10, statuses


# =============================================================================================
# 6. balancing
# =============================================================================================


def test_round_robin_even_split(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url])
    res = h1_get_many(srv.port, [f"/rr{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20
    assert (a.count(), b.count()) == (10, 10)


def test_round_robin_even_split_h2(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url])
    for i in range(20):
        assert curl(srv, "h2", f"/rr{i}").status == 200
    assert (a.count(), b.count()) == (10, 10)


def test_weighted_round_robin(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [(a.url, 3), (b.url, 1)])
    res = h1_get_many(srv.port, [f"/w{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20
    assert (a.count(), b.count()) == (15, 5)


def test_random_balance_uses_both(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url], upstream={"balance": "random"})
    res = h1_get_many(srv.port, [f"/rnd{i}" for i in range(60)])
    assert [s for s, _, _ in res] == [200] * 60
    assert a.count() + b.count() == 60
    assert a.count() >= 10 and b.count() >= 10, (a.count(), b.count())


def test_least_requests_prefers_idle_server(server, origins):
    slow = origins(name="slow", delay=1.0)
    fast = origins(name="fast")
    srv = start(server, [slow.url, fast.url], upstream={"balance": "least-requests"})
    results, errors = [], []

    def worker(k):
        try:
            results.extend(s for s, _, _ in h1_get_many(srv.port, [f"/slow{k}-{i}"
                                                                   for i in range(5)]))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, (errors, srv.log()[-4000:])
    assert results == [200] * 20
    # round robin would send 10 to each; least-requests sends the slow one only what arrives
    # while both are idle
    assert slow.count() + fast.count() == 20
    assert slow.count() <= 5, (slow.count(), fast.count())


# =============================================================================================
# 7. pooling
# =============================================================================================


def test_pool_reuse_h1(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    marker = uuid.uuid4().hex
    res = h1_get_many(srv.port, [f"/tiny.txt?pool={marker}&i={i}" for i in range(200)])
    assert all(s == 200 and b == TINY for s, _, b in res)
    lines = nginx.access_lines(marker, expect=200)
    assert len(lines) == 200
    conns = {c for c, _ in lines}
    assert len(conns) <= 3, (len(conns), sorted(conns))


def test_pool_reuse_from_separate_client_connections(server, nginx):
    """Each client request on its own connection (h2c curl process): the origin connection
    outlives the client connections."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    marker = uuid.uuid4().hex
    for i in range(20):
        r = curl(srv, "h2c" if i % 2 else "h1", f"/tiny.txt?pool={marker}&i={i}")
        assert r.status == 200 and r.body == TINY, r
    lines = nginx.access_lines(marker, expect=20)
    assert len(lines) == 20
    conns = {c for c, _ in lines}
    assert len(conns) <= 2, conns


def test_pool_reuse_https_origin(server, nginx, certs):
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"], upstream={"ca": str(certs["ca"])})
    marker = uuid.uuid4().hex
    res = h1_get_many(srv.port, [f"/tiny.txt?pool={marker}&i={i}" for i in range(50)])
    assert all(s == 200 and b == TINY for s, _, b in res)
    conns = {c for c, _ in nginx.access_lines(marker, expect=50)}
    assert len(conns) <= 2, conns


def test_keepalive_zero_disables_pool(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"], upstream={"keepalive": 0})
    marker = uuid.uuid4().hex
    res = h1_get_many(srv.port, [f"/tiny.txt?pool={marker}&i={i}" for i in range(10)])
    assert all(s == 200 for s, _, _ in res)
    conns = {c for c, _ in nginx.access_lines(marker, expect=10)}
    assert len(conns) == 10, conns


def test_pooled_connection_closed_by_origin_is_not_fatal(server, origins):
    """The Python origin closes kept-alive connections after /hop (Connection: close); and
    a restarted origin invalidates every pooled connection: requests still succeed."""
    o = origins(name="p")
    srv = start(server, [o.url])
    assert curl(srv, "h1", "/a").status == 200
    assert curl(srv, "h1", "/hop").status == 200
    assert curl(srv, "h1", "/b").status == 200
    # restart the origin on the same port: the pooled connection is dead
    port = o.port
    o.stop()
    origins(name="p2", port=port)
    for i in range(3):
        r = curl(srv, "h1", f"/after{i}")
        assert r.rc == 0 and r.status == 200, (r, srv.log()[-2000:])
        assert json.loads(r.body)["origin"] == "p2", r


# =============================================================================================
# 8. load
# =============================================================================================


def _h2load(args, timeout=60):
    p = subprocess.run(["h2load", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("mode", ["h2c", "h1"])
def test_h2load_through_proxy(server, nginx, mode):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    args = ["-n", "2000", "-c", "8"]
    args += ["-m", "8"] if mode == "h2c" else ["--h1"]
    rc, out = _h2load(args + [srv.url("/tiny.txt")])
    assert rc == 0, out
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored", out)
    assert m, out
    assert int(m.group(4)) == 2000 and int(m.group(5)) == 0 and int(m.group(6)) == 0, out
    assert re.search(r"status codes: 2000 2xx", out), out


def test_h2load_big_bodies_through_proxy(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    rc, out = _h2load(["-n", "200", "-c", "4", "-m", "4", srv.url("/big.bin")])
    assert rc == 0, out
    assert re.search(r"200 succeeded, 0 failed, 0 errored", out), out
    assert re.search(r"status codes: 200 2xx", out), out


# =============================================================================================
# 9. more response shapes and failure modes
# =============================================================================================


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
