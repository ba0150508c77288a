"""The shared HTTP cache (src/policy/cache*.c, RFC 9111, RFC 5861, RFC 9211, RFC 9213), black
box: Ferry as a caching reverse proxy in front of a Python origin in this process that counts
its hits per path, records what it was asked and answers what each test tells it to. Clients:
raw HTTP/1.1 (conftest.http_request), curl (h2c, h2 over TLS) and gtlsclient (h3). Nothing
sleeps to synchronise: staleness comes from the origin's Age field, concurrency from events
the origin waits on. docs/CACHE.md maps each RFC requirement to the test here."""
import collections
import shutil
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import http_request

CURL = shutil.which("curl")
GTLS = shutil.which("gtlsclient")


class Origin:
    """Answers by path: `routes[path]` is (status, [(name, value)], body) or a function of the
    request handler returning that; default 200, max-age=60, a body naming the hit count."""

    def __init__(self):
        self.hits = collections.Counter()
        self.seen = []  # (method, path, {lowercase name: value})
        self.routes = {}
        self.lock = threading.Lock()
        origin = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body_in = self.rfile.read(n) if n else b""
                path = self.path
                with origin.lock:
                    origin.hits[path] += 1
                    count = origin.hits[path]
                    origin.seen.append((self.command, path,
                                        {k.lower(): v for k, v in self.headers.items()}, body_in))
                r = origin.routes.get(path.split("?")[0])
                if callable(r):
                    r = r(self, count)
                    if r is None:  # the function answered itself
                        return
                if r is None:
                    r = (200, [("Cache-Control", "max-age=60")], f"hit {count} {path}\n")
                status, hdrs, body = r
                if isinstance(body, str):
                    body = body.encode()
                self.send_response(status)
                for k, v in hdrs:
                    self.send_header(k, v)
                if status not in (204, 304):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD" and status not in (204, 304):
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_FOO = do_PATCH = handle_any

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


def config(origin_port, cache="{}", protocols="[h1, h2c]", tls="", workers=2):
    return f"""
workers: {workers}
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: {protocols}
{tls}
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - match:
      path: /
    proxy: o
    cache: {cache}
"""


@pytest.fixture
def cached(server, origin):
    """A Ferry with a cache in front of the origin; call with extra cache keys (YAML flow)."""

    def make(cache="{{}}", **kw):
        return server(config(origin.port, cache, **kw))

    return make


def get(srv, path, headers=None, method="GET"):
    return http_request(srv.port, path, method=method, headers=headers)


def cs(h):
    return h.get("cache-status", "")


# ---- freshness (RFC 9111 §4.2) ----

def test_cache_hit_age_and_status(cached, origin):
    srv = cached()
    s1, h1, b1 = get(srv, "/a")
    s2, h2, b2 = get(srv, "/a")
    assert (s1, s2) == (200, 200)
    assert b1 == b2 == b"hit 1 /a\n"
    assert origin.hits["/a"] == 1
    assert cs(h1) == "ferry; fwd=uri-miss; stored"
    assert cs(h2).startswith("ferry; hit; ttl=")
    assert h2["age"].isdigit()


@pytest.mark.parametrize("cc,expect_hit", [
    ("s-maxage=60, max-age=0", True),       # s-maxage wins in a shared cache (§5.2.2.10)
    ("max-age=0, s-maxage=60", True),
    ('max-age="60"', True),                 # quoted form accepted (§5.2)
    ("max-age=60, max-age=0", False),       # duplicates that disagree: stale (§4.2.1)
    ("max-age=60, max-age=60", True),
    ("max-age=abc", False),                 # invalid: stale
    ("MAX-AGE=60", True),                   # names are case-insensitive
    ("max-age=99999999999999999999", True),  # clamps to 2^31 (§1.2.2)
    ("no-store", False),
    ("private", False),
    ('private="x-foo"', False),
    ("no-store, must-understand, max-age=60", True),  # understood status: no-store overridden
])
def test_cache_response_directives(cached, origin, cc, expect_hit):
    origin.routes["/d"] = (200, [("Cache-Control", cc)], "body")
    srv = cached()
    get(srv, "/d")
    s, h, b = get(srv, "/d")
    assert s == 200 and b == b"body"
    assert origin.hits["/d"] == (1 if expect_hit else 2), cs(h)


def test_cache_expires(cached, origin):
    origin.routes["/e-future"] = (200, [("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")], "x")
    origin.routes["/e-bad"] = (200, [("Expires", "0")], "x")  # invalid: already expired (§5.3)
    origin.routes["/e-past"] = (200, [("Expires", "Thu, 01 Jan 1998 00:00:00 GMT")], "x")
    origin.routes["/e-two"] = (200, [("Expires", "Thu, 01 Jan 2099 00:00:00 GMT"),
                                     ("Expires", "Fri, 01 Jan 2100 00:00:00 GMT")], "x")
    srv = cached()
    for p in ("/e-future", "/e-bad", "/e-past", "/e-two"):
        get(srv, p)
        get(srv, p)
    assert origin.hits["/e-future"] == 1
    assert origin.hits["/e-bad"] == 2
    assert origin.hits["/e-past"] == 2
    assert origin.hits["/e-two"] == 2


