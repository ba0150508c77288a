"""Reverse-proxy reliability against misbehaving origins (issue 12): a stuck HTTP/2 origin
connection is not reused, first-byte timeouts are retried only on another server, a bound on
interim (1xx) responses, and a total deadline for request bodies.

The origins here are small Python servers that count what reaches them; the tests assert
statuses and those counts, never times."""
import select
import socket
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from conftest import bound, wait_for


# ---- origins ----

class H1Origin:
    """A threaded HTTP/1.1 origin. Paths: /ok (200 "ok"), /never (read, counted, never
    answered; the connection stays open), /hints?n=N (N x 103, then 200), /upload (reads the
    Content-Length body; records whether it all came or the connection ended first)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.count = {}  # path -> requests seen
        self.uploads_done = 0
        self.uploads_aborted = 0
        self.socks = []
        self.done = threading.Event()
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.ls.settimeout(0.1)
        self.port = self.ls.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def n(self, path):
        with self.lock:
            return self.count.get(path, 0)

    def _accept(self):
        while not self.done.is_set():
            try:
                s, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.socks.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _recv(self, s):
        while not self.done.is_set():
            try:
                return s.recv(65536)
            except socket.timeout:
                continue
        return b""

    def _serve(self, s):
        s.settimeout(0.1)
        buf = b""
        try:
            while not self.done.is_set():
                while b"\r\n\r\n" not in buf:
                    d = self._recv(s)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                target = lines[0].split(" ")[1]
                path = target.split("?")[0]
                fields = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip()
                          for l in lines[1:] if ":" in l}
                with self.lock:
                    self.count[path] = self.count.get(path, 0) + 1
                if path == "/never":
                    while self._recv(s):
                        pass
                    return
                if path == "/upload":
                    want = int(fields.get("content-length", "0"))
                    while len(buf) < want:
                        d = self._recv(s)
                        if not d:
                            with self.lock:
                                self.uploads_aborted += 1
                            return
                        buf += d
                    buf = buf[want:]
                    with self.lock:
                        self.uploads_done += 1
                if path == "/hints":
                    n = int(target.split("n=")[1])
                    for _ in range(n):
                        s.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
        finally:
            s.close()

    def stop(self):
        self.done.set()
        self.ls.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class H2Origin:
    """A threaded h2c origin. `stuck_conns`: connection numbers (1 = the first accepted) that
    answer their first request and then stop reading and answering, holding the connection
    open. `silent`: no request is ever answered (but each is read and counted). Every other
    request gets 200 "ok" (/hints?n=N: N x 103 first)."""

    def __init__(self, stuck_conns=(), silent=False):
        self.stuck_conns = set(stuck_conns)
        self.silent = silent
        self.lock = threading.Lock()
        self.nconns = 0
        self.requests = 0  # requests read (HEADERS) over all connections
        self.answered = 0
        self.resets = 0    # RST_STREAM received
        self.socks = []
        self.done = threading.Event()
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.ls.settimeout(0.1)
        self.port = self.ls.getsockname()[1]
        self.url = f"h2c://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.done.is_set():
            try:
                s, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.nconns += 1
                k = self.nconns
                self.socks.append(s)
            threading.Thread(target=self._serve, args=(s, k), daemon=True).start()

    def _serve(self, s, k):
        s.settimeout(0.1)
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                 header_encoding="utf-8"))
        c.initiate_connection()
        answered_here = 0
        uploads = {}  # stream id -> path, of requests whose body is still coming
        try:
            s.sendall(c.data_to_send())
            while not self.done.is_set():
                if k in self.stuck_conns and answered_here >= 1:
                    time.sleep(0.05)  # stuck: reads nothing, answers nothing, stays open
                    continue
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return
                for ev in c.receive_data(data):
                    if isinstance(ev, h2.events.StreamReset):
                        with self.lock:
                            self.resets += 1
                    if isinstance(ev, h2.events.DataReceived):
                        c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    if isinstance(ev, h2.events.StreamEnded) and ev.stream_id in uploads:
                        path = uploads.pop(ev.stream_id)
                    elif isinstance(ev, h2.events.RequestReceived):
                        with self.lock:
                            self.requests += 1
                        if self.silent:
                            continue
                        path = dict(ev.headers).get(":path", "/")
                        if path == "/upload" and not ev.stream_ended:
                            uploads[ev.stream_id] = path  # answered once the body is all in
                            continue
                    else:
                        continue
                    try:
                        if path.startswith("/hints"):
                            for _ in range(int(path.split("n=")[1])):
                                c.send_headers(ev.stream_id, [(":status", "103"),
                                                              ("link", "</s.css>; rel=preload")])
                        c.send_headers(ev.stream_id, [(":status", "200"),
                                                      ("content-length", "2")])
                        c.send_data(ev.stream_id, b"ok", end_stream=True)
                    except h2.exceptions.StreamClosedError:
                        continue
                    answered_here += 1
                    with self.lock:
                        self.answered += 1
                s.sendall(c.data_to_send())
        except (OSError, h2.exceptions.ProtocolError):
            pass
        finally:
            s.close()

    def stop(self):
        self.done.set()
        self.ls.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


import pytest  # noqa: E402


@pytest.fixture
def origins():
    started = []

    def make(kind="h1", **kw):
        o = H1Origin(**kw) if kind == "h1" else H2Origin(**kw)
        started.append(o)
        return o

    yield make
    for o in started:
        o.stop()


def start(server, servers, upstream_extra="", limits=""):
    srv_list = "\n".join(f"      - {u}" for u in servers)
    text = f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2c]
{limits}
upstreams:
  - name: up
    servers:
{srv_list}
{upstream_extra}
routes:
  - match: {{{{path: /}}}}
    proxy: {{{{upstream: up}}}}
"""
    return server(text)


