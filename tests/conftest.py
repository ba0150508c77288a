"""The one `server` fixture (CONVENTIONS.md habit 10).

`server(yaml_text, ...)` renders a YAML config (placeholders {port}, {port2}, ... become free
loopback ports, {docroot} a per-test directory, {data} the data dir), starts `ferry run -c`,
waits until every listener accepts, and at teardown stops it with SIGTERM and fails the test if
ferry did not exit 0 or if its log holds an [alert]/[emerg] line or any sanitizer report.
"""
import atexit
import os
import random
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FERRY = os.environ.get("FERRY_BIN", str(ROOT / "build" / "ferry"))
SANITIZED = os.environ.get("FERRY_SANITIZED") == "1"
BAD_LOG = ("[alert]", "[emerg]", "AddressSanitizer", "LeakSanitizer", "runtime error:",
           "UndefinedBehaviorSanitizer")


def _port_range():
    """Ports to hand out: below the kernel's ephemeral range, so that no outgoing connection
    (curl, Ferry to an origin, h2load) can be given one as its local port between free_port()
    and the bind of the server the test starts on it."""
    try:
        lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    hi = max(lo - 1, 12000)
    return max(10000, hi - 16000), hi


_PORTS = _port_range()
_GIVEN = set()  # never hand out a port twice in one session (a stopped server may linger)
_RNG = random.SystemRandom()


