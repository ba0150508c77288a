"""Layer 4 follow-ups (issue 8): TCP-connect and TLS-handshake health probes for the upstream
groups of L4 relays; QUIC Version Negotiation and unknown versions in quic-passthrough."""
import os
import socket
import subprocess
import time

import pytest

from conftest import FERRY, SANITIZED, free_port
from test_l4 import TcpEcho, echo_roundtrip, make_cert, tcp_echo, udp_echo  # noqa: F401


def wait_log(f, text, count=1, limit=200):
    """Wait (bounded) until `text` is in the log `count` times."""
    for _ in range(limit * (3 if SANITIZED else 1)):
        if f.log().count(text) >= count:
            return True
        time.sleep(0.05)
    return False


def relayed(e):
    """Connections of an echo origin that carried bytes (health probes carry none)."""
    return sum(1 for x in e.first if x)


# ---- health-check: {type: tcp} ----

def test_l4_health_tcp_down_and_recovery(server, tcp_echo):
    a, b = tcp_echo(), tcp_echo()
    b_port = b.port
    f = server(f"""
workers: 2
upstreams:
  - name: pool
    servers: [http://127.0.0.1:{a.port}, http://127.0.0.1:{b_port}]
    health-check: {{{{type: tcp, interval: 100ms, timeout: 500ms, fall: 2, rise: 2}}}}
l4:
  - listen: 127.0.0.1:{{port}}
    upstream: pool
""")
    down = f"server 127.0.0.1:{b_port} is down (health check"
    up = f"server 127.0.0.1:{b_port} is up (health check)"
    # both up: the probes connect and send nothing, the relay reaches both
    for _ in range(8):
        p = os.urandom(200)
        assert echo_roundtrip(f.port, p) == p
    assert relayed(a) >= 1 and relayed(b) >= 1, (relayed(a), relayed(b))
    assert b.conns > relayed(b)  # probes reached it too
    assert down not in f.log()
    # b goes away: the probes mark it down, no client connect is tried on it any more
    b.close()
    assert wait_log(f, down), f.log()[-3000:]
    assert "origin refused the connection" in f.log()
    before = f.log().count("connect to origin failed")
    for _ in range(8):
        p = os.urandom(300)
        assert echo_roundtrip(f.port, p) == p
    assert f.log().count("connect to origin failed") == before
    # b comes back on the same port: `rise` good probes bring it back, clients reach it again
    b2 = TcpEcho(port=b_port)
    try:
        assert wait_log(f, up), f.log()[-3000:]
        for _ in range(8):
            p = os.urandom(100)
            assert echo_roundtrip(f.port, p) == p
        assert relayed(b2) >= 1
    finally:
        b2.close()


def test_l4_health_tcp_timeout_marks_down(server, tcp_echo):
    """A server whose connect never completes (full backlog stand-in: a blackhole address is
    not loopback, so use a listener that is never accepted and whose backlog is full)."""
    a = tcp_echo()
    # a listener with backlog 0 that never accepts: after one queued connection, SYNs are
    # dropped and further connects hang until the probe's timeout
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(0)
    hport = hang.getsockname()[1]
    fillers = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", hport))
        except BlockingIOError:
            pass
        fillers.append(c)
    try:
        f = server(f"""
workers: 1
upstreams:
  - name: pool
    servers: [http://127.0.0.1:{a.port}, http://127.0.0.1:{hport}]
    health-check: {{{{type: tcp, interval: 100ms, timeout: 200ms, fall: 1}}}}
l4:
  - listen: 127.0.0.1:{{port}}
    upstream: pool
""")
        assert wait_log(f, f"server 127.0.0.1:{hport} is down (health check: timeout)"), \
            f.log()[-3000:]
        p = os.urandom(500)
        assert echo_roundtrip(f.port, p) == p
    finally:
        for c in fillers:
            c.close()
        hang.close()


@pytest.fixture
def tls_origin(tmp_path, server):
    crt, key = make_cert(tmp_path, "origin.test")
    f = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    tls:
      cert: "{crt}"
      key: "{key}"
routes:
  - respond:
      status: 200
      body: "tls origin\\n"
""")
    return f.port, crt


def test_l4_health_tls_handshake_probe(server, tcp_echo, tls_origin):
    """`type: tcp` with https:// URLs: the probe is a verified TLS handshake. A plain TCP
    server on the same kind of URL fails it (it answers the ClientHello with garbage)."""
    tport, crt = tls_origin
    plain = tcp_echo()
    f = server(f"""
