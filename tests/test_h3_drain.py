"""HTTP/3 graceful drain and connection steering (src/quic): what happens to UDP traffic when
a ferry stops (SIGTERM) while another one already serves the same address (an upgrade), and
when a client's address changes mid-connection with several workers.

Clients are Debian's gtlsclient (ngtcp2-client); the origin is a Python HTTP server in this
process that holds a response until the test lets it go, so a transfer is provably in flight
across the event under test. Every wait is bounded; nothing asserts on durations.
"""
import hashlib
import random
import re
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import free_port

GTLS = shutil.which("gtlsclient")
pytestmark = pytest.mark.skipif(GTLS is None, reason="gtlsclient (Debian ngtcp2-client) missing")

BODY = random.Random(7).randbytes(400000)


class HeldOrigin(BaseHTTPRequestHandler):
    """GET /slow: the head and the first half of BODY, then the rest once `release` is set."""
    protocol_version = "HTTP/1.1"
    arrived = threading.Event()
    release = threading.Event()

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        half = len(BODY) // 2
        self.wfile.write(BODY[:half])
        self.wfile.flush()
        type(self).arrived.set()
        type(self).release.wait(60)
        self.wfile.write(BODY[half:])


@pytest.fixture
def held_origin():
    HeldOrigin.arrived = threading.Event()
    HeldOrigin.release = threading.Event()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), HeldOrigin)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd.server_address[1]
    HeldOrigin.release.set()
    httpd.shutdown()
    httpd.server_close()


def config(port, who, origin, workers=1):
    return f"""
workers: {workers}
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
routes:
  - match: {{{{path: /who}}}}
    respond: {{{{status: 200, body: "{who}\\n"}}}}
  - match: {{{{path: /slow}}}}
    proxy: {{{{upstream: up}}}}
  - static: {{{{root: {{docroot}}}}}}
upstreams:
  - name: up
    servers: [http://127.0.0.1:{origin}]
"""


def gtls_cmd(port, path, dl, timeout="20s", quiet=False):
    cmd = [GTLS, "--exit-on-all-streams-close", f"--download={dl}", "--no-quic-dump",
           "--no-http-dump", f"--timeout={timeout}"]
    if quiet:
        cmd.append("-q")
    return cmd + ["127.0.0.1", str(port), f"https://127.0.0.1:{port}{path}"]


def who(port, tmp, timeout="3s"):
    """One fresh QUIC connection (new source port) asking /who; returns the body or None."""
    dl = tmp / f"who{random.randrange(1 << 30)}"
    dl.mkdir()
    p = subprocess.run(gtls_cmd(port, "/who", dl, timeout), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
    f = dl / "who"
    return f.read_text().strip() if p.returncode == 0 and f.exists() else None


def wait_log(srv, pattern, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if re.search(pattern, srv.log()):
            return True
        time.sleep(0.05)
    return False


def test_h3_drain_hands_new_connections_to_the_new_process(server, tmp_path, held_origin):
    """Ferry A serves h3 on PORT and has a proxied download in flight; ferry B starts on the same
    PORT (SO_REUSEPORT); A gets SIGTERM. A's UDP socket must leave the reuseport group at once
    (new connections all reach B: none is dropped into the draining process), while A's live
    connection keeps receiving on a connected socket of its own and completes its transfer."""
    port = free_port()
    a = server(config(port, "A", held_origin), start=False).start(wait_ports=[port])
    dl = tmp_path / "slow"
    dl.mkdir()
    slow = subprocess.Popen(gtls_cmd(port, "/slow", dl, timeout="30s", quiet=True),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert HeldOrigin.arrived.wait(30), "the proxied request never reached the origin"
        b = server(config(port, "B", held_origin), start=False).start(wait_ports=[port])
        # B is in the group once some fresh connection lands on it (bounded)
        seen = set()
        for _ in range(40):
            seen.add(who(port, tmp_path))
            if "B" in seen:
                break
        assert "B" in seen, f"ferry B never answered: {seen}\n{b.log()[-2000:]}"
        a.proc.send_signal(15)
        assert wait_log(a, r"h3 drain: UDP socket left the reuseport group; [0-9]+ connection"), \
            a.log()[-3000:]
        answers = [who(port, tmp_path) for _ in range(16)]
        assert answers == ["B"] * 16, f"new connections after A's SIGTERM: {answers}"
        HeldOrigin.release.set()
        out, _ = slow.communicate(timeout=60)
        assert slow.returncode == 0, out.decode(errors="replace")[-3000:]
        got = (dl / "slow").read_bytes()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(BODY).hexdigest(), len(got)
        assert a.proc.wait(timeout=30) == 0
    finally:
        HeldOrigin.release.set()
        if slow.poll() is None:
            slow.kill()
            slow.wait()
