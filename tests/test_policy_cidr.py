"""CIDR allow/deny lists (policy/cidr.c): per listener (before routing) and per route, IPv4 and
IPv6, trusted proxies for X-Forwarded-For and Forwarded (RFC 7239) against spoofing from an
untrusted peer, a configurable status, and every client protocol: h1 (raw sockets), h2
(curl --http2-prior-knowledge), h3 (gtlsclient) and an intercepted (forward-proxy) flow."""
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import http_request, ROOT, FERRY

GTLS = shutil.which("gtlsclient")
CURL = shutil.which("curl")


def cfg(listener_extra="", routes="", top="", protocols="[h1, h2c]"):
    return f"""
workers: 2
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: {protocols}
{listener_extra}
{top}
routes:
{routes}
  - respond: {{{{status: 200, body: "open\\n"}}}}
"""


def test_cidr_listener_allow_v4_and_route_deny(server):
    srv = server(cfg(listener_extra="    cidr: lo",
                     top="cidr-lists:\n  - name: lo\n    allow: [127.0.0.0/8]\n",
                     routes="  - match: {{path: /closed}}\n"
                            "    cidr: {{deny: [127.0.0.1], status: 451}}\n"
                            "    respond: {{status: 200, body: \"closed\\n\"}}\n"))
    st, _, body = http_request(srv.port, "/")
    assert (st, body) == (200, b"open\n")
    st, _, body = http_request(srv.port, "/closed")
    assert st == 451 and b"closed" not in body
    # a /32 deny inside an /8 allow: the longest prefix decides
    st, _, _ = http_request(srv.port, "/closed/x")
    assert st == 451


def test_cidr_listener_deny_before_routing(server):
    # the listener's list runs before the route's handler and before a 404 for no route
    srv = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
    cidr: not-lo
cidr-lists:
  - name: not-lo
    allow: [10.0.0.0/8, "2001:db8::/32"]
    status: 404
routes:
  - match: {{{{path: /only}}}}
    respond: {{{{status: 200, body: "x"}}}}
""")
    assert http_request(srv.port, "/only")[0] == 404
    assert b"open" not in http_request(srv.port, "/nothing")[2]


def test_cidr_ipv6(server):
    srv = server(f"""
workers: 1
listeners:
  - address: "[::1]:{{port}}"
routes:
  - match: {{{{path: /v6only}}}}
    cidr: {{{{allow: ["::1"]}}}}
    respond: {{{{status: 200, body: "v6\\n"}}}}
  - match: {{{{path: /v4only}}}}
    cidr: {{{{allow: [127.0.0.0/8]}}}}
    respond: {{{{status: 200, body: "v4\\n"}}}}
  - match: {{{{path: /no-v6}}}}
    cidr: {{{{deny: ["::/0"]}}}}
    respond: {{{{status: 200, body: "x\\n"}}}}
""")
    h = {"Host": f"[::1]:{srv.port}"}
    assert http_request(srv.port, "/v6only", host="::1", headers=h)[::2] == (200, b"v6\n")
    assert http_request(srv.port, "/v4only", host="::1", headers=h)[0] == 403
    assert http_request(srv.port, "/no-v6", host="::1", headers=h)[0] == 403


TRUST = """
  - match: {{path: /xff}}
    cidr: {{allow: [203.0.113.0/24, "2001:db8::/32"], trusted-proxies: [127.0.0.0/8, 10.0.0.0/8]}}
    respond: {{status: 200, body: "real client allowed\\n"}}
  - match: {{path: /untrusted}}
    cidr: {{allow: [203.0.113.0/24], trusted-proxies: [10.0.0.0/8]}}
    respond: {{status: 200, body: "spoofed\\n"}}
