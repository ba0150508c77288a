"""W3C Trace Context through the proxy (`tracing:`, policy/trace.c) and the access log's trace
id and configurable fields (ops/access_log.c, `log.access-fields`).

A small Python origin records the head of every request it gets; clients are raw HTTP/1.1
and curl over h2c (prior knowledge)."""
import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import FERRY, free_port, http_request, wait_for

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


class Origin:
    """HTTP/1.1 origin on loopback: answers 200 "ok" and keeps each request's headers."""

    def __init__(self):
        seen = self.seen = []
        lock = self.lock = threading.Lock()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                with lock:
                    seen.append([(k.lower(), v) for k, v in self.headers.items()])
                self.send_response(200)
                self.send_header("Content-Length", "3")
                self.end_headers()
                self.wfile.write(b"ok\n")

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def last(self, name):
        with self.lock:
            vals = [v for k, v in self.seen[-1] if k == name]
        return vals

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


def conf(origin, tracing="tracing: {{enabled: true}}\n", log="log: {{access: {tmp}/access.log, "
         "access-format: json}}\n"):
    return f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2c]
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin.port}]
routes:
  - match: {{{{path: /static}}}}
    respond: {{{{status: 200, body: "s\\n"}}}}
  - proxy: {{{{upstream: o}}}}
{tracing}{log}"""


def get(srv, client, headers=()):
    """One GET /p through `client` (h1: raw, h2: curl --http2-prior-knowledge) with `headers`
    (a list of (name, value), repeats allowed); returns the status."""
    if client == "h1":
        raw = "".join(f"{k}: {v}\r\n" for k, v in headers)
        import socket
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(f"GET /p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{raw}\r\n".encode())
        data = b""
        for _ in range(1000):
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        return int(data.split(b" ", 2)[1])
    args = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
            "--http2-prior-knowledge"]
    for k, v in headers:
        args += ["-H", f"{k}: {v}"]
    r = subprocess.run(args + [f"http://127.0.0.1:{srv.port}/p"], capture_output=True, timeout=20)
    return int(r.stdout)


def log_lines(srv):
    srv.stop()
    return [json.loads(l) for l in (srv.tmp / "access.log").read_text().splitlines()]


@pytest.mark.parametrize("client", ["h1", "h2"])
def test_tracing_keeps_the_trace_id_with_a_new_parent_id(server, origin, client):
    srv = server(conf(origin))
    assert get(srv, client, [("traceparent", TP), ("tracestate", "rojo=00f067aa0ba902b7"),
                             ("tracestate", "congo=t61rcWkgMzE")]) == 200
    tp = origin.last("traceparent")
    assert len(tp) == 1, origin.seen[-1]
    m = TP_RE.match(tp[0])
    assert m, tp
    assert m.group(1) == "4bf92f3577b34da6a3ce929d0e0e4736"  # the same trace
    assert m.group(2) != "00f067aa0ba902b7" and m.group(2) != "0" * 16  # ferry is the parent
    assert m.group(3) == "01"  # the sampled flag as received
    assert origin.last("tracestate") == ["rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"]
    recs = log_lines(srv)
    assert [r["trace_id"] for r in recs] == ["4bf92f3577b34da6a3ce929d0e0e4736"]


@pytest.mark.parametrize("client", ["h1", "h2"])
def test_tracing_generates_a_trace_when_absent(server, origin, client):
    srv = server(conf(origin))
    ids = []
    for _ in range(2):
        assert get(srv, client) == 200
        tp = origin.last("traceparent")
        assert len(tp) == 1 and TP_RE.match(tp[0]), origin.seen[-1]
        m = TP_RE.match(tp[0])
        assert m.group(1) != "0" * 32 and m.group(3) == "00"  # not sampled by default
        ids.append(m.group(1))
        assert origin.last("tracestate") == []
    assert ids[0] != ids[1]
    recs = log_lines(srv)
    assert sorted(r["trace_id"] for r in recs) == sorted(ids)  # the log names the same traces


@pytest.mark.parametrize("bad", [
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # uppercase
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # 00 with more
    "garbage",
    "twice",  # two valid fields: invalid together
])
def test_tracing_replaces_a_malformed_traceparent(server, origin, bad):
    srv = server(conf(origin))
    hs = [("traceparent", TP), ("traceparent", TP)] if bad == "twice" else [("traceparent", bad)]
    assert get(srv, "h1", hs + [("tracestate", "rojo=1")]) == 200
    tp = origin.last("traceparent")
    assert len(tp) == 1, origin.seen[-1]
    m = TP_RE.match(tp[0])
    assert m and m.group(1) != "4bf92f3577b34da6a3ce929d0e0e4736", tp
    assert origin.last("tracestate") == []  # it belonged to the broken trace


def test_tracing_generate_off_removes_a_malformed_one_and_adds_none(server, origin):
    srv = server(conf(origin, tracing="tracing: {{enabled: true, generate: false}}\n"))
    assert get(srv, "h1", [("traceparent", "garbage")]) == 200
    assert origin.last("traceparent") == []
    assert get(srv, "h1") == 200
    assert origin.last("traceparent") == []
    assert get(srv, "h1", [("traceparent", TP)]) == 200
    assert origin.last("traceparent")[0][:36] == TP[:36]
    recs = log_lines(srv)
    assert ["trace_id" in r for r in recs] == [False, False, True]


def test_tracing_off_by_default_passes_fields_untouched(server, origin):
    srv = server(conf(origin, tracing=""))
    assert get(srv, "h1", [("traceparent", "garbage"), ("tracestate", "a=1")]) == 200
    assert origin.last("traceparent") == ["garbage"]
    assert origin.last("tracestate") == ["a=1"]
    assert get(srv, "h1") == 200
    assert origin.last("traceparent") == []
    recs = log_lines(srv)
    assert not any("trace_id" in r for r in recs)
    # the json line is what it was before tracing existed
    assert list(recs[0]) == ["time", "remote", "method", "target", "host", "proto", "status",
                             "bytes", "duration_ms", "referer", "user_agent"]


def test_tracing_tracestate_max(server, origin):
    srv = server(conf(origin, tracing="tracing: {{enabled: true, tracestate-max: 10}}\n"))
    assert get(srv, "h1", [("traceparent", TP), ("tracestate", "a=1,bb=22,ccc=333")]) == 200
    assert origin.last("tracestate") == ["a=1,bb=22"]


def test_access_log_fields_json_in_the_order_listed(server, origin):
    srv = server(conf(origin, log="log: {{access: {tmp}/access.log, access-format: json, "
                                  "access-fields: [trace_id, status, method, request_bytes, "
                                  "error]}}\n"))
    assert get(srv, "h1", [("traceparent", TP)]) == 200
    recs = log_lines(srv)
    assert len(recs) == 1
    assert list(recs[0].items()) == [("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
                                     ("status", 200), ("method", "GET"), ("request_bytes", 0),
                                     ("error", None)]


def test_access_log_combined_with_appended_fields(server, origin):
    srv = server(conf(origin, log="log: {{access: {tmp}/access.log, access-format: combined, "
                                  "access-fields: [trace_id, duration_ms]}}\n"))
    assert get(srv, "h1", [("traceparent", TP), ("User-Agent", "t/1")]) == 200
    srv.stop()
    lines = (srv.tmp / "access.log").read_text().splitlines()
    assert len(lines) == 1
    assert re.match(r'^127\.0\.0\.1 - - \[[^]]+\] "GET /p HTTP/1\.1" 200 3 "-" "t/1" '
                    r'"4bf92f3577b34da6a3ce929d0e0e4736" \d+$', lines[0]), lines


def test_access_log_trace_id_on_a_route_without_a_proxy(server, origin):
    srv = server(conf(origin))
    assert http_request(srv.port, "/static", headers={"traceparent": TP})[0] == 200
    assert http_request(srv.port, "/static")[0] == 200
    recs = log_lines(srv)
    assert recs[0]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert re.fullmatch(r"[0-9a-f]{32}", recs[1]["trace_id"]) and recs[1]["trace_id"] != \
        recs[0]["trace_id"]


def test_access_log_written_while_running(server, origin):
    """The per-worker buffer goes out at least every second: the line is in the file while
    the server still runs (no stop, no full buffer)."""
    srv = server(conf(origin))
    assert http_request(srv.port, "/static")[0] == 200
    path = srv.tmp / "access.log"
    wait_for(lambda: path.exists() and path.read_text().endswith("\n"), 10,
             "the access line to be written", srv.proc)
    assert srv.proc.poll() is None
    rec = json.loads(path.read_text().splitlines()[0])
    assert rec["target"] == "/static" and rec["status"] == 200


@pytest.mark.parametrize("bad,msg", [
    ("access-fields: [time, nope]", 'access-fields: unknown field "nope"'),
    ("access-fields: [time, time]", 'access-fields: field "time" listed twice'),
])
def test_access_fields_config_errors(tmp_path, bad, msg):
    cfg = tmp_path / "f.yaml"
    cfg.write_text(f"listeners: [{{address: 127.0.0.1:{free_port()}}}]\n"
                   "routes: [{echo: {}}]\n"
                   f"log:\n  {bad}\n")
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 1
    assert re.search(r"f\.yaml:4:\d+: log\." + re.escape(msg), p.stderr), p.stderr


def test_tracing_config_errors(tmp_path):
    cfg = tmp_path / "f.yaml"
    cfg.write_text(f"listeners: [{{address: 127.0.0.1:{free_port()}}}]\n"
                   "routes: [{echo: {}}]\n"
                   "tracing:\n  enabled: maybe\n  tracestate-max: 1m\n")
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 1
    assert re.search(r"f\.yaml:4:\d+: tracing\.enabled: ", p.stderr), p.stderr
    assert re.search(r"f\.yaml:5:\d+: tracing\.tracestate-max: ", p.stderr), p.stderr


def test_access_log_long_fields_are_whole_and_escaped(server, origin):
    """A long User-Agent (8000 bytes, with a quote, a backslash and a tab) is written whole and
    escaped: the line's room is computed from what it escapes, not guessed."""
    srv = server(conf(origin))
    ua = 'a"\\' + "x" * 7990 + "\tz"
    assert http_request(srv.port, "/static", headers={"User-Agent": ua})[0] == 200
    recs = log_lines(srv)
    assert len(recs) == 1 and recs[0]["user_agent"] == ua


def raw_get(srv, head):
    """GET /p over HTTP/1.1 with the raw field lines `head`; returns the status."""
    import socket
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"GET /p HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
    data = b""
    for _ in range(1000):
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return int(data.split(b" ", 2)[1])


def test_tracing_connection_list_applies_before_and_after_it(server, origin):
    """The proxy drops the fields a Connection header names wherever they stand (before it too)
    and forwards the filter's traceparent unless the client's Connection names it."""
    srv = server(conf(origin))
    assert raw_get(srv, "X-Secret: 1\r\nX-Normal: kept\r\nConnection: close, X-Secret\r\n"
                   "X-Late: 2\r\n") == 200
    h = dict(origin.seen[-1])
    assert "x-secret" not in h and h["x-normal"] == "kept" and h["x-late"] == "2", h
    assert len(origin.last("traceparent")) == 1 and TP_RE.match(origin.last("traceparent")[0])
    # traceparent named hop-by-hop by the client: not forwarded, though the filter made one
    assert raw_get(srv, "Connection: close, traceparent\r\nX-Normal: kept\r\n") == 200
    assert origin.last("traceparent") == [] and origin.last("x-normal") == ["kept"]
