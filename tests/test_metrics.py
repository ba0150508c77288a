"""GET /metrics on the admin listener (issue 14): a real Prometheus scrapes it and a PromQL
query returns the exact number of requests sent; `promtool check metrics` passes; after a
mixed run (h1, h2c, h2, h3, reverse proxy, L4, interception) every exported family is there
with the right values where they are exact.

Prometheus runs from /usr/bin/prometheus with a temporary config (1 s scrape interval) and
TSDB directory on a free loopback port; every wait is bounded.
"""
import json
import re
import socket
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import FERRY, free_port, http_request, wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
H3GET = str(Path(FERRY).parent / "h3get")


def metrics(port):
    st, h, body = http_request(port, "/metrics")
    assert st == 200, st
    assert h["content-type"].startswith("text/plain; version=0.0.4"), h
    return body.decode()


def samples(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
        assert m, line
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def promtool(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    return p.returncode, p.stdout + p.stderr


def test_metrics_prometheus_scrape_exact_count(server, tmp_path):
    """37 requests over h1 on listener `web`: once Prometheus has scraped after them,
    sum(ferry_http_responses_total{listener="web"}) is exactly 37 through its HTTP API."""
    srv = server("""
workers: 2
listeners:
  - address: 127.0.0.1:{port}
    name: web
routes:
  - respond: {{status: 200, body: "hi\\n"}}
admin:
  address: 127.0.0.1:{port2}
""")
    p, a = srv.ports[0], srv.ports[1]
    n = 37
    for _ in range(n):
        assert http_request(p, "/")[0] == 200
    pport = free_port()
    (tmp_path / "prom.yml").write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ferry
    static_configs:
      - targets: ["127.0.0.1:{a}"]
""")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prom.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prom.log", "w"))
    try:
        def query():
            q = urllib.parse.quote('sum(ferry_http_responses_total{listener="web"})')
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/query?query={q}",
                                            timeout=5) as r:
                    res = json.load(r)["data"]["result"]
            except OSError:
                return None
            return res[0]["value"][1] if res else None

        v = wait_for(query, 60, "Prometheus to scrape ferry", prom)
        assert v == str(n), v
        # and it saw the target healthy
        with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/targets", timeout=5) as r:
            t = json.load(r)["data"]["activeTargets"]
        assert t[0]["health"] == "up", t
    finally:
        prom.terminate()
        prom.wait(timeout=30)


FAMILIES = [
    "ferry_connections_active", "ferry_connections_total", "ferry_streams_active",
    "ferry_tls_handshakes_total", "ferry_quic_handshakes_total", "ferry_upstream_retries_total",
    "ferry_upstream_ejections_total", "ferry_limit_rejections_total",
    "ferry_http_responses_total", "ferry_http_request_bytes_total",
    "ferry_http_response_bytes_total", "ferry_http_ttfb_seconds", "ferry_http_duration_seconds",
    "ferry_upstream_responses_total", "ferry_upstream_ttfb_seconds",
    "ferry_upstream_duration_seconds", "ferry_l4_sessions_total", "ferry_l4_sessions_active",
    "ferry_intercept_flows_total", "ferry_intercept_certs_forged_total",
    "ferry_process_resident_memory_bytes", "ferry_config_generation",
    "ferry_upstream_server_up", "ferry_upstream_server_ejected", "ferry_upstream_server_drained",
    "ferry_upstream_pool_idle", "ferry_upstream_pool_connections", "ferry_upstream_pool_waiters",
    "ferry_quic_connections_active", "ferry_quic_connections_total",
    "ferry_quic_datagrams_dropped_total",
    "ferry_l4_session_memory_bytes", "ferry_l4_session_memory_max_bytes",
]


def curl(*args):
    p = subprocess.run(["curl", "-sS", "-k", "--max-time", "10", "-o", "/dev/null", "-w",
                        "%{http_code}", *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_metrics_mixed_run_families_and_promtool(server):
    """h1, h2c, h2 (TLS), h3, a reverse proxy, an L4 relay and an intercepted CONNECT: every
    family is exported with HELP and TYPE, promtool passes, and the exact counts add up."""
    srv = server("""
workers: 1
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    name: plain
    protocols: [h1, h2c]
  - address: 127.0.0.1:{port3}
    name: tls
    protocols: [h1, h2, h3]
    tls: self-signed
  - address: 127.0.0.1:{port4}
    kind: intercept
intercept:
  insecure: [127.0.0.1]
upstreams:
  - name: self
    servers: [http://127.0.0.1:{port}]
routes:
  - match: {{path: /proxy/}}
    proxy: {{upstream: self, strip-prefix: /proxy}}
  - respond: {{status: 200, body: "hi\\n"}}
admin:
  address: 127.0.0.1:{port2}
""")
    p, a, t, i = srv.ports
    assert curl("--http1.1", f"http://127.0.0.1:{p}/x") == "200"
    assert curl("--http2-prior-knowledge", f"http://127.0.0.1:{p}/x") == "200"
    assert curl("--http2", f"https://127.0.0.1:{t}/x") == "200"
    q = subprocess.run([H3GET, "--insecure", "127.0.0.1", str(t), "/x"], capture_output=True,
                       text=True, timeout=60)
    assert q.returncode == 0, q.stdout + q.stderr
    assert curl("--http1.1", f"http://127.0.0.1:{p}/proxy/y") == "200"
    assert curl("-x", f"http://127.0.0.1:{i}", f"https://127.0.0.1:{t}/z") == "200"
    text = metrics(a)
    rc, out = promtool(text)
    assert rc == 0, out
    for fam in FAMILIES:
        assert f"# TYPE {fam} " in text, fam
        assert f"# HELP {fam} " in text, fam
    s = samples(text)
    resp = lambda lst, proto: sum(v for (n, l), v in s.items()
                                  if n == "ferry_http_responses_total"
                                  and f'listener="{lst}"' in l and f'proto="{proto}"' in l)
    # plain: h1 /x, h2c /x, h1 /proxy/y, and the proxied request itself (h1 from the proxy)
    assert resp("plain", "h1") == 3 and resp("plain", "h2") == 1
    # tls: h2, h3, and the intercepted request (h2 from ferry's interception to its origin)
    assert resp("tls", "h2") == 2 and resp("tls", "h3") == 1 and resp("tls", "h1") == 0
    up = f'upstream="self",server="http://127.0.0.1:{p}"'
    assert s[("ferry_upstream_responses_total", "{" + up + ',code="2xx"}')] == 1
    assert s[("ferry_upstream_ttfb_seconds_count", "{" + up + "}")] == 1
    assert s[("ferry_upstream_server_up", "{" + up + "}")] == 1
    assert s[("ferry_upstream_pool_idle", "{" + up + "}")] == 1  # the h1 origin conn, kept
    assert s[("ferry_intercept_flows_total", '{mode="decrypted"}')] == 1
    assert s[("ferry_intercept_certs_forged_total", "{}")] == 1
    assert s[("ferry_connections_total", '{proto="h3"}')] == 1
    assert s[("ferry_quic_connections_total", '{side="server"}')] == 1
    assert 0 <= s[("ferry_quic_connections_active", '{side="server"}')] <= 1
    # the HTTP/3 connection's memory (ngtcp2's allocations and ours) was counted
    assert s[("ferry_connection_memory_max_bytes", '{proto="h3"}')] > 4096
    assert s[("ferry_quic_datagrams_dropped_total", "{}")] == 0  # no datagrams were sent
    assert s[("ferry_upstream_pool_connections", "{" + up + "}")] == 1  # that same connection
    assert s[("ferry_upstream_pool_waiters", "{" + up + "}")] == 0
    # the histograms' first bucket is implicit: count == the responses counted for the route
    for fam in ("ferry_http_ttfb_seconds", "ferry_http_duration_seconds"):
        for (n, l), v in s.items():
            if n == fam + "_count":
                inf = s[(fam + "_bucket", l[:-1] + ',le="+Inf"}')]
                assert inf == v and s[(fam + "_bucket", l[:-1] + ',le="0.000010"}')] <= v
    # the admin listener's own connections (these scrapes) are not counted
    before = s[("ferry_connections_total", '{proto="h1"}')]
    for _ in range(3):
        metrics(a)
    assert samples(metrics(a))[("ferry_connections_total", '{proto="h1"}')] == before
    assert s[("ferry_tls_handshakes_total", '{result="full"}')] >= 2
    assert s[("ferry_config_generation", "")] == 1
    assert s[("ferry_process_resident_memory_bytes", "")] > 1 << 20


def test_metrics_l4_sessions(server):
    """An L4 relay counts its sessions (and the active gauge returns to 0)."""
    srv = server("""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "hi\\n"}}
l4:
  - listen: 127.0.0.1:{port3}
    target: 127.0.0.1:{port}
admin:
  address: 127.0.0.1:{port2}
""")
    p, a, l4 = srv.ports[0], srv.ports[1], srv.ports[2]
    for _ in range(3):
        assert http_request(l4, "/")[2] == b"hi\n"
    wait_for(lambda: samples(metrics(a))[("ferry_l4_sessions_active", "{}")] == 0, 15,
             "the L4 sessions to close")
    s = samples(metrics(a))
    assert s[("ferry_l4_sessions_total", "{}")] == 3
    # per l4 route (its name defaults to the listen address): sessions, and the bytes both ways
    route = [l for (n, l) in s if n == "ferry_l4_route_sessions_total"]
    assert len(route) == 1 and s[("ferry_l4_route_sessions_total", route[0])] == 3, route
    rl = route[0][1:-1]
    up = s[("ferry_l4_bytes_total", "{" + rl + ',direction="up"}')]
    down = s[("ferry_l4_bytes_total", "{" + rl + ',direction="down"}')]
    req = len(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert up >= 3 * 20 and down >= 3 * len(b"hi\n") + 3 * 20, (up, down, req)
    rc, out = promtool(metrics(a))
    assert rc == 0, out


def test_metrics_l4_session_memory(server):
    """An open L4 session is counted in ferry_l4_session_memory_bytes; at its close the gauge
    returns to 0 and the _max gauge keeps the largest session's bytes."""
    import socket
    srv = server("""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "hi\\n"}}
l4:
  - listen: 127.0.0.1:{port3}
    target: 127.0.0.1:{port}
admin:
  address: 127.0.0.1:{port2}
""")
    a, l4 = srv.ports[1], srv.ports[2]
    c = socket.create_connection(("127.0.0.1", l4), timeout=10)
    c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while not got.endswith(b"hi\n"):
        got += c.recv(4096)
    s = samples(metrics(a))
    held = s[("ferry_l4_session_memory_bytes", "{}")]
    assert held > 200, held  # the session itself, at least
    assert s[("ferry_l4_session_memory_max_bytes", "{}")] >= held
    c.close()
    wait_for(lambda: samples(metrics(a))[("ferry_l4_session_memory_bytes", "{}")] == 0, 15,
             "the session's memory to be released")
    assert samples(metrics(a))[("ferry_l4_session_memory_max_bytes", "{}")] >= held


def test_metrics_promtool_rejects_broken_output():
    """The promtool check the tests rely on does fail on what Ferry's writer avoids (so a pass
    means something): a family without HELP, a counter without _total."""
    rc, out = promtool("x_total 1\n")
    assert rc != 0 and "no help text" in out, out
    rc, out = promtool("# HELP x a\n# TYPE x counter\nx 1\n")
    assert rc != 0 and "_total" in out, out


def test_metrics_upstream_retries_and_ejections_per_server(server):
    """A server that refuses connections: the request is retried on the other one (counted on
    the failing server), the failure ejects it (max-fails 1), and the next requests go to the
    live one only; the per-server series and the health gauges say so."""
    dead = free_port()  # nothing listens there
    srv = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    name: front
  - address: 127.0.0.1:{{port3}}
    name: origin
upstreams:
  - name: pair
    servers: [http://127.0.0.1:{dead}, http://127.0.0.1:{{port3}}]
    max-fails: 1
    fail-timeout: 60s
routes:
  - match: {{{{path: /p/}}}}
    proxy: {{{{upstream: pair, strip-prefix: /p}}}}
  - respond: {{{{status: 200, body: "live\\n"}}}}
admin:
  address: 127.0.0.1:{{port2}}
""".replace("{{{{", "{{").replace("}}}}", "}}"))
    p, a, o = srv.ports[0], srv.ports[1], srv.ports[2]
    for _ in range(4):
        st, _, body = http_request(p, "/p/")
        assert (st, body) == (200, b"live\n")
    s = samples(metrics(a))
    d = f'{{upstream="pair",server="http://127.0.0.1:{dead}"}}'
    lv = f'{{upstream="pair",server="http://127.0.0.1:{o}"}}'
    assert s[("ferry_upstream_server_retries_total", d)] == 1
    assert s[("ferry_upstream_server_retries_total", lv)] == 0
    assert s[("ferry_upstream_server_ejections_total", d)] == 1
    assert s[("ferry_upstream_server_ejected", d)] == 1
    assert s[("ferry_upstream_server_up", d)] == 0 and s[("ferry_upstream_server_up", lv)] == 1
    assert s[("ferry_upstream_retries_total", "{}")] == 1
    assert s[("ferry_upstream_responses_total", lv[:-1] + ',code="2xx"}')] == 4
    rc, out = promtool(metrics(a))
    assert rc == 0, out


def test_metrics_limit_rejections_by_name(server):
    """Each refusal counts under its limits: key: request-line (414), header-bytes and
    header-count (431) from the h1 codec, body-size (413); every named limit is exported."""
    srv = server("""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "hi\\n"}}
