"""Rate limits (policy/ratelimit.c, policy/redis.c): GCRA per key with an exact burst and then
429 with Retry-After and the RateLimit / RateLimit-Policy headers (draft-ietf-httpapi-
ratelimit-headers-08), shared by the workers of one process, over h1, h2 and h3; header and
route keys; two Ferry instances sharing one redis-server held to the limit; Redis killed
mid-test (fail open and fail closed); concurrency and connection-rate limits per client.

Rates are so slow (1/h) that no token refills during a test: every count is exact and nothing
depends on timing."""
import http.client
import re
import shutil
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import FERRY, ROOT, free_port, http_request, raw, wait_for, wait_port

REDIS = shutil.which("redis-server")
CURL = shutil.which("curl")
GTLS = shutil.which("gtlsclient")


def cfg(routes, listener_extra="", top="", workers=2, protocols="[h1, h2c]"):
    return f"""
workers: {workers}
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: {protocols}
{listener_extra}
{top}
routes:
{routes}
  - respond: {{{{status: 200, body: "free\\n"}}}}
"""


def keepalive(port, n, path="/", headers=None):
    """n requests on one keep-alive connection: [(status, headers)]"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    out = []
    for _ in range(n):
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        r.read()
        out.append((r.status, {k.lower(): v for k, v in r.getheaders()}))
    c.close()
    return out


LIMITED = """  - match: {{path: /limited}}
    rate-limit: {{name: api, rate: 1/h, burst: 5}}
    respond: {{status: 200, body: "limited\\n"}}
"""


def test_ratelimit_exact_burst_then_429_with_headers(server):
    srv = server(cfg(LIMITED))
    # fresh connections: two workers take them, and share the one table
    st = [http_request(srv.port, "/limited")[0] for _ in range(5)]
    assert st == [200] * 5
    status, h, body = http_request(srv.port, "/limited")
    assert status == 429 and body == b"rate limit exceeded\n"
    # 1/h: the next token in an hour at most (5 at once, one per 3600 s)
    assert 1 <= int(h["retry-after"]) <= 3600
    assert h["ratelimit-policy"] == '"api";q=5;w=18000'
    m = re.fullmatch(r'"api";r=0;t=(\d+)', h["ratelimit"])
    assert m and int(m.group(1)) == int(h["retry-after"])
    # rejections do not extend the wait, and other routes are not limited
    assert all(s == 429 for s, _ in keepalive(srv.port, 10, "/limited"))
    assert http_request(srv.port, "/other")[0] == 200


def test_ratelimit_header_and_route_keys(server):
    srv = server(cfg("""  - match: {{path: /per-key}}
    rate-limit: {{rate: 1/h, burst: 2, key: [header:x-api-key]}}
    respond: {{status: 200, body: "k\\n"}}
  - match: {{path: /per-route}}
    rate-limit: {{rate: 1/h, burst: 3, key: [route]}}
    respond: {{status: 200, body: "r\\n"}}
  - match: {{path: /combo}}
    rate-limit: {{rate: 1/h, burst: 1, key: [client-address, header:x-user]}}
    respond: {{status: 200, body: "c\\n"}}
"""))
    a = [s for s, _ in keepalive(srv.port, 3, "/per-key", {"X-Api-Key": "alice"})]
    b = [s for s, _ in keepalive(srv.port, 3, "/per-key", {"X-Api-Key": "bob"})]
    none = [s for s, _ in keepalive(srv.port, 3, "/per-key")]
    assert a == b == none == [200, 200, 429]
    assert [s for s, _ in keepalive(srv.port, 4, "/per-route")] == [200, 200, 200, 429]
    assert [s for s, _ in keepalive(srv.port, 2, "/combo", {"X-User": "u1"})] == [200, 429]
    assert [s for s, _ in keepalive(srv.port, 2, "/combo", {"X-User": "u2"})] == [200, 429]


def test_ratelimit_trusted_proxy_key(server):
    srv = server(cfg("""  - match: {{path: /x}}
    rate-limit: {{rate: 1/h, burst: 1, trusted-proxies: [127.0.0.0/8]}}
    respond: {{status: 200, body: "x\\n"}}
