"""Layer 4 (issue 8), part two: TLS termination in front of a TCP service, QUIC passthrough by
the SNI inside the decrypted Initial, and the l4 config checks. Peers and helpers are
test_l4.py's.
"""
import os
import select
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from conftest import FERRY, free_port, wait_udp
from test_l4 import make_cert, s_client_subject, sha, tcp_echo, two_tls_backends, udp_echo  # noqa: F401


# ---- TLS termination ----

def tls_echo_roundtrip(port, payload, sni="localhost"):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            cert = s.getpeercert(binary_form=True)
            s.sendall(payload)
            got = b""
            while len(got) < len(payload):
                b = s.recv(65536)
                if not b:
                    break
                got += b
            return got, cert


def test_l4_tls_terminate_oneliner_to_plain_echo(server, tcp_echo):
    e = tcp_echo()
    port = free_port()
    f = server(args=["l4", f"127.0.0.1:{e.port}", "--tls", "self-signed", "--listen",
                     f"127.0.0.1:{port}", "--workers", "1"], start=False)
    f.start(wait_ports=[port])
    p = os.urandom(300000)
    got, _ = tls_echo_roundtrip(port, p)
    assert sha(got) == sha(p)
    for _ in range(200):  # the origin records its first bytes when the session ends
        if e.first:
            break
        time.sleep(0.05)
    assert e.first and e.first[-1] == p[:256]  # plaintext at the origin


def test_l4_tls_terminate_many_records_per_read_and_backpressure(server, tcp_echo):
    """tls-terminate with edge-triggered sockets: many small TLS records arrive in one TCP
    segment (the library reads them all ahead: none may be left behind while the socket
    stays quiet), and the client does not read for a while at first, so both directions
    block on their destination and must resume. Every byte comes back, in order."""
    e = tcp_echo()
    port = free_port()
    f = server(args=["l4", f"127.0.0.1:{e.port}", "--tls", "self-signed", "--listen",
                     f"127.0.0.1:{port}", "--workers", "1"], start=False)
    f.start(wait_ports=[port])
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, outg, server_hostname="localhost")
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    raw.setblocking(False)
    deadline = time.monotonic() + 60

    def pump(want_read):
        """flush our TLS output; read what the socket has into the library"""
        data = outg.read()
        while data:
            select.select([], [raw], [], 5)
            try:
                n = raw.send(data)
                data = data[n:]
            except BlockingIOError:
                pass
        if want_read:
            r, _, _ = select.select([raw], [], [], 0.2)
            if r:
                b = raw.recv(1 << 20)
                if not b:
                    inc.write_eof()
                else:
                    inc.write(b)
    while True:  # handshake
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            pump(True)
        assert time.monotonic() < deadline
    pump(False)
    # 3000 small records, flushed together: many records per TCP segment
    msgs = [os.urandom(1 + i % 97) for i in range(3000)]
    for m in msgs:
        tls.write(m)
    big = os.urandom(6 << 20)  # then a bulk part, written while nothing is read back
    want = b"".join(msgs) + big
    sent_big = 0
    data = outg.read()
    raw.setblocking(True)
    raw.sendall(data)
    raw.setblocking(False)
    got = bytearray()
    t_stall = time.monotonic() + 1.0
    while len(got) < len(want):
        assert time.monotonic() < deadline, f"stalled at {len(got)} of {len(want)} bytes"
        if sent_big < len(big):
            sent_big += tls.write(big[sent_big:sent_big + 65536])
            data = outg.read()
            while data:  # may block until the proxy (and the echo behind it) drain
                _, w, _ = select.select([], [raw], [], 0.2)
                if w:
                    try:
                        n = raw.send(data)
                        data = data[n:]
                    except BlockingIOError:
                        pass
                elif time.monotonic() >= t_stall:
                    # our send is blocked: read back to let everything move again
                    try:
                        inc.write(raw.recv(1 << 20))
                    except BlockingIOError:
                        pass
                    try:
                        while True:
                            got += tls.read(1 << 20)
                    except ssl.SSLWantReadError:
                        pass
            continue
        if time.monotonic() < t_stall:
            time.sleep(0.05)
            continue
        pump(True)
        try:
            while True:
                got += tls.read(1 << 20)
        except ssl.SSLWantReadError:
            pass
    raw.close()
    assert sha(bytes(got)) == sha(want)


