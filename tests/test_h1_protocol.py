"""HTTP/1.1 codec, black box: framing, rejections, limits, timeouts, keep-alive, pipelining,
chunked bodies and trailers, Expect: 100-continue, backpressure, and a little load.

Every socket has a timeout. Timeouts are configured short (1s) but no test asserts on time:
only on outcomes (a response, an EOF, a log line), waited for with a generous bound.
After any rejection the connection must be closed and nothing more served.
"""
import email.utils
import os
import re
import socket
import time

import pytest

from conftest import SANITIZED, raw, statuses


# NB: configs go through str.format() in the fixture: no flow-style `{...}` maps, except
# the escaped `{{}}`.
ROUTES = """\
listeners:
  - address: 127.0.0.1:{port}
routes:
  - match:
      path: /echo
    echo: {{}}
  - match:
      path: /
    respond:
      status: 200
      headers:
        content-type: text/plain
      body: "hello\\n"
log:
  level: info
"""


def config(**limits):
    """ROUTES plus a limits section. body-timeout defaults to 5s here (not 30s) only so that
    a connection the server wedges cannot hold up the fixture's SIGTERM teardown for long."""
    limits.setdefault("body-timeout", "5s")
    return ROUTES + "limits:\n" + "".join(f"  {k}: {v}\n" for k, v in limits.items())


BASE = config()
LIMITS = config(**{"request-line": 256, "header-bytes": "1k", "header-count": 10,
                   "body-size": "4k", "header-timeout": "1s", "body-timeout": "1s",
                   "keepalive-timeout": "1s"})

SOCK_TIMEOUT = 5.0
GET = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
GET_SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
HELLO = b"hello\n"
DATE_RE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$")


# ---- a small, strict HTTP/1.1 response reader ----

class Resp:
    def __init__(self, status, reason, headers, body, trailers, raw_bytes, version):
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value) as received
        self.body = body
        self.trailers = trailers
        self.raw = raw_bytes
        self.version = version

    def all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def get(self, name):
        vals = self.all(name)
        assert len(vals) <= 1, f"header {name} repeated: {vals}"
        return vals[0] if vals else None

    def __repr__(self):
        return f"<Resp {self.status} {self.raw[:300]!r}>"


