"""Compression filter (src/policy/compress.c), black box: gzip, br and zstd chosen by
Accept-Encoding q-values, decoded by curl (--compressed), Python (gzip) and the zstd CLI;
streaming (the first part of a body arrives decodable while the origin holds the rest); Vary;
never on ranges, HEAD, 204/304, already-encoded bodies, small bodies or other types; static
files (send_file) and proxied responses; h1 and h2 (prior knowledge); HTTP/3 through a second
ferry as the h3 client. Bodies of known length up to `one-shot-max` are compressed in one call
(libdeflate for gzip; Content-Length set); longer and unknown-length bodies stream."""
import gzip
import hashlib
import json
import random
import shutil
import socket
import subprocess
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import http_origin

ROOT = Path(__file__).resolve().parent.parent


def text(n, seed=1):
    rnd = random.Random(seed)
    words = [b"ferry", b"proxy", b"stream", b"gzip", b"brotli", b"zstd", b"origin", b"client"]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words) + b" "
    return bytes(out[:n])


BIG = text(300_000)
GATE = {}


class Origin(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send(self, status, ctype, body, extra=(), chunked=False):
        self.send_response(status)
        if ctype:
            self.send_header("content-type", ctype)
        for k, v in extra:
            self.send_header(k, v)
        if chunked:
            self.send_header("transfer-encoding", "chunked")
        elif status not in (204, 304):
            self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD" or status in (204, 304):
            return
        if chunked:
            for i in range(0, len(body), 7000):
                part = body[i:i + 7000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        p = self.path
        if p.startswith("/text"):
            self.send(200, "text/plain; charset=utf-8", BIG, [("etag", '"v1"')])
        elif p.startswith("/chunked"):
            self.send(200, "application/json", BIG, chunked=True)
        elif p.startswith("/small"):
            self.send(200, "text/plain", b"tiny body\n")
        elif p.startswith("/png"):
            self.send(200, "image/png", BIG)
        elif p.startswith("/encoded"):
            self.send(200, "text/plain", gzip.compress(BIG), [("content-encoding", "gzip")])
        elif p.startswith("/range"):
            self.send(206, "text/plain", BIG[:1000], [("content-range", f"bytes 0-999/{len(BIG)}")])
        elif p.startswith("/notransform"):
            self.send(200, "text/plain", BIG, [("cache-control", "no-transform")])
        elif p.startswith("/vary"):
            self.send(200, "text/plain", BIG, [("vary", "Origin")])
        elif p.startswith("/204"):
            self.send(204, "text/plain", b"")
        elif p.startswith("/304"):
            self.send(304, "text/plain", b"")
        elif p.startswith("/len/"):
            # /len/N: N bytes of text with Content-Length, written in pieces so that the proxy
            # hands them on in several sends (the one-shot path holds them until whole)
            n = int(p.split("/")[2])
            body = text(n, 3)
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(n))
            self.end_headers()
            for i in range(0, n, 20000):
                self.wfile.write(body[i:i + 20000])
                self.wfile.flush()
                if i == 0 and n > 20000:
                    time.sleep(0.05)  # coverage only: later pieces come in later reads
        elif p.startswith("/held"):
            # half of a Content-Length body, then wait: the client goes away meanwhile
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", "40000")
            self.end_headers()
            self.wfile.write(text(20000, 4))
            self.wfile.flush()
            GATE["held"].wait(20)
            try:
                self.wfile.write(text(20000, 5))
            except OSError:
                pass
        elif p.startswith("/gated"):
            # the first part, then wait until the test has decoded it
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            first = b"first part of a streamed body\n" * 20
            self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
            self.wfile.flush()
            GATE["event"].wait(20)
            last = b"the rest\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(last), last))
        else:
            self.send(404, "text/plain", b"no\n")

    def log_message(self, *a):
        pass


@pytest.fixture
def origin():
    with http_origin(Origin) as port:
        yield port


def config(origin_port, compress="compress: enabled"):
    return f"""
workers: 2
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2c]
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - match: {{{{path: /files/}}}}
    static: {{{{root: {{docroot}}}}}}
    {compress}
  - proxy: o
    {compress}
"""


def curl(url, *args, h2=False, method=None):
    cmd = ["curl", "-s", "--max-time", "20", "-D", "-", "-o", "-"]
    if h2:
        cmd.append("--http2-prior-knowledge")
    if method == "HEAD":
        cmd.append("-I")
    cmd += list(args) + [url]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=30).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs.setdefault(k.strip().lower(), []).append(v.strip())
    return int(lines[0].split()[1]), hdrs, body


