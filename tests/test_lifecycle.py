"""Listener and process lifecycle: accepting when descriptors run out, ports another process
holds, the stop (SIGTERM) with long-lived connections, tunnel idle timeouts, and the access
log's order at stop.

Every wait is bounded (conftest.wait_for); nothing asserts on durations.
"""
import asyncio
import calendar
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import BAD_LOG, FERRY, bound, free_port, http_request, owns_port, wait_for


class Proc:
    """ferry run -c, started here rather than by the `server` fixture when the test needs
    what the fixture does not give: a low RLIMIT_NOFILE, or stdout and stderr in one file
    (so that the order of access-log lines and error-log lines can be read)."""

    def __init__(self, tmp, text, nofile=None, name="p"):
        self.dir = Path(tmp) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "ferry.yaml"
        cfg.write_text(text)
        self.logfile = self.dir / "ferry.log"
        self.fh = open(self.logfile, "w")
        env = dict(os.environ, HOME=str(self.dir), ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")

        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen([FERRY, "run", "-c", str(cfg)], stdout=self.fh,
                                     stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=limit if nofile else None)

    def log(self):
        return self.logfile.read_text(errors="replace")

    def wait_listening(self, port, kind="tcp"):
        wait_for(lambda: owns_port(self.proc.pid, port, kind), 15,
                 f"ferry to listen on {kind} {port}", self.proc)

    def stop(self):
        """SIGTERM; the exit status must be 0 and the log free of alerts."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=bound(30))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.fh.close()
        log = self.log()
        bad = [l for l in log.splitlines() if any(b in l for b in BAD_LOG)]
        assert not bad, log[-4000:]
        assert rc == 0, f"ferry exited {rc}\n{log[-4000:]}"
        return log

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.fh.close()


# ---- 1. accept when descriptors run out ----

def test_accept_pauses_when_out_of_file_descriptors(tmp_path):
    """Under RLIMIT_NOFILE 32, forty clients exhaust Ferry's descriptors. accept4 then fails
    with EMFILE while the connection stays queued (the socket stays readable): Ferry pauses
    the listener and logs one line per second with a count, instead of a busy loop logging
    ~150k lines a second. Once the clients close, new connections are served again. At start,
    Ferry warns that limits.connections does not fit under the limit."""
    port = free_port()
    p = Proc(tmp_path, f"""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
""", nofile=32)
    clients = []
    try:
        p.wait_listening(port)
        for _ in range(40):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))

        def accept_lines():
            return [l for l in p.log().splitlines() if "accept" in l and "[error]" in l]

        # two reports (more than a second of exhaustion), or the old flood
        wait_for(lambda: len([l for l in accept_lines() if "paused" in l]) >= 2
                 or len(accept_lines()) > 50, 20, "accept failures to be reported", p.proc)
        lines = accept_lines()
        assert len(lines) < 50, f"{len(lines)} accept error lines:\n" + "\n".join(lines[:10])
        assert re.search(r"out of file descriptors \(EMFILE\); paused 100 ms, [0-9]+ refused",
                         lines[0]), lines[0]
        for c in clients:
            c.close()
        clients = []
        status, _, body = http_request(port, "/after")
        assert (status, body) == (200, b"ok\n")
        assert "RLIMIT_NOFILE is 32" in p.log(), p.log()[:2000]
    finally:
        for c in clients:
            c.close()
    p.stop()


def test_l4_accept_pauses_when_out_of_file_descriptors(tmp_path):
    """The same for an L4 TCP listener: bounded accept error lines under EMFILE, and a relayed
    connection works again once the clients have closed."""
    import socketserver

    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            while True:
                b = self.request.recv(65536)
                if not b:
                    return
                self.request.sendall(b)

    origin = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    origin.daemon_threads = True
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    port = free_port()
    p = Proc(tmp_path, f"""
workers: 1
l4:
  - listen: 127.0.0.1:{port}
    mode: tcp
    target: 127.0.0.1:{origin.server_address[1]}
""", nofile=32)
    clients = []
    try:
        p.wait_listening(port)
        for _ in range(40):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))

        def accept_lines():
            return [l for l in p.log().splitlines() if "accept" in l and "[error]" in l]

        wait_for(lambda: len([l for l in accept_lines() if "paused" in l]) >= 2
                 or len(accept_lines()) > 50, 20, "accept failures to be reported", p.proc)
        lines = accept_lines()
        assert len(lines) < 50, f"{len(lines)} accept error lines:\n" + "\n".join(lines[:10])
        for c in clients:
            c.close()
        clients = []
        with socket.create_connection(("127.0.0.1", port), timeout=bound(10)) as s:
            s.sendall(b"ping")
            assert s.recv(100) == b"ping"
    finally:
        for c in clients:
            c.close()
        origin.shutdown()
        origin.server_close()
    p.stop()


# ---- 2. a port held by another process ----

def _wait_exit(p):
    try:
        return p.proc.wait(timeout=bound(15))
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("the second ferry started on a port another one holds:\n" + p.log())


def _http_conf(port, listener_extra=""):
    return f"""
workers: 2
listeners:
  - address: 127.0.0.1:{port}
{listener_extra}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
"""


def test_second_ferry_on_a_held_tcp_port_exits_naming_it(tmp_path):
    port = free_port()
    a = Proc(tmp_path, _http_conf(port), name="a")
    try:
        a.wait_listening(port)
        b = Proc(tmp_path, _http_conf(port), name="b")
        rc = _wait_exit(b)
        b.fh.close()
        log = b.log()
        assert rc == 1, log
        assert f"listen on 127.0.0.1:{port} (tcp): Address already in use" in log, log
        assert "share: true" in log
        # the first one is untouched
        assert http_request(port, "/")[0] == 200
    finally:
        a.stop()


def test_share_true_lets_two_ferries_split_a_port(tmp_path):
    port = free_port()
    conf = _http_conf(port, listener_extra="    share: true")
    a = Proc(tmp_path, conf, name="a")
    try:
        a.wait_listening(port)
        b = Proc(tmp_path, conf, name="b")
        try:
            b.wait_listening(port)
            assert a.proc.poll() is None
        finally:
            b.stop()
    finally:
        a.stop()


def test_same_address_twice_in_one_config_is_refused(tmp_path):
    port = free_port()
    p = Proc(tmp_path, f"""
listeners:
  - address: 127.0.0.1:{port}
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 204}}
""")
    rc = _wait_exit(p)
    p.fh.close()
    # refused when the config is loaded, at the second listener's line, before any bind
    assert rc == 1 and "listeners[1].address" in p.log() and "already taken by listeners[0]" \
        in p.log(), p.log()


@pytest.mark.parametrize("mode", ["tcp", "udp"])
def test_second_ferry_on_a_held_l4_port_exits_naming_it(tmp_path, mode):
    port, origin = free_port(), free_port()
    text = f"""
