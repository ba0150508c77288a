"""Layer 4 (issue 8): TCP and UDP relays, TLS passthrough by SNI, TLS termination, PROXY
protocol, QUIC passthrough by SNI. Real peers: python sockets, openssl s_server/s_client,
curl (HTTP/1.1 and HTTP/2), Ferry TLS backends, Debian's gtlsclient/gtlsserver (ngtcp2)."""
import hashlib
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import free_port


# ---- peers ----

class TcpEcho:
    """Echo server: echoes every byte; on the client's FIN, finishes echoing and then (after
    `tail` bytes, if given) closes its side. Records the first bytes of each connection."""

    def __init__(self, tail=b"", port=None):
        self.port = port or free_port()
        self.tail = tail
        self.first = []
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", self.port))
        self.ls.listen(256)
        self.conns = 0
        self.stopped = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        first = b""
        try:
            c.settimeout(30)
            while True:
                b = c.recv(65536)
                if not b:
                    break
                if len(first) < 256:
                    first += b[:256 - len(first)]
                c.sendall(b)
            if self.tail:
                c.sendall(self.tail)
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            self.first.append(first)
            c.close()

    def close(self):
        self.stopped = True
        self.ls.close()


class UdpEcho:
    def __init__(self, tag=b""):
        self.port = free_port()
        self.tag = tag
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", self.port))
        self.s.settimeout(0.2)
        self.stopped = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stopped:
            try:
                d, a = self.s.recvfrom(65536)
            except OSError:
                continue
            self.s.sendto(self.tag + d, a)

    def close(self):
        self.stopped = True
        time.sleep(0.3)
        self.s.close()


@pytest.fixture
def tcp_echo():
    made = []

    def make(**kw):
        e = TcpEcho(**kw)
        made.append(e)
        return e
    yield make
    for e in made:
        e.close()


@pytest.fixture
def udp_echo():
    made = []

    def make(**kw):
        e = UdpEcho(**kw)
        made.append(e)
        return e
    yield make
    for e in made:
        e.close()


def echo_roundtrip(port, payload, chunk=65536, timeout=30):
    """Send payload, half-close, read everything back; returns the bytes received."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = []

    def reader():
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    return
                out.append(b)
        except OSError:
            out.append(b"<ERR>")
    t = threading.Thread(target=reader)
    t.start()
    for i in range(0, len(payload), chunk):
        s.sendall(payload[i:i + chunk])
    s.shutdown(socket.SHUT_WR)
    t.join(timeout)
    s.close()
    return b"".join(out)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def make_cert(tmp, name):
    key, crt = tmp / f"{name}.key", tmp / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "2", "-subj", f"/CN={name}", "-addext",
                    f"subjectAltName=DNS:{name}"], check=True, capture_output=True)
    return crt, key


# ---- TCP relay ----

def test_l4_tcp_echo_random_payloads_concurrent(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 2
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
""")
    payloads = [os.urandom(n) for n in [1, 100, 4096, 65536, 1 << 20, 3 << 20]]
    for p in payloads:
        assert sha(echo_roundtrip(f.port, p)) == sha(p)
    # many concurrent sessions
    results = {}

    def one(i):
        p = os.urandom(1000 + i * 997)
        results[i] = (sha(p), sha(echo_roundtrip(f.port, p)))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert len(results) == 64
    assert all(a == b for a, b in results.values())


def _pipes(pid):
    n = 0
    for d in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{d}").startswith("pipe:")
        except OSError:
            pass
    return n