"""))
    for client in ("192.0.2.1", "192.0.2.2"):
        h = {"X-Forwarded-For": client}
        assert [s for s, _ in keepalive(srv.port, 2, "/x", h)] == [200, 429]


@pytest.mark.skipif(CURL is None, reason="curl missing")
def test_ratelimit_h2(server):
    srv = server(cfg(LIMITED))
    # one curl per request: curl 7.88 sends nothing for a second URL on a reused h2c
    # prior-knowledge connection (seen on routes without policies too)
    out = [subprocess.run([CURL, "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
                           "%{http_version} %{http_code} %header{ratelimit-policy}",
                           srv.url("/limited")],
                          capture_output=True, text=True, timeout=30).stdout for _ in range(7)]
    assert out[:7] == ["2 200 "] * 5 + ['2 429 "api";q=5;w=18000'] * 2


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (Debian ngtcp2-client) missing")
def test_ratelimit_h3(server, tmp_path):
    from test_h3 import gtls, statuses, header
    srv = server(cfg(LIMITED, protocols="[h1, h2, h3]\n    tls: self-signed"), start=False)
    srv.start(udp_ports=[srv.port])
    rc, out, _ = gtls(srv.port, ["/limited"] * 7, tmp_path)
    assert rc == 0, out[-3000:]
    assert sorted(statuses(out)) == [200] * 5 + [429] * 2
    assert header(out, "ratelimit-policy") == ['"api";q=5;w=18000'] * 2


# ---- concurrency and connection rate ----

class HoldingOrigin:
    """An origin that holds every request until release() (counts arrivals)."""

    def __init__(self):
        self.gate = threading.Event()
        self.arrived = 0
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with outer.lock:
                    outer.arrived += 1
                outer.gate.wait(30)
                body = b"held\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_client_concurrency_limit(server):
    origin = HoldingOrigin()
    try:
        srv = server(f"""
