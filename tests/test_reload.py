"""Config generations and hot reload (issue 13): SIGHUP and `ferry reload` build a new
generation; new connections get it, open ones finish on theirs, unchanged listeners keep their
sockets, a config with an error leaves the running one serving.

Every reload is waited for by its log line ("reload: generation N active on all workers");
every loop is bounded.
"""
import asyncio
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import FERRY, free_port, wait_for

LOAD = str(Path(FERRY).parent / "ferry-load")
H3GET = str(Path(FERRY).parent / "h3get")


def make_cert(d, cn):
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(d / "key.pem"), "-out",
                    str(d / "cert.pem"), "-days", "2", "-subj", f"/CN={cn}", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True,
                   capture_output=True, timeout=30)
    der = ssl.PEM_cert_to_DER_cert((d / "cert.pem").read_text())
    return d / "cert.pem", d / "key.pem", der


class TcpEcho:
    """A threaded TCP echo server (the L4 target and the CONNECT tunnel's origin)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.echo, args=(c,), daemon=True).start()

    @staticmethod
    def echo(c):
        with c:
            while True:
                try:
                    b = c.recv(65536)
                except OSError:
                    return
                if not b:
                    return
                c.sendall(b)

    def close(self):
        self.sock.close()


class WsEcho:
    """python3-websockets echo server in its own thread and event loop (no keepalive pings:
    the test's client answers only while it echoes)."""

    def __init__(self):
        import websockets
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def echo(ws, path=None):
            async for m in ws:
                await ws.send(m)

        async def main():
            self.stop_fut = self.loop.create_future()
            async with websockets.serve(echo, "127.0.0.1", self.port, ping_interval=None):
                ready.set()
                await self.stop_fut

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),),
                                       daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def stop(self):
        self.loop.call_soon_threadsafe(self.stop_fut.set_result, None)
        self.thread.join(timeout=10)


def render(p, v, cert, key, extra_listener=False, extra_upstream=False):
    """The config of reload number `v`: the /r body names v; every other variant adds an
    upstream (and a route to it) and a listener."""
    out = [f"workers: 2",
           "listeners:",
           f"  - address: 127.0.0.1:{p['plain']}",
           f"    protocols: [h1, h2c]",
           f"  - address: 127.0.0.1:{p['tls']}",
           f"    protocols: [h1, h2, h3]",
           f"    tls: {{cert: {cert}, key: {key}}}",
           f"  - address: 127.0.0.1:{p['mitm']}",
           f"    kind: intercept"]
    if extra_listener:
        out += [f"  - address: 127.0.0.1:{p['extra']}"]
    out += ["routes:",
            "  - match: {path: /r}",
            f"    respond: {{body: \"v{v}\\n\"}}",
            "  - match: {path: /proxy/}",
            "    proxy: {upstream: origin}",
            "  - match: {path: /ws}",
            "    proxy: {upstream: ws}",
            "  - match: {path: /echo}",
            "    echo: {}"]
    if extra_upstream:
        out += ["  - match: {path: /extra/}", "    proxy: {upstream: extra}"]
    out += ["upstreams:",
            "  - name: origin",
            f"    servers: [http://127.0.0.1:{p['origin']}]",
            "  - name: ws",
            f"    servers: [http://127.0.0.1:{p['ws']}]"]
    if extra_upstream:
        out += ["  - name: extra", f"    servers: [http://127.0.0.1:{p['origin']}]"]
    out += ["l4:", f"  - listen: 127.0.0.1:{p['l4']}", f"    target: 127.0.0.1:{p['echo']}",
            "intercept:", f"  ca-dir: {p['data']}/ca"]
    return "\n".join(out) + "\n"