"""


def test_cidr_trusted_proxies_xff_and_forwarded(server):
    srv = server(cfg(routes=TRUST))
    ok = (200, b"real client allowed\n")
    # the peer (127.0.0.1) is trusted: the rightmost untrusted address is the client
    r = http_request(srv.port, "/xff", headers={"X-Forwarded-For": "203.0.113.9"})
    assert r[::2] == ok
    # a client-supplied left part does not matter: 10.1.1.1 is a trusted hop, then 203.0.113.9
    r = http_request(srv.port, "/xff",
                     headers={"X-Forwarded-For": "198.51.100.1, 203.0.113.9, 10.1.1.1"})
    assert r[::2] == ok
    # the rightmost untrusted is outside the allow list
    r = http_request(srv.port, "/xff",
                     headers={"X-Forwarded-For": "203.0.113.9, 198.51.100.1"})
    assert r[0] == 403
    # garbage ends the walk at the trusted peer, which is not allowed
    r = http_request(srv.port, "/xff", headers={"X-Forwarded-For": "203.0.113.9, bogus"})
    assert r[0] == 403
    # no header: the peer itself (127.0.0.1) is not in the list
    assert http_request(srv.port, "/xff")[0] == 403
    # RFC 7239, quoted IPv6 with a port
    r = http_request(srv.port, "/xff",
                     headers={"Forwarded": 'for="[2001:db8::7]:4711";proto=https'})
    assert r[::2] == ok
    r = http_request(srv.port, "/xff", headers={"Forwarded": "for=198.51.100.2"})
    assert r[0] == 403
    r = http_request(srv.port, "/xff", headers={"Forwarded": "for=unknown"})
    assert r[0] == 403


def test_cidr_spoofed_xff_from_untrusted_peer(server, tmp_path, monkeypatch):
    dump = tmp_path / "counters.txt"
    monkeypatch.setenv("FERRY_DUMP_COUNTERS", str(dump))
    srv = server(cfg(routes=TRUST))
    # 127.0.0.1 is not a trusted proxy of /untrusted: its X-Forwarded-For is ignored
    for h in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
              {"X-Forwarded-For": "10.0.0.1, 203.0.113.9"}):
        st, _, body = http_request(srv.port, "/untrusted", headers=h)
        assert st == 403 and b"spoofed" not in body
    srv.stop()
    import re
    n = [int(m.group(1)) for m in re.finditer(
        r'^ferry_policy_cidr_denied_total\{policy="routes\[1\]"\} (\d+)$', dump.read_text(), re.M)]
    assert n == [3]


@pytest.mark.skipif(CURL is None, reason="curl missing")
def test_cidr_h2(server):
    srv = server(cfg(routes=TRUST + "  - match: {{path: /deny}}\n    cidr: {{deny: [127.0.0.0/8]}}\n"
                     "    respond: {{status: 200, body: \"no\"}}\n"))

    def h2(path, *hdr):
        args = [CURL, "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
                "%{http_version} %{http_code}", srv.url(path)]
        for h in hdr:
            args += ["-H", h]
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout

    assert h2("/") == "2 200"
    assert h2("/deny") == "2 403"
    assert h2("/xff", "X-Forwarded-For: 203.0.113.4") == "2 200"
    assert h2("/xff", "X-Forwarded-For: 198.51.100.4") == "2 403"
    assert h2("/untrusted", "X-Forwarded-For: 203.0.113.4") == "2 403"


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (Debian ngtcp2-client) missing")
def test_cidr_h3(server, tmp_path):
    from test_h3 import gtls, statuses
    srv = server(cfg(protocols="[h1, h2, h3]\n    tls: self-signed",
                     routes="  - match: {{path: /deny}}\n    cidr: {{deny: [127.0.0.0/8]}}\n"
                            "    respond: {{status: 200, body: \"no\"}}\n"
                            "  - match: {{path: /allow}}\n    cidr: {{allow: [127.0.0.0/8]}}\n"
                            "    respond: {{status: 200, body: \"yes\"}}\n"),
                 start=False)
    srv.start(udp_ports=[srv.port])
    rc, out, _ = gtls(srv.port, ["/allow", "/deny"], tmp_path)
    assert rc == 0, out
    assert sorted(statuses(out)) == [200, 403]
    # the listener's list holds over QUIC too (the h3 endpoint shares the listener's context)
    srv2 = server(cfg(protocols="[h1, h2, h3]\n    tls: self-signed\n    cidr: no-loopback",
                      top="cidr-lists:\n  - name: no-loopback\n    deny: [127.0.0.0/8]\n"),
                  start=False)
    srv2.start(udp_ports=[srv2.port])
    rc, out, _ = gtls(srv2.port, ["/allow", "/"], tmp_path)
    assert rc == 0, out
    assert statuses(out) == [403, 403]


def test_cidr_intercept_listener(server):
    # a forward-proxy (intercept) listener: the listener's list sees the proxy's clients
    srv = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    kind: intercept
    cidr: nobody
  - address: 127.0.0.1:{{port2}}
    kind: intercept
    cidr: lo
  - address: 127.0.0.1:{{port3}}
cidr-lists:
  - name: nobody
    deny: ["0.0.0.0/0", "::/0"]
  - name: lo
    allow: [127.0.0.0/8]
intercept:
  ca-dir: {{data}}/ca
routes:
  - respond: {{{{status: 200, body: "origin\\n"}}}}
""")
    origin = f"http://127.0.0.1:{srv.ports[2]}/"
    req = (f"GET {origin} HTTP/1.1\r\nHost: 127.0.0.1:{srv.ports[2]}\r\n"
           "Connection: close\r\n\r\n").encode()
    from conftest import raw, statuses
    assert statuses(raw(srv.ports[0], req)) == [403]
    out = raw(srv.ports[1], req)
    assert statuses(out) == [200] and out.endswith(b"origin\n")
    # CONNECT from a denied client is refused before any tunnel
    conn = f"CONNECT 127.0.0.1:{srv.ports[2]} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    assert statuses(raw(srv.ports[0], conn)) == [403]