def test_cache_heuristic_freshness(cached, origin):
    lm = [("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT")]
    origin.routes["/h200"] = (200, lm, "x")
    origin.routes["/h302"] = (302, lm + [("Location", "/elsewhere")], "x")  # not heuristic
    origin.routes["/h-none"] = (200, [], "x")  # neither explicit nor Last-Modified
    srv = cached()
    for p in ("/h200", "/h302", "/h-none"):
        get(srv, p)
        get(srv, p)
    assert origin.hits["/h200"] == 1
    assert origin.hits["/h302"] == 2
    assert origin.hits["/h-none"] == 2


@pytest.mark.parametrize("age,expect_hit", [
    ("5", True),
    ("70", False),         # older than max-age=60 already
    ("1.5", True),         # invalid: ignored (§5.1)
    ("-3", True),          # invalid: ignored
    ("99999999999999999999", False),  # huge: clamped, stale
    ("70, 5", False),      # a list: the first member counts
])
def test_cache_age_values(cached, origin, age, expect_hit):
    origin.routes["/age"] = (200, [("Cache-Control", "max-age=60"), ("Age", age)], "x")
    srv = cached()
    get(srv, "/age")
    get(srv, "/age")
    assert origin.hits["/age"] == (1 if expect_hit else 2)


def test_cache_age_repeated_lines(cached, origin):
    origin.routes["/age2"] = (200, [("Cache-Control", "max-age=60"), ("Age", "70"),
                                    ("Age", "1")], "x")
    srv = cached()
    get(srv, "/age2")
    get(srv, "/age2")
    assert origin.hits["/age2"] == 2


def test_cache_age_sent_counts_origin_age(cached, origin):
    origin.routes["/agex"] = (200, [("Cache-Control", "max-age=600"), ("Age", "100")], "x")
    srv = cached()
    get(srv, "/agex")
    s, h, b = get(srv, "/agex")
    assert int(h["age"]) >= 100 and cs(h).startswith("ferry; hit")


# ---- configured lifetimes (routes[].cache) ----

def test_cache_conf_default_ttl(cached, origin):
    origin.routes["/dt"] = (200, [], "x")  # neither explicit nor heuristic freshness
    srv = cached("{{default-ttl: 60s}}")
    get(srv, "/dt")
    get(srv, "/dt")
    assert origin.hits["/dt"] == 1


def test_cache_conf_max_ttl(cached, origin):
    origin.routes["/mt"] = (200, [("Cache-Control", "max-age=600"), ("Age", "5")], "x")
    srv = cached("{{max-ttl: 2s}}")
    get(srv, "/mt")
    get(srv, "/mt")
    assert origin.hits["/mt"] == 2


def test_cache_conf_force_ttl(cached, origin):
    origin.routes["/ft"] = (200, [("Cache-Control", "no-store, private")], "x")
    origin.routes["/ft-cookie"] = (200, [("Set-Cookie", "a=b")], "x")
    srv = cached("{{force-ttl: 60s}}")
    for p in ("/ft", "/ft-cookie"):
        get(srv, p)
        get(srv, p)
    assert origin.hits["/ft"] == 1 and origin.hits["/ft-cookie"] == 2


def test_cache_conf_heuristic(cached, origin):
    lm = [("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT")]
    origin.routes["/hp"] = (200, lm, "x")
    origin.routes["/hm"] = (200, lm + [("Age", "5")], "x")
    srv = cached("{{heuristic-percent: 0}}")
    get(srv, "/hp")
    get(srv, "/hp")
    assert origin.hits["/hp"] == 2
    srv2 = cached("{{heuristic-max: 2s}}")
    get(srv2, "/hm")
    get(srv2, "/hm")
    assert origin.hits["/hm"] == 2


def test_cache_conf_stale_if_error(cached, origin):
    state = {"fail": False}
    origin.routes["/cs"] = lambda h, c: ((502, [], "bad") if state["fail"] else
                                         (200, [("Cache-Control", "max-age=10"), ("Age", "15")],
                                          "kept"))
    srv = cached("{{stale-if-error: 60s}}")
    get(srv, "/cs")
    state["fail"] = True
    s, h, b = get(srv, "/cs")
    assert (s, b) == (200, b"kept")


# ---- targeted cache control (RFC 9213) ----

def test_cache_cdn_cache_control(cached, origin):
    origin.routes["/cdn"] = (200, [("Cache-Control", "no-store"),
                                   ("CDN-Cache-Control", "max-age=60")], "x")
    origin.routes["/cdn-bad"] = (200, [("Cache-Control", "no-store"),
                                       ("CDN-Cache-Control", 'max-age="60"')], "x")
    origin.routes["/cdn-nostore"] = (200, [("Cache-Control", "max-age=60"),
                                           ("CDN-Cache-Control", "no-store")], "x")
    srv = cached()
    for p in ("/cdn", "/cdn-bad", "/cdn-nostore"):
        get(srv, p)
        get(srv, p)
    assert origin.hits["/cdn"] == 1          # the targeted field wins
    assert origin.hits["/cdn-bad"] == 2      # invalid: ignored, Cache-Control applies
    assert origin.hits["/cdn-nostore"] == 2


def test_cache_targeted_field_configurable(cached, origin):
    origin.routes["/t"] = (200, [("Cache-Control", "no-store"),
                                 ("Ferry-Cache-Control", "max-age=60"),
                                 ("CDN-Cache-Control", "no-store")], "x")
    srv = cached("{{targeted-field: Ferry-Cache-Control}}")
    get(srv, "/t")
    get(srv, "/t")
    assert origin.hits["/t"] == 1