def test_l4_tls_terminate_data_close_notify_and_fin_in_one_segment(server, tcp_echo):
    """The last records, the close_notify and the FIN arrive together: the relay (which
    skips the read after a short one) still sees the end, half-closes the origin, and the
    origin's answer and its own end come back."""
    e = tcp_echo(tail=b"bye")
    port = free_port()
    f = server(args=["l4", f"127.0.0.1:{e.port}", "--tls", "self-signed", "--listen",
                     f"127.0.0.1:{port}", "--workers", "1"], start=False)
    f.start(wait_ports=[port])
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, outg, server_hostname="localhost")
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            raw.sendall(outg.read())
            b = raw.recv(65536)
            assert b, "closed during the handshake"
            inc.write(b)
    raw.sendall(outg.read())
    want = b"".join(os.urandom(50 + i) for i in range(40))
    for i in range(0, len(want), 100):
        tls.write(want[i:i + 100])
    try:
        tls.unwrap()  # queues our close_notify
    except ssl.SSLWantReadError:
        pass
    raw.sendall(outg.read())
    raw.shutdown(socket.SHUT_WR)
    got = bytearray()
    ended = False
    while not ended:
        b = raw.recv(65536)
        if not b:
            inc.write_eof()
        else:
            inc.write(b)
        try:
            while True:
                d = tls.read(65536)
                if not d:
                    ended = True
                    break
                got += d
        except ssl.SSLWantReadError:
            assert b, "TCP end before the TLS end"
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            ended = True
    raw.close()
    assert bytes(got) == want + b"bye"


def test_l4_mixed_listener_passthrough_and_terminate(server, tcp_echo, two_tls_backends,
                                                     tmp_path):
    """One tls-passthrough listener: alpha.test passes through, plain.test is terminated
    here and relayed as plaintext to an echo."""
    a_port, _ = two_tls_backends["alpha.test"]
    e = tcp_echo()
    crt, key = make_cert(tmp_path, "plain.test")
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: tls-passthrough
    tls:
      cert: "{crt}"
      key: "{key}"
    sni:
      - server-name: alpha.test
        target: 127.0.0.1:{a_port}
      - server-name: plain.test
        target: 127.0.0.1:{e.port}
        terminate: true
""")
    assert "CN = alpha.test" in s_client_subject(f.port, "alpha.test")
    got, cert = tls_echo_roundtrip(f.port, b"hello plaintext", sni="plain.test")
    assert got == b"hello plaintext"
    assert ssl.DER_cert_to_PEM_cert(cert).strip() == crt.read_text().strip()


# ---- QUIC passthrough ----

GTLS_SERVER = shutil.which("gtlsserver") or "/usr/sbin/gtlsserver"
GTLS_CLIENT = shutil.which("gtlsclient") or "/usr/bin/gtlsclient"


def _unshare_ok():
    r = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return r.returncode == 0


@pytest.fixture
def quic_backends(tmp_path):
    assert os.path.exists(GTLS_SERVER) and os.path.exists(GTLS_CLIENT), \
        "Debian's ngtcp2-server/ngtcp2-client (gtlsserver/gtlsclient) are required"
    procs, out = [], {}
    for name in ("alpha.test", "beta.test"):
        crt, key = make_cert(tmp_path, name)
        d = tmp_path / f"www-{name}"
        d.mkdir()
        (d / "index.html").write_text(f"quic backend {name}\n")
        port = free_port()
        p = subprocess.Popen([GTLS_SERVER, "-q", "-d", str(d), "127.0.0.1", str(port), str(key),
                              str(crt)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        out[name] = port
        wait_udp(port, p)  # bound: its socket queues the first Initial
    yield out
    for p in procs:
        p.terminate()
        p.wait(10)


def gtls_get(tmp_path, host, port, tag):
    """gtlsclient GET https://host/index.html via 127.0.0.1:port. gtlsclient sends the host
    argument as SNI ("localhost" for a numeric one; its --sni is ignored with GnuTLS), so names
    are resolved through a private /etc/hosts in a user+mount namespace."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost alpha.test beta.test other.test\n")
    dl = tmp_path / f"dl-{tag}"
    dl.mkdir()
    cmd = (f"mount --bind {hosts} /etc/hosts && exec {GTLS_CLIENT} -q --timeout=5s "
           f"--exit-on-all-streams-close --download={dl} {host} {port} "
           f"https://{host}/index.html")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], capture_output=True, timeout=30)
    f = dl / "index.html"
    return f.read_text() if f.exists() else None, r