def _bindable(port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


_CLAIMS = Path("/tmp/ferry-test-ports")


def _claim(port):
    """Reserve `port` machine-wide for this process: test runs of other worktrees on the same
    machine draw from the same range, and Ferry listens with SO_REUSEPORT, so two Ferries
    given the same port would both bind it and share its connections (a TLS client then
    reaching a plain listener, say). A claim whose owner is gone is taken over."""
    try:
        _CLAIMS.mkdir(exist_ok=True)
        f = _CLAIMS / str(port)
        for _ in range(2):
            try:
                fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                try:
                    owner = int(f.read_text() or "0")
                except (OSError, ValueError):
                    owner = 0
                if owner and owner != os.getpid() and Path(f"/proc/{owner}").exists():
                    return False
                f.unlink(missing_ok=True)
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return True
        return False
    except OSError:
        return True  # no shared directory: the bind checks still apply


def _release_claims():
    for p in _GIVEN:
        try:
            f = _CLAIMS / str(p)
            if f.read_text() == str(os.getpid()):
                f.unlink()
        except (OSError, ValueError):
            pass


atexit.register(_release_claims)


def free_port():
    """A loopback port that nothing holds (TCP and UDP), outside the ephemeral range, and
    that no other test run on this machine was given."""
    for _ in range(500):
        p = _RNG.randrange(*_PORTS)
        if p in _GIVEN or p in (8080, 8443, 8888):
            continue
        if _bindable(p) and _claim(p):
            _GIVEN.add(p)
            return p
    with socket.socket() as s:  # the range is exhausted: let the kernel pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15.0, proc=None):
    """Wait until something accepts TCP connections on loopback `port` (tripled under
    sanitizers). With `proc` (the Popen expected to listen there): until that process holds
    the listening socket (not some other process that took the port), failing at once if it
    exited; raises TimeoutError either way."""
    deadline = time.monotonic() + timeout * (3 if SANITIZED else 1)
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                raise TimeoutError(f"port {port}: the process exited ({proc.returncode})")
            if owns_port(proc.pid, port):
                return
            time.sleep(0.05)
            continue
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open")


def _inodes(kind, port, listen_only):
    """Inodes of the sockets in /proc/net/<kind>{,6} whose local port is `port`."""
    out = set()
    for f in (kind, kind + "6"):
        try:
            lines = Path(f"/proc/net/{f}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            if listen_only and fields[3] != "0A":
                continue
            out.add(fields[9])
    return out


def _proc_tree(pid):
    pids, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in pids:
            continue
        pids.add(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in
                         Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except OSError:
            pass
    return pids


def _socket_inodes(pid):
    out = set()
    for p in _proc_tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    return out


def owns_port(pid, port, kind="tcp"):
    """Whether process `pid` (or a child of it) holds a listening TCP socket / a bound UDP
    socket on loopback `port`. Raises PortShared if a process that this test run did not
    start holds one too: Ferry binds with SO_REUSEPORT, so a Ferry of another test run on
    this machine that drew the same port binds it as well and the kernel spreads the
    connections over both. (Two Ferries of this run may share a port on purpose: a drain
    hands the port from one to the next.)"""
    inodes = _inodes(kind, port, listen_only=(kind == "tcp"))
    if not inodes:
        return False
    ours = inodes & _socket_inodes(pid)
    if ours and inodes - ours and inodes - _socket_inodes(os.getpid()):
        raise PortShared(f"{kind} port {port} is also held by a process of another test run")
    return bool(ours)


class PortShared(AssertionError):
    pass


def conns_to(pid, port):
    """How many established TCP connections process `pid` has to loopback port `port` (an
    origin's): lets a test wait for a pooled connection to be closed instead of sleeping."""
    ours = _socket_inodes(pid)
    n = 0
    for f in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{f}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port and \
                    fields[9] in ours:
                n += 1
    return n


def bound(seconds):
    """A wait's upper bound: tripled under sanitizers (2-5x slower on a loaded machine)."""
    return seconds * (3 if SANITIZED else 1)


def wait_for(cond, timeout=15.0, what="condition", proc=None, interval=0.05):
    """Poll cond() until true; AssertionError after `timeout` seconds (tripled under
    sanitizers), or as soon as `proc` (a Popen) has exited."""
    deadline = time.monotonic() + timeout * (3 if SANITIZED else 1)
    while True:
        v = cond()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def wait_udp(port, proc=None, timeout=15.0):
    """Wait until a UDP socket is bound on loopback `port` (by `proc`, a Popen, if given).
    UDP has no handshake to poll: a bound socket queues datagrams, so this is readiness."""
    if proc is not None:
        return wait_for(lambda: owns_port(proc.pid, port, "udp"), timeout,
                        f"UDP port {port} to be bound", proc)
    return wait_for(lambda: _inodes("udp", port, False), timeout, f"UDP port {port} to be bound")


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
        self.port_clash = False
        self.logfile = self.tmp / "ferry.log"

    def start(self, wait_ports=None, udp_ports=()):
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
        # Ready means: this ferry (not some other process that took the port) holds a
        # listening socket on every port; fail at once if it exited (a bind error, say).
        waits = [(p, "tcp") for p in (wait_ports if wait_ports is not None
                                      else self.listener_ports())]
        waits += [(p, "udp") for p in udp_ports]
        for p, kind in waits:
            try:
                wait_for(lambda: owns_port(self.proc.pid, p, kind), 15,
                         f"ferry to listen on {kind} port {p}", self.proc)
            except AssertionError as e:
                self.port_clash = isinstance(e, PortShared)
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                raise AssertionError(f"ferry did not start ({e}):\n{self.log()}")
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
            for attempt in range(3):
                try:
                    f.start()
                    break
                except AssertionError:
                    # Another process took one of the ports between free_port() and ferry's
                    # bind (other suites on the machine): the test has not seen the ports
                    # yet, so start again on fresh ones.
                    if attempt == 2 or not (f.port_clash or
                                            "Address already in use" in f.log()):
                        raise
                    f.log_fh.close()
                    started.remove(f)
                    f = Ferry(tmp_path / f"s{len(started)}-retry{attempt}", text, args, **kw)
                    f.tmp.mkdir(parents=True, exist_ok=True)
                    f.docroot.mkdir(exist_ok=True)
                    started.append(f)
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


@contextmanager
def http_origin(handler):
    """A Python HTTP origin on a free loopback port, serving `handler` (a
    BaseHTTPRequestHandler class) from a thread; yields the port, shuts down after."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------------------------------------
# shared origins: a test CA with a localhost leaf, and Debian's nginx
# ---------------------------------------------------------------------------------------------


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, timeout=30,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_certs(d, ca_cn="Origin Test CA"):
    """A CA (`ca_cn`) and a leaf for localhost / 127.0.0.1 signed by it, in directory d:
    {"ca", "cert", "key"} paths."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", f"/CN={ca_cn}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "leaf.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext", cwd=d)
    return {"ca": d / "ca.pem", "cert": d / "leaf.pem", "key": d / "leaf.key"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """The origins' own CA (CN "Origin Test CA") and a leaf for localhost / 127.0.0.1."""
    return make_certs(tmp_path_factory.mktemp("origin-certs"))


NGINX = "/usr/sbin/nginx"


class NginxOrigin:
    """Debian's nginx as an origin, in directory d: `servers` is the text of its server blocks
    (and any http-level directives), `ports` the ports to wait for. The access log is
    d/access.log, in `log_format` (nginx's default when None)."""

    def __init__(self, d, servers, ports, log_format=None):
        self.d = d
        self.access_log = d / "access.log"
        self.wait_ports = list(ports)
        log = f"access_log {d}/access.log;" if log_format is None else \
            f"log_format t '{log_format}';\n    access_log {d}/access.log t;"
        temp = "".join(f"    {k}_temp_path {d}/tmp_{k};\n"
                       for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (d / "nginx.conf").write_text(
            f"daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/err;\n"
            f"pid {d}/pid;\nevents {{ worker_connections 1024; }}\nhttp {{\n    {log}\n"
            f"{temp}    default_type application/octet-stream;\n{servers}\n}}\n")
        self.start()

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", str(self.d), "-c", str(self.d / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for p in self.wait_ports:
                wait_port(p, proc=self.proc)
        except TimeoutError:
            self.stop()
            raise AssertionError("nginx did not start: " + self.error_log())

    def restart(self):
        self.stop()
        self.start()

    def error_log(self):
        try:
            return (self.d / "err").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