# ---- request directives (§5.2.1) ----

def stale_route(origin, path, extra_cc=""):
    """A response that is stale as soon as it is stored (Age beyond max-age), with a
    validator, answering 304 to a matching If-None-Match."""
    def r(h, count):
        if h.headers.get("If-None-Match") == '"v1"':
            return (304, [("ETag", '"v1"'), ("Cache-Control", "max-age=10" + extra_cc),
                          ("X-Revalidated", str(count))], b"")
        return (200, [("Cache-Control", "max-age=10" + extra_cc), ("Age", "15"),
                      ("ETag", '"v1"')], f"body {count}")
    origin.routes[path] = r


def test_cache_request_no_cache_revalidates(cached, origin):
    origin.routes["/rq"] = (200, [("Cache-Control", "max-age=600"), ("Age", "5")], "x")
    srv = cached()
    get(srv, "/rq")
    s, h, b = get(srv, "/rq", {"Cache-Control": "no-cache"})
    assert origin.hits["/rq"] == 2 and s == 200
    s, h, b = get(srv, "/rq", {"Pragma": "no-cache"})
    assert origin.hits["/rq"] == 3
    get(srv, "/rq", {"Cache-Control": "max-age=0"})
    assert origin.hits["/rq"] == 4
    get(srv, "/rq", {"Cache-Control": "min-fresh=3600"})
    assert origin.hits["/rq"] == 5
    get(srv, "/rq", {"Cache-Control": "max-age=3600"})
    assert origin.hits["/rq"] == 5


def test_cache_request_no_cache_ignored_when_configured(cached, origin):
    srv = cached("{{ignore-request-no-cache: true}}")
    get(srv, "/rq")
    get(srv, "/rq", {"Cache-Control": "no-cache"})
    assert origin.hits["/rq"] == 1


def test_cache_request_no_store(cached, origin):
    srv = cached()
    get(srv, "/ns", {"Cache-Control": "no-store"})
    get(srv, "/ns")
    assert origin.hits["/ns"] == 2


def test_cache_only_if_cached(cached, origin):
    srv = cached()
    s, h, b = get(srv, "/oic", {"Cache-Control": "only-if-cached"})
    assert s == 504 and origin.hits["/oic"] == 0
    get(srv, "/oic")
    s, h, b = get(srv, "/oic", {"Cache-Control": "only-if-cached"})
    assert s == 200 and origin.hits["/oic"] == 1


def test_cache_max_stale(cached, origin):
    stale_route(origin, "/st")
    srv = cached()
    get(srv, "/st")
    s, h, b = get(srv, "/st", {"Cache-Control": "max-stale=60"})
    assert origin.hits["/st"] == 1 and b == b"body 1" and "ttl=-" in cs(h)
    s, h, b = get(srv, "/st", {"Cache-Control": "max-stale"})
    assert origin.hits["/st"] == 1
    s, h, b = get(srv, "/st", {"Cache-Control": "max-stale=1"})  # 5 s stale > 1
    assert origin.hits["/st"] == 2


def test_cache_max_stale_refused_by_must_revalidate(cached, origin):
    stale_route(origin, "/mr", ", must-revalidate")
    srv = cached()
    get(srv, "/mr")
    get(srv, "/mr", {"Cache-Control": "max-stale=60"})
    assert origin.hits["/mr"] == 2


def test_cache_stale_never_served_without_directive(cached, origin):
    stale_route(origin, "/sn")
    srv = cached()
    get(srv, "/sn")
    s, h, b = get(srv, "/sn")
    assert origin.hits["/sn"] == 2  # revalidated, not served stale


# ---- Authorization (§3.5) ----

@pytest.mark.parametrize("cc,stored", [("max-age=60", False), ("public, max-age=60", True),
                                       ("s-maxage=60", True), ("max-age=60, must-revalidate", True)])
def test_cache_authorization(cached, origin, cc, stored):
    origin.routes["/auth"] = (200, [("Cache-Control", cc)], "secret")
    srv = cached()
    get(srv, "/auth", {"Authorization": "Bearer a"})
    get(srv, "/auth")
    assert origin.hits["/auth"] == (1 if stored else 2)


# ---- Set-Cookie ----

def test_cache_set_cookie_not_stored(cached, origin):
    origin.routes["/ck"] = (200, [("Cache-Control", "max-age=60"), ("Set-Cookie", "s=1")], "x")
    srv = cached()
    get(srv, "/ck")
    s, h, b = get(srv, "/ck")
    assert origin.hits["/ck"] == 2


def test_cache_set_cookie_stored_when_configured(cached, origin):
    origin.routes["/ck"] = (200, [("Cache-Control", "max-age=60"), ("Set-Cookie", "s=1")], "x")
    srv = cached("{{store-set-cookie: true}}")
    get(srv, "/ck")
    get(srv, "/ck")
    assert origin.hits["/ck"] == 1


# ---- Vary (§4.1) ----

def vary_route(origin, path, vary):
    def r(h, count):
        return (200, [("Cache-Control", "max-age=60"), ("Vary", vary)],
                f"{h.headers.get('Accept-Encoding')}|{h.headers.get('Accept-Language')}|{count}")
    origin.routes[path] = r


