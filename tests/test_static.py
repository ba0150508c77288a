"""Black-box tests of the static file handler (src/handler/static.c) over HTTP/1.1."""
import hashlib
import json
import os
import re
import socket
import ssl
import subprocess
import time
from email.utils import formatdate

import pytest

from conftest import http_request, raw, statuses

CONF = """\
listeners:
  - address: 127.0.0.1:{port}
routes:
  - static:
      root: "{docroot}"
"""

CONF_LISTING = CONF + "      listing: true\n"


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


@pytest.fixture
def site(server):
    """A server over a docroot with a few files; returns the Ferry object."""
    f = server(CONF, start=False)
    d = f.docroot
    write(d / "index.html", "<html><body>index page</body></html>\n")
    write(d / "style.css", "body { color: red }\n")
    write(d / "app.js", "console.log('hi');\n")
    write(d / "img.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    write(d / "blob.unknownext", b"\x00\x01\x02")
    write(d / "noext", b"no extension")
    write(d / "digits.txt", "0123456789abcdefghijklmnopqrstuvwxyz")  # 36 bytes
    write(d / "sub" / "index.html", "sub index\n")
    (d / "empty").mkdir()
    write(d / "empty" / "nested" / "x.txt", "x")
    return f.start()


# ---- basics ----

def test_static_index_for_root(site):
    st, h, body = http_request(site.port, "/")
    assert st == 200
    assert body == b"<html><body>index page</body></html>\n"
    assert h["content-type"].startswith("text/html")
    assert h["content-length"] == str(len(body))


def test_static_index_for_subdir(site):
    st, h, body = http_request(site.port, "/sub/")
    assert st == 200
    assert body == b"sub index\n"


@pytest.mark.parametrize("path,mime", [
    ("/index.html", "text/html"),
    ("/style.css", "text/css"),
    ("/app.js", "text/javascript"),
    ("/img.png", "image/png"),
    ("/blob.unknownext", "application/octet-stream"),
    ("/noext", "application/octet-stream"),
])
def test_static_mime_types(site, path, mime):
    st, h, body = http_request(site.port, path)
    assert st == 200
    assert h["content-type"].split(";")[0].strip() == mime
    assert body == (site.docroot / path[1:]).read_bytes()


def test_static_head_has_length_and_no_body(site):
    st, h, body = http_request(site.port, "/digits.txt", method="HEAD")
    assert st == 200
    assert h["content-length"] == "36"
    assert body == b""


def test_static_head_keepalive_then_get(site):
    # after a HEAD the connection must be reusable: no stray body bytes before the next response
    resp = raw(site.port, b"HEAD /digits.txt HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"GET /digits.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert statuses(resp) == [200, 200]
    assert resp.endswith(b"\r\n\r\n0123456789abcdefghijklmnopqrstuvwxyz")
    assert resp.count(b"0123456789abcdef") == 1


def test_static_post_is_405_with_allow(site):
    st, h, body = http_request(site.port, "/digits.txt", method="POST",
                               headers={"Content-Length": "0"})
    assert st == 405
    allow = [m.strip() for m in h["allow"].split(",")]
    assert "GET" in allow and "HEAD" in allow


def test_static_missing_is_404(site):
    st, _, _ = http_request(site.port, "/nope.txt")
    assert st == 404


# ---- conditional requests ----

def test_static_etag_if_none_match(site):
    st, h, body = http_request(site.port, "/digits.txt")
    assert st == 200
    etag = h["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    st, h2, body2 = http_request(site.port, "/digits.txt", headers={"If-None-Match": etag})
    assert st == 304
    assert body2 == b""
    assert h2["etag"] == etag
    st, _, _ = http_request(site.port, "/digits.txt",
                            headers={"If-None-Match": f'"nope", {etag}'})
    assert st == 304
    st, _, body3 = http_request(site.port, "/digits.txt", headers={"If-None-Match": '"other"'})
    assert st == 200
    assert body3 == body


def test_static_last_modified_if_modified_since(site):
    st, h, _ = http_request(site.port, "/digits.txt")
    assert st == 200
    lm = h["last-modified"]
    assert lm.endswith(" GMT")
    st, _, body = http_request(site.port, "/digits.txt", headers={"If-Modified-Since": lm})
    assert st == 304 and body == b""
    old = formatdate(time.time() - 86400 * 365, usegmt=True)
    st, _, body = http_request(site.port, "/digits.txt", headers={"If-Modified-Since": old})
    assert st == 200
    assert body == b"0123456789abcdefghijklmnopqrstuvwxyz"


# ---- ranges ----

DIGITS = b"0123456789abcdefghijklmnopqrstuvwxyz"


def test_static_range_first_bytes(site):
    st, h, body = http_request(site.port, "/digits.txt", headers={"Range": "bytes=0-9"})
    assert st == 206
    assert h["content-range"] == "bytes 0-9/36"
    assert h["content-length"] == "10"
    assert body == DIGITS[0:10]


def test_static_range_suffix(site):
    st, h, body = http_request(site.port, "/digits.txt", headers={"Range": "bytes=-5"})
    assert st == 206
    assert h["content-range"] == "bytes 31-35/36"
    assert body == DIGITS[-5:]


def test_static_range_open_ended(site):
    st, h, body = http_request(site.port, "/digits.txt", headers={"Range": "bytes=10-"})
    assert st == 206
    assert h["content-range"] == "bytes 10-35/36"
    assert body == DIGITS[10:]


def test_static_range_unsatisfiable(site):
    st, h, body = http_request(site.port, "/digits.txt", headers={"Range": "bytes=100-200"})
    assert st == 416
    assert h["content-range"] == "bytes */36"
    assert DIGITS not in body


def test_static_range_multiple_gives_full(site):
    st, h, body = http_request(site.port, "/digits.txt", headers={"Range": "bytes=0-1,5-6"})
    assert st == 200
    assert "content-range" not in h
    assert body == DIGITS


def test_static_if_range(site):
    st, h, _ = http_request(site.port, "/digits.txt")
    etag = h["etag"]
    st, h, body = http_request(site.port, "/digits.txt",
                               headers={"Range": "bytes=0-9", "If-Range": etag})
    assert st == 206 and body == DIGITS[:10]
    st, h, body = http_request(site.port, "/digits.txt",
                               headers={"Range": "bytes=0-9", "If-Range": '"mismatch"'})
    assert st == 200
    assert body == DIGITS
    assert "content-range" not in h


# ---- precompressed siblings ----

@pytest.fixture
def precompressed(server):
    f = server(CONF, start=False)
    write(f.docroot / "foo.txt", "plain text body\n")
    write(f.docroot / "foo.txt.gz", b"\x1f\x8bGZIP-BYTES")
    write(f.docroot / "foo.txt.br", b"BROTLI-BYTES!")
    return f.start()


def test_static_precompressed_br(precompressed):
    st, h, body = http_request(precompressed.port, "/foo.txt",
                               headers={"Accept-Encoding": "gzip, deflate, br"})
    assert st == 200
    assert body == b"BROTLI-BYTES!"
    assert h["content-encoding"] == "br"
    assert "accept-encoding" in h["vary"].lower()
    assert h["content-type"].startswith("text/plain")
    assert h["content-length"] == str(len(b"BROTLI-BYTES!"))


def test_static_precompressed_gzip(precompressed):
    st, h, body = http_request(precompressed.port, "/foo.txt",
                               headers={"Accept-Encoding": "gzip"})
    assert st == 200
    assert body == b"\x1f\x8bGZIP-BYTES"
    assert h["content-encoding"] == "gzip"
    assert "accept-encoding" in h["vary"].lower()
    assert h["content-type"].startswith("text/plain")


def test_static_precompressed_none(precompressed):
    st, h, body = http_request(precompressed.port, "/foo.txt")
    assert st == 200
    assert body == b"plain text body\n"
    assert "content-encoding" not in h
    assert "accept-encoding" in h["vary"].lower()


def test_static_precompressed_q0_refuses_encoding(precompressed):
    # RFC 9110 §12.5.3: a qvalue of 0 means "not acceptable"
    st, h, body = http_request(precompressed.port, "/foo.txt",
                               headers={"Accept-Encoding": "br;q=0, gzip"})
    assert st == 200
    assert h.get("content-encoding") == "gzip"
    assert body == b"\x1f\x8bGZIP-BYTES"


def test_static_precompressed_etags_differ(precompressed):
    _, h1, _ = http_request(precompressed.port, "/foo.txt")
    _, h2, _ = http_request(precompressed.port, "/foo.txt", headers={"Accept-Encoding": "br"})
    _, h3, _ = http_request(precompressed.port, "/foo.txt", headers={"Accept-Encoding": "gzip"})
    assert len({h1["etag"], h2["etag"], h3["etag"]}) == 3


# ---- traversal and path checks ----

SECRET = b"TOP-SECRET-OUTSIDE-DOCROOT\n"


@pytest.fixture
def jail(server, tmp_path):
    f = server(CONF, start=False)
    outside = write(tmp_path / "secret.txt", SECRET)
    write(f.docroot / "a" / "inside.txt", "inside\n")
    os.symlink(outside, f.docroot / "escape.txt")
    os.symlink("../" * 10 + str(outside).lstrip("/"), f.docroot / "escape_rel.txt")
    os.symlink(str(tmp_path), f.docroot / "outdir")
    os.symlink("a/inside.txt", f.docroot / "link_inside.txt")
    f.outside = outside
    return f.start()


def curl_path_as_is(port, path):
    p = subprocess.run(["curl", "-s", "--path-as-is", "--max-time", "10", "-o", "-",
                        "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, timeout=20)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body


def test_static_traversal_curl_path_as_is(jail):
    code, body = curl_path_as_is(jail.port, "/../etc/passwd")
    assert code in (400, 403, 404)
    assert b"root:" not in body


@pytest.mark.parametrize("target", [
    "/../etc/passwd",
    "/../../../../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
    "/a/../../x",
    "/a/../../secret.txt",
    "/a/%2e%2e/%2e%2e/secret.txt",
    "/..%2fsecret.txt",
    "/a/..%2f..%2fsecret.txt",
])
def test_static_traversal_refused(jail, target):
    st, _, body = http_request(jail.port, target)
    assert st in (400, 403, 404), st
    assert b"root:" not in body
    assert SECRET not in body


def test_static_dotdot_inside_root_is_fine(jail):
    st, _, body = http_request(jail.port, "/a/../a/inside.txt")
    assert st == 200 and body == b"inside\n"


@pytest.mark.parametrize("target", ["/escape.txt", "/escape_rel.txt", "/outdir/secret.txt"])
def test_static_symlink_outside_root_refused(jail, target):
    st, _, body = http_request(jail.port, target)
    assert st == 403
    assert SECRET not in body


def test_static_symlink_inside_root_served(jail):
    st, _, body = http_request(jail.port, "/link_inside.txt")
    assert st == 200
    assert body == b"inside\n"


@pytest.mark.parametrize("target", ["/%00", "/a/inside.txt%00", "/a%00/inside.txt",
                                    "/a/inside.txt%00.png"])
def test_static_nul_is_400(jail, target):
    st, _, body = http_request(jail.port, target)
    assert st == 400
    assert b"inside" not in body


# ---- directories ----

def test_static_dir_without_slash_redirects(site):
    st, h, _ = http_request(site.port, "/sub")
    assert st == 301
    assert h["location"].endswith("/sub/")


def test_static_dir_redirect_keeps_query(site):
    st, h, _ = http_request(site.port, "/sub?x=1")
    assert st == 301
    assert h["location"].endswith("/sub/?x=1")


def test_static_dir_without_index_listing_off(site):
    st, _, body = http_request(site.port, "/empty/")
    assert st == 403
    assert b"nested" not in body


def test_static_dir_listing_on(server):
    f = server(CONF_LISTING, start=False)
    d = f.docroot / "files"
    write(d / "plain.txt", "p")
    write(d / "<b>&\"x'.txt", "evil")
    write(d / "subdir" / "y", "y")
    write(d / ".hidden", "h")
    f.start()
    st, h, body = http_request(f.port, "/files/")
    assert st == 200
    assert h["content-type"].startswith("text/html")
    text = body.decode()
    assert "plain.txt" in text
    assert "subdir/" in text
    assert "&lt;b&gt;&amp;&quot;x&#39;.txt" in text
    assert "<b>&" not in text
    # and the escaped link actually fetches the file
    href = re.search(r'href="([^"]*x[^"]*\.txt)"', text).group(1)
    st, _, b2 = http_request(f.port, "/files/" + href)
    assert st == 200 and b2 == b"evil"


# ---- big files ----

BIG = 100 * 1024 * 1024


@pytest.fixture
def bigfile(server):
    f = server(CONF, start=False)
    path = f.docroot / "big.bin"
    h = hashlib.sha256()
    block = os.urandom(1024 * 1024 + 7)  # period not a power of two: offset bugs show
    with open(path, "wb") as out:
        left = BIG
        while left:
            b = block[:min(left, len(block))]
            out.write(b)
            h.update(b)
            left -= len(b)
    f.big_sha = h.hexdigest()
    return f


def download_sha(sock, deadline, path="/big.bin", size=BIG):
    """GET path on a connected socket; read exactly Content-Length bytes; return their sha256."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = sock.recv(65536)
        assert b, "closed before headers"
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    assert m and int(m.group(1)) == size, head
    h = hashlib.sha256(rest)
    n = len(rest)
    while n < size:
        assert time.time() < deadline, f"download too slow: {n} of {size} bytes"
        b = sock.recv(min(1 << 20, size - n))
        assert b, f"connection closed after {n} of {size} body bytes"
        h.update(b)
        n += len(b)
    return h.hexdigest()


def test_static_100mb_plain(bigfile):
    bigfile.start()
    with socket.create_connection(("127.0.0.1", bigfile.port), timeout=20) as s:
        assert download_sha(s, time.time() + 60) == bigfile.big_sha


def test_static_100mb_tls(server, tmp_path):
    f = server(CONF.replace("{port}\n", "{port}\n    tls: self-signed\n"), start=False)
    path = f.docroot / "big.bin"
    h = hashlib.sha256()
    block = os.urandom(1024 * 1024 + 7)
    with open(path, "wb") as out:
        left = BIG
        while left:
            b = block[:min(left, len(block))]
            out.write(b)
            h.update(b)
            left -= len(b)
    f.start()
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", f.port), timeout=20) as raw_s:
        with ctx.wrap_socket(raw_s, server_hostname="localhost") as s:
            assert download_sha(s, time.time() + 90) == h.hexdigest()


MID = 1024 * 1024 + 3  # over file-cache-max-size (64k): sent from the fd, not from memory


@pytest.fixture(params=["plain", "tls"])
def midfile(request, server):
    tls = "    tls: self-signed\n" if request.param == "tls" else ""
    f = server(CONF.replace("{port}\n", "{port}\n" + tls), start=False)
    data = os.urandom(MID)
    write(f.docroot / "mid.bin", data)
    write(f.docroot / "small.txt", "small\n")
    f.mid_sha = hashlib.sha256(data).hexdigest()
    f.tls = bool(tls)
    return f.start()


def connect(f, timeout=5):
    s = socket.create_connection(("127.0.0.1", f.port), timeout=timeout)
    if f.tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s, server_hostname="localhost")
    return s


def test_static_large_file_keepalive_next_request(midfile):
    # a second request on the same connection after a file sent from its fd gets answered
    with connect(midfile) as s:
        assert download_sha(s, time.time() + 20, "/mid.bin", MID) == midfile.mid_sha
        s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = b""
        try:
            while not buf.endswith(b"small\n"):
                b = s.recv(65536)
                if not b:
                    break
                buf += b
        except socket.timeout:
            pass
        assert buf.startswith(b"HTTP/1.1 200") and buf.endswith(b"\r\n\r\nsmall\n"), buf[:300]


def test_static_large_file_connection_close(midfile):
    # "Connection: close": after the last body byte the server closes the connection
    with connect(midfile) as s:
        s.sendall(b"GET /mid.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        closed = False
        try:
            while True:
                b = s.recv(1 << 20)
                if not b:
                    closed = True
                    break
                data += b
        except socket.timeout:
            pass
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        assert hashlib.sha256(body).hexdigest() == midfile.mid_sha
        assert closed, "server kept the connection open after a Connection: close response"


# ---- file cache freshness ----

@pytest.fixture
def site1(server):
    """One worker: a second request meets the file cache entry of the first."""
    return server("workers: 1\n" + CONF)


def test_static_modified_file_served_fresh(site1):
    site = site1
    p = site.docroot / "change.txt"
    p.write_text("version one\n")
    st, _, body = http_request(site.port, "/change.txt")
    assert st == 200 and body == b"version one\n"
    p.write_text("version two, longer\n")
    time.sleep(1.2)
    st, _, body = http_request(site.port, "/change.txt")
    assert st == 200 and body == b"version two, longer\n"


def test_static_modified_file_same_size_served_fresh(server):
    # an edit that keeps the size, made within the same second as the previous write; one
    # worker so that the second request meets the cached entry of the first
    f = server("workers: 1\n" + CONF, start=False)
    p = f.docroot / "same.txt"
    f.start()
    while time.time() % 1.0 > 0.3:  # start early in a second: both writes share it
        time.sleep(0.05)
    p.write_text("AAAA\n")
    st, _, body = http_request(f.port, "/same.txt")
    assert st == 200 and body == b"AAAA\n"
    p.write_text("BBBB\n")
    time.sleep(1.2)
    st, _, body = http_request(f.port, "/same.txt")
    assert st == 200 and body == b"BBBB\n"


def test_static_deleted_file_becomes_404(site1):
    site = site1
    p = site.docroot / "gone.txt"
    p.write_text("here\n")
    st, _, _ = http_request(site.port, "/gone.txt")
    assert st == 200
    p.unlink()
    time.sleep(1.2)
    st, _, body = http_request(site.port, "/gone.txt")
    assert st == 404
    assert b"here" not in body


# ---- access log ----

def test_static_access_log_json(server, tmp_path):
    log = tmp_path / "access.json"
    f = server(CONF + f"log:\n  access: \"{log}\"\n  access-format: json\n", start=False)
    write(f.docroot / "a.txt", "aaa")
    f.start()
    assert http_request(f.port, "/a.txt", headers={"User-Agent": "t/1"})[0] == 200
    assert http_request(f.port, "/missing")[0] == 404
    assert http_request(f.port, "/a.txt?q=\"x\"")[0] == 200
    assert f.stop() == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 3, lines
    # one buffer per worker: lines from different workers may come in any order
    recs = sorted((json.loads(l) for l in lines), key=lambda r: r["target"])
    assert [(r["method"], r["target"], r["status"]) for r in recs] == [
        ("GET", "/a.txt", 200), ("GET", "/a.txt?q=\"x\"", 200), ("GET", "/missing", 404)]
    assert recs[0]["user_agent"] == "t/1"
    assert recs[0]["bytes"] >= 3
    assert recs[0]["remote"] == "127.0.0.1"


def test_static_access_log_combined(server, tmp_path):
    log = tmp_path / "access.log"
    f = server(CONF + f"log:\n  access: \"{log}\"\n  access-format: combined\n", start=False)
    write(f.docroot / "a.txt", "aaa")
    f.start()
    assert http_request(f.port, "/a.txt", headers={"User-Agent": "curl/8", "Referer": "http://r/"})[0] == 200
    assert http_request(f.port, "/nope", method="HEAD")[0] == 404
    assert f.stop() == 0
    # one buffer per worker: lines from different workers may come in any order
    lines = sorted(log.read_text().splitlines(), key=lambda l: '"GET' not in l)
    assert len(lines) == 2, lines
    pat = re.compile(r'^127\.0\.0\.1 - - \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\] '
                     r'"(\S+) (\S+) HTTP/1\.1" (\d{3}) (\d+) "([^"]*)" "([^"]*)"$')
    m = pat.match(lines[0])
    assert m, lines[0]
    assert m.group(1, 2, 3) == ("GET", "/a.txt", "200")
    assert int(m.group(4)) >= 3
    assert m.group(5, 6) == ("http://r/", "curl/8")
    m = pat.match(lines[1])
    assert m, lines[1]
    assert m.group(1, 2, 3) == ("HEAD", "/nope", "404")
    assert m.group(5) == "-"