workers: 1
upstreams:
  - name: pool
    servers: [https://127.0.0.1:{tport}, https://127.0.0.1:{plain.port}]
    ca: "{crt}"
    sni: origin.test
    health-check: {{{{type: tcp, interval: 100ms, timeout: 5s, fall: 1, rise: 1}}}}
l4:
  - listen: 127.0.0.1:{{port}}
    mode: tls-passthrough
    upstream: pool
""")
    assert wait_log(f, f"server 127.0.0.1:{plain.port} is down (health check"), f.log()[-3000:]
    time.sleep(0.5)  # several more probe rounds
    assert f"server 127.0.0.1:{tport} is down" not in f.log()
    # the passthrough reaches only the TLS origin now
    for _ in range(4):
        r = subprocess.run(["curl", "-sS", "-k", "--resolve", f"origin.test:{f.port}:127.0.0.1",
                            f"https://origin.test:{f.port}/"], capture_output=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"tls origin\n"


def test_l4_health_type_config_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("upstreams:\n  - name: p\n    servers: [http://127.0.0.1:1]\n"
                   "    health-check: {type: udp}\n"
                   "l4:\n  - listen: 127.0.0.1:9\n    upstream: p\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "health-check.type: expected one of: http, tcp" in r.stderr, r.stderr
    assert r.stderr.startswith(f"{cfg}:")


# ---- QUIC Version Negotiation and unknown versions ----

class VnOrigin:
    """A UDP origin that answers every datagram with a Version Negotiation packet built from
    the client's connection IDs (RFC 9000 §17.2.1), listing version 1. Counts what it got."""

    def __init__(self):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", 0))
        self.port = self.s.getsockname()[1]
        self.s.settimeout(0.2)
        self.got = []
        self.stopped = False
        import threading
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stopped:
            try:
                d, a = self.s.recvfrom(65536)
            except OSError:
                continue
            self.got.append(d)
            self.s.sendto(vn_reply(d), a)

    def close(self):
        self.stopped = True
        self.t.join(2)
        self.s.close()


def long_hdr(version, dcid, scid, pad=1200):
    return (bytes([0xc0]) + version.to_bytes(4, "big") + bytes([len(dcid)]) + dcid +
            bytes([len(scid)]) + scid + b"\x00" * pad)


def vn_reply(pkt):
    dl = pkt[5]
    dcid = pkt[6:6 + dl]
    sl = pkt[6 + dl]
    scid = pkt[7 + dl:7 + dl + sl]
    return (b"\x80" + b"\x00\x00\x00\x00" + bytes([len(scid)]) + scid + bytes([len(dcid)]) +
            dcid + (1).to_bytes(4, "big"))


def udp_ask(port, pkt, tries=1, wait=0.5):
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.bind(("127.0.0.1", 0))
    c.settimeout(wait)
    try:
        for _ in range(tries):
            c.sendto(pkt, ("127.0.0.1", port))
            try:
                return c.recvfrom(65536)[0]
            except socket.timeout:
                pass
        return None
    finally:
        c.close()


@pytest.fixture
def vn_origin():
    o = VnOrigin()
    yield o
    o.close()


def test_l4_quic_unknown_version_default_gets_origin_vn(server, vn_origin):
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    unknown-version: default
    target: 127.0.0.1:{vn_origin.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    # an unknown version (a greased one) starts a flow to the default target; the origin's
    # Version Negotiation comes back to the client byte for byte
    pkt = long_hdr(0x1a2a3a4a, b"\x11" * 8, b"\x22" * 5)
    got = udp_ask(f.port, pkt, tries=20)
    assert got == vn_reply(pkt)
    assert got[1:5] == b"\x00\x00\x00\x00" and got[6:11] == b"\x22" * 5
    n = len(vn_origin.got)
    # a Version Negotiation packet from a client is never relayed, even with `default`
    vn = vn_reply(long_hdr(1, b"\x33" * 8, b"\x44" * 8, pad=0)) + b"\x00" * 1200
    assert udp_ask(f.port, vn, tries=3, wait=0.3) is None
    assert len(vn_origin.got) == n
    assert "datagram dropped: Version Negotiation from a client" in f.log()


def test_l4_quic_unknown_version_dropped_by_default(server, vn_origin):
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    target: 127.0.0.1:{vn_origin.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    pkt = long_hdr(0x1a2a3a4a, b"\x11" * 8, b"\x22" * 5)
    assert udp_ask(f.port, pkt, tries=3, wait=0.3) is None
    assert vn_origin.got == []
    assert "datagram dropped: QUIC version other than 1" in f.log()


# ---- edge-triggered relay: bytes and FIN arriving together ----

def test_l4_tcp_data_and_fin_together_are_both_relayed(server):
    """The origin writes a greeting and closes at once, so its bytes and FIN usually arrive
    in one go; the relay is edge-triggered and must still see the FIN after a short read.
    Both directions, many times (a lost FIN hangs the session until idle-timeout)."""
    import threading
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    oport = ls.getsockname()[1]
    got_from_client = []

    def origin():
        for _ in range(200):  # 60, and room for stray connections
            try:
                c, _ = ls.accept()
            except OSError:
                return
            c.settimeout(10)
            c.sendall(b"greeting " * 10)
            c.shutdown(socket.SHUT_WR)
            data = b""
            try:
                while True:
                    b = c.recv(65536)
                    if not b:
                        break
                    data += b
            except OSError:
                data += b"<ERR>"
            got_from_client.append(data)
            c.close()
    t = threading.Thread(target=origin, daemon=True)
    t.start()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{oport}
    idle-timeout: 60s
""")
    try:
        for i in range(60):
            s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
            s.sendall(b"bye %d" % i)
            s.shutdown(socket.SHUT_WR)
            data = b""
            while True:
                b = s.recv(65536)  # socket.timeout here = a lost FIN
                if not b:
                    break
                data += b
            s.close()
            assert data == b"greeting " * 10
        for _ in range(200):  # the origin records the last one after the client is done
            if len([x for x in got_from_client if x]) >= 60:
                break
            time.sleep(0.05)
        sent = [x for x in got_from_client if x]  # (a connection that sent nothing: not ours)
        assert sent == [b"bye %d" % i for i in range(60)]
    finally:
        ls.close()
