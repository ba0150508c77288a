"""RFC 9113 §8 request checks (malformed requests, §8.1.1, §8.2, §8.3): each bad header
block or body is answered as before Ferry took these checks over from nghttp2 1.52 (nghttp2's
HTTP messaging is off, h2_server_check.c does them): a stream error RST_STREAM
PROTOCOL_ERROR (also for a regular field with a bad name or value: Debian's nghttp2 1.52
is strict there), or Ferry's own 400. Each case is sent as the first request of a connection and again
after a good response on another connection, and the connection must go on serving.
"""
import struct

import pytest

from test_h2_errors import (DATA, F_END_HEADERS, F_END_STREAM, HEADERS, PROTOCOL_ERROR,
                            RST_STREAM, GOAWAY, Conn, frame)

SMALL = b"small file\n"
CONFIG = """\
listeners:
  - address: 127.0.0.1:{port}
  - address: 127.0.0.1:{port2}
    tls: self-signed
routes:
  - match:
      path: /echo
    echo: {{}}
  - match:
      path: /
    static:
      root: "{docroot}"
data-dir: "{data}"
log:
  level: info
"""


def base(path="/small.txt", method="GET", scheme="http", authority="127.0.0.1"):
    return [(":method", method), (":scheme", scheme), (":authority", authority), (":path", path)]


G = base()
P = base("/echo", "POST")
RST, OK, S400 = "rst", "ok", "400"