def test_l4_tcp_messages_up_to_64k_go_through_the_buffer_bulk_splices(server, tcp_echo):
    """A plain session relays a message of up to 64 KiB through its buffer (one read takes
    it whole: no pipe is made), and switches a direction to splice(2) (a pipe pair) only
    when a read fills the buffer: bulk. Every byte arrives either way."""
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
""")
    pid = f.proc.pid
    s = socket.create_connection(("127.0.0.1", f.port), timeout=20)
    s.sendall(b"x")
    assert s.recv(10) == b"x"
    base = _pipes(pid)
    for size in (16384, 40000, 60000, 16384):  # one message at a time, echoed whole
        m = os.urandom(size)
        s.sendall(m)
        got = b""
        while len(got) < size:
            b = s.recv(65536)
            assert b
            got += b
        assert got == m
    assert _pipes(pid) == base, "a message below 64 KiB made a pipe"
    big = os.urandom(8 << 20)  # bulk, sent while the echo comes back
    out = []

    def reader():
        n = 0
        while n < len(big):
            b = s.recv(1 << 20)
            if not b:
                return
            out.append(b)
            n += len(b)
    t = threading.Thread(target=reader)
    t.start()
    s.sendall(big)
    t.join(60)
    assert sha(b"".join(out)) == sha(big)
    assert _pipes(pid) >= base + 2, "bulk did not switch to splice"
    s.close()


def test_l4_tcp_half_close_keeps_other_direction(server, tcp_echo):
    """The client's FIN reaches the origin, which then still sends (tail) before closing."""
    tail = os.urandom(200000)
    e = tcp_echo(tail=tail)
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
""")
    p = os.urandom(50000)
    got = echo_roundtrip(f.port, p)
    assert sha(got) == sha(p + tail)


def test_l4_tcp_origin_down_closes_client(server):
    dead = free_port()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{dead}
""")
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    assert s.recv(10) == b""
    s.close()


def test_l4_tcp_upstream_group_balances_and_skips_dead(server, tcp_echo):
    a, b = tcp_echo(), tcp_echo()
    dead = free_port()
    f = server(f"""
workers: 1
upstreams:
  - name: pool
    servers: [http://127.0.0.1:{a.port}, http://127.0.0.1:{dead}, http://127.0.0.1:{b.port}]
l4:
  - listen: 127.0.0.1:{{port}}
    upstream: pool
""")
    for i in range(12):
        p = os.urandom(1000)
        assert echo_roundtrip(f.port, p) == p
    assert a.conns >= 3 and b.conns >= 3, (a.conns, b.conns)
    assert "connect to origin failed" in f.log()


def test_l4_tcp_max_sessions_pauses_accepting(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
    max-sessions: 1
""")
    s1 = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s1.sendall(b"one")
    assert s1.recv(10) == b"one"
    s2 = socket.create_connection(("127.0.0.1", f.port), timeout=10)  # kernel backlog
    s2.sendall(b"two")
    s2.settimeout(0.5)
    with pytest.raises(socket.timeout):
        s2.recv(10)  # not relayed while s1 holds the only session
    s1.close()
    s2.settimeout(10)
    assert s2.recv(10) == b"two"
    s2.close()
    assert "max-sessions (1) reached" in f.log()


def test_l4_tcp_idle_timeout(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 1
log:
  level: debug
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
    idle-timeout: 2s
""")
    # (2 s: the session must not idle out between the connect and the first byte)
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    assert s.recv(1) == b""  # closed by the idle timeout
    s.close()
    assert "idle timeout" in f.log()


# ---- PROXY protocol ----

@pytest.mark.parametrize("version", ["v1", "v2"])
def test_l4_proxy_protocol_to_origin(server, tcp_echo, version):
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
    proxy-protocol: {version}
""")
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    cport = s.getsockname()[1]
    s.sendall(b"hello")
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
    s.close()
    if version == "v1":
        hdr = f"PROXY TCP4 127.0.0.1 127.0.0.1 {cport} {f.port}\r\n".encode()
    else:
        hdr = (b"\r\n\r\n\x00\r\nQUIT\n" + b"\x21\x11\x00\x0c" + socket.inet_aton("127.0.0.1") * 2
               + cport.to_bytes(2, "big") + f.port.to_bytes(2, "big"))
    assert got == hdr + b"hello"


def test_l4_accept_proxy_from_trusted_front(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
    accept-proxy: [127.0.0.0/8]
    proxy-protocol: v1
""")
    # v1 in, split in two segments
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(b"PROXY TCP4 192.0.2.7 198.51.100.9 4")
    time.sleep(0.05)
    s.sendall(b"444 443\r\npayload")
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
    s.close()
    assert got == b"PROXY TCP4 192.0.2.7 198.51.100.9 4444 443\r\npayload"
    # v2 in
    v2 = (b"\r\n\r\n\x00\r\nQUIT\n" + b"\x21\x11\x00\x0c" + socket.inet_aton("192.0.2.8")
          + socket.inet_aton("198.51.100.10") + (5555).to_bytes(2, "big")
          + (8443).to_bytes(2, "big"))
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(v2 + b"data")
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
    s.close()
    assert got == b"PROXY TCP4 192.0.2.8 198.51.100.10 5555 8443\r\ndata"
    # garbage instead of a header: closed
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert s.recv(100) == b""
    s.close()
    assert "bad PROXY protocol header" in f.log()


