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

from conftest import bound, free_port

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


def config(port, who, origin, workers=1, extra=""):
    return f"""
workers: {workers}
{extra}
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
    share: true
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
    deadline = time.time() + bound(timeout)
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


class RebindingShim:
    """A UDP relay between a client and ferry that moves its ferry-facing socket to a new source
    port every `every` client datagrams (NAT rebinding), up to `max_rebinds` times or until
    `done()` says enough. Replies go back to the client's last address."""

    def __init__(self, target_port, every, max_rebinds, done):
        self.target = ("127.0.0.1", target_port)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.back = self._new_back()
        self.every, self.max_rebinds, self.done = every, max_rebinds, done
        self.rebinds = 0
        self.ports = {self.back.getsockname()[1]}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _new_back():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        return s

    def _run(self):
        import select
        client = None
        count = 0
        deadline = time.time() + 300
        while not self.stop.is_set() and time.time() < deadline:
            r, _, _ = select.select([self.front, self.back], [], [], 0.1)
            for s in r:
                if s.fileno() < 0:  # the socket this round replaced
                    continue
                data, addr = s.recvfrom(65535)
                if s is self.front:
                    client = addr
                    count += 1
                    if (count % self.every == 0 and self.rebinds < self.max_rebinds
                            and not self.done()):
                        old, self.back = self.back, self._new_back()
                        old.close()
                        self.rebinds += 1
                        self.ports.add(self.back.getsockname()[1])
                    self.back.sendto(data, self.target)
                elif client is not None:
                    self.front.sendto(data, client)

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.front.close()
        self.back.close()


def test_h3_nat_rebinding_across_workers(server, tmp_path):
    """workers: 2. A client whose source port keeps changing mid-download (a relay that rebinds,
    as a NAT does) still gets the whole 8 MB file intact: packets of a connection that the
    kernel's reuseport hash now gives to the other worker are forwarded to the worker that
    owns the connection (CID byte) instead of being answered with a stateless reset. The
    relay rebinds until ferry logs that forwarding happened (bounded), so the cross-worker
    path is provably taken."""
    port = free_port()
    srv = server(config(port, "A", 9, workers=2, extra="log: {{level: info}}"), start=False)
    srv.start(wait_ports=[port])
    data = random.Random(3).randbytes(8 * 1000 * 1000)
    (srv.docroot / "big.bin").write_bytes(data)
    fwd = r"h3: packets of worker \d+'s connections reach worker \d+"
    shim = RebindingShim(port, every=60, max_rebinds=60,
                         done=lambda: re.search(fwd, srv.log()) is not None)
    try:
        dl = tmp_path / "big"
        dl.mkdir()
        p = subprocess.run(gtls_cmd(shim.port, "/big.bin", dl, timeout="20s", quiet=True),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        assert p.returncode == 0, p.stdout.decode(errors="replace")[-3000:]
        got = (dl / "big.bin").read_bytes()
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), len(got)
        assert shim.rebinds >= 1
        assert re.search(fwd, srv.log()), \
            f"{shim.rebinds} rebinds and no cross-worker packet:\n{srv.log()[-3000:]}"
    finally:
        shim.close()