def get(srv, path, timeout=30):
    """One HTTP/1.1 GET on a new connection: (status, body). Interim heads are skipped."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=bound(timeout)) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    return parse(data)


def parse(data):
    """(final status, body, number of 103 heads) of a raw HTTP/1.1 response."""
    hints = 0
    while data.startswith(b"HTTP/1.1 1"):
        head, data = data.split(b"\r\n\r\n", 1)
        hints += head.startswith(b"HTTP/1.1 103")
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head else 0
    return status, body, hints


# ---- item 1: a stuck multiplexed origin connection ----

def test_stuck_h2_connection_is_not_reused(server, origins):
    """The first connection answers one request, then stops reading but stays open: the
    request that timed out on it leaves it behind, and the next one gets a new connection."""
    o = origins("h2", stuck_conns={1})
    srv = start(server, [o.url], "    first-byte-timeout: 1s")
    assert get(srv, "/a")[0] == 200
    assert o.nconns == 1
    assert get(srv, "/b")[0] == 504  # stuck: the one server is not asked again
    st, body, _ = get(srv, "/c")
    assert (st, body) == (200, b"ok"), srv.log()[-2000:]
    assert o.nconns == 2
    assert get(srv, "/d")[0] == 200
    assert o.nconns == 2  # the new connection is reused
    assert "first-byte timeout" in srv.log()


def test_stuck_h2_server_is_ejected_and_avoided(server, origins):
    """Two servers, the first reads every request and answers none: its requests time out and
    go to the other; after max-fails it is ejected and no more requests reach it."""
    stuck = origins("h2", silent=True)
    good = origins("h2")
    srv = start(server, [stuck.url, good.url],
                "    first-byte-timeout: 1s\n    max-fails: 2\n    fail-timeout: 1h")
    for i in range(6):
        st, body, _ = get(srv, f"/r{i}")
        assert (st, body) == (200, b"ok"), (i, srv.log()[-2000:])
    assert stuck.requests == 2, srv.log()[-3000:]
    assert good.answered == 6
    assert "ejected" in srv.log()


def test_ejection_is_obeyed_by_every_worker(server, origins):
    """Two workers: the worker that saw the failure ejects the server for all of them (each
    new client connection may land on either worker; 10 all on one is a 1 in 512 chance)."""
    stuck = origins("h2", silent=True)
    good = origins("h2")
    servers = "\n".join(f"      - {u}" for u in (stuck.url, good.url))
    srv = server(f"""
workers: 2
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1]
upstreams:
  - name: up
    servers:
{servers}
    first-byte-timeout: 1s
    max-fails: 1
    fail-timeout: 1h
routes:
  - match: {{{{path: /}}}}
    proxy: {{{{upstream: up}}}}