def unzstd(b):
    return subprocess.run(["zstd", "-d", "-c", "-q"], input=b, stdout=subprocess.PIPE,
                          check=True, timeout=30).stdout


@pytest.mark.parametrize("h2", [False, True])
@pytest.mark.parametrize("path", ["/text", "/chunked"])
def test_compress_every_encoding_proxied(server, origin, path, h2):
    srv = server(config(origin))
    url = srv.url(path)
    st, h, body = curl(url, "-H", "Accept-Encoding: gzip", h2=h2)
    assert st == 200 and h["content-encoding"] == ["gzip"]
    assert "content-length" not in h or h2  # h2 may not send it either; h1 must be chunked
    assert h["vary"] == ["Accept-Encoding"]
    assert gzip.decompress(body) == BIG
    assert len(body) < len(BIG) // 2
    st, h, body = curl(url, "-H", "Accept-Encoding: zstd", h2=h2)
    assert h["content-encoding"] == ["zstd"] and unzstd(body) == BIG
    st, h, body = curl(url, "-H", "Accept-Encoding: br", h2=h2)
    assert h["content-encoding"] == ["br"]
    # curl decodes each of them itself
    for enc in ("gzip", "br", "zstd"):
        st, h, body = curl(url, "--compressed", "-H", f"Accept-Encoding: {enc}", h2=h2)
        assert st == 200 and h["content-encoding"] == [enc] and body == BIG, enc


def test_compress_q_values_pick_the_encoding(server, origin):
    srv = server(config(origin))
    cases = {
        "gzip, br, zstd": "br",
        "gzip;q=1, br;q=0.5, zstd;q=0.9": "gzip",
        "br;q=0, zstd;q=0.1": "zstd",
        "*": "br",
        "*;q=0.2, gzip": "gzip",
        "br;q=0, gzip;q=0, zstd;q=0": None,
        "identity": None,
        "deflate": None,
    }
    for ae, want in cases.items():
        st, h, body = curl(srv.url("/text"), "-H", f"Accept-Encoding: {ae}")
        assert st == 200
        if want is None:
            assert "content-encoding" not in h and body == BIG, ae
            assert h["vary"] == ["Accept-Encoding"]
        else:
            assert h["content-encoding"] == [want], (ae, h)
    st, h, body = curl(srv.url("/text"))  # no Accept-Encoding at all
    assert "content-encoding" not in h and body == BIG and h["content-length"] == [str(len(BIG))]


def test_compress_etag_weakened_and_ranges_dropped(server, origin):
    srv = server(config(origin))
    st, h, _ = curl(srv.url("/text"), "-H", "Accept-Encoding: gzip")
    assert h["etag"] == ['W/"v1"']
    st, h, _ = curl(srv.url("/text"))
    assert h["etag"] == ['"v1"']


@pytest.mark.parametrize("path,why", [
    ("/small", "smaller than min-size"), ("/png", "type not listed"),
    ("/encoded", "already encoded"), ("/range", "a range"), ("/notransform", "no-transform"),
])
def test_compress_leaves_alone(server, origin, path, why):
    srv = server(config(origin))
    st, h, body = curl(srv.url(path), "-H", "Accept-Encoding: gzip, br, zstd")
    if path == "/encoded":
        assert h["content-encoding"] == ["gzip"] and gzip.decompress(body) == BIG
    else:
        assert "content-encoding" not in h, why
    if path == "/range":
        assert st == 206 and body == BIG[:1000]
    if path == "/small":
        assert body == b"tiny body\n"