workers: 2
l4:
  - listen: 127.0.0.1:{port}
    mode: {mode}
    target: 127.0.0.1:{origin}
"""
    a = Proc(tmp_path, text, name="a")
    try:
        a.wait_listening(port, mode)
        b = Proc(tmp_path, text, name="b")
        rc = _wait_exit(b)
        b.fh.close()
        assert rc == 1, b.log()
        assert f"({mode}): Address already in use" in b.log(), b.log()
        # shared on purpose: both run
        c = Proc(tmp_path, text.replace("    mode:", "    share: true\n    mode:"), name="c")
        try:
            c.wait_listening(port, mode)
        finally:
            c.stop()
    finally:
        a.stop()


def test_second_ferry_on_a_held_h3_udp_port_exits(tmp_path):
    """h3 listens on UDP too: a process holding only the UDP port is refused as well."""
    port = free_port()
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as another Ferry's
    holder.bind(("127.0.0.1", port))
    try:
        p = Proc(tmp_path, f"""
data-dir: {tmp_path / "d"}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
routes:
  - respond: {{status: 204}}
""")
        rc = _wait_exit(p)
        p.fh.close()
        assert rc == 1 and f"127.0.0.1:{port} (udp): Address already in use" in p.log(), p.log()
    finally:
        holder.close()


# ---- 5. the access log at stop ----

def test_access_log_precedes_the_drain_notice_and_is_in_time_order(tmp_path):
    """Two workers, the access log and the error log in one file (stdout and stderr of the
    process). Requests over three wall-clock seconds, then SIGTERM: every access-log line
    is written before the "draining" notice (workers flush first, then the notice is
    logged), and the lines are in time order across workers within a second."""
    port = free_port()
    p = Proc(tmp_path, f"""