def test_l4_quic_passthrough_by_sni(server, quic_backends, tmp_path):
    if not _unshare_ok():
        pytest.skip("needs unprivileged user namespaces (unshare -rm) to give gtlsclient "
                    "two host names")
    f = server(f"""
workers: 2
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    sni:
      - server-name: alpha.test
        target: 127.0.0.1:{quic_backends['alpha.test']}
      - server-name: "*.test"
        target: 127.0.0.1:{quic_backends['beta.test']}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    body, r = gtls_get(tmp_path, "alpha.test", f.port, "a")
    assert body == "quic backend alpha.test\n", r
    body, r = gtls_get(tmp_path, "beta.test", f.port, "b")
    assert body == "quic backend beta.test\n", r
    body, r = gtls_get(tmp_path, "other.test", f.port, "c")
    assert body == "quic backend beta.test\n", r
    # no route for "localhost": the flow is dropped, the client times out
    body, r = gtls_get(tmp_path, "localhost", f.port, "d")
    assert body is None
    assert "no route for QUIC server name 'localhost'" in f.log()


def test_l4_quic_passthrough_garbage_and_truncated(server, quic_backends, tmp_path):
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    peek-timeout: 500ms
    target: 127.0.0.1:{quic_backends['alpha.test']}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    # capture a real Initial from gtlsclient
    cap = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    cap.bind(("127.0.0.1", 0))
    cap.settimeout(10)
    cp = subprocess.Popen([GTLS_CLIENT, "-q", "--timeout=2s", "localhost",
                           str(cap.getsockname()[1]), "https://localhost/"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    initial, _ = cap.recvfrom(65536)
    cp.terminate()
    cp.wait(10)
    cap.close()
    assert len(initial) >= 1200 and initial[0] & 0xf0 == 0xc0
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(0.3)
    junk = [b"", b"\x00", os.urandom(1), os.urandom(1500), b"\xc0" + os.urandom(1300),
            initial[:600], initial[:1199], initial[:40],
            initial[:20] + bytes([initial[20] ^ 0xff]) + initial[21:],  # corrupt
            b"\xc0\x00\x00\x00\x00" + os.urandom(1300),  # version negotiation
            b"\xc0\x0a\x0a\x0a\x0a\x08" + os.urandom(1300),  # unknown version
            b"\x40" + os.urandom(1300)]  # short header of no known flow
    for j in junk:
        c.sendto(j, ("127.0.0.1", f.port))
    with pytest.raises(socket.timeout):
        c.recvfrom(65536)  # nothing reached a backend that answers
    c.close()
    # then a real client still works (default target, SNI "localhost")
    body, r = gtls_get_numeric(tmp_path, f.port)
    assert body == "quic backend alpha.test\n", r
    assert "datagram dropped" in f.log()


def gtls_get_numeric(tmp_path, port):
    dl = tmp_path / "dl-n"
    dl.mkdir()
    r = subprocess.run([GTLS_CLIENT, "-q", "--timeout=5s", "--exit-on-all-streams-close",
                        f"--download={dl}", "127.0.0.1", str(port),
                        "https://localhost/index.html"], capture_output=True, timeout=30)
    f = dl / "index.html"
    return f.read_text() if f.exists() else None, r


def test_l4_quic_peek_max_limit(server, quic_backends, tmp_path):
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    peek-max: 256
    target: 127.0.0.1:{quic_backends['alpha.test']}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    body, r = gtls_get_numeric(tmp_path, f.port)
    assert body is None
    assert "QUIC ClientHello larger than peek-max (256 bytes)" in f.log()


def test_l4_quic_unknown_version_to_default(server, udp_echo):
    e = udp_echo(tag=b"E:")
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    unknown-version: default
    target: 127.0.0.1:{e.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(1)
    pkt = b"\xc0\x0a\x0a\x0a\x0a\x04abcd\x04efgh" + b"\x00" * 1200
    got = None
    for _ in range(10):
        c.sendto(pkt, ("127.0.0.1", f.port))
        try:
            got = c.recvfrom(65536)[0]
            break
        except socket.timeout:
            pass
    c.close()
    assert got == b"E:" + pkt


# ---- config ----

@pytest.mark.parametrize("body,msg", [
    ("  - listen: 127.0.0.1:9\n", "l4[0]: needs a target or an upstream"),
    ("  - listen: 127.0.0.1:9\n    mode: tcpx\n    target: 127.0.0.1:1\n",
     "l4[0].mode: expected one of: tcp, udp, tls-passthrough, tls-terminate, quic-passthrough"),
    ("  - listen: 127.0.0.1:9\n    upstream: nope\n", "c.yaml:3:15: l4[0].upstream: no upstream named 'nope'"),
    ("  - listen: 127.0.0.1:9\n    mode: tls-terminate\n    target: 127.0.0.1:1\n",
     "l4[0].tls: is required for mode tls-terminate"),
    ("  - listen: 127.0.0.1:9\n    mode: udp\n    target: 127.0.0.1:1\n"
     "    proxy-protocol: v1\n", "PROXY protocol is for TCP modes only"),
    ("  - listen: 127.0.0.1:9\n    target: nohost\n", "cannot use 'nohost'"),
    ("  - listen: 127.0.0.1:9\n    target: 127.0.0.1:1\n    accept-proxy: [10.0.0.0/99]\n",
     "bad CIDR '10.0.0.0/99'"),
    ("  - listen: 127.0.0.1:9\n    mode: tls-passthrough\n    sni:\n"
     "      - {server-name: 'a b', target: 127.0.0.1:1}\n", "bad server name 'a b'"),
    ("  - listen: 127.0.0.1:9\n    target: 127.0.0.1:1\n    peek-max: 1m\n",
     "l4[0].peek-max: must be between"),
])
def test_l4_config_errors(tmp_path, body, msg):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("l4:\n" + body)
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1
    assert msg in r.stderr, r.stderr
    assert r.stderr.startswith(f"{cfg}:")


def test_l4_only_config_is_valid(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("l4:\n  - listen: 127.0.0.1:9\n    target: 127.0.0.1:1\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "mode: tcp" in r.stdout and "peek-max: 16k" in r.stdout.replace("KiB", "k")


def test_l4_http_listener_sni_map(server, tcp_echo, two_tls_backends, tmp_path):
    """An ordinary HTTPS listener whose `sni:` map passes alpha.test through, terminates
    plain.test and relays it as L4, and serves every other name from the HTTP routes."""
    a_port, _ = two_tls_backends["alpha.test"]
    e = tcp_echo()
    crt, key = make_cert(tmp_path, "web.test")
    f = server(f"""
workers: 2
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2]
    tls:
      cert: "{crt}"
      key: "{key}"
    sni:
      - server-name: alpha.test
        passthrough: 127.0.0.1:{a_port}
      - server-name: plain.test
        relay: 127.0.0.1:{e.port}