workers: 2
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: slow
    servers: [http://127.0.0.1:{origin.port}]
routes:
  - match: {{{{path: /slow}}}}
    client-limits: {{{{concurrency: 2, status: 503}}}}
    proxy: slow
  - respond: {{{{status: 200, body: "free\\n"}}}}
""")
        results = []

        def one():
            results.append(http_request(srv.port, "/slow", timeout=30)[0])

        ts = [threading.Thread(target=one) for _ in range(2)]
        for t in ts:
            t.start()
        wait_for(lambda: origin.arrived == 2, 20, "two requests at the origin")
        # the third from the same address is over the limit, whatever worker takes it
        st, _, _ = http_request(srv.port, "/slow")
        assert st == 503
        assert http_request(srv.port, "/free")[0] == 200  # other routes are not limited
        origin.gate.set()
        for t in ts:
            t.join(30)
        assert results == [200, 200]
        # released when the exchanges ended
        assert http_request(srv.port, "/slow")[0] == 200
        assert http_request(srv.port, "/slow")[0] == 200
    finally:
        origin.close()


def counters(path):
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([a-z_]+)\{(.*)\} (-?[0-9]+)$", line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def test_client_connection_rate(server, tmp_path, monkeypatch):
    dump = tmp_path / "counters.txt"
    monkeypatch.setenv("FERRY_DUMP_COUNTERS", str(dump))
    srv = server(cfg("", listener_extra="    client-limits: per-ip",
                     top="client-limits:\n  - name: per-ip\n    connection-rate: 1/h\n"
                         "    connection-burst: 3\n"))
    for _ in range(3):
        assert http_request(srv.port, "/")[0] == 200
    # the fourth connection is accepted and closed at once, before any byte
    out = raw(srv.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out in (b"", b"<RESET>")
    # requests on a connection already open are not connections
    srv2 = server(cfg("", listener_extra="    client-limits: per-ip",
                      top="client-limits:\n  - name: per-ip\n    connection-rate: 1/h\n"
                          "    connection-burst: 1\n"))
    assert [s for s, _ in keepalive(srv2.port, 5, "/")] == [200] * 5
    assert raw(srv2.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") in (b"", b"<RESET>")
    srv.stop()
    c = counters(dump)
    assert c[("ferry_policy_client_connection_rate_closed_total", 'policy="listeners[0]"')] == 1


def test_ratelimit_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("""listeners:
  - address: 127.0.0.1:1
routes:
  - rate-limit: {rate: 10/w, key: [cookie]}
    respond: {status: 200}
  - rate-limit: {rate: 10/s, redis: {address: nowhere}}
    respond: {status: 200}
""")
    p = subprocess.run([FERRY, "check", "-c", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1
    e = p.stderr
    assert "bad.yaml:4:24: routes[0].rate-limit.rate: '10/w' is not a rate" in e, e
    assert "routes[0].rate-limit.key: 'cookie' is not a key" in e, e
    assert "routes[1].rate-limit.redis.address: 'nowhere' is not HOST:PORT" in e, e
    bad.write_text("""listeners:
  - address: 127.0.0.1:1
    client-limits: nope
routes:
  - client-limits: {connection-rate: 5/s}
    respond: {status: 200}
""")
    e = subprocess.run([FERRY, "check", "-c", str(bad)], capture_output=True, text=True).stderr
    assert "listeners[0].client-limits: no client-limits entry named 'nope'" in e, e
    assert "routes[0].client-limits: connection-rate is checked at accept" in e, e


# ---- Redis ----

class Redis:
    def __init__(self, tmp):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, proc=self.proc)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path)
    yield r
    r.kill()


def redis_cfg(rport, burst, lease, on_error="allow", name="shared", workers=1):
    return cfg(f"""  - match: {{{{path: /r}}}}
    rate-limit:
      name: {name}
      rate: 1/h
      burst: {burst}
      redis: {{{{address: "127.0.0.1:{rport}", lease: {lease}, on-error: {on_error}}}}}
    respond: {{{{status: 200, body: "r\\n"}}}}
""", workers=workers)


@pytest.mark.skipif(REDIS is None, reason="redis-server missing")
def test_ratelimit_redis_two_instances_share_one_limit(server, redis):
    a = server(redis_cfg(redis.port, 200, 4))
    b = server(redis_cfg(redis.port, 200, 4))
    ca = http.client.HTTPConnection("127.0.0.1", a.port, timeout=20)
    cb = http.client.HTTPConnection("127.0.0.1", b.port, timeout=20)
    ok = {a.port: 0, b.port: 0}
    rejected = []
    for i in range(400):
        c = ca if i % 2 == 0 else cb
        c.request("GET", "/r")
        r = c.getresponse()
        r.read()
        if r.status == 200:
            ok[c.port] += 1
        else:
            assert r.status == 429
            rejected.append(r.getheader("ratelimit-policy"))
    admitted = sum(ok.values())
    # never more than the limit; less only by the tokens still leased (< 2 x lease)
    assert 190 <= admitted <= 200, ok
    assert ok[a.port] > 50 and ok[b.port] > 50, ok  # both instances took part
    assert set(rejected) == {'"shared";q=200;w=720000'}
    ca.close()
    cb.close()
    # a third instance with the same name sees the limit spent
    c = server(redis_cfg(redis.port, 200, 4))
    assert http_request(c.port, "/r")[0] == 429


@pytest.mark.skipif(REDIS is None, reason="redis-server missing")
@pytest.mark.parametrize("on_error,want", [("allow", 200), ("deny", 503)])
def test_ratelimit_redis_killed_mid_test(server, redis, on_error, want, tmp_path, monkeypatch):
    dump = tmp_path / "counters.txt"
    monkeypatch.setenv("FERRY_DUMP_COUNTERS", str(dump))
    srv = server(redis_cfg(redis.port, 3, 1, on_error=on_error, name=f"kill-{on_error}"))
    assert [s for s, _ in keepalive(srv.port, 4, "/r")] == [200, 200, 200, 429]
    redis.kill()
    # lease 1: every request asks Redis, so each one after the kill meets it down
    assert [s for s, _ in keepalive(srv.port, 5, "/r")] == [want] * 5
    assert [http_request(srv.port, "/r")[0] for _ in range(3)] == [want] * 3
    assert http_request(srv.port, "/other")[0] == 200
    srv.stop()
    downs = [l for l in srv.log().splitlines() if "is down" in l]
    assert len(downs) == 1, srv.log()  # one log line per transition
    assert ("failing open" if on_error == "allow" else "failing closed") in downs[0]
    c = counters(dump)
    lab = f'policy="kill-{on_error}"'
    assert c[("ferry_policy_ratelimit_redis_down_total", lab)] == 1  # one transition
    assert c[("ferry_policy_ratelimit_rejected_total", lab)] == 1
    assert c[("ferry_policy_ratelimit_redis_round_trips_total", lab)] >= 4


@pytest.mark.skipif(REDIS is None, reason="redis-server missing")
def test_ratelimit_redis_down_from_start(server, tmp_path):
    port = free_port()  # nothing listens there
    srv = server(redis_cfg(port, 2, 1, on_error="deny", name="never"))
    assert [s for s, _ in keepalive(srv.port, 3, "/r")] == [503] * 3


def example(server, name, subst):
    ex = ROOT / "examples" / name
    p = subprocess.run([FERRY, "check", "-c", str(ex)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    origin = server("""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "from origin\\n"}}