class Reloadable:
    """A ferry run -c FILE --pid-file PATH whose FILE the test rewrites."""

    def __init__(self, server, tmp, ports, cert, key, **kw):
        self.tmp = tmp
        self.cfg = tmp / "reload.yaml"
        self.pid = tmp / "ferry.pid"
        self.ports = ports
        self.gen = 1
        self.cfg.write_text(render(ports, 1, cert, key, **kw))
        self.f = server("", start=False)
        self.f.args = ["run", "-c", str(self.cfg), "--pid-file", str(self.pid)]
        self.f.start(wait_ports=[ports["plain"], ports["tls"], ports["mitm"], ports["l4"]],
                     udp_ports=[ports["tls"]])
        wait_for(lambda: self.pid.exists(), 15, "the pid file")

    def reload(self, text=None, via_cli=False):
        if text is not None:
            self.cfg.write_text(text)
        self.gen += 1
        if via_cli:
            r = subprocess.run([FERRY, "reload", "-c", str(self.cfg), "--pid-file",
                                str(self.pid)], capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
        else:
            self.f.proc.send_signal(signal.SIGHUP)
        line = f"reload: generation {self.gen} active on all workers"
        wait_for(lambda: line in self.f.log(), 30, line, self.f.proc)


@pytest.fixture
def env(tmp_path):
    ws, echo = WsEcho(), TcpEcho()
    origin = subprocess.Popen([FERRY, "serve", str(tmp_path), "--listen",
                               f"127.0.0.1:{free_port()}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    yield ws, echo, origin
    ws.stop()
    echo.close()
    origin.terminate()
    origin.wait(timeout=10)


def ports_for(tmp, ws, echo, origin_port):
    return {"plain": free_port(), "tls": free_port(), "mitm": free_port(), "extra": free_port(),
            "l4": free_port(), "origin": origin_port, "ws": ws.port, "echo": echo.port,
            "data": tmp / "data"}


def get(port, path, tls=False, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def peer_der(port):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            return t.getpeercert(binary_form=True)


@pytest.fixture
def origin_server(server, tmp_path):
    o = server("listeners: [{{address: 127.0.0.1:{port}}}]\n"
               "routes: [{{respond: {{body: \"origin\\n\"}}}}]\n")
    return o


def test_reload_routes_certificate_and_listeners(server, tmp_path, origin_server):
    """A changed route answers at once on new connections; a rotated certificate is what a new
    handshake sees, over TCP and over QUIC; an added listener opens and a removed one closes, the others keep their
    sockets (same inode); `ferry reload` validates first and signals the pid file's server."""
    ws, echo = WsEcho(), TcpEcho()
    try:
        c1, k1, der1 = make_cert(tmp_path / "c1", "one")
        c2, k2, der2 = make_cert(tmp_path / "c2", "two")
        p = ports_for(tmp_path, ws, echo, origin_server.port)
        r = Reloadable(server, tmp_path, p, c1, k1)
        assert get(p["plain"], "/r") == (200, b"v1\n")
        assert peer_der(p["tls"]) == der1
        assert h3_verifies(p["tls"], c1) and not h3_verifies(p["tls"], c2)
        inode = os.stat(f"/proc/{r.f.proc.pid}/fd/0")  # noqa: F841  (process alive)
        before = listen_inodes(r.f.proc.pid, p["plain"])
        assert before
        r.reload(render(p, 2, c2, k2, extra_listener=True, extra_upstream=True), via_cli=True)
        assert get(p["plain"], "/r") == (200, b"v2\n")
        assert get(p["extra"], "/r") == (200, b"v2\n")
        assert get(p["plain"], "/extra/x") == (200, b"origin\n")
        assert peer_der(p["tls"]) == der2
        assert h3_verifies(p["tls"], c2) and not h3_verifies(p["tls"], c1)
        assert listen_inodes(r.f.proc.pid, p["plain"]) == before  # no rebind
        r.reload(render(p, 3, c1, k1))
        assert get(p["plain"], "/r") == (200, b"v3\n")
        assert get(p["plain"], "/extra/x")[0] == 404
        assert peer_der(p["tls"]) == der1
        assert h3_verifies(p["tls"], c1) and not h3_verifies(p["tls"], c2)
        wait_for(lambda: not listen_inodes(r.f.proc.pid, p["extra"]), 15,
                 "the removed listener to close")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", p["extra"]), timeout=5).close()
    finally:
        ws.stop()
        echo.close()


def h3_verifies(port, ca):
    """Whether an h3 request over a new QUIC connection verifies against `ca` alone."""
    q = subprocess.run([H3GET, "--ca", str(ca), "127.0.0.1", str(port), "/r"],
                       capture_output=True, text=True, timeout=60)
    return q.returncode == 0


def listen_inodes(pid, port):
    """Inodes of the listening TCP sockets on `port` that process `pid` holds."""
    want = f"0100007F:{port:04X}"
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[1] == want and f[3] == "0A":
            inodes.add(f[9])
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            t = os.readlink(fd)
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", t)
        if m and m.group(1) in inodes:
            held.add(m.group(1))
    return held


def test_reload_bad_config_keeps_serving(server, tmp_path, origin_server):
    """A config with an error: `ferry reload` prints file:line:col as `ferry check` does and
    exits 1 without signalling; SIGHUP with the same file logs file:line:col and the old
    generation goes on serving."""
    ws, echo = WsEcho(), TcpEcho()
    try:
        c1, k1, _ = make_cert(tmp_path / "c1", "one")
        p = ports_for(tmp_path, ws, echo, origin_server.port)
        r = Reloadable(server, tmp_path, p, c1, k1)
        good = r.cfg.read_text()
        r.cfg.write_text(good.replace("    echo: {}\n", "    echo: {}\n    bogus: 1\n"))
        check = subprocess.run([FERRY, "check", "-c", str(r.cfg)], capture_output=True,
                               text=True, timeout=30)
        rel = subprocess.run([FERRY, "reload", "-c", str(r.cfg), "--pid-file", str(r.pid)],
                             capture_output=True, text=True, timeout=30)
        assert check.returncode == 1 and rel.returncode == 1, rel.stderr
        err = [l for l in check.stderr.splitlines() if not l.startswith("ferry: ")]
        assert err and all(re.match(r"^\S+reload\.yaml:\d+:\d+: ", l) for l in err), check.stderr
        assert rel.stderr.splitlines()[:-1] == err, rel.stderr
        assert rel.stderr.splitlines()[-1] == f"ferry: reload: {r.cfg} is not valid"
        r.f.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "the running configuration stays" in r.f.log(), 30, "the refusal",
                 r.f.proc)
        assert err[0] in r.f.log()
        assert get(p["plain"], "/r") == (200, b"v1\n")
        assert "generation 2" not in r.f.log()
        # and a good one after it still applies
        r.reload(good.replace('"v1\\n"', '"v9\\n"'))
        assert get(p["plain"], "/r") == (200, b"v9\n")
    finally:
        ws.stop()
        echo.close()


def test_reload_under_load_and_long_lived_traffic(server, tmp_path, origin_server):
    """ferry-load at a steady rate through h1, h2 and a proxied route, and h3 requests, while
    the config is reloaded many times (routes changed, an upstream added and removed, a
    certificate rotated, a listener added and removed): zero failed requests. A WebSocket, an
    h2 stream, a CONNECT tunnel and an L4 session opened before the first reload still echo
    after the last."""
    import h2.config
    import h2.connection
    import h2.events
    import websockets
    ws, echo = WsEcho(), TcpEcho()
    try:
        c1, k1, _ = make_cert(tmp_path / "c1", "one")
        c2, k2, _ = make_cert(tmp_path / "c2", "two")
        p = ports_for(tmp_path, ws, echo, origin_server.port)
        r = Reloadable(server, tmp_path, p, c1, k1)

        # long-lived traffic, opened before the first reload
        l4 = socket.create_connection(("127.0.0.1", p["l4"]), timeout=10)
        l4.sendall(b"l4-1")
        assert l4.recv(10) == b"l4-1"
        tun = socket.create_connection(("127.0.0.1", p["mitm"]), timeout=10)
        tun.sendall(f"CONNECT 127.0.0.1:{p['echo']} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        resp = b""
        while b"\r\n\r\n" not in resp:
            b = tun.recv(4096)
            assert b, resp
            resp += b
        assert resp.startswith(b"HTTP/1.1 200"), resp
        tun.sendall(b"tunnel-1")
        assert tun.recv(100) == b"tunnel-1"
        hs = socket.create_connection(("127.0.0.1", p["plain"]), timeout=10)
        hc = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        hc.initiate_connection()
        hc.send_headers(1, [(":method", "POST"), (":path", "/echo"), (":scheme", "http"),
                            (":authority", "x")])
        hc.send_data(1, b"h2-one")
        hs.sendall(hc.data_to_send())

        def h2_read(want):
            got = b""
            for _ in range(200):
                if got == want:
                    return got
                data = hs.recv(65536)
                assert data
                for ev in hc.receive_data(data):
                    if isinstance(ev, h2.events.DataReceived):
                        got += ev.data
                        hc.acknowledge_received_data(ev.flow_controlled_length, 1)
                    assert not isinstance(ev, (h2.events.StreamReset,
                                               h2.events.ConnectionTerminated)), ev
                hs.sendall(hc.data_to_send())
            return got

        assert h2_read(b"h2-one") == b"h2-one"
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        wsc = loop.run_until_complete(websockets.connect(
            f"ws://127.0.0.1:{p['plain']}/ws", open_timeout=10, close_timeout=5,
            ping_interval=None))  # its loop only runs while the test echoes: no keepalive

        async def ws_echo(m):
            await wsc.send(m)
            return await asyncio.wait_for(wsc.recv(), 10)

        assert loop.run_until_complete(ws_echo("ws-1")) == "ws-1"

        # steady load while reloading: rounds of fixed-length ferry-load runs, reloading
        # while they run, until every reload is done
        targets = [(f"http://127.0.0.1:{p['plain']}/r", ["--h1"]),
                   (f"https://127.0.0.1:{p['tls']}/r", ["--h2", "--insecure"]),
                   (f"http://127.0.0.1:{p['plain']}/proxy/x", ["--h1"])]
        stop = threading.Event()
        h3_results = []

        def h3_loop():
            for _ in range(1000):
                if stop.is_set():
                    return
                q = subprocess.run([H3GET, "--insecure", "127.0.0.1", str(p["tls"]), "/r",
                                    "/r"], capture_output=True, text=True, timeout=60)
                h3_results.append((q.returncode, q.stdout + q.stderr))

        h3t = threading.Thread(target=h3_loop, daemon=True)
        h3t.start()
        n = int(os.environ.get("FERRY_RELOADS", "100"))
        done, reports = 0, []
        for _round in range(60):
            if done >= n:
                break
            loads = [subprocess.Popen([LOAD, url, "-c", "2", "--rate", "50", "-d", "3s",
                                       "--json", *extra], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
                     for url, extra in targets]
            while done < n and all(lp.poll() is None for lp in loads):
                odd = done % 2 == 0
                r.reload(render(p, done + 2, c2 if odd else c1, k2 if odd else k1,
                                extra_listener=odd, extra_upstream=odd), via_cli=done % 10 == 0)
                done += 1
            for lp in loads:
                reports.append(lp.communicate(timeout=60))
        assert done == n
        stop.set()
        h3t.join(timeout=90)

        # long-lived traffic still echoes after the last reload
        assert loop.run_until_complete(ws_echo("ws-2")) == "ws-2"
        loop.run_until_complete(wsc.close())
        asyncio.set_event_loop(None)
        loop.close()
        hc.send_data(1, b"h2-two", end_stream=True)
        hs.sendall(hc.data_to_send())
        assert h2_read(b"h2-two") == b"h2-two"
        hs.close()
        tun.sendall(b"tunnel-2")
        assert tun.recv(100) == b"tunnel-2"
        tun.close()
        l4.sendall(b"l4-2")
        assert l4.recv(10) == b"l4-2"
        l4.close()

        for out, errs in reports:
            rep = json.loads(out)
            assert rep["requests"] > 0, (out, errs)
            assert rep["errors"] == 0, (out, errs)
        assert h3_results and all(rc == 0 for rc, _ in h3_results), h3_results[-3:]
        assert get(p["plain"], "/r") == (200, f"v{n + 1}\n".encode())
    finally:
        ws.stop()
        echo.close()


def test_reload_static_root_change_serves_the_new_files(server, tmp_path):
    """A static route whose root changes on each reload serves the new root's file at once
    (the per-worker file cache is keyed by a per-handler id, not by the handler's address,
    which a newer generation's handler may reuse)."""
    roots = []
    for i in range(3):
        d = tmp_path / f"root{i}"
        d.mkdir()
        (d / "f.txt").write_text(f"root {i}\n")
        roots.append(d)
    port = free_port()
    cfg = tmp_path / "static.yaml"

    def text(i):
        return (f"workers: 1\nlisteners: [{{address: 127.0.0.1:{port}}}]\n"
                f"routes: [{{static: {{root: {roots[i % 3]}}}}}]\n")

    cfg.write_text(text(0))
    f = server("", start=False)
    f.args = ["run", "-c", str(cfg), "--pid-file", str(tmp_path / "pid")]
    f.start(wait_ports=[port])
    assert get(port, "/f.txt") == (200, b"root 0\n")
    for i in range(1, 31):
        cfg.write_text(text(i))
        f.proc.send_signal(signal.SIGHUP)
        line = f"reload: generation {i + 1} active on all workers"
        wait_for(lambda: line in f.log(), 30, line, f.proc)
        assert get(port, "/f.txt") == (200, f"root {i % 3}\n".encode()), i


def test_reload_carries_upstream_health_over(server, tmp_path, origin_server):
    """A server ejected by passive health (max-fails) stays ejected in the new generation's
    upstream of the same name: requests after the reload never try it again (without the
    carry-over, round-robin picks it at once and it is ejected a second time)."""
    dead = free_port()
    port = free_port()
    cfg = tmp_path / "health.yaml"

    def text(body):
        return (f"workers: 1\nlisteners: [{{address: 127.0.0.1:{port}}}]\n"
                "routes:\n  - match: {path: /r}\n"
                f"    respond: {{body: \"{body}\\n\"}}\n"
                "  - proxy: {upstream: u}\n"
                "upstreams:\n  - name: u\n    max-fails: 1\n    fail-timeout: 120s\n"
                f"    servers: [http://127.0.0.1:{dead}, http://127.0.0.1:{origin_server.port}]\n")

    cfg.write_text(text("one"))
    f = server("", start=False)
    f.args = ["run", "-c", str(cfg), "--pid-file", str(tmp_path / "pid")]
    f.start(wait_ports=[port])
    ejected = f"server 127.0.0.1:{dead} ejected"
    for _ in range(4):  # retries: 1, so each of these is answered by the live server
        assert get(port, "/x") == (200, b"origin\n")
    assert f.log().count(ejected) == 1, f.log()
    cfg.write_text(text("two"))
    f.proc.send_signal(signal.SIGHUP)
    line = "reload: generation 2 active on all workers"
    wait_for(lambda: line in f.log(), 30, line, f.proc)
    assert get(port, "/r") == (200, b"two\n")
    for _ in range(6):
        assert get(port, "/x") == (200, b"origin\n")
    assert f.log().count(ejected) == 1, f.log()


def test_reload_keeps_h3_connection_and_stream(server, tmp_path):
    """An HTTP/3 download (gtlsclient, Debian ngtcp2-client) proxied from an origin that holds
    the second half of the body: the QUIC connection and its stream outlive ten reloads (routes
    changed, the certificate rotated) and the body arrives whole; new h3 connections get the
    new routes."""
    import hashlib
    import shutil
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    gtls = shutil.which("gtlsclient")
    if gtls is None:
        pytest.skip("gtlsclient (Debian ngtcp2-client) missing")
    body = os.urandom(300000)
    arrived, release = threading.Event(), threading.Event()

    class Held(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            arrived.set()
            release.wait(60)
            self.wfile.write(body[len(body) // 2:])

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    c1, k1, _ = make_cert(tmp_path / "c1", "one")
    c2, k2, _ = make_cert(tmp_path / "c2", "two")
    port = free_port()
    cfg = tmp_path / "h3.yaml"

    def text(i):
        c, k = (c2, k2) if i % 2 else (c1, k1)
        return (f"workers: 2\nlisteners:\n  - address: 127.0.0.1:{port}\n"
                f"    protocols: [h1, h3]\n    tls: {{cert: {c}, key: {k}}}\n"
                "routes:\n  - match: {path: /who}\n"
                f"    respond: {{body: \"v{i}\\n\"}}\n"
                "  - proxy: {upstream: up}\n"
                f"upstreams:\n  - name: up\n    servers: [http://127.0.0.1:{httpd.server_port}]\n")

    def gtls_get(path, dl, timeout):
        return [gtls, "--exit-on-all-streams-close", f"--download={dl}", "--no-quic-dump",
                "--no-http-dump", f"--timeout={timeout}", "-q", "127.0.0.1", str(port),
                f"https://127.0.0.1:{port}{path}"]

    cfg.write_text(text(1))
    f = server("", start=False)
    f.args = ["run", "-c", str(cfg), "--pid-file", str(tmp_path / "pid")]
    slow = None
    try:
        f.start(wait_ports=[port], udp_ports=[port])
        dl = tmp_path / "slow"
        dl.mkdir()
        slow = subprocess.Popen(gtls_get("/slow", dl, "60s"), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        assert arrived.wait(30), "the proxied request never reached the origin"
        for i in range(2, 12):
            cfg.write_text(text(i))
            f.proc.send_signal(signal.SIGHUP)
            line = f"reload: generation {i} active on all workers"
            wait_for(lambda: line in f.log(), 30, line, f.proc)
        d2 = tmp_path / "who"
        d2.mkdir()
        p = subprocess.run(gtls_get("/who", d2, "10s"), capture_output=True, timeout=60)
        assert p.returncode == 0 and (d2 / "who").read_bytes() == b"v11\n", p
        release.set()
        out, _ = slow.communicate(timeout=60)
        assert slow.returncode == 0, out.decode(errors="replace")[-3000:]
        got = (dl / "slow").read_bytes()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), len(got)
    finally:
        release.set()
        if slow and slow.poll() is None:
            slow.kill()
            slow.wait()
        httpd.shutdown()
        httpd.server_close()