routes:
  - respond:
      status: 200
      body: "from the l7 routes\\n"
""")
    assert "CN = alpha.test" in s_client_subject(f.port, "alpha.test")
    assert "CN = web.test" in s_client_subject(f.port, "web.test")
    for proto in ("--http1.1", "--http2"):
        for name, body in (("alpha.test", "this is alpha.test\n"),
                           ("web.test", "from the l7 routes\n"),
                           ("other.test", "from the l7 routes\n")):
            r = subprocess.run(["curl", "-sS", "-k", proto, "--resolve",
                                f"{name}:{f.port}:127.0.0.1", f"https://{name}:{f.port}/"],
                               capture_output=True, timeout=20)
            assert r.returncode == 0, r.stderr
            assert r.stdout.decode() == body
    p = os.urandom(100000)
    got, cert = tls_echo_roundtrip(f.port, p, sni="plain.test")
    assert sha(got) == sha(p)
    assert ssl.DER_cert_to_PEM_cert(cert).strip() == crt.read_text().strip()


def test_l4_http_listener_sni_map_needs_tls(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("listeners:\n  - address: 127.0.0.1:9\n    sni:\n"
                   "      - {server-name: a.test, passthrough: 127.0.0.1:1}\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "listeners[0].sni: needs tls" in r.stderr, r.stderr


def test_l4_quic_passthrough_follows_nat_rebinding(server, quic_backends, tmp_path):
    """gtlsclient changes its local port mid-connection without path validation (NAT
    rebinding): the flow is found again by the origin's connection ID."""
    f = server(f"""
workers: 1
log:
  level: debug
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    target: 127.0.0.1:{quic_backends['alpha.test']}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    dl = tmp_path / "dl-rebind"
    dl.mkdir()
    r = subprocess.run([GTLS_CLIENT, "-q", "--timeout=5s", "--exit-on-all-streams-close",
                        "--change-local-addr=300ms", "--nat-rebinding", "--delay-stream=1s",
                        f"--download={dl}", "127.0.0.1", str(f.port),
                        "https://localhost/index.html"], capture_output=True, timeout=30)
    assert (dl / "index.html").exists(), r
    assert (dl / "index.html").read_text() == "quic backend alpha.test\n"
    assert "QUIC flow found by connection ID at a new client address" in f.log()


def test_l4_tcp_connect_timeout(server):
    """An origin whose accept queue is full drops SYNs: connect-timeout closes the session."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(0)
    port = ls.getsockname()[1]
    fillers = []
    for _ in range(8):  # fill the accept queue (nobody accepts)
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    time.sleep(0.2)
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{port}
    connect-timeout: 300ms
""")
    s = socket.create_connection(("127.0.0.1", f.port), timeout=20)
    assert s.recv(10) == b""
    s.close()
    for c in fillers:
        c.close()
    ls.close()
    assert "connect to origin timed out" in f.log()


def test_l4_sigterm_lets_open_sessions_finish(server, tcp_echo):
    e = tcp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    target: 127.0.0.1:{e.port}
""")
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    s.sendall(b"before")
    assert s.recv(100) == b"before"
    f.proc.send_signal(15)
    time.sleep(0.3)
    assert f.proc.poll() is None  # still relaying the open session
    s.sendall(b"after")
    assert s.recv(100) == b"after"
    s.close()
    assert f.proc.wait(20) == 0