# name: (header fields, DATA frames [(payload, end_stream)] or None for END_STREAM on HEADERS,
#        trailers or None, expected)
CASES = {
    # pseudo-header fields (§8.3)
    "pseudo_after_regular": ([G[0], G[1], ("x-a", "1"), G[2], G[3]], None, None, RST),
    "unknown_pseudo": (G + [(":bogus", "1")], None, None, RST),
    "duplicate_method": (G + [(":method", "GET")], None, None, RST),
    "duplicate_scheme": (G + [(":scheme", "http")], None, None, RST),
    "duplicate_path": (G + [(":path", "/small.txt")], None, None, RST),
    "duplicate_authority": (G + [(":authority", "127.0.0.1")], None, None, RST),
    "missing_method": (G[1:], None, None, RST),
    "missing_scheme": ([G[0], G[2], G[3]], None, None, RST),
    "missing_path": (G[:3], None, None, RST),
    "missing_authority_and_host": ([G[0], G[1], G[3]], None, None, RST),
    "host_instead_of_authority": ([G[0], G[1], G[3], ("host", "127.0.0.1")], None, None, OK),
    "duplicate_host": (G + [("host", "a"), ("host", "a")], None, None, RST),
    "empty_host": ([G[0], G[1], G[3], ("host", "")], None, None, RST),
    "empty_path": (base(path=""), None, None, RST),
    "empty_method": (base(method=""), None, None, RST),
    "empty_authority": (base(authority=""), None, None, RST),
    "path_without_slash": (base(path="small.txt"), None, None, RST),
    "path_asterisk_get": (base(path="*"), None, None, RST),
    "path_other_scheme": (base(path="small.txt", scheme="foo"), None, None, S400),
    "path_with_space": (base(path="/a b"), None, None, RST),
    "path_with_ctl": (base(path="/a\x01b"), None, None, RST),
    "bad_scheme": (base(scheme="ht tp"), None, None, RST),
    "scheme_digit_first": (base(scheme="1http"), None, None, RST),
    "bad_method": (base(method="GE T"), None, None, RST),
    "bad_authority_space": (base(authority="a b"), None, None, RST),
    "bad_authority_slash": (base(authority="a/b"), None, None, RST),
    "bad_host_value": ([G[0], G[1], G[3], ("host", "a b")], None, None, RST),
    "protocol_without_connect": (G + [(":protocol", "websocket")], None, None, RST),
    "protocol_connect_no_authority": ([(":method", "CONNECT"), (":protocol", "websocket"),
                                       (":scheme", "http"), (":path", "/echo")], [], None, RST),
    "protocol_connect_no_path": ([(":method", "CONNECT"), (":protocol", "websocket"),
                                  (":scheme", "http"), (":authority", "a")], [], None, RST),
    "connect_with_path": ([(":method", "CONNECT"), (":authority", "a:443"), (":path", "/")],
                          [], None, RST),
    "connect_with_scheme": ([(":method", "CONNECT"), (":authority", "a:443"),
                             (":scheme", "http")], [], None, RST),
    "connect_without_authority": ([(":method", "CONNECT")], [], None, RST),
    # regular fields (§8.2)
    "uppercase_name": (G + [("X-Upper", "1")], None, None, RST),
    "connection": (G + [("connection", "close")], None, None, RST),
    "keep_alive": (G + [("keep-alive", "1")], None, None, RST),
    "proxy_connection": (G + [("proxy-connection", "x")], None, None, RST),
    "transfer_encoding": (G + [("transfer-encoding", "chunked")], None, None, RST),
    "upgrade": (G + [("upgrade", "websocket")], None, None, RST),
    "te_gzip": (G + [("te", "gzip")], None, None, RST),
    "te_trailers_gzip": (G + [("te", "trailers, gzip")], None, None, RST),
    "te_trailers": (G + [("te", "trailers")], None, None, OK),
    "te_trailers_case": (G + [("te", "Trailers")], None, None, OK),
    "value_nul": (P + [("content-type", "text/a\x00b")], [(b"x", True)], None, RST),
    "value_cr": (P + [("content-type", "text/a\rb")], [(b"x", True)], None, RST),
    "value_lf": (P + [("content-type", "text/a\nb")], [(b"x", True)], None, RST),
    "value_leading_space": (P + [("content-type", " text/a")], [(b"x", True)], None, RST),
    "value_trailing_tab": (P + [("content-type", "text/a\t")], [(b"x", True)], None, RST),
    "value_ctl": (P + [("content-type", "text/a\x01b")], [(b"x", True)], None, RST),
    "value_inner_space_ok": (P + [("content-type", "text/a; b=c")], [(b"x", True)], None,
                             "text/a; b=c"),
    "value_high_bytes_ok": (P + [("content-type", "text/\xe9")], [(b"x", True)], None,
                            "text/\xe9"),
    "name_with_space": (P + [("x y", "1")], [(b"x", True)], None, RST),
    "name_empty": (P + [("", "1")], [(b"x", True)], None, RST),
    "name_colon_inside": (P + [("x:y", "1")], [(b"x", True)], None, RST),
    "value_del": (P + [("x-a", "a\x7fb")], [(b"x", True)], None, RST),
    # bad name then a pseudo-header: still a pseudo-header after a regular field
    "bad_name_then_pseudo": ([G[0], G[1], ("x y", "1"), G[2], G[3]], None, None, RST),
    # content-length (§8.1.1)
    "cl_not_number": (P + [("content-length", "abc")], [(b"x", True)], None, RST),
    "cl_negative": (P + [("content-length", "-1")], [(b"x", True)], None, RST),
    "cl_empty": (P + [("content-length", "")], [(b"x", True)], None, RST),
    "cl_overflow": (P + [("content-length", "99999999999999999999")], [(b"x", True)], None,
                    RST),
    "cl_duplicate": (P + [("content-length", "1"), ("content-length", "1")], [(b"x", True)],
                     None, RST),
    "cl_more_data": (P + [("content-length", "3")], [(b"abcde", True)], None, RST),
    "cl_more_data_split": (P + [("content-length", "3")], [(b"ab", False), (b"cd", True)],
                           None, RST),
    "cl_less_data": (P + [("content-length", "10")], [(b"abc", True)], None, RST),
    "cl_end_stream_on_headers": (G + [("content-length", "5")], None, None, RST),
    "cl_less_then_trailers": (P + [("content-length", "10")], [(b"abc", False)],
                              [("x-t", "1")], RST),
    "cl_match": (P + [("content-length", "3")], [(b"abc", True)], None, "application/octet-stream"),
    "cl_zero_empty_data": (P + [("content-length", "0")], [(b"", True)], None,
                           "application/octet-stream"),
    # trailers (§8.1)
    "trailer_pseudo": (P, [(b"abc", False)], [(":path", "/x")], RST),
    "trailer_uppercase": (P, [(b"abc", False)], [("X-T", "1")], RST),
    "trailer_connection": (P, [(b"abc", False)], [("connection", "close")], RST),
    "trailer_ok": (P, [(b"abc", False)], [("x-t", "1")], "application/octet-stream"),
}


