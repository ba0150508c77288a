"""The one `server` fixture (CONVENTIONS.md habit 10).

`server(yaml_text, ...)` renders a YAML config (placeholders {port}, {port2}, ... become free
loopback ports, {docroot} a per-test directory, {data} the data dir), starts `ferry run -c`,
waits until every listener accepts, and at teardown stops it with SIGTERM and fails the test if
ferry did not exit 0 or if its log holds an [alert]/[emerg] line or any sanitizer report.
"""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FERRY = os.environ.get("FERRY_BIN", str(ROOT / "build" / "ferry"))
SANITIZED = os.environ.get("FERRY_SANITIZED") == "1"
BAD_LOG = ("[alert]", "[emerg]", "AddressSanitizer", "LeakSanitizer", "runtime error:",
           "UndefinedBehaviorSanitizer")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open")


class Ferry:
    def __init__(self, tmp, text, args=None, expect_exit=0, check_log=True):
        self.tmp = Path(tmp)
        self.ports = [free_port() for _ in range(4)]
        self.port = self.ports[0]
        self.docroot = self.tmp / "www"
        self.docroot.mkdir(parents=True, exist_ok=True)
        self.data = self.tmp / "data"
        self.expect_exit = expect_exit
        self.check_log = check_log
        self.text = text.format(port=self.ports[0], port2=self.ports[1], port3=self.ports[2],
                                port4=self.ports[3], docroot=self.docroot, data=self.data,
                                tmp=self.tmp) if text is not None else None
        self.args = args
        self.proc = None
        self.logfile = self.tmp / "ferry.log"

    def start(self, wait_ports=None):
        env = dict(os.environ)
        env["HOME"] = str(self.tmp)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
        if self.args is not None:
            cmd = [FERRY] + self.args
        else:
            cfg = self.tmp / "ferry.yaml"
            cfg.write_text(self.text)
            cmd = [FERRY, "run", "-c", str(cfg)]
        self.log_fh = open(self.logfile, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log_fh, env=env,
                                     text=True)
        for p in (wait_ports if wait_ports is not None else self.listener_ports()):
            try:
                wait_port(p)
            except TimeoutError:
                self.proc.kill()
                raise AssertionError(f"ferry did not start:\n{self.log()}")
        return self

    def listener_ports(self):
        if self.text is None:
            return []
        return [p for p in self.ports if str(p) in self.text]

    def log(self):
        try:
            return self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def url(self, path="/", port=None, scheme="http"):
        return f"{scheme}://127.0.0.1:{port or self.port}{path}"

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("ferry did not exit within 30 s of SIGTERM")
        return self.proc.returncode

    def finish(self):
        rc = self.stop()
        self.log_fh.close()
        log = self.log()
        if self.check_log:
            bad = [l for l in log.splitlines() if any(b in l for b in BAD_LOG)]
            assert not bad, "ferry log has alerts or sanitizer reports:\n" + log[-6000:]
        if self.expect_exit is not None:
            assert rc == self.expect_exit, f"ferry exited {rc}\n{log[-4000:]}"


@pytest.fixture
def server(tmp_path):
    started = []

    def make(text=None, args=None, start=True, **kw):
        f = Ferry(tmp_path / f"s{len(started)}", text, args, **kw)
        f.tmp.mkdir(parents=True, exist_ok=True)
        f.docroot.mkdir(exist_ok=True)
        started.append(f)
        if start:
            f.start()
        return f

    yield make
    for f in started:
        if f.proc is not None:
            f.finish()


def raw(port, data, timeout=5.0, read_until_close=True, host="127.0.0.1"):
    """Send bytes, return everything received until the server closes (or timeout)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
                if not read_until_close:
                    break
        except socket.timeout:
            chunks.append(b"<TIMEOUT>")
        except ConnectionResetError:
            chunks.append(b"<RESET>")
        return b"".join(chunks)


def statuses(resp: bytes):
    """Status codes of all responses in a byte stream (pipelining)."""
    import re
    return [int(m) for m in re.findall(rb"HTTP/1\.[01] (\d{3}) ", resp)]


def http_request(port, path="/", method="GET", headers=None, timeout=10.0, host="127.0.0.1",
                 tls=False, server_hostname=None):
    """One request over a fresh connection (Connection: close); returns (status, headers, body).

    `headers` in the result is a dict of lower-cased names to the last value; the raw head is in
    headers["_raw"]. The request target is sent exactly as given (no normalisation)."""
    import ssl as _ssl
    hdrs = {"Host": f"{host}:{port}", "Connection": "close"}
    hdrs.update(headers or {})
    req = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        if tls:
            ctx = _ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = _ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname=server_hostname)
        s.sendall((req + "\r\n").encode("latin-1"))
        chunks = []
        while True:
            b = s.recv(1 << 16)
            if not b:
                break
            chunks.append(b)
    finally:
        s.close()
    data = b"".join(chunks)
    head, sep, body = data.partition(b"\r\n\r\n")
    assert sep, f"no complete response head: {data[:500]!r}"
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    h = {"_raw": head.decode("latin-1")}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        h[k.strip().lower()] = v.strip()
    if h.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        body = out
    return status, h, body
