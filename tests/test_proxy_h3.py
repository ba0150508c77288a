"""The reverse proxy to HTTP/3 origins (`h3://` upstreams: src/upstream/upstream_h3.c,
src/h3/h3_client.c) with every client protocol: H1, h2c, h2 (TLS) and H3 in front, against
Debian's ngtcp2 example server (gtlsserver) and against a second ferry (request bodies,
WebSocket through two proxies). Bodies checked by sha256.
"""
import hashlib
import os
import random
import shutil
import socket
import subprocess
import time

import pytest

from conftest import bound, free_port, http_request, wait_udp
from test_h3 import gtls, statuses
from test_h3_client import _ws_frame, _ws_parse, cert, ws_origin  # noqa: F401 (fixtures)

GTLSSERVER = shutil.which("gtlsserver")
CURL = shutil.which("curl")


def sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def gorigin(tmp_path, cert):  # noqa: F811
    if GTLSSERVER is None:
        pytest.skip("gtlsserver (Debian ngtcp2-server) missing")
    docs = tmp_path / "htdocs"
    docs.mkdir()
    port = free_port()
    proc = subprocess.Popen([GTLSSERVER, "-q", "-d", str(docs), "127.0.0.1", str(port),
                             str(cert / "key.pem"), str(cert / "cert.pem")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_udp(port, proc)  # bound: its socket queues the first Initial
    yield port, docs
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def front_config(servers, ca):
    return f"""
workers: 2
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: self-signed
  - address: 127.0.0.1:{{port2}}
upstreams:
  - name: o
    servers: [{servers}]
    ca: {ca}
routes:
  - proxy: {{{{upstream: o}}}}
"""


def curl(*args):
    p = subprocess.run([CURL, "-s", "--max-time", "60", *args], capture_output=True, timeout=90)
    return p.returncode, p.stdout


def test_proxy_every_client_to_h3_origin(server, tmp_path, gorigin, cert):  # noqa: F811
    gport, docs = gorigin
    big = random.Random(1).randbytes(3 * 1000 * 1000)
    (docs / "big.bin").write_bytes(big)
    (docs / "s.txt").write_text("small\n")
    srv = server(front_config(f"h3://127.0.0.1:{gport}", cert / "cert.pem"))
    tls_port, plain_port = srv.ports[0], srv.ports[1]
    # H1
    st, hs, body = http_request(plain_port, "/big.bin")
    assert st == 200 and sha(body) == sha(big)
    # h2c and h2 (curl)
    rc, out = curl("--http2-prior-knowledge", f"http://127.0.0.1:{plain_port}/big.bin")
    assert rc == 0 and sha(out) == sha(big)
    rc, out = curl("-k", "--http2", f"https://127.0.0.1:{tls_port}/big.bin")
    assert rc == 0 and sha(out) == sha(big)
    # H3 in front too: H3 -> H3
    rc, out, dl = gtls(tls_port, ["/big.bin", "/s.txt"], tmp_path)
    assert rc == 0 and sorted(statuses(out)) == [200, 200], out[-3000:]
    assert sha((dl / "big.bin").read_bytes()) == sha(big)
    assert (dl / "s.txt").read_text() == "small\n"
    # many requests at once on the pooled origin connection (h2 client, many streams)
    rc, out = curl("-k", "--http2", "--parallel", "--parallel-max", "50",
                   *[f"https://127.0.0.1:{tls_port}/s.txt" for _ in range(100)])
    assert rc == 0 and out == b"small\n" * 100, (rc, out.count(b"small\n"), out[:1200])


def test_proxy_h3_origin_bad_certificate_is_502(server, tmp_path, gorigin):
    """Without the origin's CA the QUIC handshake fails: 502, and the log says why."""
    gport, docs = gorigin
    (docs / "s.txt").write_text("small\n")
    ca = tmp_path / "other.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(tmp_path / "k"),
                    "-out", str(ca), "-days", "2", "-subj", "/CN=other"],
                   check=True, capture_output=True, timeout=30)
    srv = server(front_config(f"h3://127.0.0.1:{gport}", ca))
    st, hs, body = http_request(srv.ports[1], "/s.txt")
    assert st == 502
    assert "h3 origin: certificate" in srv.log() or "h3 connection closed" in srv.log()