def test_cache_vary_secondary_keys(cached, origin):
    vary_route(origin, "/v", "Accept-Encoding")
    srv = cached()
    _, _, b1 = get(srv, "/v", {"Accept-Encoding": "gzip, br"})
    _, _, b2 = get(srv, "/v", {"Accept-Encoding": "gzip,br"})     # same after normalising
    _, _, b3 = get(srv, "/v", {"Accept-Encoding": "identity"})
    _, _, b4 = get(srv, "/v")                                    # absent differs from any
    _, _, b5 = get(srv, "/v", {"Accept-Encoding": "gzip, br"})
    assert b1 == b2 == b5 == b"gzip, br|None|1"
    assert b3 == b"identity|None|2" and b4 == b"None|None|3"
    assert origin.hits["/v"] == 3


def test_cache_vary_odd_syntax(cached, origin):
    vary_route(origin, "/vo", " accept-encoding ,, ACCEPT-ENCODING,")
    srv = cached()
    get(srv, "/vo", {"Accept-Encoding": "gzip"})
    _, _, b = get(srv, "/vo", {"accept-encoding": "gzip"})
    assert origin.hits["/vo"] == 1 and b.endswith(b"|1")


def test_cache_vary_star_never_matches(cached, origin):
    vary_route(origin, "/vs", "*")
    srv = cached()
    get(srv, "/vs")
    get(srv, "/vs")
    vary_route(origin, "/vs2", "Accept-Encoding, *")
    get(srv, "/vs2")
    get(srv, "/vs2")
    assert origin.hits["/vs"] == 2 and origin.hits["/vs2"] == 2


# ---- revalidation (§4.3) ----

def test_cache_revalidation_304_merges_headers(cached, origin):
    stale_route(origin, "/rv")
    srv = cached()
    s1, h1, b1 = get(srv, "/rv")
    s2, h2, b2 = get(srv, "/rv")
    assert origin.hits["/rv"] == 2
    inm = origin.seen[-1][2].get("if-none-match")
    assert inm == '"v1"'
    assert s2 == 200 and b2 == b"body 1"          # the stored body
    assert h2.get("x-revalidated") == "2"          # the 304's field merged (§4.3.4)
    assert "fwd-status=304" in cs(h2)
    s3, h3, b3 = get(srv, "/rv")                    # now fresh (max-age=10 from the 304)
    assert origin.hits["/rv"] == 2 and b3 == b"body 1" and h3.get("x-revalidated") == "2"


def test_cache_revalidation_last_modified(cached, origin):
    def r(h, count):
        if h.headers.get("If-Modified-Since") == "Thu, 01 Jan 2015 00:00:00 GMT":
            return (304, [("Cache-Control", "max-age=60")], b"")
        return (200, [("Cache-Control", "no-cache"),
                      ("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT")], f"lm {count}")
    origin.routes["/lm"] = r
    srv = cached()
    get(srv, "/lm")
    s, h, b = get(srv, "/lm")  # no-cache: revalidated every time
    assert origin.hits["/lm"] == 2 and b == b"lm 1"


def test_cache_client_conditional_answered_from_store(cached, origin):
    origin.routes["/cc"] = (200, [("Cache-Control", "max-age=60"), ("ETag", '"e1"')], "x")
    srv = cached()
    get(srv, "/cc")
    s, h, b = get(srv, "/cc", {"If-None-Match": '"e1"'})
    assert s == 304 and b == b"" and origin.hits["/cc"] == 1
    s, h, b = get(srv, "/cc", {"If-None-Match": '"other"'})
    assert s == 200 and b == b"x"


# ---- stale-while-revalidate, stale-if-error (RFC 5861) ----

def test_cache_stale_if_error(cached, origin):
    state = {"fail": False}

    def r(h, count):
        if state["fail"]:
            return (503, [], "down")
        return (200, [("Cache-Control", "max-age=10, stale-if-error=60"), ("Age", "15")], "good")
    origin.routes["/sie"] = r
    origin.routes["/sie-mr"] = lambda h, c: ((503, [], "down") if state["fail"] else
                                             (200, [("Cache-Control", "max-age=10, "
                                                     "stale-if-error=60, must-revalidate"),
                                                    ("Age", "15")], "good"))
    origin.routes["/sie-none"] = lambda h, c: ((503, [], "down") if state["fail"] else
                                               (200, [("Cache-Control", "max-age=10"),
                                                      ("Age", "15")], "good"))
    srv = cached()
    for p in ("/sie", "/sie-mr", "/sie-none"):
        get(srv, p)
    state["fail"] = True
    s, h, b = get(srv, "/sie")
    assert (s, b) == (200, b"good") and "stale-if-error" in cs(h)
    s, h, b = get(srv, "/sie-mr")
    assert s == 503
    s, h, b = get(srv, "/sie-none")
    assert s == 503


def test_cache_stale_if_error_origin_down(cached, origin, server):
    origin.routes["/sd"] = (200, [("Cache-Control", "max-age=10, stale-if-error=60"),
                                  ("Age", "15")], "kept")
    srv = cached()
    get(srv, "/sd")
    origin.close()
    s, h, b = get(srv, "/sd")
    assert (s, b) == (200, b"kept")