workers: 2
log: {{access: stdout, access-format: json}}
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
""")
    p.wait_listening(port)
    dates, n = set(), 0
    deadline = time.monotonic() + bound(20)
    while len(dates) < 3 and time.monotonic() < deadline:  # two second boundaries crossed
        status, h, _ = http_request(port, f"/r{n}")
        assert status == 200
        dates.add(h["date"])
        n += 1
    assert len(dates) == 3, dates
    log = p.stop()
    lines = log.splitlines()
    drain = [i for i, l in enumerate(lines) if "draining connections" in l]
    assert len(drain) == 1, log[-3000:]
    access = [(i, json.loads(l)) for i, l in enumerate(lines) if l.startswith("{")]
    assert len(access) == n, f"{len(access)} access lines for {n} requests"
    late = [i for i, _ in access if i > drain[0]]
    assert not late, f"{len(late)} access lines after the drain notice:\n" + log[-3000:]
    # workers buffer their lines; each writes them out before its first line of a new second
    # and just after each second, so no line is more than a second behind one before it
    stamps = [calendar.timegm(time.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ")) for _, e in access]
    newest, behind = stamps[0], []
    for i, t in enumerate(stamps):
        if t < newest - 1:
            behind.append((i, t, newest))
        newest = max(newest, t)
    assert not behind, f"lines more than 1 s out of time order: {behind[:5]}"


# ---- 3. the stop with long-lived connections; 4. tunnel timeouts ----

class WsOrigin:
    """python3-websockets echo server in its own thread; records the close code each
    connection received from Ferry (None: the connection ended without a Close frame)."""

    def __init__(self):
        import websockets
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.codes = []
        self.closed = threading.Event()
        ready = threading.Event()

        async def echo(ws, path=None):
            try:
                async for m in ws:
                    await ws.send(m)
            except websockets.ConnectionClosed:
                pass
            self.codes.append(ws.close_code if ws.close_code != 1006 else None)
            self.closed.set()

        async def main():
            self.stop_fut = self.loop.create_future()
            async with websockets.serve(echo, "127.0.0.1", self.port, close_timeout=5):
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
    o = WsOrigin()
    yield o
    o.stop()


def _ws_conf(origin_port, limits="", upstream=""):
    return f"""
workers: 1
log: {{{{level: info}}}}
limits: {{{{{limits}}}}}
listeners:
  - address: 127.0.0.1:{{port}}
routes:
  - proxy: {{{{upstream: up}}}}