limits:
  request-line: 256
  header-bytes: 1k
  header-count: 10
  body-size: 4k
admin:
  address: 127.0.0.1:{port2}
""")
    p, a = srv.ports[0], srv.ports[1]

    def raw(data):
        c = socket.create_connection(("127.0.0.1", p), timeout=10)
        try:
            c.sendall(data)
            got = b""
            while b"\r\n" not in got:
                b = c.recv(4096)
                if not b:
                    break
                got += b
            return int(got.split()[1])
        finally:
            c.close()

    assert raw(b"GET /" + b"a" * 400 + b" HTTP/1.1\r\nHost: a\r\n\r\n") == 414
    assert raw(b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"b" * 2000 + b"\r\n\r\n") == 431
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(12))
    assert raw(b"GET / HTTP/1.1\r\nHost: a\r\n" + many + b"\r\n") == 431
    assert raw(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n") == 413
    text = metrics(a)
    rc, out = promtool(text)
    assert rc == 0, out
    s = samples(text)
    got = {l: v for (n, l), v in s.items() if n == "ferry_limit_rejections_total"}
    want = {"request-line": 1, "header-bytes": 1, "header-count": 1, "body-size": 1,
            "connections": 0, "header-timeout": 0, "body-timeout": 0, "send-timeout": 0,
            "connection-memory": 0}
    assert got == {f'{{limit="{k}"}}': v for k, v in want.items()}, got