def test_cache_stale_while_revalidate(cached, origin):
    release = threading.Event()
    arrived = threading.Event()
    state = {"n": 0}

    def r(h, count):
        state["n"] += 1
        if state["n"] == 2:  # the revalidation: hold it
            arrived.set()
            release.wait(20)
        return (200, [("Cache-Control", "max-age=10, stale-while-revalidate=60"),
                      ("Age", "15")], f"v{count}")
    origin.routes["/swr"] = r
    srv = cached()
    get(srv, "/swr")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("a", get(srv, "/swr")))
    t.start()
    assert arrived.wait(20)
    s, h, b = get(srv, "/swr")  # while the first revalidates: stale at once
    assert (s, b) == (200, b"v1") and "ttl=-" in cs(h)
    release.set()
    t.join(20)
    assert out["a"][2] == b"v2"
    assert origin.hits["/swr"] == 2


# ---- invalidation (§4.4) ----

@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "FOO"])
def test_cache_invalidation_by_unsafe_methods(cached, origin, method):
    srv = cached()
    get(srv, "/inv")
    get(srv, "/inv")
    assert origin.hits["/inv"] == 1
    s, h, b = get(srv, "/inv", method=method, headers={"Content-Length": "0"})
    assert cs(h) == "ferry; fwd=method"
    get(srv, "/inv")
    assert origin.hits["/inv"] == 3


def test_cache_invalidation_location_same_origin_only(cached, origin, server):
    srv = cached()
    origin.routes["/post"] = lambda h, c: (201, [("Location", "/loc"),
                                                 ("Content-Location",
                                                  f"http://127.0.0.1:{srv.port}/cloc")], "ok")
    origin.routes["/post-foreign"] = (201, [("Location", "http://other.example/far")], "ok")
    for p in ("/loc", "/cloc", "/far"):
        get(srv, p)
    get(srv, "/post", method="POST", headers={"Content-Length": "0"})
    get(srv, "/post-foreign", method="POST", headers={"Content-Length": "0"})
    for p in ("/loc", "/cloc", "/far"):
        get(srv, p)
    assert origin.hits["/loc"] == 2 and origin.hits["/cloc"] == 2
    assert origin.hits["/far"] == 1


def test_cache_no_invalidation_on_error(cached, origin):
    origin.routes["/err"] = lambda h, c: ((500, [], "no") if h.command == "POST" else
                                          (200, [("Cache-Control", "max-age=60")], "x"))
    srv = cached()
    get(srv, "/err")
    get(srv, "/err", method="POST", headers={"Content-Length": "0"})
    get(srv, "/err")
    assert origin.hits["/err"] == 2


# ---- HEAD and ranges ----

def test_cache_head_from_stored_get(cached, origin):
    srv = cached()
    get(srv, "/hd")
    s, h, b = get(srv, "/hd", method="HEAD")
    assert s == 200 and b == b"" and h["content-length"] == str(len("hit 1 /hd\n"))
    assert origin.hits["/hd"] == 1 and cs(h).startswith("ferry; hit")


def test_cache_ranges_from_complete_object(cached, origin):
    origin.routes["/rg"] = (200, [("Cache-Control", "max-age=60"), ("ETag", '"r"')],
                            "0123456789")
    srv = cached()
    get(srv, "/rg")
    s, h, b = get(srv, "/rg", {"Range": "bytes=2-4"})
    assert (s, b, h["content-range"]) == (206, b"234", "bytes 2-4/10")
    s, h, b = get(srv, "/rg", {"Range": "bytes=-3"})
    assert (s, b) == (206, b"789")
    s, h, b = get(srv, "/rg", {"Range": "bytes=7-"})
    assert (s, b) == (206, b"789")
    s, h, b = get(srv, "/rg", {"Range": "bytes=20-30"})
    assert s == 416 and h["content-range"] == "bytes */10"
    s, h, b = get(srv, "/rg", {"Range": "bytes=1-2,5-6"})
    assert (s, b) == (200, b"0123456789")
    s, h, b = get(srv, "/rg", {"Range": "bytes=2-4", "If-Range": '"other"'})
    assert (s, b) == (200, b"0123456789")
    assert origin.hits["/rg"] == 1


# ---- size bounds ----

def test_cache_max_object_size_streams_through(cached, origin):
    big = "y" * 300000
    origin.routes["/big"] = (200, [("Cache-Control", "max-age=60")], big)
    origin.routes["/small"] = (200, [("Cache-Control", "max-age=60")], "s" * 1000)
    srv = cached("{{max-object-size: 100k}}")
    for _ in range(2):
        s, h, b = get(srv, "/big")
        assert s == 200 and b == big.encode()
        get(srv, "/small")
    assert origin.hits["/big"] == 2 and origin.hits["/small"] == 1