upstreams:
  - name: up
    servers: [http://127.0.0.1:{origin_port}]
{upstream}
"""


def _wait_log(srv, text):
    wait_for(lambda: text in srv.log(), 15, f"'{text}' in the log")


def test_stop_sends_websocket_close_1001_to_both_sides(server, ws_origin):
    """SIGTERM with a proxied WebSocket open (HTTP/1.1 Upgrade both sides): the client gets a
    Close frame with 1001 (going away) before the connection ends, and so does the origin;
    then Ferry exits 0 well before the drain deadline would cut the tunnel (1006)."""
    import websockets
    srv = server(_ws_conf(ws_origin.port))

    async def run():
        async with websockets.connect(f"ws://127.0.0.1:{srv.port}/chat", open_timeout=5,
                                      close_timeout=5) as ws:
            await ws.send("before")
            assert await asyncio.wait_for(ws.recv(), 5) == "before"
            srv.proc.send_signal(signal.SIGTERM)
            with pytest.raises(websockets.ConnectionClosed) as e:
                await asyncio.wait_for(ws.recv(), bound(8))
            return e.value

    closed = asyncio.run(run())
    assert closed.rcvd is not None, f"no Close frame from Ferry: {closed!r}"
    assert closed.rcvd.code == 1001, closed.rcvd
    assert ws_origin.closed.wait(bound(10))
    assert ws_origin.codes == [1001], ws_origin.codes
    assert srv.proc.wait(timeout=bound(15)) == 0
    assert "drain deadline passed" not in srv.log()


def _held_origin():
    """An HTTP/1.1 origin that holds GET /slow until `release` is set."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    arrived, release = threading.Event(), threading.Event()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path == "/slow":
                arrived.set()
                release.wait(30)
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, arrived, release


def _reset_within(s, seconds):
    """Whether socket `s` goes to TCP state CLOSE (a reset came) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] == 7:  # TCP_CLOSE
            return True
        time.sleep(0.02)
    return False


def _read_response(s):
    """One HTTP/1.1 response with a Content-Length body from socket `s`: (head, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        assert b, f"closed before a response head: {buf!r}"
        buf += b
    head, _, body = buf.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < n:
        b = s.recv(65536)
        assert b, "closed inside the body"
        body += b
    return head.decode("latin-1"), body


def test_stop_closes_kept_alive_h1_connections_with_fin_and_connection_close(server):
    """SIGTERM while one request is in flight (the origin holds it) and another kept-alive
    connection is idle: the idle one gets a FIN, and a request the client sends on it
    afterwards meets EOF, not a reset (Ferry lingers instead of closing with a request
    unread); the request in flight is answered with `Connection: close`, then a FIN."""
    httpd, arrived, release = _held_origin()
    try:
        srv = server(_ws_conf(httpd.server_address[1]))
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
        busy = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
        idle.sendall(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = _read_response(idle)
        assert head.startswith("HTTP/1.1 200") and "connection: close" not in head.lower()
        busy.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert arrived.wait(bound(10))
        srv.proc.send_signal(signal.SIGTERM)
        _wait_log(srv, "draining connections")
        assert idle.recv(100) == b"", "the idle kept-alive connection was not closed"
        idle.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")  # the client had not noticed
        # a socket closed with our request unread answers with a reset at once (TCP state
        # CLOSE); a lingering one reads it and stays half-closed (CLOSE_WAIT here): watch
        # for the reset for a bounded while (its absence is the point)
        assert not _reset_within(idle, 1.0), "the late request was answered with a reset"
        assert idle.recv(100) == b""
        release.set()
        head, body = _read_response(busy)
        assert head.startswith("HTTP/1.1 200") and body == b"ok\n"
        assert "connection: close" in head.lower(), head
        assert busy.recv(100) == b""
        idle.close()
        busy.close()
        assert srv.proc.wait(timeout=bound(15)) == 0
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def test_stop_answers_a_request_that_arrives_with_the_signal(server):
    """A kept-alive client sends its second request as the SIGTERM arrives: whichever comes
    first in the worker, the request is answered and the connection then ends with a FIN (a
    close with the request unread in the socket would reset it)."""
    httpd, _, _ = _held_origin()
    try:
        srv = server(_ws_conf(httpd.server_address[1]))
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
        s.sendall(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
        _read_response(s)
        s.sendall(b"GET /two HTTP/1.1\r\nHost: x\r\n\r\n")
        srv.proc.send_signal(signal.SIGTERM)
        head, body = _read_response(s)
        assert head.startswith("HTTP/1.1 200") and body == b"ok\n"
        assert s.recv(100) == b""
        s.close()
        assert srv.proc.wait(timeout=bound(15)) == 0
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_stop_sends_goaway_to_h2_clients(server):
    """An idle h2c connection gets GOAWAY (NO_ERROR) on SIGTERM before the connection ends."""
    import h2.config
    import h2.connection
    import h2.events
    srv = server("""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h2c]
routes:
  - respond: {{status: 200, body: "ok\\n"}}
""")
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "http"),
                       (":authority", "x")], end_stream=True)
    s.sendall(c.data_to_send())
    events, ended = [], False
    while not ended:
        data = s.recv(65536)
        assert data, "closed before the response"
        for e in c.receive_data(data):
            events.append(e)
            ended |= isinstance(e, h2.events.StreamEnded)
        s.sendall(c.data_to_send())
    srv.proc.send_signal(signal.SIGTERM)
    goaway = None
    for _ in range(100):
        data = s.recv(65536)
        if not data:
            break
        for e in c.receive_data(data):
            if isinstance(e, h2.events.ConnectionTerminated):
                goaway = e
    s.close()
    assert goaway is not None and goaway.error_code == 0, goaway
    assert srv.proc.wait(timeout=bound(15)) == 0


def test_websocket_tunnel_timeout_sends_close_1001(server, ws_origin):
    """limits.tunnel-timeout (1 s here) governs an open WebSocket, not the upstream's
    idle-timeout (400 ms): a WebSocket idle longer than the latter still echoes, and one idle
    past the tunnel timeout gets a Close frame with 1001 on both sides, not a cut (1006)."""
    import websockets
    srv = server(_ws_conf(ws_origin.port, limits="tunnel-timeout: 1500ms",
                          upstream="    idle-timeout: 400ms"))

    async def run():
        async with websockets.connect(f"ws://127.0.0.1:{srv.port}/chat", open_timeout=5,
                                      close_timeout=5, ping_interval=None) as ws:
            await ws.send("a")
            assert await asyncio.wait_for(ws.recv(), 5) == "a"
            # idle for longer than the upstream's idle-timeout (the scenario, not a wait)
            await asyncio.sleep(0.8)
            await ws.send("b")
            assert await asyncio.wait_for(ws.recv(), 5) == "b"
            with pytest.raises(websockets.ConnectionClosed) as e:
                await asyncio.wait_for(ws.recv(), bound(20))
            return e.value

    closed = asyncio.run(run())
    assert closed.rcvd is not None and closed.rcvd.code == 1001, repr(closed)
    assert ws_origin.closed.wait(bound(10))
    assert ws_origin.codes == [1001], ws_origin.codes
    assert "tunnel idle timeout: closing the WebSocket (1001)" in srv.log()


def _ws_frame(payload, opcode=1):
    mask = os.urandom(4)
    assert len(payload) < 126
    return (bytes([0x80 | opcode, 0x80 | len(payload)]) + mask +
            bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def _ws_frames(buf):
    """Whole unmasked frames in buf: [(opcode, payload)], rest."""
    out = []
    while len(buf) >= 2 and len(buf) >= 2 + (buf[1] & 0x7f) and (buf[1] & 0x7f) < 126:
        n = buf[1] & 0x7f
        out.append((buf[0] & 0x0f, buf[2:2 + n]))
        buf = buf[2 + n:]
    return out, buf


def test_stop_sends_websocket_close_1001_over_h2_extended_connect(server, ws_origin):
    """The same for an h2c client's WebSocket (RFC 8441 extended CONNECT, HTTP/1.1 Upgrade to
    the origin): on SIGTERM a Close frame with 1001 arrives in the stream's DATA before the
    stream ends, and the origin gets one too."""
    import h2.config
    import h2.connection
    import h2.events
    srv = server(_ws_conf(ws_origin.port).replace("127.0.0.1:{port}",
                                                   "127.0.0.1:{port}\n    protocols: [h1, h2c]"))
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    while not c.remote_settings.enable_connect_protocol:
        c.receive_data(s.recv(65535))
        s.sendall(c.data_to_send())
    c.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                       (":path", "/chat"), (":authority", "127.0.0.1"),
                       ("sec-websocket-version", "13")])
    c.send_data(1, _ws_frame(b"hello"))
    s.sendall(c.data_to_send())
    # frames are read raw from here: python3-h2 refuses DATA after a GOAWAY, which is legal
    # (RFC 9113 §6.8: streams up to the last id go on)
    raw, buf, frames, ended, signalled, goaway = b"", b"", [], False, False, False
    for _ in range(200):  # bounded: each round is one recv
        data = s.recv(65535)
        if not data:
            break
        raw += data
        while len(raw) >= 9:
            n = int.from_bytes(raw[:3], "big")
            if len(raw) < 9 + n:
                break
            ftype, flags, sid = raw[3], raw[4], int.from_bytes(raw[5:9], "big") & 0x7fffffff
            payload, raw = raw[9:9 + n], raw[9 + n:]
            goaway |= ftype == 7
            if sid == 1 and ftype == 0:  # DATA
                if flags & 0x8:
                    payload = payload[1:len(payload) - payload[0]]
                buf += payload
            if sid == 1 and (ftype in (0, 1) and flags & 0x1 or ftype == 3):
                ended = True
        got, buf = _ws_frames(buf)
        frames += got
        if (1, b"hello") in frames and not signalled:
            srv.proc.send_signal(signal.SIGTERM)
            signalled = True
        if ended:
            break
    s.close()
    assert signalled, frames
    assert (8, b"\x03\xe9") in frames, f"no Close 1001 for the h2 client: {frames}"
    assert goaway and ended
    assert ws_origin.closed.wait(bound(10))
    assert ws_origin.codes == [1001], ws_origin.codes
    assert srv.proc.wait(timeout=bound(15)) == 0