def test_compress_vary_appended_and_no_body_statuses(server, origin):
    srv = server(config(origin))
    st, h, body = curl(srv.url("/vary"), "-H", "Accept-Encoding: gzip")
    assert h["vary"] == ["Origin", "Accept-Encoding"] and gzip.decompress(body) == BIG
    for p, s in (("/204", 204), ("/304", 304)):
        st, h, body = curl(srv.url(p), "-H", "Accept-Encoding: gzip")
        assert st == s and "content-encoding" not in h and body == b""
    st, h, body = curl(srv.url("/text"), "-H", "Accept-Encoding: gzip", method="HEAD")
    assert st == 200 and "content-encoding" not in h
    assert h["content-length"][0] == str(len(BIG))


def test_compress_streams_each_send(server, origin):
    """The first part of a chunked origin body reaches the client decodable while the origin
    still holds the rest: each send is compressed and flushed, nothing waits for the end."""
    GATE["event"] = threading.Event()
    srv = server(config(origin))
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    try:
        s.sendall(b"GET /gated HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        want = b"first part of a streamed body\n" * 20
        buf, plain, head = b"", b"", None
        for _ in range(200):
            chunk = s.recv(65536)
            assert chunk, "closed before the first part arrived"
            buf += chunk
            if head is None:
                if b"\r\n\r\n" not in buf:
                    continue
                head, _, buf = buf.partition(b"\r\n\r\n")
                assert b"content-encoding: gzip" in head.lower()
            # de-chunk what is complete
            while True:
                line, sep, rest = buf.partition(b"\r\n")
                if not sep:
                    break
                n = int(line, 16)
                if len(rest) < n + 2:
                    break
                plain += d.decompress(rest[:n])
                buf = rest[n + 2:]
            if len(plain) >= len(want):
                break
        assert plain == want
    finally:
        GATE["event"].set()
        s.close()


def test_compress_static_files(server, origin):
    srv = server(config(origin, "compress: {{file-chunk: 4k, min-size: 100}}"))
    files = srv.docroot / "files"
    files.mkdir()
    (files / "big.txt").write_bytes(BIG)
    (files / "page.html").write_bytes(text(5000, 2))
    (files / "tiny.txt").write_bytes(b"small\n")
    for h2 in (False, True):
        for name, data in (("big.txt", BIG), ("page.html", text(5000, 2))):
            st, h, body = curl(srv.url(f"/files/{name}"), "-H", "Accept-Encoding: gzip", h2=h2)
            assert st == 200 and h["content-encoding"] == ["gzip"], (name, h)
            assert gzip.decompress(body) == data
            assert "accept-ranges" not in h
            st, h, body = curl(srv.url(f"/files/{name}"), "--compressed", "-H",
                               "Accept-Encoding: br", h2=h2)
            assert h["content-encoding"] == ["br"] and body == data
            st, h, body = curl(srv.url(f"/files/{name}"), "-H", "Accept-Encoding: zstd", h2=h2)
            assert h["content-encoding"] == ["zstd"] and unzstd(body) == data
    st, h, body = curl(srv.url("/files/big.txt"), "-H", "Accept-Encoding: gzip", "-H",
                       "Range: bytes=10-19")
    assert st == 206 and body == BIG[10:20] and "content-encoding" not in h
    st, h, body = curl(srv.url("/files/tiny.txt"), "-H", "Accept-Encoding: gzip")
    assert "content-encoding" not in h and body == b"small\n"


def test_compress_config_errors(tmp_path):
    from conftest import FERRY
    bad = tmp_path / "bad.yaml"
    bad.write_text("""listeners: [{address: "127.0.0.1:1"}]
routes:
  - respond: {}
    compress: {encodings: [gzip, deflate], types: [textplain], gzip-level: 13}
""")
    p = subprocess.run([FERRY, "check", "-c", str(bad)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20, text=True)
    assert p.returncode == 1
    assert "routes[0].compress.encodings: unknown encoding 'deflate'" in p.stdout
    assert "routes[0].compress.types: 'textplain' is not a MIME type" in p.stdout
    assert "routes[0].compress.gzip-level" in p.stdout


def test_compress_example_runs_as_written(server, origin):
    text_ = (ROOT / "examples" / "compress.yaml").read_text()
    assert "127.0.0.1:8080" in text_ and "http://127.0.0.1:9000" in text_
    text_ = text_.replace("{", "{{").replace("}", "}}")
    text_ = text_.replace("127.0.0.1:8080", "127.0.0.1:{port}")
    text_ = text_.replace("http://127.0.0.1:9000", f"http://127.0.0.1:{origin}")
    srv = server(text_)
    st, h, body = curl(srv.url("/text"), "--compressed")
    assert st == 200 and body == BIG and h["content-encoding"] == ["br"]


def test_compress_h3(server, origin):
    """HTTP/3 on the compressing side: curl (h1) -> ferry A -> h3:// -> ferry B (compress) ->
    origin. A's HTTP/3 client codec forwards Accept-Encoding and relays B's encoded body
    untouched; curl decodes it. (gtlsclient, the h3 client of tests/test_h3.py, cannot send an
    Accept-Encoding header, hence the second ferry as the HTTP/3 client.)"""
    back = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: self-signed
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin}]
routes:
  - proxy: o
    compress: enabled
