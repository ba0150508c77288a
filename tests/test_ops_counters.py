"""Per-worker counters (src/core/counters.c) and the metrics observer (src/ops/http_metrics.c),
end to end: a known mix of requests over h1, h2c, h1+TLS, h2+TLS and h3 (2xx, 4xx, 5xx, a
413 limit rejection, a proxied request), then `ferry run` with FERRY_DUMP_COUNTERS=FILE writes
the summed snapshot at stop and the test asserts exact counts. Two workers, so the sums cross
workers."""
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import http_request, raw

GTLS = shutil.which("gtlsclient")


class Origin(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"from origin\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


CONFIG = """
workers: 2
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    name: main
    protocols: [h1, h2c]
  - address: 127.0.0.1:{port2}
    name: tls
    protocols: [h1, h2, h3]
    tls: self-signed
upstreams:
  - name: up
    servers: ["http://127.0.0.1:ORIGIN"]
routes:
  - match: {{path: /fixed}}
    respond: {{status: 201, body: "fixed\\n"}}
  - match: {{path: /boom}}
    respond: {{status: 503, body: "down\\n"}}
  - match: {{path: /proxy/}}
    proxy: {{upstream: up}}
  - static: {{root: {docroot}}}
limits:
  body-size: 100
log:
  level: info
"""


def parse(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z0-9_]+)\{(.*)\} (-?[0-9.]+)$", line)
        assert m, f"bad dump line: {line!r}"
        out[(m.group(1), m.group(2))] = float(m.group(3)) if "." in m.group(3) else int(m.group(3))
    return out


def curl(*args):
    p = subprocess.run(["curl", "-sS", "-k", "--max-time", "10", "-o", "/dev/null", "-w",
                        "%{http_code} %{http_version}", *args], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (Debian ngtcp2-client) missing")
def test_ops_counters_exact_mix(server, tmp_path, monkeypatch):
    origin = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    dump = tmp_path / "counters.txt"
    monkeypatch.setenv("FERRY_DUMP_COUNTERS", str(dump))
    try:
        srv = server(CONFIG.replace("ORIGIN", str(origin.server_address[1])), start=False)
        srv.start(udp_ports=())
        p1, p2 = srv.ports[0], srv.ports[1]
        # h1 on the plain listener
        for _ in range(3):
            assert http_request(p1, "/fixed")[0] == 201
        for _ in range(2):
            assert http_request(p1, "/missing")[0] == 404
        assert http_request(p1, "/boom")[0] == 503
        st, _, body = http_request(p1, "/proxy/x")
        assert (st, body) == (200, b"from origin\n")
        # a body over limits.body-size: 413 before any route is chosen
        r = raw(p1, b"POST /fixed HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        assert r.startswith(b"HTTP/1.1 413"), r[:200]
        # h2c with prior knowledge, twice (two connections)
        for _ in range(2):
            assert curl("--http2-prior-knowledge", f"http://127.0.0.1:{p1}/fixed") == "201 2"
        # TLS: one h1, one h2
        assert curl("--http1.1", f"https://127.0.0.1:{p2}/fixed") == "201 1.1"
        assert curl("--http2", f"https://127.0.0.1:{p2}/fixed") == "201 2"
        # h3
        dl = tmp_path / "dl"
        dl.mkdir()
        p = subprocess.run([GTLS, "--exit-on-all-streams-close", f"--download={dl}",
                            "--no-quic-dump", "--no-http-dump", "--timeout=20s", "127.0.0.1",
                            str(p2), f"https://127.0.0.1:{p2}/fixed"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert p.returncode == 0, p.stdout[-2000:]
        assert (dl / "fixed").read_text() == "fixed\n"
        assert srv.stop() == 0
    finally:
        origin.shutdown()
    c = parse(dump.read_text())

    def resp(listener, route, code, proto):
        return c[("ferry_http_responses_total",
                  f'listener="{listener}",route="{route}",code="{code}",proto="{proto}"')]

    assert resp("main", 0, "2xx", "h1") == 3
    assert resp("main", 3, "4xx", "h1") == 2
    assert resp("main", 1, "5xx", "h1") == 1
    assert resp("main", 2, "2xx", "h1") == 1
    assert resp("main", "-", "4xx", "h1") == 1  # the 413
    assert resp("main", 0, "2xx", "h2") == 2
    assert resp("tls", 0, "2xx", "h1") == 1
    assert resp("tls", 0, "2xx", "h2") == 1
    assert resp("tls", 0, "2xx", "h3") == 1
    total = sum(v for (n, _), v in c.items() if n == "ferry_http_responses_total")
    assert total == 13
    assert c[("ferry_limit_rejections_total", 'limit="body-size"')] == 1
    assert c[("ferry_limit_rejections_total", 'limit="header-bytes"')] == 0
    # latency histograms per route: one observation per response
    assert c[("ferry_http_duration_seconds_count", 'route="0"')] == 8
    assert c[("ferry_http_ttfb_seconds_count", 'route="0"')] == 8
    assert c[("ferry_http_duration_seconds_bucket", 'route="0",le="+Inf"')] == 8
    assert c[("ferry_http_duration_seconds_count", 'route="2"')] == 1
    # bytes: "fixed\n" is 6 bytes; h2c twice
    assert c[("ferry_http_response_bytes_total", 'listener="main",route="0",proto="h2"')] == 12
    assert c[("ferry_http_response_bytes_total", 'listener="tls",route="0",proto="h3"')] == 6
    assert c[("ferry_http_response_bytes_total", 'listener="main",route="2",proto="h1"')] == 12
    assert c[("ferry_http_request_bytes_total", 'listener="main",route="0",proto="h1"')] == 0
    # connections: h2c 2 + TLS h2 1; h3 1; none left open; two full TLS handshakes (h3 is
    # QUIC's own TLS)
    assert c[("ferry_connections_total", 'proto="h2"')] == 3
    assert c[("ferry_connections_total", 'proto="h3"')] == 1
    for proto in ("h1", "h2", "h3"):
        assert c[("ferry_connections_active", f'proto="{proto}"')] == 0
        assert c[("ferry_streams_active", f'proto="{proto}"')] == 0
    assert c[("ferry_tls_handshakes_total", 'result="full"')] == 2
    assert c[("ferry_tls_handshakes_total", 'result="failed"')] == 0


def test_ops_counters_upstream_retry_and_ejection(server, tmp_path, monkeypatch):
    """One refusing server and one live one, max-fails 1, one worker: the first request that
    picks the refusing server is retried on the other and ejects it; nothing else retries."""
    import socket
    origin = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    dump = tmp_path / "counters.txt"
    monkeypatch.setenv("FERRY_DUMP_COUNTERS", str(dump))
    try:
        srv = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: up
    servers: ["http://127.0.0.1:{dead}", "http://127.0.0.1:{origin.server_address[1]}"]
    max-fails: 1
    fail-timeout: 60s
routes:
  - proxy: {{{{upstream: up}}}}
""")
        for i in range(4):
            assert http_request(srv.port, f"/r{i}")[0] == 200
        assert srv.stop() == 0
    finally:
        origin.shutdown()
    c = parse(dump.read_text())
    assert c[("ferry_upstream_retries_total", "")] == 1
    assert c[("ferry_upstream_ejections_total", "")] == 1
    assert c[("ferry_http_responses_total",
              'listener="127.0.0.1:%d",route="0",code="2xx",proto="h1"' % srv.port)] == 4
