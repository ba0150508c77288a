"""HTTP/3 client codec (src/h3/h3_client.c over src/quic), driven by the test helper
build/h3get (tests/h3/h3get.c) the way the proxy will drive it, against a server nobody here
wrote (Debian's ngtcp2 example server `gtlsserver`, package ngtcp2-server) and against ferry
itself (H3 <-> H3). Bodies are checked by sha256; certificate verification both ways.

The proxy's `h3://` upstream integration is not part of this branch (the h2-origins work owns
handler/proxy.c); these tests pin the codec it will call.
"""
import hashlib
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FERRY, free_port, wait_udp

GTLSSERVER = shutil.which("gtlsserver")
H3GET = os.environ.get("FERRY_H3GET", str(Path(FERRY).parent / "h3get"))


def sha(b):
    return hashlib.sha256(b).hexdigest()


def h3get(port, paths, *args, timeout=120):
    p = subprocess.run([H3GET, *args, "127.0.0.1", str(port), *paths], capture_output=True,
                       text=True, timeout=timeout)
    assert "Sanitizer" not in p.stderr and "runtime error:" not in p.stderr, p.stderr[-4000:]
    lines = [l.split() for l in p.stdout.splitlines()]
    return p.returncode, lines, p.stdout + p.stderr


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("h3cert")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "key.pem", "-out",
                    "cert.pem", "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   cwd=d, check=True, capture_output=True, timeout=30)
    return d


@pytest.fixture
def origin(tmp_path, cert):
    """gtlsserver serving tmp/htdocs on a free UDP port."""
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


def write(path, size, seed):
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


def test_h3_client_against_gtlsserver(origin, cert):
    port, docs = origin
    small = write(docs / "small.txt", 1000, 1)
    big = write(docs / "big.bin", 5 * 1000 * 1000, 2)
    rc, lines, out = h3get(port, ["/small.txt", "/big.bin"], "--ca", str(cert / "cert.pem"))
    assert rc == 0, out
    got = {l[0]: l[1:] for l in lines}
    assert got["/small.txt"] == ["200", "1000", sha(small)]
    assert got["/big.bin"] == ["200", str(len(big)), sha(big)]


def test_h3_client_many_streams_one_connection(origin, cert):
    """200 requests over one connection: more than the server's initial stream credit, so the
    codec waits for MAX_STREAMS and goes on."""
    port, docs = origin
    files = {f"/f{i}": write(docs / f"f{i}", 3000 + i * 101, 10 + i) for i in range(8)}
    rc, lines, out = h3get(port, list(files), "--ca", str(cert / "cert.pem"), "-n", "200")
    assert rc == 0, out
    assert len(lines) == 200
    for path, st, n, h in lines:
        assert (st, int(n), h) == ("200", len(files[path]), sha(files[path]))


def test_h3_client_verifies_the_certificate(origin, tmp_path):
    """Without the CA the handshake fails (system store), --insecure skips the check."""
    port, docs = origin
    write(docs / "x", 10, 3)
    rc, lines, out = h3get(port, ["/x"])
    assert rc != 0
    assert "CLOSED" in out or "ERROR" in out
    rc, lines, out = h3get(port, ["/x"], "--insecure")
    assert rc == 0 and lines[0][1] == "200", out


def test_h3_client_sni_mismatch_fails(origin, cert):
    port, docs = origin
    write(docs / "x", 10, 4)
    rc, lines, out = h3get(port, ["/x"], "--ca", str(cert / "cert.pem"), "--sni", "wrong.example")
    assert rc != 0, out


def test_h3_to_h3_ferry(server, tmp_path):
    """Our client against our server: GET of a large file, 404, and a POST echoed back."""
    srv = server("""
workers: 2
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h2, h3]
    tls: self-signed
routes:
  - match: {{path: /echo}}
    echo: {{}}
  - static: {{root: {docroot}}}
""")
    big = write(srv.docroot / "big.bin", 8 * 1000 * 1000, 5)
    ca = srv.data / "selfsigned.crt"
    rc, lines, out = h3get(srv.port, ["/big.bin", "/missing"], "--ca", str(ca))
    assert rc == 0, out
    got = {l[0]: l[1:] for l in lines}
    assert got["/big.bin"] == ["200", str(len(big)), sha(big)]
    assert got["/missing"][0] == "404"
    body = tmp_path / "post.bin"
    data = write(body, 700000, 6)
    rc, lines, out = h3get(srv.port, ["/echo"], "--ca", str(ca), "--post", str(body), "-n", "5")
    assert rc == 0, out
    assert [l[1:] for l in lines] == [["200", str(len(data)), sha(data)]] * 5


# ---- extended CONNECT over HTTP/3 (RFC 9220) through the proxy: WebSocket to an h1 origin ----


def _ws_frame(payload, opcode=1):
    """A masked client frame."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _ws_parse(buf):
    """Unmasked server frames -> [(opcode, payload)], leftover."""
    out = []
    while len(buf) >= 2:
        n = buf[1] & 0x7F
        off = 2
        if n == 126:
            if len(buf) < 4:
                break
            n, off = int.from_bytes(buf[2:4], "big"), 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, off = int.from_bytes(buf[2:10], "big"), 10
        if len(buf) < off + n:
            break
        out.append((buf[0] & 0x0F, buf[off:off + n]))
        buf = buf[off + n:]
    return out, buf


@pytest.fixture
def ws_origin():
    import asyncio
    import threading
    import websockets
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state = {}

    async def echo(ws, path=None):
        try:
            async for m in ws:
                await ws.send(m)
        except Exception:
            pass

    async def main():
        state["stop"] = loop.create_future()
        async with websockets.serve(echo, "127.0.0.1", port):
            ready.set()
            await state["stop"]

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()
    assert ready.wait(10)
    yield port
    loop.call_soon_threadsafe(state["stop"].set_result, None)
    t.join(timeout=10)


def test_h3_websocket_extended_connect_to_h1_origin(server, tmp_path, ws_origin):
    """:protocol websocket over HTTP/3 becomes an HTTP/1.1 Upgrade at the origin (the proxy
    handler, unchanged); 200 to the client, WebSocket frames both ways in DATA frames."""
    srv = server(f"""
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: self-signed
upstreams:
  - name: ws
    servers: [http://127.0.0.1:{ws_origin}]
routes:
  - proxy: {{{{upstream: ws}}}}
""")
    frames = tmp_path / "frames"
    frames.write_bytes(_ws_frame(b"hello over h3") + _ws_frame(b"z" * 30000))
    got = tmp_path / "got"
    rc, lines, out = h3get(srv.port, ["/chat"], "--ca", str(srv.data / "selfsigned.crt"),
                           "--ws", str(2 + 13 + 4 + 30000), "--post", str(frames),
                           "--save", str(got))
    assert lines and lines[0][1] == "200", out
    msgs, rest = _ws_parse(got.read_bytes())
    assert msgs[:2] == [(1, b"hello over h3"), (1, b"z" * 30000)], out
