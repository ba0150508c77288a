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
from test_proxy import proxy_config
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
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Origin", cls.name)
        self.end_headers()
        self.wfile.write(body)

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
