"""HTTP/1.1 codec, black box, part two: request bodies through echo (lengths, chunked, trailers,
backpressure), Expect: 100-continue, unread bodies drained, curl, and a little load. The
strict response reader and helpers are test_h1_protocol.py's. No test asserts on time.
"""
import hashlib
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from test_h1_protocol import BASE, chunked_post, Client, config, GET, GET_SMUGGLED, HELLO


# ---- request bodies through echo ----

def echo_in_two_reads(c, body, tail=b""):
    """POST body to /echo so that its last 10 bytes arrive in a later read than the rest:
    send all but 10 bytes, wait until they came back, then send the rest (+ tail)."""
    n = len(body)
    c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % n
           + body[:-10])
    status, _, _, headers, _ = c.head()
    assert status == 200 and ("Content-Length", str(n)) in [(k.title(), v) for k, v in headers]
    assert c._take(n - 10) == body[:-10]
    c.send(body[-10:] + tail)
    assert c._take(10) == body[-10:]


@pytest.mark.parametrize("n", [100, 40000])
def test_h1_keepalive_after_body_spanning_reads(server, n):
    """A body whose end arrives in a later read than its head must not wedge the
    connection: the next request, sent after the response was read, is served."""
    srv = server(BASE)
    with Client(srv.port) as c:
        echo_in_two_reads(c, os.urandom(n))
        c.send(GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO


@pytest.mark.parametrize("n", [100, 40000])
def test_h1_pipelined_after_body_spanning_reads(server, n):
    srv = server(BASE)
    with Client(srv.port) as c:
        echo_in_two_reads(c, os.urandom(n), tail=GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO


def test_h1_chunked_request_with_extensions_and_trailers(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: text/x-test\r\n\r\n"
               b"3;name=value\r\nabc\r\n"
               b"5;a;b=\"quoted ext\"\r\ndefgh\r\n"
               b"0;last=1\r\n"
               b"X-Checksum: 1234\r\nX-Other: two words\r\n\r\n" + GET)
        r = c.response()
        assert r.status == 200
        assert r.get("Transfer-Encoding") == "chunked"
        assert r.get("Content-Length") is None
        assert r.get("Content-Type") == "text/x-test"
        assert r.body == b"abcdefgh"
        assert r.trailers == [("X-Checksum", "1234"), ("X-Other", "two words")]
        head, _, tail = r.raw.partition(b"\r\n\r\n")
        # the exact chunk framing: data chunks, then last-chunk, trailers, empty line
        assert re.fullmatch(rb"(?:[0-9a-f]+\r\n[a-h]+\r\n)+0\r\n"
                            rb"X-Checksum: 1234\r\nX-Other: two words\r\n\r\n", tail), tail
        # the pipelined request after the trailers is served on the same connection
        r2 = c.response()
        assert r2.status == 200 and r2.body == HELLO


def test_h1_chunked_request_without_trailers(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(chunked_post(b"/echo", b"1\r\nA\r\n10\r\n" + b"B" * 16 + b"\r\n0\r\n\r\n"))
        r = c.response()
        assert r.status == 200 and r.body == b"A" + b"B" * 16 and r.trailers == []
        assert r.raw.endswith(b"\r\n0\r\n\r\n")


def test_h1_chunked_request_empty(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(chunked_post(b"/echo", b"0\r\n\r\n") + GET)
        r = c.response()
        assert r.status == 200 and r.body == b""
        assert r.raw.endswith(b"\r\n\r\n0\r\n\r\n")
        assert c.response().body == HELLO


def test_h1_chunked_request_byte_by_byte(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = chunked_post(b"/echo", b"4;x=y\r\nwxyz\r\n2\r\n12\r\n0\r\nT: v\r\n\r\n")
        for i in range(len(data)):
            c.send(data[i:i + 1])
        r = c.response()
        assert r.status == 200 and r.body == b"wxyz12" and r.trailers == [("T", "v")]
        assert c.is_open()


def sender(sock, data, piece=65536, delay=0.0, errors=None):
    def run():
        try:
            for i in range(0, len(data), piece):
                sock.sendall(data[i:i + piece])
                if delay:
                    time.sleep(delay)
        except OSError as e:  # reported by the reader's assertions
            if errors is not None:
                errors.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("size", [0, 1, 65536, 1 << 20])
def test_h1_content_length_echo_exact(server, size):
    srv = server(BASE)
    body = os.urandom(size)
    with Client(srv.port, timeout=10) as c:
        head = b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % size
        errs = []
        t = sender(c.s, head + body, errors=errs)
        r = c.response()
        t.join(10)
        assert not errs, errs
        assert r.status == 200
        assert r.get("Content-Length") == str(size)
        assert r.get("Content-Type") == "application/octet-stream"
        assert len(r.body) == size
        assert hashlib.sha256(r.body).hexdigest() == hashlib.sha256(body).hexdigest()
        assert c.is_open()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_h1_large_body_slow_reader_backpressure(server):
    """24 MiB in, nothing read back for a while, then read slowly: the server must hold back
    (stop reading rather than buffer the body in memory) and the echo must still be exact."""
    srv = server(config(**{"body-size": "64m"}))
    size = 24 << 20
    body = os.urandom(size)
    rss_before = rss_kib(srv.proc.pid)
    with Client(srv.port, timeout=10) as c:
        c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        head = b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % size
        errs = []
        t = sender(c.s, head + body, errors=errs)
        time.sleep(1.0)  # the stall: nothing read while the sender pushes
        rss_stalled = rss_kib(srv.proc.pid)
        reads = [0]

        def slow():
            reads[0] += 1
            if reads[0] % 64 == 0:
                time.sleep(0.01)
        r = c.response(slow=slow)
        t.join(10)
        assert not errs, errs
        assert r.status == 200 and len(r.body) == size
        assert hashlib.sha256(r.body).digest() == hashlib.sha256(body).digest()
        # kernel socket buffers may hold a lot, but not the server's own memory
        assert rss_stalled - rss_before < 8 * 1024, (rss_before, rss_stalled)
        assert c.is_open()


def test_h1_large_chunked_body_slow_reader(server):
    srv = server(BASE)
    pieces = [os.urandom(n) for n in (1, 100, 4096, 16383, 16384, 16385, 65536, 300000)] * 4
    wire = b"".join(b"%x;ext=1\r\n" % len(p) + p + b"\r\n" for p in pieces)
    wire += b"0\r\nX-Done: yes\r\n\r\n"
    expect = b"".join(pieces)
    with Client(srv.port, timeout=10) as c:
        errs = []
        t = sender(c.s, chunked_post(b"/echo", wire), piece=7000, errors=errs)
        time.sleep(0.5)
        r = c.response()
        t.join(10)
        assert not errs, errs
        assert r.status == 200 and r.get("Transfer-Encoding") == "chunked"
        assert len(r.body) == len(expect)
        assert hashlib.sha256(r.body).digest() == hashlib.sha256(expect).digest()
        assert r.trailers == [("X-Done", "yes")]
        assert c.is_open()


# ---- Expect: 100-continue ----

def test_h1_expect_100_continue_echo(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
               b"Expect: 100-continue\r\n\r\n")
        interim = c.response()
        assert interim.status == 100
        assert interim.raw.startswith(b"HTTP/1.1 100 Continue\r\n")
        assert interim.body == b""
        c.send(b"hello")
        r = c.response()
        assert r.status == 200 and r.body == b"hello"
        assert r.get("Connection") is None
        assert c.is_open()


def test_h1_expect_100_continue_chunked_echo(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
               b"Expect: 100-continue\r\n\r\n")
        assert c.response().raw == b"HTTP/1.1 100 Continue\r\n\r\n"
        c.send(b"2\r\nhi\r\n0\r\n\r\n")
        r = c.response()
        assert r.status == 200 and r.body == b"hi"


def test_h1_expect_100_continue_http10_ignored(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.0\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nhi")
        r = c.response()
        assert r.status == 200 and r.body == b"hi"


def test_h1_expect_100_continue_respond_route_closes(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n"
               b"Expect: 100-continue\r\n\r\n")
        r = c.response()
        assert r.status == 200, "a 100 Continue was sent to a handler that reads no body"
        assert r.body == HELLO
        assert r.get("Connection") == "close"
        c.expect_eof()


def test_h1_expect_100_continue_body_already_sent(server):
    """Client did not wait for 100: the body is there; no 100 needed, and the connection
    can go on."""
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
               b"Expect: 100-continue\r\n\r\nabc" + GET)
        r = c.response()
        if r.status == 100:  # allowed, though not needed
            r = c.response()
        assert r.status == 200 and r.body == b"abc"
        assert c.response().body == HELLO


# ---- unread bodies are drained ----

def test_h1_unread_body_drained_then_next_request(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        body = b"z" * 50000
        c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body)
               + body + GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO and r.get("Connection") is None
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert c.is_open()


def test_h1_unread_chunked_body_drained_then_next_request(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(chunked_post(b"/", b"5\r\nGET /\r\n3\r\nxyz\r\n0\r\nT: 1\r\n\r\n")
               + b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert c.is_open()


def test_h1_unread_body_in_pieces_then_next_request(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 30000\r\n\r\n")
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        for _ in range(3):
            c.send(b"q" * 10000)
            time.sleep(0.05)
        c.send(GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO


def test_h1_early_response_large_upload_drained_exactly(server):
    """The answer comes before a large upload ends; the rest of the body is dropped (read
    straight from the socket), but not one byte past it: the request glued right behind the
    body is served, and a smuggled-looking body byte never becomes a request."""
    srv = server(BASE)
    with Client(srv.port) as c:
        n = 900 * 1024
        body = (GET_SMUGGLED * (n // len(GET_SMUGGLED) + 1))[:n]
        c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % n + body[:1000])
        r = c.response()
        assert r.status == 200 and r.body == HELLO and r.get("Connection") is None
        c.send(body[1000:] + GET + GET)
        for _ in range(2):
            r = c.response()
            assert r.status == 200 and r.body == HELLO
        assert c.is_open()


def test_h1_early_response_upload_in_slow_pieces(server):
    """An upload the response overtook keeps the connection while its rest trickles in."""
    srv = server(BASE)
    with Client(srv.port) as c:
        n = 600 * 1024
        c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % n)
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        piece = b"p" * (n // 6)
        for _ in range(6):
            c.send(piece)
            time.sleep(0.02)
        c.send(GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert c.is_open()


def test_h1_early_response_client_gives_up_mid_upload(server):
    """The client closes in the middle of a body being drained: the connection is closed,
    the server goes on serving others (and logs no alert: the fixture checks)."""
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 500000\r\n\r\n" + b"x" * 70000)
        r = c.response()
        assert r.status == 200 and r.body == HELLO
    with Client(srv.port) as c:
        c.send(GET)
        assert c.response().body == HELLO


UNREAD_CLOSE = {
    "http11_connection_close": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                               b"Connection: close\r\n\r\nabc",
    "http10": b"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
    "chunked_connection_close": b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                                b"Connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "partial_body_connection_close": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n"
                                     b"Connection: close\r\n\r\nabc",
    "body_over_drain_limit": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\nabc",
}


@pytest.mark.parametrize("name", sorted(UNREAD_CLOSE))
def test_h1_unread_body_response_delivered_before_close(server, name):
    """A handler that ignores the body answers; when the connection is not kept (close,
    HTTP/1.0, too much to drain) the response must still reach the client before EOF."""
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(UNREAD_CLOSE[name])
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert r.get("Connection") == "close"
        c.expect_eof()


# ---- curl ----

def curl(*args, timeout=10):
    return subprocess.run(["curl", "-sS", "--max-time", "8", *args], capture_output=True,
                          timeout=timeout)


def test_h1_curl_get(server):
    srv = server(BASE)
    p = curl("-v", srv.url("/"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == HELLO
    err = p.stderr.decode()
    assert "< HTTP/1.1 200 OK" in err
    assert "< Server: ferry" in err
    assert "< Content-Length: 6" in err
    assert re.search(r"< Date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", err)


def test_h1_curl_head(server):
    srv = server(BASE)
    p = curl("-v", "-I", srv.url("/"))
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert out.startswith("HTTP/1.1 200 OK\r\n")
    assert "Content-Length: 6\r\n" in out
    assert out.endswith("\r\n\r\n") and "hello" not in out


def test_h1_curl_keepalive_reuse(server):
    srv = server(BASE)
    p = curl("-v", srv.url("/a"), srv.url("/b"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == HELLO * 2
    assert re.search(rb"Re-using existing connection|Reusing existing", p.stderr), p.stderr


def test_h1_curl_data_binary_echo(server, tmp_path):
    srv = server(BASE)
    f = tmp_path / "payload.bin"
    data = os.urandom(300000)
    f.write_bytes(data)
    p = curl("-v", "--data-binary", f"@{f}", "-H", "Content-Type: application/x-test",
             srv.url("/echo"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == data
    assert re.search(rb"(?i)< content-type: application/x-test", p.stderr), p.stderr
    # curl sends Expect: 100-continue for large bodies; either way the body round-trips
    p = curl("--data-binary", f"@{f}", "-H", "Transfer-Encoding: chunked", srv.url("/echo"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == data


# ---- load ----

def test_h1_h2load_2000(server):
    srv = server(BASE)
    p = subprocess.run(["h2load", "--h1", "-n", "2000", "-c", "10", "-T", "10",
                        srv.url("/")], capture_output=True, text=True, timeout=15)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored", p.stdout)
    assert m, p.stdout
    assert m.group(1) == m.group(4) == "2000", p.stdout
    assert m.group(5) == "0" and m.group(6) == "0", p.stdout
    assert re.search(r"status codes: 2000 2xx", p.stdout), p.stdout