""")
    for i in range(10):
        st, body, _ = get(srv, f"/r{i}")
        assert (st, body) == (200, b"ok"), (i, srv.log()[-2000:])
    assert stuck.requests == 1, srv.log()[-3000:]


# ---- item 2: first-byte timeouts are retried on another server only ----

def test_first_byte_timeout_single_server_not_retried(server, origins):
    o = origins("h1")
    srv = start(server, [o.url], "    first-byte-timeout: 1s\n    retries: 3")
    assert get(srv, "/ok")[0] == 200  # pools a connection: the stale-connection retry too
    assert get(srv, "/never")[0] == 504
    assert o.n("/never") == 1, srv.log()[-2000:]
    assert get(srv, "/never")[0] == 504
    assert o.n("/never") == 2


def test_first_byte_timeout_single_h2_server_not_retried(server, origins):
    o = origins("h2", silent=True)
    srv = start(server, [o.url], "    first-byte-timeout: 1s\n    retries: 3")
    assert get(srv, "/x")[0] == 504
    assert o.requests == 1, srv.log()[-2000:]


def test_first_byte_timeout_retried_on_the_other_server(server, origins):
    a, b = origins("h1"), origins("h1")
    srv = start(server, [a.url, b.url], "    first-byte-timeout: 1s\n    retries: 3")
    st, _, _ = get(srv, "/never")  # neither answers it
    assert st == 504  # each server got it once, none twice, though retries allow 3 more
    assert (a.n("/never"), b.n("/never")) == (1, 1), srv.log()[-2000:]
    assert "retrying on another server" in srv.log()


def test_first_byte_timeout_retry_goes_to_the_healthy_server(server, origins):
    stuck = origins("h2", silent=True)
    good = origins("h1")
    srv = start(server, [stuck.url, good.url], "    first-byte-timeout: 1s\n    retries: 3")
    st, body, _ = get(srv, "/ok")
    assert (st, body) == (200, b"ok"), srv.log()[-2000:]
    assert stuck.requests == 1 and good.n("/ok") == 1
    log = srv.log()
    assert f"127.0.0.1:{stuck.port}: origin first-byte timeout; retrying on another server" in log


def test_retry_timeout_bounds_the_attempts(server, origins):
    """retry-timeout shorter than the first attempt's wait: no retry starts after it."""
    stuck = origins("h2", silent=True)
    good = origins("h1")
    srv = start(server, [stuck.url, good.url],
                "    first-byte-timeout: 1s\n    retries: 3\n    retry-timeout: 500ms")
    assert get(srv, "/ok")[0] == 504
    assert stuck.requests == 1 and good.n("/ok") == 0


# ---- item 3: a bound on interim responses ----

@pytest.mark.parametrize("kind", ["h1", "h2"])
def test_too_many_informational_responses_is_502(server, origins, kind):
    o = origins(kind)
    srv = start(server, [o.url], limits="limits:\n  informational-responses: 4")
    st, body, hints = get(srv, "/hints?n=4")
    assert (st, body, hints) == (200, b"ok", 4)
    st, _, hints = get(srv, "/hints?n=5")
    assert st == 502 and hints == 4, srv.log()[-2000:]
    assert "limits.informational-responses" in srv.log()


def test_informational_default_limit(server, origins):
    o = origins("h1")
    srv = start(server, [o.url])
    st, _, hints = get(srv, "/hints?n=32")
    assert st == 200 and hints == 32
    st, _, hints = get(srv, "/hints?n=1000")
    assert st == 502 and hints == 32, srv.log()[-2000:]
    assert o.n("/hints") == 2  # not retried


# ---- item 4: a total deadline for request bodies ----

def trickle(srv, total, head_extra=""):
    """POST /upload with a `total`-byte body sent one byte every 50 ms until a response
    arrives (or the body is all sent). Returns (status, bytes sent)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(30))
    s.sendall(f"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {total}\r\n"
              f"{head_extra}\r\n".encode())
    sent, data = 0, b""
    try:
        while sent < total:
            r, _, _ = select.select([s], [], [], 0.05)
            if r:
                break
            s.sendall(b"x")
            sent += 1
        while b"\r\n\r\n" not in data:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    finally:
        s.close()
    return parse(data)[0], sent


def test_slow_upload_past_body_total_timeout_is_408(server, origins):
    o = origins("h1")
    srv = start(server, [o.url], "    first-byte-timeout: 60s",
                limits="limits:\n  body-total-timeout: 1s")
    st, sent = trickle(srv, 400)  # 20 s at the trickle's pace
    assert st == 408, srv.log()[-2000:]
    assert sent < 400
    wait_for(lambda: o.uploads_aborted == 1, 10, "the origin to see the upload aborted")
    assert o.uploads_done == 0
    assert "limits.body-total-timeout" in srv.log()


def test_slow_upload_to_h2_origin_is_reset(server, origins):
    o = origins("h2")
    srv = start(server, [o.url], limits="limits:\n  body-total-timeout: 1s")
    st, _ = trickle(srv, 400)
    assert st == 408, srv.log()[-2000:]
    wait_for(lambda: o.resets == 1, 10, "the origin to see the stream reset")
    assert o.answered == 0


def test_upload_within_body_total_timeout(server, origins):
    o = origins("h1")
    srv = start(server, [o.url], limits="limits:\n  body-total-timeout: 60s")
    st, sent = trickle(srv, 10)
    assert (st, sent) == (200, 10)
    assert o.uploads_done == 1


def test_slow_upload_is_no_first_byte_timeout(server, origins):
    """The first-byte wait starts once the body is all sent: a client uploading for longer
    than first-byte-timeout is not an origin failure (504, and counted towards ejection)."""
    o = origins("h1")
    srv = start(server, [o.url], "    first-byte-timeout: 1s")
    st, sent = trickle(srv, 40)  # 2 s at the trickle's pace
    assert (st, sent) == (200, 40), srv.log()[-2000:]
    assert o.uploads_done == 1
    assert "first-byte timeout" not in srv.log()