""")
    text = ex.read_text().replace("127.0.0.1:8080", "127.0.0.1:PORT1")
    text = text.replace("127.0.0.1:9000", f"127.0.0.1:{origin.port}")
    for k, v in subst.items():
        text = text.replace(k, v)
    return server(text.replace("{", "{{").replace("}", "}}").replace("PORT1", "{port}"))


def test_ratelimit_example_runs(server):
    srv = example(server, "ratelimit.yaml", {})
    st = [s for s, _ in keepalive(srv.port, 12, "/")]
    # 10 at once; the 11th and 12th come sooner than 100 ms apart only on a fast machine, so
    # only the first ten are certain
    assert st[:10] == [200] * 10 and set(st) <= {200, 429}
    assert http_request(srv.port, "/")[2] in (b"from origin\n", b"rate limit exceeded\n")


@pytest.mark.skipif(REDIS is None, reason="redis-server missing")
def test_ratelimit_redis_example_runs(server, redis):
    srv = example(server, "ratelimit-redis.yaml", {"127.0.0.1:6379": f"127.0.0.1:{redis.port}"})
    st = [s for s, _ in keepalive(srv.port, 10, "/")]
    assert st == [200] * 10


class SilentRedis:
    """Accepts connections and reads, never answers: every round trip times out."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                continue

    def close(self):
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


def test_ratelimit_redis_reply_timeout(server):
    silent = SilentRedis()
    try:
        srv = server(cfg(f"""  - match: {{{{path: /r}}}}
    rate-limit:
      rate: 1/h
      burst: 5
      redis: {{{{address: "127.0.0.1:{silent.port}", lease: 1, timeout: 50ms, on-error: deny,
               error-status: 504}}}}
    respond: {{{{status: 200, body: "r\\n"}}}}
""", workers=1))
        assert [s for s, _ in keepalive(srv.port, 3, "/r")] == [504] * 3
        srv.stop()
        downs = [l for l in srv.log().splitlines() if "is down" in l]
        assert len(downs) == 1 and "no reply in time" in downs[0], srv.log()
    finally:
        silent.close()


@pytest.mark.skipif(REDIS is None, reason="redis-server missing")
def test_ratelimit_redis_back_after_restart(server, tmp_path):
    r = Redis(tmp_path)
    port = r.port
    srv = server(cfg(f"""  - match: {{{{path: /r}}}}
    rate-limit:
      name: back
      rate: 1/h
      burst: 2
      redis: {{{{address: "127.0.0.1:{port}", lease: 1, reconnect: 10ms, on-error: deny}}}}
    respond: {{{{status: 200, body: "r\\n"}}}}
""", workers=1))
    assert [s for s, _ in keepalive(srv.port, 3, "/r")] == [200, 200, 429]
    r.kill()
    assert http_request(srv.port, "/r")[0] == 503
    # a new, empty Redis on the same port: once reconnected, the limit starts afresh
    r2 = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", str(tmp_path)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc=r2)
        first = wait_for(lambda: (lambda s: s if s != 503 else None)(
            http_request(srv.port, "/r")[0]), 20, "the limiter to reconnect")
        assert first == 200
        assert [s for s, _ in keepalive(srv.port, 2, "/r")] == [200, 429]
    finally:
        r2.kill()
        r2.wait()
    srv.stop()
    log = srv.log()
    assert len([l for l in log.splitlines() if "is down" in l]) == 1, log
    assert len([l for l in log.splitlines() if "is back" in l]) == 1, log


