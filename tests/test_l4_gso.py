"""UDP L4 relays with UDP_GRO / UDP_SEGMENT (issue 17): a sender's GSO super-datagram crosses
the relay as one buffer each way with every datagram's bytes and boundaries intact; a QUIC
flow's Initials that arrive coalesced are taken apart for the SNI peek; a path whose MTU
refuses the segment size gets the datagrams one by one."""
import os
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import free_port

UDP_SEGMENT, UDP_GRO = 103, 104
BIG_HELLO = (os.path.dirname(os.path.abspath(__file__))
             + "/../fuzz/corpus/l4_quic/big_hello_three_initials")


def gso_send(s, segs, to=None):
    """One sendmsg carrying every segment (all of len(segs[0]) bytes but the last)."""
    anc = [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("H", len(segs[0])))]
    if to:
        return s.sendmsg([b"".join(segs)], anc, 0, to)
    return s.sendmsg([b"".join(segs)], anc)


def gro_recv(s):
    """One receive: (datagrams, segment size or 0, address)."""
    d, anc, _, addr = s.recvmsg(65536, socket.CMSG_SPACE(4))
    seg = 0
    for level, typ, data in anc:
        if level == socket.SOL_UDP and typ == UDP_GRO:
            seg = struct.unpack("i", data[:4])[0]
    if not seg or seg >= len(d):
        return [d], 0, addr
    return [d[o:o + seg] for o in range(0, len(d), seg)], seg, addr


def gro_socket(host="127.0.0.1", port=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
    s.bind((host, port))
    return s


class GroEcho:
    """Records every datagram (and each receive's segment size), echoes each datagram alone;
    a datagram b"gso?" is answered with `reply` in one UDP_SEGMENT send."""

    def __init__(self, host="127.0.0.1", reply=None):
        self.s = gro_socket(host)
        self.port = self.s.getsockname()[1]
        self.s.settimeout(0.2)
        self.reply = reply
        self.got, self.segs = [], []
        self.stopped = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stopped:
            try:
                ds, seg, a = gro_recv(self.s)
            except OSError:
                continue
            self.got += ds
            self.segs.append(seg)
            for d in ds:
                if d == b"gso?" and self.reply:
                    gso_send(self.s, self.reply, a)
                else:
                    self.s.sendto(d, a)

    def wait(self, n, limit=100):
        for _ in range(limit):
            if len(self.got) >= n:
                break
            time.sleep(0.05)
        return self.got

    def close(self):
        self.stopped = True
        time.sleep(0.3)
        self.s.close()


@pytest.fixture
def gro_echo():
    made = []

    def make(**kw):
        e = GroEcho(**kw)
        made.append(e)
        return e
    yield make
    for e in made:
        e.close()


def l4_bytes(admin):
    """ferry_l4_bytes_total (up, down) of the one L4 route."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10).read().decode()
    v = {}
    for m in re.finditer(r'^ferry_l4_bytes_total\{.*direction="(up|down)"\} (\S+)$', body, re.M):
        v[m.group(1)] = int(float(m.group(2)))
    return v.get("up"), v.get("down")


def recv_n(c, n):
    """n datagrams from the client socket, and the segment size of each receive."""
    got, segs = [], []
    while len(got) < n:
        ds, seg, _ = gro_recv(c)
        got += ds
        segs.append(seg)
    return got, segs


def test_l4_udp_gso_super_datagram_crosses_whole(server, gro_echo):
    down = [os.urandom(1100) for _ in range(50)] + [os.urandom(5)]
    e = gro_echo(reply=down)
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: udp
    target: 127.0.0.1:{e.port}
admin:
  address: 127.0.0.1:{{port2}}
""", start=False)
    f.start(wait_ports=[f.ports[1]], udp_ports=[f.port])
    c = gro_socket()
    c.settimeout(5)
    c.connect(("127.0.0.1", f.port))
    c.send(b"hello")  # the session's first datagram (the relay connects to the origin)
    assert recv_n(c, 1)[0] == [b"hello"]
    # client -> origin: 45 datagrams of 1,000 bytes and one of 77, in one send
    up = [os.urandom(1000) for _ in range(45)] + [os.urandom(77)]
    gso_send(c, up)
    assert e.wait(1 + len(up)) == [b"hello"] + up
    # the relay forwarded them as one coalesced buffer (one UDP_SEGMENT send)
    assert e.segs[-1] == 1000
    got, _ = recv_n(c, len(up))  # echoed one by one
    assert got == up
    # origin -> client: one UDP_SEGMENT reply of 51 datagrams comes out as one buffer
    c.send(b"gso?")
    got, segs = recv_n(c, len(down))
    assert got == down
    assert segs == [1100]
    # equal sizes with no shorter tail, and a single small datagram, keep their boundaries
    even = [os.urandom(700) for _ in range(8)]
    gso_send(c, even)
    c.send(b"x")
    got, _ = recv_n(c, 9)
    assert got == even + [b"x"]
    # bytes counted are payload bytes, each datagram once
    up_b = 5 + sum(map(len, up)) + 4 + 700 * 8 + 1
    down_b = 5 + sum(map(len, up)) + sum(map(len, down)) + 700 * 8 + 1
    assert l4_bytes(f.ports[1]) == (up_b, down_b)
    c.close()