def test_l4_accept_proxy_untrusted_is_plain(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
    accept-proxy: [10.0.0.0/8]
""")
    p = b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nx"
    assert echo_roundtrip(f.port, p) == p  # not trusted: relayed as data


# ---- UDP relay ----

def test_l4_udp_echo_boundaries_many_clients(server, udp_echo):
    e = udp_echo()
    f = server(f"""
workers: 2
l4:
  - listen: 127.0.0.1:{{port}}
    mode: udp
    target: 127.0.0.1:{e.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    errors = []

    def client(i):
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.settimeout(2)
        try:
            for k in range(20):
                d = os.urandom(1 + (i * 131 + k * 977) % 8000)
                for attempt in range(5):
                    c.sendto(d, ("127.0.0.1", f.port))
                    try:
                        r, a = c.recvfrom(65536)
                        break
                    except socket.timeout:
                        r = None
                if r != d:
                    errors.append((i, k))
                    return
        finally:
            c.close()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors
    # a large datagram keeps its boundary exactly
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(5)
    big = os.urandom(60000)
    c.sendto(big, ("127.0.0.1", f.port))
    assert c.recvfrom(65536)[0] == big
    c.close()


def test_l4_udp_max_sessions_drops_new_clients(server, udp_echo):
    e = udp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: udp
    target: 127.0.0.1:{e.port}
    max-sessions: 2
    idle-timeout: 3s
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    # (3 s: the first two sessions must stay while the third is refused, on a loaded machine)
    cs = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    for c in cs:
        c.settimeout(10)
    cs[2].settimeout(1)
    for c in cs[:2]:
        c.sendto(b"hi", ("127.0.0.1", f.port))
        assert c.recvfrom(100)[0] == b"hi"
    cs[2].sendto(b"third", ("127.0.0.1", f.port))
    with pytest.raises(socket.timeout):
        cs[2].recvfrom(100)
    assert "max-sessions (2) reached" in f.log()
    # the idle timeout frees the table: the third client gets in
    ok = False
    for _ in range(30):
        cs[2].sendto(b"third", ("127.0.0.1", f.port))
        try:
            if cs[2].recvfrom(100)[0] == b"third":
                ok = True
                break
        except socket.timeout:
            pass
    assert ok
    for c in cs:
        c.close()


def test_l4_udp_oneliner(server, udp_echo):
    e = udp_echo(tag=b"T:")
    port = free_port()
    f = server(args=["l4", f"127.0.0.1:{e.port}", "--udp", "--listen", f"127.0.0.1:{port}",
                     "--workers", "1"], start=False)
    f.start(wait_ports=[], udp_ports=[port])
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(1)
    got = None
    for _ in range(20):
        c.sendto(b"ping", ("127.0.0.1", port))
        try:
            got = c.recvfrom(100)[0]
            break
        except socket.timeout:
            pass
    c.close()
    assert got == b"T:ping"


# ---- TLS passthrough ----

@pytest.fixture
def two_tls_backends(tmp_path, server):
    """Two Ferry TLS backends (h1+h2) with their own certificates and different content."""
    out = {}
    for name in ("alpha.test", "beta.test"):
        crt, key = make_cert(tmp_path, name)
        f = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2]
    tls:
      cert: "{crt}"
      key: "{key}"
routes:
  - respond:
      status: 200
      body: "this is {name}\\n"
""")
        out[name] = (f.port, crt)
    return out


def s_client_subject(port, sni):
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername",
                        sni, "-brief"], input=b"", capture_output=True, timeout=20)
    return (r.stdout + r.stderr).decode(errors="replace")


def test_l4_tls_passthrough_by_sni(server, two_tls_backends):
    a_port, _ = two_tls_backends["alpha.test"]
    b_port, _ = two_tls_backends["beta.test"]
    f = server(f"""
workers: 2
l4:
  - listen: 127.0.0.1:{{port}}
    mode: tls-passthrough
    sni:
      - server-name: alpha.test
        target: 127.0.0.1:{a_port}
      - server-name: "*.test"
        target: 127.0.0.1:{b_port}
""")
    assert "CN = alpha.test" in s_client_subject(f.port, "alpha.test")
    assert "CN = beta.test" in s_client_subject(f.port, "beta.test")
    assert "CN = beta.test" in s_client_subject(f.port, "other.test")  # wildcard
    for name in ("alpha.test", "beta.test"):
        for proto in ("--http1.1", "--http2"):
            r = subprocess.run(["curl", "-sS", "-k", proto, "--resolve",
                                f"{name}:{f.port}:127.0.0.1", "-w", "|%{http_version}",
                                f"https://{name}:{f.port}/"],
                               capture_output=True, timeout=20)
            assert r.returncode == 0, r.stderr
            body, _, ver = r.stdout.decode().rpartition("|")
            assert body == f"this is {name}\n"
            assert ver == ("1.1" if proto == "--http1.1" else "2")
    # unknown name, no default: closed cleanly
    out = s_client_subject(f.port, "nothing.example")
    assert "CN = " not in out
    assert "no route for server name 'nothing.example'" in f.log()


def _client_hello(sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, outb, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return obj, inc, outb, outb.read()


def test_l4_tls_passthrough_client_hello_byte_by_byte(server, two_tls_backends):
    a_port, _ = two_tls_backends["alpha.test"]
    b_port, _ = two_tls_backends["beta.test"]
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: tls-passthrough
    sni:
      - server-name: alpha.test
        target: 127.0.0.1:{a_port}
      - server-name: beta.test
        target: 127.0.0.1:{b_port}
""")
    obj, inc, outb, hello = _client_hello("beta.test")
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(len(hello)):
        s.send(hello[i:i + 1])
        time.sleep(0.001)
    # finish the handshake and one request through the tunnel
    for _ in range(100):
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            pending = outb.read()
            if pending:
                s.sendall(pending)
            data = s.recv(65536)
            assert data, "closed during the handshake"
            inc.write(data)
    s.sendall(outb.read())
    obj.write(b"GET / HTTP/1.1\r\nHost: beta.test\r\nConnection: close\r\n\r\n")
    s.sendall(outb.read())
    resp = b""
    while True:
        data = s.recv(65536)
        if not data:
            break
        inc.write(data)
        try:
            while True:
                chunk = obj.read(65536)
                if not chunk:
                    break
                resp += chunk
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
    s.close()
    assert resp.startswith(b"HTTP/1.1 200")
    assert resp.endswith(b"this is beta.test\n")


def test_l4_tls_passthrough_peek_limits(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: tls-passthrough
    peek-max: 512
    peek-timeout: 300ms
    target: 127.0.0.1:{e.port}
""")
    # a ClientHello larger than peek-max
    big_sni = "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + ".test"
    _, _, _, hello = _client_hello(big_sni)
    assert len(hello) > 512
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(hello)
    assert s.recv(100) == b""
    s.close()
    assert "larger than peek-max (512 bytes)" in f.log()
    # half a ClientHello, then silence: the peek timeout closes
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(hello[:100])
    assert s.recv(100) == b""
    s.close()
    assert "peek timeout" in f.log()
    # not TLS at all
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(100) == b""
    s.close()
    assert "not a TLS ClientHello" in f.log()