def test_proxy_post_and_websocket_through_h3_hop(server, tmp_path, ws_origin):  # noqa: F811
    """client (h1) -> ferry A -> h3:// -> ferry B -> echo / WebSocket origin: request bodies
    and an extended CONNECT tunnel cross the HTTP/3 hop."""
    back = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: self-signed
upstreams:
  - name: ws
    servers: [http://127.0.0.1:{ws_origin}]
routes:
  - match: {{{{path: /echo}}}}
    echo: {{{{}}}}
  - proxy: {{{{upstream: ws}}}}
""")
    front = server(front_config(f"h3://127.0.0.1:{back.port}", back.data / "selfsigned.crt"))
    data = random.Random(2).randbytes(1500000)
    body = tmp_path / "b.bin"
    body.write_bytes(data)
    rc, out = curl("--data-binary", f"@{body}", "-H", "content-type: application/octet-stream",
                   f"http://127.0.0.1:{front.ports[1]}/echo")
    assert rc == 0 and sha(out) == sha(data)
    # WebSocket: HTTP/1.1 Upgrade at A, extended CONNECT over h3 to B, Upgrade again to the origin
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    s = socket.create_connection(("127.0.0.1", front.ports[1]), timeout=10)
    try:
        s.sendall((f"GET /chat HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                   f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            assert d, buf
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head  # our Sec-WebSocket-Accept
        s.sendall(_ws_frame(b"hello across h3") + _ws_frame(b"w" * 20000))
        msgs = []
        buf = rest
        while len(msgs) < 2:
            got, buf = _ws_parse(buf)
            msgs += got
            if len(msgs) >= 2:
                break
            d = s.recv(65536)
            assert d, msgs
            buf += d
        assert msgs[:2] == [(1, b"hello across h3"), (1, b"w" * 20000)]
    finally:
        s.close()


def _wait_log(srv, text, timeout=20.0, after=0):
    deadline = time.time() + bound(timeout)
    while time.time() < deadline:
        if text in srv.log()[after:]:
            return True
        time.sleep(0.05)
    return False


def test_proxy_h3_active_health_check_down_and_up(server, tmp_path, cert):  # noqa: F811
    """health-check on h3:// servers: a GET stream on the checking worker's pooled QUIC
    connection. A server nobody listens on is marked down (so retries: 0 still gets every
    request through to the live gtlsserver, which sees the probes' path); then the live one is
    stopped (marked down: the probe on its pooled connection times out and that connection is
    closed), started again on the same port (a fresh connection's probe marks it up) and
    serves again: the other worker's connection pooled before the down mark is not reused."""
    if GTLSSERVER is None:
        pytest.skip("gtlsserver (Debian ngtcp2-server) missing")
    docs = tmp_path / "htdocs"
    docs.mkdir()
    (docs / "health").write_text("ok\n")
    (docs / "s.txt").write_text("small\n")
    gport = free_port()

    def start_origin():
        p = subprocess.Popen([GTLSSERVER, "-q", "-d", str(docs), "127.0.0.1", str(gport),
                              str(cert / "key.pem"), str(cert / "cert.pem")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_udp(gport, p)  # bound: its socket queues the first Initial
        return p

    def stop_origin(p):
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    origin = start_origin()
    try:
        dead = free_port()
        cfg = front_config(f"h3://127.0.0.1:{dead}, h3://127.0.0.1:{gport}", cert / "cert.pem")
        cfg = cfg.replace("    ca: ", "    retries: 0\n    health-check: {{path: /health, "
                          "interval: 200ms, timeout: 5s, fall: 1, rise: 1}}\n    ca: ")
        srv = server(cfg)
        assert _wait_log(srv, f"server 127.0.0.1:{dead} is down (health check"), srv.log()[-3000:]
        # (gtlsserver may have missed the very first probe's Initial while starting: wait until
        # its server is not marked down, bounded)
        # (a probe must have succeeded since the last down mark, if there was one; and the
        # requests may wait out one QUIC handshake timeout (10 s), so they get 30 s)
        deadline = time.time() + 30
        while time.time() < deadline:
            log = srv.log()
            down, up = log.rfind(f"{gport} is down"), log.rfind(f"{gport} is up")
            if down < 0 or down < up:
                break
            time.sleep(0.05)
        for i in range(10):
            st, hs, body = http_request(srv.ports[1], "/s.txt", timeout=30)
            assert (st, body) == (200, b"small\n"), (i, st, body)
        # the live one goes away ...
        mark = len(srv.log())
        stop_origin(origin)
        assert _wait_log(srv, f"server 127.0.0.1:{gport} is down (health check", after=mark), \
            srv.log()[-3000:]
        st, hs, body = http_request(srv.ports[1], "/s.txt", timeout=30)
        assert st in (502, 503), st  # every server is down
        # ... and comes back on the same port
        mark = len(srv.log())
        origin = start_origin()
        assert _wait_log(srv, f"server 127.0.0.1:{gport} is up (health check", after=mark), \
            srv.log()[-3000:]
        # every worker (2; new TCP connections spread over them) drops the QUIC connection it
        # pooled before the down mark (the old gtlsserver is gone and the new one cannot reset
        # it) instead of sending requests into it
        for i in range(8):
            st, hs, body = http_request(srv.ports[1], "/s.txt", timeout=30)
            assert (st, body) == (200, b"small\n"), (i, st, body)
    finally:
        stop_origin(origin)


def test_proxy_h3_origin_client_certificate(server, tmp_path, cert):  # noqa: F811
    """mTLS to an h3:// origin: gtlsserver --verify-client refuses a handshake without a client
    certificate (TLS alert certificate_required), so the upstream without `cert`/`key` gets
    502 and the one with them gets the file. (gtlsserver only requires a certificate; it does
    not verify it against a CA, so this shows the certificate is offered, not that a wrong
    one would be refused.)"""
    if GTLSSERVER is None:
        pytest.skip("gtlsserver (Debian ngtcp2-server) missing")
    docs = tmp_path / "htdocs"
    docs.mkdir()
    (docs / "s.txt").write_text("with a client certificate\n")
    cc, ck = tmp_path / "client.pem", tmp_path / "client.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(ck), "-out", str(cc),
                    "-days", "2", "-subj", "/CN=ferry-h3-client"],
                   check=True, capture_output=True, timeout=30)
    gport = free_port()
    origin = subprocess.Popen([GTLSSERVER, "-q", "--verify-client", "-d", str(docs), "127.0.0.1",
                               str(gport), str(cert / "key.pem"), str(cert / "cert.pem")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_udp(gport, origin)  # bound: its socket queues the first Initial
        cfg = f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: with
    servers: [h3://127.0.0.1:{gport}]
    ca: {cert / "cert.pem"}
    cert: {cc}
    key: {ck}
  - name: without
    servers: [h3://127.0.0.1:{gport}]
    ca: {cert / "cert.pem"}
routes:
  - match: {{{{path: /without}}}}
    proxy: {{{{upstream: without, strip-prefix: /without}}}}
  - proxy: {{{{upstream: with}}}}
"""
        srv = server(cfg)
        st, hs, body = http_request(srv.port, "/s.txt")
        assert (st, body) == (200, b"with a client certificate\n"), (st, body, srv.log()[-2000:])
        st, hs, body = http_request(srv.port, "/without/s.txt")
        assert st == 502, (st, body)
    finally:
        origin.terminate()
        try:
            origin.wait(timeout=10)
        except subprocess.TimeoutExpired:
            origin.kill()
            origin.wait()