""")
    front = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: b
    servers: [h3://127.0.0.1:{back.port}]
    ca: {back.data / "selfsigned.crt"}
routes:
  - proxy: b
""")
    for enc in ("gzip", "br", "zstd"):
        st, h, body = curl(front.url("/text"), "-H", f"Accept-Encoding: {enc}")
        assert st == 200 and h["content-encoding"] == [enc], h
        if enc == "gzip":
            assert gzip.decompress(body) == BIG
        if enc == "zstd":
            assert unzstd(body) == BIG
        st, h, body = curl(front.url("/text"), "--compressed", "-H", f"Accept-Encoding: {enc}")
        assert body == BIG
    st, h, body = curl(front.url("/range"), "-H", "Accept-Encoding: gzip")
    assert st == 206 and "content-encoding" not in h and body == BIG[:1000]


def oneshot_config(origin_port, max_="100000"):
    return config(origin_port, f"compress: {{{{one-shot-max: {max_}, min-size: 100}}}}")


def is_one_shot(h, body):
    """A one-shot answer carries the compressed length; a streamed one none (h1: chunked)."""
    if "content-length" in h:
        assert h["content-length"] == [str(len(body))] and "transfer-encoding" not in h
        return True
    return False


@pytest.mark.parametrize("h2", [False, True])
def test_compress_one_shot_up_to_the_cap_then_streaming(server, origin, h2):
    """one-shot-max: 100000. A Content-Length body of exactly the cap is held (it comes in
    several sends) and compressed in one call (gzip, zstd; br always streams); one byte more
    streams; a chunked body (no length) streams. Every answer decodes (python's gzip, curl --compressed, zstd, brotli via curl) to
    the origin's bytes."""
    srv = server(oneshot_config(origin))
    for path, n, one in (("/len/100000", 100000, True), ("/len/100001", 100001, False),
                         ("/len/300", 300, True), ("/chunked", len(BIG), False)):
        want = text(n, 3) if path.startswith("/len/") else BIG
        url = srv.url(path)
        st, h, body = curl(url, "-H", "Accept-Encoding: gzip", h2=h2)
        assert st == 200 and h["content-encoding"] == ["gzip"], (path, h)
        assert h["vary"] == ["Accept-Encoding"]
        assert is_one_shot(h, body) == one, (path, h)
        if not one and not h2:
            assert h["transfer-encoding"] == ["chunked"]
        assert gzip.decompress(body) == want, path
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # exactly one member, nothing after it
        assert d.decompress(body) == want and d.eof and d.unused_data == b""
        st, h, body = curl(url, "-H", "Accept-Encoding: zstd", h2=h2)
        assert h["content-encoding"] == ["zstd"] and is_one_shot(h, body) == one
        assert unzstd(body) == want
        st, h, body = curl(url, "-H", "Accept-Encoding: br", h2=h2)
        assert h["content-encoding"] == ["br"] and not is_one_shot(h, body)  # br streams
        for enc in ("gzip", "br", "zstd"):
            st, h, body = curl(url, "--compressed", "-H", f"Accept-Encoding: {enc}", h2=h2)
            assert st == 200 and h["content-encoding"] == [enc] and body == want, (path, enc)