def test_l4_quic_coalesced_initials_are_peeked_one_by_one(server, gro_echo):
    """Three 1,200-byte Initials (a 2.6 KB ClientHello) and two short-header datagrams in one
    UDP_SEGMENT send: the relay splits the buffer for the peek, holds the Initials until the
    third completes the ClientHello, then relays all five in order, boundaries intact."""
    parts = open(BIG_HELLO, "rb").read().split(b"\xff\xfe\xfd")
    assert len(parts) == 3 and all(len(p) == 1200 for p in parts)
    e = gro_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    sni:
      - server-name: pq.example
        target: 127.0.0.1:{e.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    c = gro_socket()
    c.settimeout(5)
    c.connect(("127.0.0.1", f.port))
    after = [b"\x40" + os.urandom(1199), b"\x40" + os.urandom(1199)]
    gso_send(c, parts + after)
    assert e.wait(5) == parts + after
    got, _ = recv_n(c, 5)
    assert got == parts + after
    # the flow is routed: a later super-datagram crosses as one buffer
    more = [b"\x41" + os.urandom(1299) for _ in range(20)] + [b"\x42tail"]
    gso_send(c, more)
    assert e.wait(5 + len(more))[5:] == more
    assert e.segs[-1] == 1300
    assert recv_n(c, len(more))[0] == more
    c.close()


def _private_netns():
    return [n for _, n in socket.if_nameindex()] == ["lo"]


@pytest.fixture
def small_mtu_addr():
    """127.0.0.2 behind a route of MTU 1300 (only in a private network namespace)."""
    if not _private_netns() or os.geteuid() != 0:
        pytest.skip("needs root in a private network namespace (route change)")
    cmd = ["ip", "route", "add", "local", "127.0.0.2/32", "dev", "lo", "mtu", "1300",
           "table", "local"]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        pytest.skip("cannot add a route")
    yield "127.0.0.2"
    cmd[2] = "del"
    subprocess.run(cmd, capture_output=True)


def test_l4_udp_gso_refused_by_path_mtu_falls_back_to_datagrams(server, gro_echo,
                                                                  small_mtu_addr):
    """1,400-byte segments towards an origin whose route MTU is 1300: the kernel refuses the
    UDP_SEGMENT send (EMSGSIZE), so the relay sends those datagrams one by one (the kernel
    fragments each), and the session sends later buffers split without trying again."""
    e = gro_echo(host=small_mtu_addr)
    f = server(f"""
workers: 1
log:
  level: debug
l4:
  - listen: 127.0.0.1:{{port}}
    mode: udp
    target: {small_mtu_addr}:{e.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    c = gro_socket()
    c.settimeout(5)
    c.connect(("127.0.0.1", f.port))
    c.send(b"hello")
    assert recv_n(c, 1)[0] == [b"hello"]
    want = [b"hello"]
    for k in range(3):
        segs = [os.urandom(1400) for _ in range(6)] + [os.urandom(99 + k)]
        gso_send(c, segs)
        want += segs
        assert e.wait(len(want)) == want
        assert recv_n(c, len(segs))[0] == segs
    assert all(s == 0 for s in e.segs)  # every datagram reached the origin alone
    log = f.log()
    assert log.count("UDP_SEGMENT to origin refused") == 1, log[-2000:]