def test_cache_chunked_body_past_max_object_size(cached, origin):
    def r(h, count):
        h.send_response(200)
        h.send_header("Cache-Control", "max-age=60")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for _ in range(20):
            h.wfile.write(b"2710\r\n" + b"z" * 10000 + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")
    origin.routes["/chunky"] = r
    srv = cached("{{max-object-size: 50k}}")
    for _ in range(2):
        s, h, b = get(srv, "/chunky")
        assert s == 200 and b == b"z" * 200000
    assert origin.hits["/chunky"] == 2


def test_cache_size_bound_evicts_lru(cached, origin):
    for i in range(40):
        origin.routes[f"/ev{i}"] = (200, [("Cache-Control", "max-age=60")], "e" * 2000)
    srv = cached("{{size: 40k}}")
    for i in range(40):
        get(srv, f"/ev{i}")
    get(srv, "/ev0")
    get(srv, "/ev39")
    assert origin.hits["/ev0"] == 2   # evicted long ago
    assert origin.hits["/ev39"] == 1  # the most recent stays


# ---- PURGE ----

def test_cache_purge(cached, origin):
    origin.routes["/tagged"] = (200, [("Cache-Control", "max-age=60"),
                                      ("Surrogate-Key", "t1 t2")], "x")
    srv = cached("{{purge-allow: [127.0.0.1/32]}}")
    for p in ("/p1", "/dir/a", "/dir/b", "/tagged"):
        get(srv, p)
    s, h, b = get(srv, "/p1", method="PURGE")
    assert (s, b) == (200, b"purged 1\n")
    s, h, b = get(srv, "/p1", method="PURGE")
    assert s == 404
    s, h, b = get(srv, "/dir/*", method="PURGE")
    assert (s, b) == (200, b"purged 2\n")
    s, h, b = get(srv, "/", method="PURGE", headers={"Surrogate-Key": "t2"})
    assert (s, b) == (200, b"purged 1\n")
    for p in ("/p1", "/dir/a", "/dir/b", "/tagged"):
        get(srv, p)
        assert origin.hits[p] == 2
    assert not any(m == "PURGE" for m, *_ in origin.seen)


def test_cache_purge_refused_outside_cidrs(cached, origin):
    srv = cached("{{purge-allow: [10.0.0.0/8]}}")
    get(srv, "/p")
    s, h, b = get(srv, "/p", method="PURGE")
    assert s == 403
    get(srv, "/p")
    assert origin.hits["/p"] == 1


def test_cache_purge_allow_bad_cidr(server, origin):
    srv = server(config(origin.port, "{{purge-allow: [10.0.0.0/99]}}"), args=None, start=False)
    cfg = srv.tmp / "bad.yaml"
    cfg.write_text(srv.text)
    from conftest import FERRY
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 1
    assert "cache.purge-allow" in p.stderr and "bad CIDR" in p.stderr


# ---- key safety and poisoning ----

def test_cache_key_authority_normalised(cached, origin):
    srv = cached()
    get(srv, "/k", {"Host": f"EXAMPLE.com:80"})
    get(srv, "/k", {"Host": "example.com"})
    get(srv, "/k", {"Host": "example.com."})
    get(srv, "/k", {"Host": "other.com"})
    assert origin.hits["/k"] == 2
    get(srv, "/k?a=1")
    get(srv, "/k?a=2")
    get(srv, "/./x/../k?a=1")  # the router's normalised path
    assert origin.hits["/k?a=1"] == 1 and origin.hits["/k?a=2"] == 1


def test_cache_key_headers(cached, origin):
    origin.routes["/kh"] = lambda h, c: (200, [("Cache-Control", "max-age=60")],
                                         f"{h.headers.get('X-Tenant')}")
    srv = cached("{{key-headers: [X-Tenant]}}")
    _, _, a = get(srv, "/kh", {"X-Tenant": "a"})
    _, _, b = get(srv, "/kh", {"x-tenant": "b"})
    _, _, a2 = get(srv, "/kh", {"X-TENANT": "a"})
    assert (a, b, a2) == (b"a", b"b", b"a") and origin.hits["/kh"] == 2


@pytest.mark.parametrize("hdr", [("X-Forwarded-Host", "evil.example"),
                                 ("x-forwarded-host", "evil.example"),
                                 ("X-FORWARDED-HOST", "evil.example"),
                                 ("X-Original-URL", "/admin"),
                                 ("X-Rewrite-URL", "/admin"),
                                 ("X-HTTP-Method-Override", "POST")])
def test_cache_poisoning_unkeyed_headers(cached, origin, hdr):
    def r(h, count):
        # a careless origin that reflects what it is sent
        evil = [h.headers.get(n) for n in ("X-Forwarded-Host", "X-Original-URL", "X-Rewrite-URL",
                                            "X-HTTP-Method-Override")]
        return (200, [("Cache-Control", "max-age=60")], f"links to {evil}")
    origin.routes["/pz"] = r
    srv = cached()
    _, _, attacker = get(srv, "/pz", {hdr[0]: hdr[1]})
    _, _, victim = get(srv, "/pz")
    assert b"evil" not in victim and b"admin" not in victim and b"POST" not in victim
    assert victim == attacker  # the origin never saw the header
    # the origin never saw the client's value (Ferry sets X-Forwarded-Host itself)
    assert all(s[2].get(hdr[0].lower()) != hdr[1] for s in origin.seen)


def test_cache_poisoning_fat_get(cached, origin):
    origin.routes["/fat"] = lambda h, c: (200, [("Cache-Control", "max-age=60")],
                                          f"got {c}")
    srv = cached()
    # a GET with a body: answered, never stored
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sk:
        sk.sendall(b"GET /fat HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close"
                   b"\r\n\r\nevil!")
        resp = b""
        while True:
            d = sk.recv(65536)
            if not d:
                break
            resp += d
    assert b"fwd=bypass" in resp
    s, h, b = get(srv, "/fat", {"Host": "x"})
    assert cs(h) == "ferry; fwd=uri-miss; stored"
    assert origin.hits["/fat"] == 2


def test_cache_poisoning_header_case_vary(cached, origin):
    vary_route(origin, "/vc", "accept-language")
    srv = cached()
    _, _, b1 = get(srv, "/vc", {"ACCEPT-LANGUAGE": "fr"})
    _, _, b2 = get(srv, "/vc", {"accept-language": "en"})
    _, _, b3 = get(srv, "/vc", {"Accept-Language": "fr"})
    assert b1 == b3 and b1 != b2 and origin.hits["/vc"] == 2


# ---- one object whatever the client protocol ----

@pytest.mark.skipif(CURL is None, reason="curl missing")
def test_cache_h1_h2c_share(cached, origin):
    srv = cached()
    get(srv, "/sh", {"Host": f"127.0.0.1:{srv.port}"})
    p = subprocess.run([CURL, "-s", "-i", "--http2-prior-knowledge",
                        f"http://127.0.0.1:{srv.port}/sh"], capture_output=True, timeout=20)
    assert b"HTTP/2 200" in p.stdout and b"cache-status: ferry; hit" in p.stdout
    assert origin.hits["/sh"] == 1


@pytest.mark.skipif(CURL is None or GTLS is None, reason="curl or gtlsclient missing")
def test_cache_h1_h2_h3_share(cached, origin, tmp_path):
    from test_h3 import gtls, header, statuses
    srv = cached(protocols="[h1, h2, h3]", tls="    tls: self-signed")
    s, h, b = http_request(srv.port, "/tri", headers={"Host": f"127.0.0.1:{srv.port}"}, tls=True)
    assert s == 200 and cs(h) == "ferry; fwd=uri-miss; stored"
    p = subprocess.run([CURL, "-s", "-k", "-i", "--http2", f"https://127.0.0.1:{srv.port}/tri"],
                       capture_output=True, timeout=20)
    assert b"HTTP/2 200" in p.stdout and b"cache-status: ferry; hit" in p.stdout
    rc, out, dl = gtls(srv.port, ["/tri"], tmp_path)
    assert rc == 0 and statuses(out) == [200], out[-2000:]
    assert header(out, "cache-status")[0].startswith("ferry; hit")
    assert (dl / "tri").read_bytes() == b"hit 1 /tri\n"
    # and the other way round: an object stored by h3 is an h1 hit
    rc, out, dl = gtls(srv.port, ["/tri3"], tmp_path)
    assert rc == 0 and header(out, "cache-status")[0] == "ferry; fwd=uri-miss; stored"
    s, h, b = http_request(srv.port, "/tri3", headers={"Host": f"127.0.0.1:{srv.port}"},
                           tls=True)
    assert cs(h).startswith("ferry; hit") and b == b"hit 1 /tri3\n"
    assert origin.hits["/tri"] == 1 and origin.hits["/tri3"] == 1


# ---- Cache-Status on every response of a cached route (RFC 9211) ----

def test_cache_status_on_every_response(cached, origin):
    origin.routes["/up"] = (200, [("Cache-Control", "max-age=60"),
                                  ("Cache-Status", "upstream-cache; hit")], "x")
    srv = cached()
    s, h, b = get(srv, "/up")
    raw_lines = [l for l in h["_raw"].split("\r\n") if l.lower().startswith("cache-status")]
    assert raw_lines[-1].lower().endswith("ferry; fwd=uri-miss; stored")
    assert len(raw_lines) == 2  # ours after the upstream cache's
    s, h, b = get(srv, "/x", method="OPTIONS")
    assert cs(h) == "ferry; fwd=bypass"


def test_cache_example_config_runs(server, origin, tmp_path):
    """examples/cache.yaml as written, with its two addresses moved to free ports."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "examples" / "cache.yaml").read_text()
    assert "127.0.0.1:8080" in text and "http://127.0.0.1:9000" in text
    text = text.replace("{", "{{").replace("}", "}}")
    text = text.replace("127.0.0.1:8080", "127.0.0.1:{port}")
    text = text.replace("http://127.0.0.1:9000", f"http://127.0.0.1:{origin.port}")
    srv = server(text)
    get(srv, "/ex")
    s, h, b = get(srv, "/ex")
    assert s == 200 and cs(h).startswith("ferry; hit") and origin.hits["/ex"] == 1


def test_cache_doc_sample_checks(tmp_path):
    """docs/CACHE.md's YAML sample passes `ferry check`."""
    from pathlib import Path
    from conftest import FERRY
    text = (Path(__file__).resolve().parent.parent / "docs" / "CACHE.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = tmp_path / "sample.yaml"
    cfg.write_text(block)
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=20, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr


def test_cache_survives_reload(cached, origin):
    """A reload builds new filters on the same zone: stored objects stay (and a new zone
    name starts empty)."""
    import signal
    from conftest import wait_for
    srv = cached("{{zone: z1}}")
    get(srv, "/rl")
    cfg = srv.tmp / "ferry.yaml"
    srv.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: generation 2 active on all workers" in srv.log(), 30, "reload",
             srv.proc)
    s, h, b = get(srv, "/rl")
    assert cs(h).startswith("ferry; hit") and origin.hits["/rl"] == 1
    cfg.write_text(cfg.read_text().replace("zone: z1", "zone: z2"))
    srv.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: generation 3 active on all workers" in srv.log(), 30, "reload",
             srv.proc)
    get(srv, "/rl")
    assert origin.hits["/rl"] == 2