class Client:
    def __init__(self, port, timeout=SOCK_TIMEOUT):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = bytearray()
        self.consumed = 0  # position in buf of the start of unparsed bytes

    def send(self, data):
        self.s.sendall(data)

    def _fill(self, n=65536):
        b = self.s.recv(n)
        if not b:
            raise EOFError("connection closed by server; unparsed: %r" % bytes(self.buf[:200]))
        self.buf += b

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                return self._take(i + 2)
            assert len(self.buf) < 1 << 20, "no CRLF in 1 MiB"
            self._fill()

    def head(self):
        """Read one response head; returns (status, reason, version, headers, raw)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n\r\n")
        rawh = self._take(i + 4)
        lines = rawh[:-4].split(b"\r\n")
        m = re.match(rb"^HTTP/(1\.[01]) (\d{3}) (.*)$", lines[0])
        assert m, f"bad status line {lines[0]!r}"
        headers = []
        for l in lines[1:]:
            assert b":" in l, f"bad header line {l!r}"
            n, v = l.split(b":", 1)
            assert n == n.strip() and n, f"bad header name {l!r}"
            headers.append((n.decode(), v.strip().decode()))
        return int(m.group(2)), m.group(3).decode(), m.group(1).decode(), headers, rawh

    def response(self, method="GET", slow=None):
        """Read one full response (skipping nothing: a 1xx is returned as such)."""
        status, reason, version, headers, rawh = self.head()
        r = Resp(status, reason, headers, b"", [], rawh, version)
        rawb = bytearray()
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        te = r.get("Transfer-Encoding")
        cl = r.get("Content-Length")
        body = bytearray()
        if no_body:
            pass
        elif te is not None:
            assert te.lower() == "chunked", te
            assert cl is None, "both Transfer-Encoding and Content-Length in a response"
            while True:
                line = self._line()
                rawb += line
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    break
                data = self._take(size + 2)
                rawb += data
                assert data.endswith(b"\r\n"), "chunk data not followed by CRLF"
                body += data[:-2]
            while True:
                line = self._line()
                rawb += line
                if line == b"\r\n":
                    break
                n, v = line[:-2].split(b":", 1)
                r.trailers.append((n.decode(), v.strip().decode()))
        elif cl is not None:
            n = int(cl)
            while len(body) < n:
                if slow:
                    slow()
                want = min(n - len(body), 16384 if slow else 1 << 20)
                if not self.buf:
                    self._fill(want)
                k = min(want, len(self.buf))
                body += self.buf[:k]
                del self.buf[:k]
            rawb += body
        else:
            # delimited by close (HTTP/1.0 with unknown length)
            try:
                while True:
                    self._fill()
            except EOFError:
                pass
            body += self.buf
            rawb += self.buf
            self.buf.clear()
        r.body = bytes(body)
        r.raw = rawh + bytes(rawb)
        return r

    def expect_eof(self):
        """Assert the server closes without sending anything more."""
        assert not self.buf, f"unexpected extra bytes: {bytes(self.buf[:300])!r}"
        try:
            b = self.s.recv(65536)
        except socket.timeout:
            pytest.fail("connection still open: expected EOF")
        except ConnectionResetError:
            pytest.fail("connection reset instead of an orderly close (response may be lost)")
        assert b == b"", f"unexpected extra bytes after the last response: {b[:300]!r}"

    def is_open(self, wait=0.3):
        """True if nothing arrives and no EOF within `wait` (used only for open-ness)."""
        self.s.settimeout(wait)
        try:
            b = self.s.recv(1, socket.MSG_PEEK)
            return bool(b)
        except socket.timeout:
            return True
        finally:
            self.s.settimeout(SOCK_TIMEOUT)

    def close(self):
        self.s.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def wait_log(srv, needle, bound=5.0):
    deadline = time.time() + bound * (3 if SANITIZED else 1)
    while time.time() < deadline:
        if needle in srv.log():
            return True
        time.sleep(0.05)
    return False


def assert_single_rejection(port, data, status):
    """Send `data` (a bad request followed by a valid pipelined one); exactly one error
    response must come back, with Connection: close, and then an orderly EOF."""
    with Client(port) as c:
        c.send(data)
        r = c.response()
        assert r.status == status, r
        assert r.get("Connection") == "close", r
        assert r.get("Content-Length") == str(len(r.body)), r
        assert r.get("Server") == "ferry"
        c.expect_eof()
    return r


# ---- rejections: 400 + close, nothing more served ----

def chunked_post(path, body_bytes):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            + body_bytes)


BAD_400 = {
    "cl_and_te": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "te_and_cl": b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Length: 5\r\n\r\n0\r\n\r\n",
    "cl_differing_duplicates": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                               b"Content-Length: 4\r\n\r\nabc",
    "cl_differing_list": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\nabc",
    "cl_not_a_number": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3x\r\n\r\nabc",
    "cl_negative": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
    "te_gzip": b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
    "te_chunked_chunked": b"POST /echo HTTP/1.1\r\nHost: a\r\n"
                          b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
    "te_gzip_chunked": b"POST /echo HTTP/1.1\r\nHost: a\r\n"
                       b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "te_two_fields": b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "obs_fold": b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n  c\r\n\r\n",
    "obs_fold_tab": b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n",
    "bare_cr_in_value": b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n",
    "nul_in_value": b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n",
    "space_before_colon": b"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n",
    "space_before_colon_cl": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 3\r\n\r\nabc",
    "bad_char_in_name": b"GET / HTTP/1.1\r\nHost: a\r\nX@A: b\r\n\r\n",
    "ctl_in_name": b"GET / HTTP/1.1\r\nHost: a\r\nX\x01A: b\r\n\r\n",
    "empty_name": b"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n",
    "chunk_size_zz": chunked_post(b"/echo", b"zz\r\nabc\r\n0\r\n\r\n"),
    "chunk_size_minus1": chunked_post(b"/echo", b"-1\r\nabc\r\n0\r\n\r\n"),
    "chunk_size_0x": chunked_post(b"/echo", b"0x3\r\nabc\r\n0\r\n\r\n"),
    "chunk_size_17_digits": chunked_post(b"/echo", b"10000000000000000\r\nabc\r\n0\r\n\r\n"),
    "chunk_size_18_f": chunked_post(b"/echo", b"ffffffffffffffffff\r\nabc\r\n0\r\n\r\n"),
    "chunk_size_17_leading_zeros": chunked_post(b"/echo",
                                                b"00000000000000003\r\nabc\r\n0\r\n\r\n"),
    "chunk_size_2p63": chunked_post(b"/echo", b"8000000000000000\r\nabc\r\n0\r\n\r\n"),
    "chunk_data_no_crlf": chunked_post(b"/echo", b"3\r\nabcX\r\n0\r\n\r\n"),
    "target_space": b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
    "target_ctl": b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n",
    "target_del": b"GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n",
    "target_fragment": b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
    "target_not_origin": b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n",
    "no_host_11": b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n",
    "two_hosts": b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "two_hosts_same": b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
    "lowercase_method_version": b"GET / http/1.1\r\nHost: a\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(BAD_400))
def test_h1_reject_400_then_close(server, name):
    srv = server(BASE)
    r = assert_single_rejection(srv.port, BAD_400[name] + GET_SMUGGLED, 400)
    assert b"400 Bad Request" in r.body


@pytest.mark.parametrize("line", [b"GET / HTTP/1.2", b"GET / HTTP/2.0"])
def test_h1_reject_505_version(server, line):
    srv = server(BASE)
    r = assert_single_rejection(srv.port, line + b"\r\nHost: a\r\n\r\n" + GET_SMUGGLED, 505)
    assert b"505" in r.body


def test_h1_reject_smuggling_cl_te_second_request_not_served(server):
    """The classic CL.TE smuggle: whatever the framing, the second request never runs."""
    srv = server(BASE)
    data = (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nG" + GET_SMUGGLED)
    out = raw(srv.port, data, timeout=SOCK_TIMEOUT)
    assert statuses(out) == [400], out
    assert b"<TIMEOUT>" not in out and b"<RESET>" not in out


# ---- limits ----

def test_h1_limit_414_request_line(server):
    srv = server(LIMITS)
    req = b"GET /" + b"a" * 300 + b" HTTP/1.1\r\nHost: a\r\n\r\n"
    assert_single_rejection(srv.port, req + GET, 414)


def test_h1_limit_request_line_just_fits(server):
    srv = server(LIMITS)
    target = b"/" + b"a" * (256 - len(b"GET  HTTP/1.1") - 1)
    line = b"GET " + target + b" HTTP/1.1"
    assert len(line) == 256
    with Client(srv.port) as c:
        c.send(line + b"\r\nHost: a\r\n\r\n")
        r = c.response()
        assert r.status == 200 and r.body == HELLO


def test_h1_limit_414_without_end_of_line(server):
    """A request line over the limit is refused before its end arrives."""
    srv = server(LIMITS)
    with Client(srv.port) as c:
        c.send(b"GET /" + b"a" * 1000)
        r = c.response()
        assert r.status == 414
        assert r.get("Connection") == "close"
        c.expect_eof()


def test_h1_limit_431_header_bytes(server):
    srv = server(LIMITS)
    req = b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"b" * 1100 + b"\r\n\r\n"
    assert_single_rejection(srv.port, req + GET, 431)


def test_h1_limit_431_header_bytes_spread_over_fields(server):
    srv = server(LIMITS)
    hdrs = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 150) for i in range(8))
    req = b"GET / HTTP/1.1\r\nHost: a\r\n" + hdrs + b"\r\n"
    assert len(req) > 1024
    assert_single_rejection(srv.port, req + GET, 431)


def test_h1_limit_431_header_count(server):
    srv = server(LIMITS)
    hdrs = b"".join(b"X-%d: v\r\n" % i for i in range(11))
    req = b"GET / HTTP/1.1\r\nHost: a\r\n" + hdrs + b"\r\n"
    assert len(req) < 1024
    assert_single_rejection(srv.port, req + GET, 431)


def test_h1_limit_header_count_at_limit_ok(server):
    srv = server(LIMITS)
    hdrs = b"".join(b"X-%d: v\r\n" % i for i in range(9))  # + Host = 10
    with Client(srv.port) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n" + hdrs + b"\r\n")
        r = c.response()
        assert r.status == 200 and r.body == HELLO


@pytest.mark.parametrize("path", [b"/echo", b"/"])
def test_h1_limit_413_content_length(server, path):
    srv = server(LIMITS)
    req = (b"POST " + path + b" HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n"
           + b"x" * 5000)
    assert_single_rejection(srv.port, req + GET, 413)


def test_h1_limit_body_size_exact_ok(server):
    srv = server(LIMITS)
    body = os.urandom(4096)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 4096\r\n\r\n" + body)
        r = c.response()
        assert r.status == 200 and r.body == body


def test_h1_limit_413_chunked_grows_over(server):
    """Chunked body (no length up front) arriving in one piece and exceeding body-size."""
    srv = server(LIMITS)
    chunks = b"".join(b"3e8\r\n" + b"c" * 1000 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n"
    assert_single_rejection(srv.port, chunked_post(b"/echo", chunks) + GET, 413)


def test_h1_limit_chunked_over_streamed_closes(server):
    """Chunked body streamed to echo: echo may already have started its 200, so the server
    cannot turn it into a 413; it must then cut the response short (no last-chunk) and close.
    Either way nothing after it is served and the response is never a complete 200."""
    srv = server(LIMITS)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(6):
            try:
                c.send(b"3e8\r\n" + b"c" * 1000 + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.05)
        try:
            c.send(b"0\r\n\r\n" + GET)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status = c.head()
        if status[0] == 413:
            assert dict((k.lower(), v) for k, v in status[3])["connection"] == "close"
            return
        assert status[0] == 200, status
        # the chunked response must be truncated: read until EOF, no last-chunk
        rest = bytearray(c.buf)
        c.buf.clear()
        try:
            while True:
                b = c.s.recv(65536)
                if not b:
                    break
                rest += b
        except ConnectionResetError:
            pass
        assert b"\r\n0\r\n\r\n" not in rest, "an over-limit body was echoed completely"
        assert len(rest) <= 4096 + 200
        assert b"HTTP/1.1" not in rest


# ---- timeouts: outcome and log only, never timing ----

def read_to_eof(s, bound=8.0):
    s.settimeout(bound)
    out = bytearray()
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return bytes(out), "eof"
            out += b
    except socket.timeout:
        return bytes(out), "timeout"
    except ConnectionResetError:
        return bytes(out), "reset"


def test_h1_header_timeout_partial_head(server):
    srv = server(LIMITS)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n")
        out, how = read_to_eof(s)
        assert how in ("eof", "reset"), "connection with a partial head never closed"
        assert out == b"" or out.startswith(b"HTTP/1.1 408 "), out
    assert wait_log(srv, "header read timeout"), srv.log()


def test_h1_header_timeout_idle_new_connection(server):
    srv = server(LIMITS)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        out, how = read_to_eof(s)
        assert how in ("eof", "reset") and (out == b"" or out.startswith(b"HTTP/1.1 408 ")), out
    assert wait_log(srv, "header read timeout"), srv.log()


def test_h1_header_timeout_not_reset_by_trickle(server):
    """header-timeout bounds the whole head: trickling bytes does not keep it alive."""
    srv = server(LIMITS)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(b"GET / HTTP/1.1\r\n")
        closed = False
        for i in range(40):  # up to ~8 s of trickling, one byte each 200 ms
            try:
                s.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            s.settimeout(0.2)
            try:
                b = s.recv(65536)
                if b == b"" or b.startswith(b"HTTP/1.1 408"):
                    closed = True
                    break
                pytest.fail(f"unexpected response to a partial head: {b!r}")
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
                break
        assert closed, "a trickled head kept the connection open past header-timeout"
    assert wait_log(srv, "header read timeout"), srv.log()


def test_h1_body_timeout_partial_body(server):
    srv = server(LIMITS)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc")
        out, how = read_to_eof(s)
        assert how in ("eof", "reset"), "connection with a partial body never closed"
        # echo may have started streaming: at most the 3 bytes came back, never a full body
        if out:
            head, _, body = out.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 ")
            assert len(body) < 100
    assert wait_log(srv, "body read timeout"), srv.log()


def test_h1_body_timeout_partial_chunked_body(server):
    srv = server(LIMITS)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(chunked_post(b"/echo", b"5\r\nab"))
        out, how = read_to_eof(s)
        assert how in ("eof", "reset"), "connection with a partial chunked body never closed"
        assert b"\r\n0\r\n\r\n" not in out
    assert wait_log(srv, "body read timeout"), srv.log()


def test_h1_keepalive_timeout_after_response(server):
    srv = server(LIMITS)
    with Client(srv.port) as c:
        c.send(GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert r.get("Connection") is None
        out, how = read_to_eof(c.s)
        assert (out, how) == (b"", "eof")
    assert wait_log(srv, "keep-alive idle timeout"), srv.log()


def test_h1_keepalive_timeout_zero_closes_after_each(server):
    srv = server(config(**{"keepalive-timeout": "0s"}))
    with Client(srv.port) as c:
        c.send(GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        out, how = read_to_eof(c.s)
        assert how == "eof" and out == b""


# ---- keep-alive, pipelining, connection management ----

def test_h1_keepalive_two_requests(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        for _ in range(2):
            c.send(GET)
            r = c.response()
            assert r.status == 200 and r.body == HELLO
            assert r.get("Connection") is None
            assert r.version == "1.1"
        assert c.is_open()


def test_h1_pipelining_in_order_with_head(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
               b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n"
               b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nfirst"
               b"GET /other HTTP/1.1\r\nHost: a\r\n\r\n"
               b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nsecond")
        r1 = c.response()
        assert r1.status == 200 and r1.body == HELLO
        r2 = c.response("HEAD")
        assert r2.status == 200 and r2.get("Content-Length") == "6" and r2.body == b""
        r3 = c.response()
        assert r3.status == 200 and r3.body == b"first"
        r4 = c.response()
        assert r4.status == 200 and r4.body == HELLO
        # if HEAD had carried a body, the stream would now be misaligned
        r5 = c.response()
        assert r5.status == 200 and r5.body == b"second"
        assert c.is_open()


def test_h1_pipelining_many_byte_by_byte(server):
    """Pipelined requests fed one byte per send still parse the same."""
    srv = server(BASE)
    data = GET * 3
    with Client(srv.port) as c:
        c.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(data)):
            c.send(data[i:i + 1])
        for _ in range(3):
            r = c.response()
            assert r.status == 200 and r.body == HELLO


def test_h1_pipelining_many(server):
    srv = server(BASE)
    n = 50
    with Client(srv.port) as c:
        c.send(b"".join(b"GET /%d HTTP/1.1\r\nHost: a\r\n\r\n" % i for i in range(n)))
        for _ in range(n):
            r = c.response()
            assert r.status == 200 and r.body == HELLO


def test_h1_connection_close_honoured(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" + GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert r.get("Connection") == "close"
        c.expect_eof()


def test_h1_http10_closes_by_default(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"GET / HTTP/1.0\r\n\r\n" + b"GET / HTTP/1.0\r\n\r\n")
        r = c.response()
        assert r.status == 200 and r.body == HELLO
        assert r.get("Connection") == "close"
        assert r.version == "1.1"
        c.expect_eof()


def test_h1_http10_keepalive(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        for _ in range(2):
            c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            r = c.response()
            assert r.status == 200 and r.body == HELLO
            assert r.get("Connection").lower() == "keep-alive"
        assert c.is_open()


def test_h1_http10_echo_content_length(server):
    """An HTTP/1.0 request body is echoed with its length, never chunked."""
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"POST /echo HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc")
        r = c.response()
        assert r.status == 200 and r.body == b"abc"
        assert r.get("Transfer-Encoding") is None


def test_h1_date_and_server_headers(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(GET)
        r = c.response()
    assert r.get("Server") == "ferry"
    date = r.get("Date")
    assert date and DATE_RE.match(date), date
    when = email.utils.parsedate_to_datetime(date).timestamp()
    assert abs(when - time.time()) < 600  # same clock; not a timing assertion
    assert r.get("Content-Type") == "text/plain"


def test_h1_error_responses_have_date_and_server(server):
    srv = server(BASE)
    r = assert_single_rejection(srv.port, b"GET / HTTP/1.1\r\n\r\n", 400)
    assert DATE_RE.match(r.get("Date") or ""), r
    assert r.get("Content-Type").startswith("text/html")


def test_h1_unknown_path_404_keeps_connection(server):
    srv = server("""\
listeners:
  - address: 127.0.0.1:{port}
routes:
  - match:
      path: /only
    respond:
      body: "x"
""")
    with Client(srv.port) as c:
        c.send(GET + b"GET /only HTTP/1.1\r\nHost: a\r\n\r\n")
        r = c.response()
        assert r.status == 404
        r = c.response()
        assert r.status == 200 and r.body == b"x"


def test_h1_leading_empty_lines_tolerated(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"\r\n\r\n" + GET)
        r = c.response()
        assert r.status == 200 and r.body == HELLO


def test_h1_options_star(server):
    srv = server(BASE)
    with Client(srv.port) as c:
        c.send(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n" + GET)
        r = c.response()
        assert r.status == 204 and r.body == b""
        assert r.get("Content-Length") is None
        assert "GET" in r.get("Allow")
        r = c.response()
        assert r.status == 200 and r.body == HELLO
