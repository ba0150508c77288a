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

from conftest import free_port, http_request
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
    time.sleep(0.3)  # UDP: no readiness to poll; QUIC retransmits the first Initial anyway
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
    assert rc == 0 and out == b"small\n" * 100


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