# ---- Vary: Accept-Encoding (normalised secondary key) and the compression filter ----

def test_cache_vary_accept_encoding_normalised(cached, origin):
    """An origin that varies on Accept-Encoding: requests that accept the same codings (order,
    case, spacing, q=1, unknown codings aside) share one variant; others get their own."""
    origin.routes["/ae"] = lambda h, n: (200, [("Cache-Control", "max-age=60"),
                                               ("Vary", "Accept-Encoding")],
                                         f"ae {n} {h.headers.get('Accept-Encoding')}\n")
    srv = cached()
    s, h, b = get(srv, "/ae", {"Accept-Encoding": "gzip, deflate, br"})
    assert b == b"ae 1 gzip, deflate, br\n" and "stored" in cs(h)
    for same in ("br,gzip,deflate", "GZIP;q=1, Deflate ,br, sdch", "deflate, x-gzip, br"):
        s, h, b = get(srv, "/ae", {"Accept-Encoding": same})
        assert b == b"ae 1 gzip, deflate, br\n", same
        assert cs(h).startswith("ferry; hit"), same
    s, h, b = get(srv, "/ae", {"Accept-Encoding": "gzip"})
    assert b == b"ae 2 gzip\n"
    s, h, b = get(srv, "/ae", {"Accept-Encoding": "gzip;q=0.5, br"})  # a preference differs
    assert b == b"ae 3 gzip;q=0.5, br\n"
    s, h, b = get(srv, "/ae")  # no field: its own variant
    assert b == b"ae 4 None\n"
    s, h, b = get(srv, "/ae", {"Accept-Encoding": "gzip;q=0, identity"})
    assert b == b"ae 5 gzip;q=0, identity\n"
    s, h, b = get(srv, "/ae", {"Accept-Encoding": "identity"})  # the same meaning
    assert b == b"ae 5 gzip;q=0, identity\n" and cs(h).startswith("ferry; hit")
    assert origin.hits["/ae"] == 5