BIG_HELLO = (os.path.dirname(os.path.abspath(__file__))
             + "/../fuzz/corpus/l4_quic/big_hello_three_initials")


def test_l4_quic_hello_across_datagrams_and_peek_timeout(server, udp_echo):
    """A 2.6 KB ClientHello (SNI pq.example) in three Initial datagrams (made by
    src/l4/l4_quic_test.c): all three are held, then relayed in order once the SNI is known;
    the first alone is dropped at peek-timeout."""
    parts = open(BIG_HELLO, "rb").read().split(b"\xff\xfe\xfd")
    assert len(parts) == 3 and all(len(p) == 1200 for p in parts)
    e = udp_echo(tag=b"E:")
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    peek-timeout: 1s
    sni:
      - server-name: pq.example
        target: 127.0.0.1:{e.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(2)
    for p in parts:
        c.sendto(p, ("127.0.0.1", f.port))
    got = [c.recvfrom(65536)[0] for _ in range(3)]
    assert got == [b"E:" + p for p in parts]
    c.close()
    # only the first datagram of a hello: held, then dropped at peek-timeout
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(1)
    c.sendto(parts[0], ("127.0.0.1", f.port))
    with pytest.raises(socket.timeout):
        c.recvfrom(65536)
    for _ in range(100):
        if "QUIC ClientHello incomplete after peek-timeout" in f.log():
            break
        time.sleep(0.05)
    assert "QUIC ClientHello incomplete after peek-timeout" in f.log()
    c.close()


def test_l4_quic_held_datagrams_bound(server, udp_echo):
    """At most 32 datagrams are held while a flow's ClientHello is incomplete."""
    parts = open(BIG_HELLO, "rb").read().split(b"\xff\xfe\xfd")
    e = udp_echo()
    f = server(f"""
workers: 1
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    target: 127.0.0.1:{e.port}
""", start=False)
    f.start(wait_ports=[], udp_ports=[f.port])
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(33):
        c.sendto(parts[0], ("127.0.0.1", f.port))
    c.close()
    for _ in range(100):
        if "more than 32 datagrams before the QUIC ClientHello" in f.log():
            break
        time.sleep(0.05)
    assert "more than 32 datagrams before the QUIC ClientHello was complete" in f.log()