def good(c, sid):
    c.send(c.request(sid, "GET"))
    i = c.wait(lambda f: f[2] == sid and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY)
    assert i is not None and c.frames[i][0] == HEADERS, c.summary()
    assert c.heads[i][b":status"] == b"200", c.summary()
    j = c.wait(lambda f: f[2] == sid and f[0] == DATA and f[1] & F_END_STREAM, i)
    assert j is not None, c.summary()
    assert b"".join(f[3] for f in c.frames if f[0] == DATA and f[2] == sid) == SMALL


def send_case(c, sid, name):
    fields, body, trailers, _ = CASES[name]
    fields = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in fields]
    end = body is None and trailers is None
    out = frame(HEADERS, F_END_HEADERS | (F_END_STREAM if end else 0), sid,
                c.enc.encode(fields))
    for payload, fin in body or []:
        out += frame(DATA, F_END_STREAM if fin and not trailers else 0, sid, payload)
    if trailers:
        out += frame(HEADERS, F_END_HEADERS | F_END_STREAM, sid,
                     c.enc.encode([(n.encode(), v.encode()) for n, v in trailers]))
    c.send(out)


def check_case(c, sid, name, start):
    expected = CASES[name][3]
    i = c.wait(lambda f: f[2] == sid and f[0] in (HEADERS, RST_STREAM) or f[0] == GOAWAY, start)
    assert i is not None, f"closed: {c.summary()}"
    t, _, _, p = c.frames[i]
    if expected == RST:
        assert t == RST_STREAM, f"{name}: expected RST_STREAM, got {c.summary()}"
        assert int.from_bytes(p[:4], "big") == PROTOCOL_ERROR, c.summary()
        return
    assert t == HEADERS, f"{name}: expected a response, got {c.summary()}"
    status = c.heads[i][b":status"]
    if expected == S400:
        assert status == b"400", c.summary()
        return
    assert status == b"200", (name, status, c.summary())
    j = c.wait(lambda f: f[2] == sid and f[0] in (DATA, HEADERS, RST_STREAM) and
               (f[1] & F_END_STREAM or f[0] == RST_STREAM), i)
    assert j is not None and c.frames[j][0] != RST_STREAM, c.summary()
    if expected == OK:
        return
    ct = c.heads[i].get(b"content-type")  # echo's: the request's, or its default
    assert ct == expected.encode("latin-1"), (name, ct)


@pytest.fixture
def ferry(server):
    srv = server(CONFIG, start=False)
    (srv.docroot / "small.txt").write_bytes(SMALL)
    srv.start()
    return srv


@pytest.mark.parametrize("proto", ["h2c", "h2"])
@pytest.mark.parametrize("name", list(CASES))
def test_h2_request_check(ferry, proto, name):
    tls = proto == "h2"
    port = ferry.ports[1] if tls else ferry.ports[0]
    # first on the connection, then a good request on it
    c = Conn(port, tls)
    try:
        send_case(c, 1, name)
        check_case(c, 1, name, 0)
        good(c, 3)
    finally:
        c.close()
    # after a good response on the same connection, then another good one
    c = Conn(port, tls)
    try:
        good(c, 1)
        start = len(c.frames)
        send_case(c, 3, name)
        check_case(c, 3, name, start)
        good(c, 5)
    finally:
        c.close()