def test_cache_with_compression_filter(server, origin):
    """The compression filter sits between the client and the cache: the cache stores the
    identity response once and every hit is compressed for its own client (Vary sent)."""
    import gzip
    body = "compressible text " * 200
    origin.routes["/c"] = (200, [("Cache-Control", "max-age=60"),
                                 ("Content-Type", "text/plain")], body)
    cfg = config(origin.port, "{{}}").replace("    cache: {{}}\n",
                                              "    cache: {{}}\n    compress: enabled\n")
    srv = server(cfg)
    s, h, b = get(srv, "/c", {"Accept-Encoding": "gzip"})
    assert s == 200 and h.get("content-encoding") == "gzip"
    assert "accept-encoding" in h.get("vary", "").lower()
    assert gzip.decompress(b).decode() == body and "stored" in cs(h)
    s, h, b = get(srv, "/c")  # a hit, identity for a client that accepts nothing
    assert s == 200 and "content-encoding" not in h and b.decode() == body
    assert cs(h).startswith("ferry; hit")
    s, h, b = get(srv, "/c", {"Accept-Encoding": "gzip, br"})  # a hit, compressed
    assert h.get("content-encoding") in ("gzip", "br") and cs(h).startswith("ferry; hit")
    assert origin.hits["/c"] == 1


# ---- freshening with HEAD (RFC 9111 §4.3.5) ----

def test_cache_head_freshens_stored_get(cached, origin):
    """A stale stored GET and a HEAD whose 200 carries the same strong ETag and length: the
    stored response takes the HEAD's fields (and freshness); a HEAD that shows another ETag
    makes the stored one unusable."""
    def r(h, n):
        if h.command == "HEAD":
            return (200, [("Cache-Control", "max-age=60"), ("ETag", '"v1"'),
                          ("X-Gen", str(n))], "body-v1")
        return (200, [("Cache-Control", "max-age=0"), ("ETag", '"v1"'), ("X-Gen", str(n))],
                "body-v1")
    origin.routes["/hf"] = r
    srv = cached()
    assert get(srv, "/hf")[2] == b"body-v1"
    s, h, b = get(srv, "/hf", method="HEAD")  # stale: asks the origin, which answers 200
    assert s == 200 and h.get("x-gen") == "2" and b == b""
    s, h, b = get(srv, "/hf")  # fresh again from the HEAD's max-age, with its fields
    assert (s, b) == (200, b"body-v1") and h.get("x-gen") == "2"
    assert cs(h).startswith("ferry; hit")
    assert origin.hits["/hf"] == 2

    def m(h, n):
        tag = '"b"' if h.command == "HEAD" else f'"a{n}"'
        return (200, [("Cache-Control", "max-age=0"), ("ETag", tag)], f"m{n}")
    origin.routes["/hm"] = m
    get(srv, "/hm")
    get(srv, "/hm", method="HEAD")  # another representation: the stored one goes
    s, h, b = get(srv, "/hm", headers={"Cache-Control": "max-stale=600"})
    assert b == b"m3" and "hit" not in cs(h).split("; ")[1]  # not the invalidated m1
    assert origin.hits["/hm"] == 3
