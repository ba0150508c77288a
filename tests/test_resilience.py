"""Resilience of the reverse proxy (issue 15): outlier ejection that routes away for real,
the per-server circuit breaker (closed -> open -> half-open -> closed), the retry budget and
hedged GETs. src/upstream/upstream_breaker.c, src/upstream/upstream.c, src/handler/proxy.c.

Origins: python3-h2 (test_proxy_h2's H2Origin: any unknown path never answers) and small
Python HTTP/1.1 origins whose behaviour the test switches (200 / 500 / slow) by request count.
Transitions are observed through the log and /metrics; waits poll a state with a bound,
nothing asserts a duration."""
import re
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from conftest import bound, http_origin, http_request, wait_for
from proxy_kit import proxy_config
from test_proxy_h2 import H2Origin


class Switch(BaseHTTPRequestHandler):
    """GET answers `mode` (a class attribute set by the test): "ok" 200, "fail" 500, or
    "slow" (waits `delay` s, then 200). Every request is counted in `hits`."""
    mode = "ok"
    delay = 0.0
    name = "o"
    hits = None
    lock = threading.Lock()

    def do_GET(self):
        cls = type(self)
        with cls.lock:
            cls.hits.append(self.path)
        if cls.mode == "slow":
            time.sleep(cls.delay)
        status = 500 if cls.mode == "fail" else 200
        body = f"{cls.name} {status}\n".encode()
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Origin", cls.name)
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # a hedge's loser: Ferry closed the connection
            pass

    do_HEAD = do_GET

    def log_message(self, *a):
        pass


def switch(name, mode="ok", delay=0.0):
    return type(f"Switch_{name}", (Switch,), {"mode": mode, "delay": delay, "name": name,
                                               "hits": [], "lock": threading.Lock()})


def get(srv, path="/x"):
    return http_request(srv.port, path, timeout=bound(20))


def metrics_text(srv):
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.ports[3]}/metrics",
                                timeout=bound(10)) as r:
        return r.read().decode()