@pytest.mark.skipif(REDIS is None, reason="redis-server missing")
def test_ratelimit_redis_survives_reload(server, redis):
    """A reload makes new filters (the old generation's go when its last exchange does); the
    Redis state, and the per-worker connections, carry over: the spent limit stays spent."""
    import signal
    text = redis_cfg(redis.port, 3, 1, name="reloaded", workers=2)
    srv = server(text)
    assert [s for s, _ in keepalive(srv.port, 4, "/r")] == [200, 200, 200, 429]

    def reload(gen, new_text):
        (srv.tmp / "ferry.yaml").write_text(new_text.format(port=srv.port, data=srv.data))
        srv.proc.send_signal(signal.SIGHUP)
        line = f"reload: generation {gen} active on all workers"
        wait_for(lambda: line in srv.log(), 30, line, srv.proc)

    reload(2, text)
    assert [http_request(srv.port, "/r")[0] for _ in range(2)] == [429, 429]
    reload(3, cfg("", workers=2))
    assert http_request(srv.port, "/r")[0] == 200
    reload(4, text)
    assert http_request(srv.port, "/r")[0] == 429


def test_ratelimit_listener_and_intercepted_flow(server):
    """A listener's rate limit runs before routing, so it also holds on an intercepting
    listener: forward-proxy requests (absolute-form) are counted and refused with 429."""
    srv = server("""
workers: 2
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    kind: intercept
    rate-limit: proxy-clients
  - address: 127.0.0.1:{port2}
    rate-limit: proxy-clients
  - address: 127.0.0.1:{port3}
rate-limits:
  - name: proxy-clients
    rate: 1/h
    burst: 2
intercept:
  ca-dir: {data}/ca
routes:
  - respond: {{status: 200, body: "origin\\n"}}
""")
    from conftest import statuses
    origin = f"http://127.0.0.1:{srv.ports[2]}/"
    req = (f"GET {origin} HTTP/1.1\r\nHost: 127.0.0.1:{srv.ports[2]}\r\n"
           "Connection: close\r\n\r\n").encode()
    got = [statuses(raw(srv.ports[0], req)) for _ in range(3)]
    assert got == [[200], [200], [429]]
    # the second listener naming the same entry keeps its own local counts
    assert [http_request(srv.ports[1], "/")[0] for _ in range(3)] == [200, 200, 429]
    assert http_request(srv.ports[2], "/")[0] == 200  # a listener without it


def test_ratelimit_named_needs_name(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("""listeners:
  - address: 127.0.0.1:1
    rate-limit: nope
rate-limits:
  - rate: 1/s
routes:
  - respond: {status: 200}
""")
    e = subprocess.run([FERRY, "check", "-c", str(bad)], capture_output=True, text=True).stderr
    assert "bad.yaml:3:17: listeners[0].rate-limit: no rate-limits entry named 'nope'" in e, e
    assert "bad.yaml:5:11: rate-limits: entry 0 needs a `name`" in e, e


def test_ratelimit_headers_always(server):
    origin = server("""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "from origin\\n"}}
""")
    srv = server(cfg(f"""  - match: {{{{path: /p}}}}
    rate-limit: {{{{name: shown, rate: 1/h, burst: 3, headers: always}}}}
    proxy: app
  - match: {{{{path: /r}}}}
    rate-limit: {{{{name: fixed, rate: 1/h, burst: 2, headers: always}}}}
    respond: {{{{status: 201, body: "x\\n"}}}}
""", top=f"upstreams:\n  - name: app\n    servers: [http://127.0.0.1:{origin.port}]\n"))
    got = keepalive(srv.port, 4, "/p")
    assert [s for s, _ in got] == [200, 200, 200, 429]
    assert [h["ratelimit-policy"] for _, h in got] == ['"shown";q=3;w=10800'] * 4
    rs = [re.fullmatch(r'"shown";r=(\d+);t=(\d+)', h["ratelimit"]) for _, h in got]
    assert all(rs)
    assert [int(m.group(1)) for m in rs] == [2, 1, 0, 0]
    # t: until the burst is full again (1, 2, 3 hours less the moments between requests)
    assert [int(m.group(2)) for m in rs[:3]] == [3600, 7200, 10800]
    assert 1 <= int(rs[3].group(2)) <= 3600  # the 429: until the next request
    got = keepalive(srv.port, 3, "/r")
    assert [s for s, _ in got] == [201, 201, 429]
    assert [h["ratelimit"].split(";")[1] for _, h in got] == ["r=1", "r=0", "r=0"]
    # on-reject (the default): nothing on allowed responses
    srv2 = server(cfg(LIMITED))
    assert "ratelimit" not in http_request(srv2.port, "/limited")[1]