def check_errors(tmp_path, text):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    p = subprocess.run([FERRY, "check", "-c", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1
    return p.stderr


def test_cidr_config_errors(tmp_path):
    err = check_errors(tmp_path, """listeners:
  - address: 127.0.0.1:1
routes:
  - cidr: {allow: [10.0.0.1/8]}
    respond: {status: 200}
  - cidr: {allow: [300.0.0.0/8], status: 200}
    respond: {status: 200}
  - cidr: {status: 403}
    respond: {status: 200}
""")
    assert "bad.yaml:4:20: routes[0].cidr.allow: '10.0.0.1/8' has bits set below" in err, err
    assert "bad.yaml:6:20: routes[1].cidr.allow: '300.0.0.0/8' not an IPv4 or IPv6" in err, err
    assert "routes[1].cidr.status: must be between 400 and 599, got 200" in err, err
    assert "bad.yaml:8:11: routes[2].cidr: needs `allow`, `deny` or `use`" in err, err
    err = check_errors(tmp_path, """listeners:
  - address: 127.0.0.1:1
    cidr: missing
routes:
  - cidr: nope
    respond: {status: 200}
""")
    assert "bad.yaml:3:11: listeners[0].cidr: no cidr-lists entry named 'missing'" in err, err
    assert "bad.yaml:5:11: routes[0].cidr: no cidr-lists entry named 'nope'" in err, err


@pytest.mark.skipif(CURL is None, reason="curl missing")
def test_cidr_example_runs(server, tmp_path):
    """examples/cidr.yaml as written: check passes, and (with its ports moved to free ones)
    it serves, allowing loopback."""
    ex = ROOT / "examples" / "cidr.yaml"
    p = subprocess.run([FERRY, "check", "-c", str(ex)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    origin = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
routes:
  - respond: {{{{status: 200, body: "from origin\\n"}}}}
""")
    text = ex.read_text().replace("127.0.0.1:8080", "127.0.0.1:PORT1")
    text = text.replace("127.0.0.1:9000", f"127.0.0.1:{origin.port}")
    srv = server(text.replace("{", "{{").replace("}", "}}").replace("PORT1", "{port}"))
    st, _, body = http_request(srv.port, "/")
    assert (st, body) == (200, b"from origin\n")