def metric(srv, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0
    found = False
    for line in metrics_text(srv).splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r"^([a-z_0-9]+)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        lab = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
        if all(lab.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else None


def admin_config(servers, upstream):
    text = proxy_config(servers, upstream=upstream)
    return text + "admin:\n  address: 127.0.0.1:{port4}\n"


@pytest.fixture
def h2silent():
    started = []

    def make():
        o = H2Origin()
        started.append(o)
        return o

    yield make
    for o in started:
        o.stop()


# ---------------------------------------------------------------------------------------------
# outlier ejection: a stuck HTTP/2 origin connection gets nothing once its server is out
# ---------------------------------------------------------------------------------------------

def test_ejected_stuck_h2_server_receives_nothing(server, h2silent):
    """Server A is HTTP/2 and never answers (its connection stays up and answers PING); B is
    fine. A's first-byte timeouts eject it (max-fails 2); from then on every request goes to
    B and not one stream more reaches A, for as long as the ejection lasts."""
    a = h2silent()
    b = switch("b")
    with http_origin(b) as bport:
        srv = server(admin_config([a.url, f"http://127.0.0.1:{bport}"], {
            "first-byte-timeout": "300ms", "max-fails": 2, "fail-timeout": "60s",
            "retries": 1}))
        for _ in range(4):  # round robin: A gets two of these and times out on both
            st, _, _ = get(srv)
            assert st == 200
        wait_for(lambda: "ejected" in srv.log(), bound(10), "the ejection of A")
        before = len(a.requests)
        assert before >= 2
        for _ in range(20):
            st, h, _ = get(srv)
            assert st == 200 and h["x-origin"] == "b"
        assert len(a.requests) == before, srv.log()[-3000:]


# ---------------------------------------------------------------------------------------------
# circuit breaker: closed -> open -> half-open -> closed, and a failed trial reopens it
# ---------------------------------------------------------------------------------------------

BREAKER = {"consecutive-failures": 3, "error-rate": "0%", "open-for": "2s",
           "half-open-requests": 2}


def transitions(srv, to):
    return metric(srv, "ferry_upstream_circuit_transitions_total", upstream="up", to=to) or 0


def poll_until_passed(srv, want_status, what):
    """Requests until one is not refused by the open breaker (503): returns its status. Bounded;
    each refused one never reached the origin."""
    got = []

    def once():
        st, h, body = get(srv)
        got.append(st)
        if st == 503:
            assert b"circuit breaker" in body, body
            time.sleep(0.05)
            return None
        return st
    st = wait_for(once, bound(20), what)
    assert st == want_status, (got, srv.log()[-2000:])
    return st


def test_breaker_open_half_open_closed(server):
    a = switch("a", "fail")
    with http_origin(a) as aport:
        srv = server(admin_config([f"http://127.0.0.1:{aport}"], {
            "retries": 0, "max-fails": 1000, "circuit-breaker": BREAKER}))
        for _ in range(3):
            assert get(srv)[0] == 500
        assert "circuit breaker open" in srv.log()
        assert transitions(srv, "open") == 1
        assert metric(srv, "ferry_upstream_circuit_open", upstream="up") == 1
        # open: refused here, the origin sees nothing
        st, _, body = get(srv)
        assert st == 503 and b"circuit breaker is open" in body
        assert len(a.hits) == 3
        # the origin recovers; once open-for passed, two trials close the breaker
        a.mode = "ok"
        poll_until_passed(srv, 200, "the first half-open trial")
        assert "circuit breaker half-open" in srv.log()
        assert transitions(srv, "half_open") == 1
        assert metric(srv, "ferry_upstream_circuit_half_open", upstream="up") == 1
        assert get(srv)[0] == 200
        assert "circuit breaker closed" in srv.log()
        assert transitions(srv, "closed") == 1
        assert metric(srv, "ferry_upstream_circuit_open", upstream="up") == 0
        assert metric(srv, "ferry_upstream_circuit_half_open", upstream="up") == 0
        for _ in range(5):
            assert get(srv)[0] == 200
        # it fails again: open; the trial fails: open again, for twice as long
        a.mode = "fail"
        for _ in range(3):
            assert get(srv)[0] == 500
        assert transitions(srv, "open") == 2
        n = len(a.hits)
        poll_until_passed(srv, 500, "the failing trial")
        assert len(a.hits) == n + 1
        assert "a half-open trial failed" in srv.log()
        assert "open for 4000 ms" in srv.log()
        assert transitions(srv, "open") == 3
        assert get(srv)[0] == 503


def test_open_server_is_skipped_by_balancing(server):
    """Two servers, A fails: its breaker opens and every later request goes to B (passive
    ejection is out of the way: max-fails 1000)."""
    a, b = switch("a", "fail"), switch("b")
    with http_origin(a) as aport, http_origin(b) as bport:
        srv = server(admin_config([f"http://127.0.0.1:{aport}", f"http://127.0.0.1:{bport}"], {
            "retries": 0, "max-fails": 1000, "circuit-breaker": BREAKER}))
        seen = [get(srv)[0] for _ in range(6)]
        assert seen.count(500) == 3 and seen.count(200) == 3
        assert "circuit breaker open" in srv.log()
        n = len(a.hits)
        for _ in range(20):
            st, h, _ = get(srv)
            assert st == 200 and h["x-origin"] == "b"
        assert len(a.hits) == n


def test_5xx_not_a_failure_when_configured(server):
    a = switch("a", "fail")
    with http_origin(a) as aport:
        srv = server(admin_config([f"http://127.0.0.1:{aport}"], {
            "retries": 0, "max-fails": 1000,
            "circuit-breaker": dict(BREAKER, **{"5xx-is-failure": False})}))
        for _ in range(10):
            assert get(srv)[0] == 500
        assert "circuit breaker open" not in srv.log()
        assert transitions(srv, "open") == 0


def test_breaker_on_h2_origin_resets(server, h2silent):
    """The same breaker over an HTTP/2 origin: streams reset before the head are failures."""
    a = h2silent()
    srv = server(admin_config([a.url], {
        "retries": 0, "max-fails": 1000, "circuit-breaker": BREAKER}))
    for _ in range(3):
        assert get(srv, "/zreset")[0] == 502
    assert "circuit breaker open" in srv.log()
    n = len(a.requests)
    st, _, body = get(srv, "/zreset")
    assert st == 503 and len(a.requests) == n


def test_error_rate_opens(server):
    """consecutive-failures off: every other request fails; at min-requests 10 the rate (50%)
    opens the breaker."""
    class Alt(Switch):
        hits, lock, name, n = [], threading.Lock(), "alt", [0]

        def do_GET(self):
            Alt.n[0] += 1
            type(self).mode = "fail" if Alt.n[0] % 2 == 0 else "ok"
            Switch.do_GET(self)
    with http_origin(Alt) as port:
        srv = server(admin_config([f"http://127.0.0.1:{port}"], {
            "retries": 0, "max-fails": 1000, "circuit-breaker": {
                "consecutive-failures": 0, "error-rate": "50%", "min-requests": 10,
                "window": "60s", "open-for": "60s"}}))
        got = [get(srv)[0] for _ in range(10)]
        assert got == [200, 500] * 5
        assert "error rate over the window" in srv.log()
        assert get(srv)[0] == 503


# ---------------------------------------------------------------------------------------------
# retry budget
# ---------------------------------------------------------------------------------------------

def test_retry_budget_caps_retries(server):
    """A refuses connections (nothing listens), B is fine, retries: 1. Without a budget every
    request A got would be retried on B; with ratio 0.1 and no minimum, retries stay within a
    tenth of the requests, the rest are 502s, and the exhaustion is counted."""
    import socket as _s
    dead = _s.socket()
    dead.bind(("127.0.0.1", 0))
    dport = dead.getsockname()[1]
    dead.close()  # nothing listens there now: connections are refused
    b = switch("b")
    with http_origin(b) as bport:
        srv = server(admin_config([f"http://127.0.0.1:{dport}", f"http://127.0.0.1:{bport}"], {
            "retries": 1, "max-fails": 1000,
            "retry-budget": {"ratio": 0.1, "min-per-second": 0, "window": "60s"}}))
        n = 40
        got = [get(srv)[0] for _ in range(n)]
        retries = metric(srv, "ferry_upstream_retries_total")
        exhausted = metric(srv, "ferry_upstream_retry_budget_exhausted_total", upstream="up")
        assert 1 <= retries <= n // 10, (retries, got)
        assert exhausted >= 1
        assert got.count(502) == exhausted
        assert got.count(200) == n - exhausted
        assert "retry budget exhausted" in srv.log()


# ---------------------------------------------------------------------------------------------
# hedged GETs
# ---------------------------------------------------------------------------------------------

def test_hedge_goes_to_the_other_server_and_the_fast_answer_wins(server):
    """A answers after 5 s, B at once; hedge delay 100ms. Every GET the balancer sends to A is
    hedged to B after the delay: the client gets B's answer, A's attempt is cancelled."""
    a, b = switch("a", "slow", delay=5.0), switch("b")
    with http_origin(a) as aport, http_origin(b) as bport:
        srv = server(admin_config([f"http://127.0.0.1:{aport}", f"http://127.0.0.1:{bport}"], {
            "retries": 0, "hedge": {"delay": "100ms"}}))
        for _ in range(6):
            st, h, body = get(srv)
            assert st == 200 and h["x-origin"] == "b" and body == b"b 200\n"
        wait_for(lambda: len(a.hits) == 3, bound(10), "A's three attempts")
        assert len(b.hits) == 6
        assert metric(srv, "ferry_upstream_hedges_total", upstream="up") == 3
        assert metric(srv, "ferry_upstream_hedge_wins_total", upstream="up") == 3
        assert "hedged to" in srv.log()


def test_hedge_cancels_the_h2_loser(server, h2silent):
    """The slow server speaks HTTP/2 and never answers: the hedge to B wins and A's stream is
    reset (RST_STREAM), its connection kept."""
    a = h2silent()
    b = switch("b")
    with http_origin(b) as bport:
        srv = server(admin_config([a.url, f"http://127.0.0.1:{bport}"], {
            "retries": 0, "hedge": "100ms", "first-byte-timeout": "30s"}))
        for _ in range(4):
            st, h, _ = get(srv, "/never")
            assert st == 200 and h["x-origin"] == "b"
        assert len(a.requests) == 2
        wait_for(lambda: a.resets == 2, bound(10), "A's two streams reset")
        assert a.nconns == 1
        assert metric(srv, "ferry_upstream_hedge_wins_total", upstream="up") == 2


class FailsWhileHedged(BaseHTTPRequestHandler):
    """A: holds its request until B has the hedge, then closes without a response."""
    waiting = None  # threading.Event: A holds a request
    hedged = None  # threading.Event: B has the hedge

    def do_GET(self):
        cls = type(self)
        cls.waiting.set()
        cls.hedged.wait(bound(10))
        self.close_connection = True  # no status line: Ferry sees the connection end first

    def log_message(self, *a):
        pass


class AnswersAfterTheFailure(BaseHTTPRequestHandler):
    """B: a request while A holds one is the hedge; it is answered only once Ferry has logged
    that the first attempt failed, so the hedge is then the only attempt."""
    a = None
    srv = None

    def do_GET(self):
        a = type(self).a
        if a.waiting.is_set():
            a.hedged.set()
            wait_for(lambda: "the hedge to" in type(self).srv.log(), bound(10),
                     "Ferry logs the first attempt's failure")
        body = b"b 200\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Origin", "b")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_hedge_becomes_the_attempt_when_the_first_fails(server):
    """The first attempt fails (A closes without a head) while the hedge to B runs: the hedge
    goes on as the request's attempt, no retry is spent (retries: 0 would allow none), and the
    client gets B's answer. Ordered by events and the log line, not by time."""
    a = type("A", (FailsWhileHedged,), {"waiting": threading.Event(),
                                        "hedged": threading.Event()})
    b = type("B", (AnswersAfterTheFailure,), {"a": a})
    with http_origin(a) as aport, http_origin(b) as bport:
        srv = server(admin_config([f"http://127.0.0.1:{aport}", f"http://127.0.0.1:{bport}"], {
            "retries": 0, "hedge": {"delay": "100ms"}}))
        b.srv = srv
        for _ in range(2):  # round robin: one of the two goes to A first
            st, h, body = get(srv)
            assert st == 200 and h["x-origin"] == "b" and body == b"b 200\n"
        assert a.waiting.is_set() and a.hedged.is_set()
        assert "the hedge to" in srv.log()
        assert metric(srv, "ferry_upstream_hedges_total", upstream="up") == 1
        assert metric(srv, "ferry_upstream_retries_total") == 0


def test_no_hedge_for_post(server, h2silent):
    a = h2silent()
    b = switch("b")
    with http_origin(b) as bport:
        srv = server(admin_config([a.url, f"http://127.0.0.1:{bport}"], {
            "retries": 0, "hedge": "50ms", "first-byte-timeout": "1s"}))
        st, _, _ = http_request(srv.port, "/never", method="POST",
                                headers={"Content-Length": "0"}, timeout=bound(20))
        assert st == 504
        assert metric(srv, "ferry_upstream_hedges_total", upstream="up") == 0
        assert b.hits == []


def test_breaker_on_h3_origin(server):
    """The same breaker over an HTTP/3 origin (a second ferry answering 500): three 500s open
    it, the next request is refused without reaching the origin."""
    back = server("""
workers: 1
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h2, h3]
    tls: self-signed
routes:
  - respond: {{status: 500, body: "h3 origin fails\\n"}}
admin:
  address: 127.0.0.1:{port4}
""")
    ca = back.data / "selfsigned.crt"
    front = server(proxy_config([f"h3://127.0.0.1:{back.port}"], upstream={
        "retries": 0, "max-fails": 1000, "ca": str(ca), "circuit-breaker": BREAKER}))
    for _ in range(3):
        st, _, body = get(front)
        assert st == 500 and body == b"h3 origin fails\n"
    assert "circuit breaker open" in front.log()
    wait_for(lambda: metric(back, "ferry_http_responses_total") == 3, bound(10),
             "the origin to count its three answers")
    st, _, body = get(front)
    assert st == 503 and b"circuit breaker is open" in body
    time.sleep(0.2)  # (a request that did reach it would be counted by now: none may)
    assert metric(back, "ferry_http_responses_total") == 3


def test_post_retried_only_when_nothing_was_sent(server, h2silent):
    """A POST whose connection could not even be made went nowhere: it is retried on the other
    server. A POST that reached a server that then timed out is not (it may have run)."""
    import socket as _s
    dead = _s.socket()
    dead.bind(("127.0.0.1", 0))
    dport = dead.getsockname()[1]
    dead.close()

    class Post(Switch):
        hits, lock, name = [], threading.Lock(), "p"

        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            self.rfile.read(n)
            Switch.do_GET(self)
    with http_origin(Post) as pport:
        srv = server(admin_config([f"http://127.0.0.1:{dport}", f"http://127.0.0.1:{pport}"], {
            "retries": 1, "max-fails": 1000}))
        import socket
        for _ in range(4):  # round robin: two of these try the dead server first
            with socket.create_connection(("127.0.0.1", srv.port), timeout=bound(20)) as s:
                s.sendall(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                          b"Connection: close\r\n\r\nhello")
                data = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    data += b
            assert data.startswith(b"HTTP/1.1 200"), data[:300]
        assert len(Post.hits) == 4
    a = h2silent()
    b = switch("b")
    with http_origin(b) as bport:
        srv = server(admin_config([a.url, f"http://127.0.0.1:{bport}"], {
            "retries": 1, "max-fails": 1000, "first-byte-timeout": "300ms"}))
        st, _, _ = http_request(srv.port, "/never", method="POST",
                                headers={"Content-Length": "0"}, timeout=bound(20))
        assert st == 504 and b.hits == []