def test_compress_one_shot_levels_and_off(server, origin):
    """gzip-level 12 (libdeflate only) compresses in one shot and streams as zlib's 9; with
    one-shot-max: 0 every body streams."""
    srv = server(config(origin, "compress: {{one-shot-max: 256k, gzip-level: 12}}"))
    st, h, body = curl(srv.url("/len/100000"), "-H", "Accept-Encoding: gzip")
    assert is_one_shot(h, body) and gzip.decompress(body) == text(100000, 3)
    st, h, body = curl(srv.url("/text"), "-H", "Accept-Encoding: gzip")  # 300,000 > 256k
    assert not is_one_shot(h, body) and gzip.decompress(body) == BIG
    off = server(config(origin, "compress: {{one-shot-max: 0}}"))
    st, h, body = curl(off.url("/len/100000"), "-H", "Accept-Encoding: gzip")
    assert not is_one_shot(h, body) and gzip.decompress(body) == text(100000, 3)


def test_compress_one_shot_static_files(server, origin):
    """send_file: a file up to the cap is read whole and compressed in one call (gzip, zstd);
    a longer one, or br, is read file-chunk by file-chunk and streams."""
    srv = server(config(origin, "compress: {{file-chunk: 4k, min-size: 100, one-shot-max: 64k}}"))
    files = srv.docroot / "files"
    files.mkdir()
    small, large = text(65536, 6), text(65537, 7)
    (files / "fits.txt").write_bytes(small)
    (files / "over.txt").write_bytes(large)
    for h2 in (False, True):
        for name, data, one in (("fits.txt", small, True), ("over.txt", large, False)):
            for enc in ("gzip", "br", "zstd"):
                st, h, body = curl(srv.url(f"/files/{name}"), "-H", f"Accept-Encoding: {enc}",
                                   h2=h2)
                assert st == 200 and h["content-encoding"] == [enc], (name, h)
                assert is_one_shot(h, body) == (one and enc != "br"), (name, enc, h2)
                if enc == "gzip":
                    assert gzip.decompress(body) == data
                st, h, body = curl(srv.url(f"/files/{name}"), "--compressed", "-H",
                                   f"Accept-Encoding: {enc}", h2=h2)
                assert body == data, (name, enc)


def test_compress_one_shot_client_gone_while_held(server, origin):
    """The client closes while half of a 40,000-byte body is held: nothing is sent, nothing
    leaks or fails (the fixture fails on an alert or sanitizer line), and the next request on
    another connection is answered."""
    GATE["held"] = threading.Event()
    srv = server(oneshot_config(origin))
    try:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
        s.sendall(b"GET /held HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        s.settimeout(0.3)
        try:
            got = s.recv(100)
        except socket.timeout:
            got = b""
        assert got == b""  # held: not even the head went out
        s.close()
    finally:
        GATE["held"].set()
    st, h, body = curl(srv.url("/len/100000"), "-H", "Accept-Encoding: gzip")
    assert is_one_shot(h, body) and gzip.decompress(body) == text(100000, 3)


def test_compress_one_shot_h3(server, origin):
    """HTTP/3 on the compressing side (as test_compress_h3): a body under the cap arrives with
    its compressed Content-Length, one over it and a chunked one stream; all decode."""
    back = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: self-signed
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin}]
routes:
  - proxy: o
    compress: {{{{one-shot-max: 100000}}}}
""")
    front = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: b
    servers: [h3://127.0.0.1:{back.port}]
    ca: {back.data / "selfsigned.crt"}
routes:
  - proxy: b
""")
    for path, want, one in (("/len/100000", text(100000, 3), True),
                            ("/len/100001", text(100001, 3), False), ("/chunked", BIG, False)):
        for enc in ("gzip", "br", "zstd"):
            st, h, body = curl(front.url(path), "-H", f"Accept-Encoding: {enc}")
            assert st == 200 and h["content-encoding"] == [enc], (path, h)
            assert is_one_shot(h, body) == (one and enc != "br"), (path, enc, h)
            if enc == "gzip":
                assert gzip.decompress(body) == want
            st, h, body = curl(front.url(path), "--compressed", "-H", f"Accept-Encoding: {enc}")
            assert body == want, (path, enc)
