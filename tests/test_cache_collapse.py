"""Request collapsing in the cache (src/policy/cache.c, cache_store.c): concurrent misses for
one key wait for one origin fetch and get its response streamed as it arrives; the wait is
bounded (collapse-timeout); a response that is not stored sends each waiter to the origin
alone. The origin holds its answer on events the test sets, so nothing depends on timing: a
request Ferry has not looked at yet when the head arrives reads the object while it streams,
which the same assertions cover."""
import socket
import threading

import pytest

from test_cache import Origin, config

N = 100
HALF = 32768


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


def send_get(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n".encode())
    return s


def read_at_least(s, buf, n):
    while len(buf) < n:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    return buf


def read_all(s, buf):
    while True:
        d = s.recv(65536)
        if not d:
            return buf
        buf += d


def test_cache_collapse_100_misses_one_fetch_streamed(server, origin):
    head_gate, body_gate, arrived = threading.Event(), threading.Event(), threading.Event()
    first = b"a" * HALF
    second = b"b" * HALF

    def r(h, count):
        arrived.set()
        assert head_gate.wait(60)
        h.send_response(200)
        h.send_header("Cache-Control", "max-age=60")
        h.send_header("Content-Length", str(2 * HALF))
        h.end_headers()
        h.wfile.write(first)
        h.wfile.flush()
        assert body_gate.wait(60)
        h.wfile.write(second)
        h.wfile.flush()
        return None
    origin.routes["/col"] = r
    srv = server(config(origin.port, "{{collapse-timeout: 60s}}", workers=2))
    socks = [send_get(srv.port, "/col")]
    assert arrived.wait(30)
    socks += [send_get(srv.port, "/col") for _ in range(N - 1)]
    head_gate.set()
    # every client gets the head and the first half while the origin still holds the rest
    bufs = []
    for s in socks:
        b = b""
        while b"\r\n\r\n" not in b:
            d = s.recv(65536)
            assert d, "closed before the head"
            b += d
        hl = b.index(b"\r\n\r\n") + 4
        b = read_at_least(s, b, hl + HALF)
        assert b[hl:hl + HALF] == first
        bufs.append(b)
    body_gate.set()
    statuses = []
    for s, b in zip(socks, bufs):
        b = read_all(s, b)
        s.close()
        head, body = b.split(b"\r\n\r\n", 1)
        statuses.append(head.split(b"\r\n")[0])
        assert body == first + second
        assert b"Cache-Status: ferry; " in head
    assert all(st == b"HTTP/1.1 200 OK" for st in statuses)
    assert origin.hits["/col"] == 1


def test_cache_collapse_timeout_goes_alone(server, origin):
    gate, arrived = threading.Event(), threading.Event()

    def r(h, count):
        if count == 1:
            arrived.set()
            assert gate.wait(60)
        return (200, [("Cache-Control", "max-age=60")], f"n{count}")
    origin.routes["/slow"] = r
    srv = server(config(origin.port, "{{collapse-timeout: 200ms}}", workers=1))
    a = send_get(srv.port, "/slow")
    assert arrived.wait(30)
    b = send_get(srv.port, "/slow")
    rb = read_all(b, b"")
    assert rb.endswith(b"n2") and b"detail=collapse-timeout" in rb
    gate.set()
    ra = read_all(a, b"")
    assert ra.endswith(b"n1")
    a.close()
    b.close()
    assert origin.hits["/slow"] == 2


def test_cache_collapse_uncacheable_each_goes_alone(server, origin):
    gate, arrived = threading.Event(), threading.Event()

    def r(h, count):
        if count == 1:
            arrived.set()
            assert gate.wait(60)
        return (200, [("Cache-Control", "no-store")], f"n{count}")
    origin.routes["/ns"] = r
    srv = server(config(origin.port, "{{collapse-timeout: 60s}}", workers=2))
    socks = [send_get(srv.port, "/ns")]
    assert arrived.wait(30)
    socks += [send_get(srv.port, "/ns") for _ in range(5)]
    gate.set()
    bodies = sorted(read_all(s, b"").rsplit(b"\r\n\r\n", 1)[1] for s in socks)
    for s in socks:
        s.close()
    assert bodies == sorted(f"n{i}".encode() for i in range(1, 7))
    assert origin.hits["/ns"] == 6