def test_websocket_close_handshake_is_cut_after_tunnel_close_timeout(server):
    """Peers that ignore Ferry's Close (an origin that never answers it, a client that sends
    nothing): after limits.tunnel-close-timeout the tunnel is cut; each side had received a
    Close 1001 first (the origin's masked, as from a client)."""
    import base64
    import hashlib
    got, done, end = bytearray(), threading.Event(), threading.Event()
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)

    def origin():
        c, _ = lsock.accept()
        c.settimeout(bound(30))
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(4096)
        key = re.search(rb"(?i)sec-websocket-key: *([^\r]+)", head).group(1)
        acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                               .digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        try:
            while True:  # never answers: reads until Ferry's FIN
                b = c.recv(4096)
                if not b:
                    break
                got.extend(b)
        except OSError:
            pass
        done.set()
        end.wait(bound(30))  # ... and does not close either
        c.close()

    threading.Thread(target=origin, daemon=True).start()
    try:
        srv = server(_ws_conf(lsock.getsockname()[1],
                              limits="tunnel-timeout: 300ms, tunnel-close-timeout: 300ms"))
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(20))
        s.sendall(b"GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        buf = b""
        while True:  # bounded by the socket timeout: Ferry ends the connection
            b = s.recv(4096)
            if not b:
                break
            buf += b
        s.close()
        head, _, rest = buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), buf
        assert rest == b"\x88\x02\x03\xe9", rest  # Close 1001, then EOF
        assert done.wait(bound(10))
        assert len(got) == 8 and got[:2] == b"\x88\x82", bytes(got)
        assert bytes(b ^ got[2 + i % 4] for i, b in enumerate(got[6:8])) == b"\x03\xe9"
        _wait_log(srv, "WebSocket close handshake timed out")
    finally:
        end.set()
        lsock.close()
