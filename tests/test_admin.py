"""The admin listener (issue 14): bearer-token auth, the JSON API (GET/POST /config with an
exact dry-run diff, apply under load, rollback, reload, /upstreams with drain and enable), the
CLI that talks to it (`ferry reload`, `ferry status`), `ferry check`'s warning for an exposed
admin address, and examples/metrics.yaml as written.

Every wait is bounded; a reload through the API returns only once every worker took it.
"""
import http.server
import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import FERRY, ROOT, free_port, http_request, wait_for

LOAD = str(Path(FERRY).parent / "ferry-load")


def admin(port, method="GET", path="/status", body=None, token=None, timeout=30):
    """One request to the admin listener; (status, headers, body bytes)."""
    hdrs = {}
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    if body is not None:
        hdrs["Content-Length"] = str(len(body))
        hdrs["Content-Type"] = "application/yaml"
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        s.sendall(head.encode() + (body.encode() if body is not None else b""))
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    h, _, rest = data.partition(b"\r\n\r\n")
    lines = h.decode("latin-1").split("\r\n")
    hd = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    return int(lines[0].split()[1]), hd, rest


def jadmin(port, method="GET", path="/status", body=None, token=None):
    st, _, b = admin(port, method, path, body, token)
    return st, json.loads(b)


BASE = """
listeners:
  - address: 127.0.0.1:{port}
    name: web
upstreams:
  - name: app
    servers: [http://127.0.0.1:9]
routes:
  - match: {{path: /a/}}
    respond: {{status: 200, body: "a\\n"}}
  - match: {{path: /p/}}
    proxy: app
  - respond: {{status: 200, body: "one\\n"}}
admin:
  address: 127.0.0.1:{port2}
"""


def test_admin_token_required(server):
    """With admin.token every request needs `Authorization: Bearer TOKEN`: none or a wrong one
    is 401 with WWW-Authenticate, for every endpoint; the right one gets the answer."""
    srv = server(BASE.replace("admin:\n", "admin:\n  token: s3cret-Tok\n"))
    a = srv.ports[1]
    for path in ("/metrics", "/status", "/config", "/upstreams"):
        st, h, body = admin(a, path=path)
        assert st == 401, (path, st, body)
        assert h["www-authenticate"].startswith("Bearer"), h
        assert json.loads(body)["ok"] is False
        assert admin(a, path=path, token="s3cret-To")[0] == 401
        assert admin(a, path=path, token="s3cret-Tokx")[0] == 401
        assert admin(a, path=path, token="s3cret-Tok")[0] == 200, path
    # a POST without the token changes nothing
    st, _, _ = admin(a, "POST", "/config", BASE.format(port=srv.ports[0], port2=a))
    assert st == 401
    assert jadmin(a, token="s3cret-Tok")[1]["generation"] == 1


def test_admin_token_file(server, tmp_path):
    tok = tmp_path / "tok"
    tok.write_text("from-a-file\nignored\n")
    srv = server(BASE.replace("admin:\n", f"admin:\n  token-file: {tok}\n"))
    assert admin(srv.ports[1], path="/metrics")[0] == 401
    assert admin(srv.ports[1], path="/metrics", token="from-a-file")[0] == 200


def check(tmp_path, text):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    p = subprocess.run([FERRY, "check", "-c", str(f)], capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stderr, f


def test_admin_check_warns_non_loopback(tmp_path):
    """A non-loopback admin address is an error without allow-remote; with it and no token
    `ferry check` warns; a token silences the warning; loopback never warns."""
    lst = "listeners:\n  - address: 127.0.0.1:1\nroutes:\n  - respond: {status: 204}\n"
    rc, err, f = check(tmp_path, lst + "admin:\n  address: 0.0.0.0:9901\n")
    assert rc == 1
    assert f"{f}:6:12: admin.address: 0.0.0.0:9901 is not a loopback address" in err, err
    rc, err, _ = check(tmp_path, lst + "admin:\n  address: 0.0.0.0:9901\n  allow-remote: true\n")
    assert rc == 0, err
    assert "warning: admin.address 0.0.0.0:9901 is not a loopback address and admin has no " \
           "token" in err, err
    rc, err, _ = check(tmp_path, lst + "admin:\n  address: 0.0.0.0:9901\n  allow-remote: true\n"
                                       "  token: t\n")
    assert rc == 0 and "warning" not in err, err
    rc, err, _ = check(tmp_path, lst + "admin:\n  address: 127.0.0.1:9901\n")
    assert rc == 0 and "warning" not in err, err


def test_admin_dry_run_diff_exact(server, tmp_path):
    """POST /config?dry-run=1 validates like `ferry check` (same errors) and returns the exact
    diff against the running generation, which keeps serving unchanged."""
    srv = server(BASE)
    p, a, p3, p4 = srv.ports
    new = f"""
listeners:
  - address: 127.0.0.1:{p}
    name: web
    backlog: 100
  - address: 127.0.0.1:{p4}
upstreams:
  - name: app2
    servers: [http://127.0.0.1:9]
routes:
  - match: {{path: /b/}}
    respond: {{status: 200, body: "b\\n"}}
  - match: {{path: /p/}}
    proxy: app2
  - respond: {{status: 200, body: "two\\n"}}
limits:
  header-count: 50
admin:
  address: 127.0.0.1:{a}
"""
    st, r = jadmin(a, "POST", "/config?dry-run=1", new)
    assert st == 200, r
    assert r["ok"] is True and r["dry_run"] is True and r["generation"] == 1
    assert r["diff"] == {
        "listeners": {"added": [f"127.0.0.1:{p4}"], "removed": [], "changed": ["web"]},
        "routes": {"added": [{"index": 0, "match": "path: /b/"}],
                   "removed": [{"index": 0, "match": "path: /a/"}],
                   "changed": [{"index": 1, "match": "path: /p/"},
                               {"index": 2, "match": "path: /"}]},
        "upstreams": {"added": ["app2"], "removed": ["app"], "changed": []},
        "sections": ["limits"],
    }, r["diff"]
    # an upstream's servers changing is a change of that upstream; the same config: no diff
    st, r = jadmin(a, "POST", "/config?dry-run=1",
                   BASE.format(port=p, port2=a).replace(":9]", ":19]"))
    assert r["diff"]["upstreams"] == {"added": [], "removed": [], "changed": ["app"]}, r
    assert r["diff"]["routes"] == {"added": [], "removed": [], "changed": []}, r
    st, r = jadmin(a, "POST", "/config?dry-run=1", BASE.format(port=p, port2=a))
    assert r["diff"] == {k: {"added": [], "removed": [], "changed": []}
                         for k in ("listeners", "routes", "upstreams")} | {"sections": []}
    # errors: the same lines as `ferry check` on a file with that text
    bad = BASE.format(port=p, port2=a).replace("proxy: app", "proxy: nope").replace(
        "status: 200, body: \"a", "status: 99, body: \"a")
    st, r = jadmin(a, "POST", "/config?dry-run=1", bad)
    assert st == 400 and r["ok"] is False
    f = tmp_path / "bad.yaml"
    f.write_text(bad)
    pc = subprocess.run([FERRY, "check", "-c", str(f)], capture_output=True, text=True,
                        timeout=30)
    want = [l.replace(str(f), "<request>") for l in pc.stderr.splitlines()
            if l.startswith(str(f))]
    assert want and r["errors"] == want, (r, pc.stderr)
    # nothing was applied
    assert jadmin(a)[1]["generation"] == 1
    assert http_request(p, "/x")[2] == b"one\n"
    assert http_request(p, "/a/")[2] == b"a\n"
    st, r = jadmin(a, "POST", "/config", bad)
    assert st == 400 and r["errors"] == want
    assert jadmin(a)[1]["generation"] == 1


def load(url, seconds):
    p = subprocess.Popen([LOAD, url, "-c", "4", "-d", str(seconds), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p


def test_admin_apply_under_load_and_rollback(server):
    """POST /config applies a new generation while ferry-load keeps 4 connections busy: zero
    failed requests; the new body is served at once; /config/rollback brings the previous
    generation's config back (and a second rollback the newer one again); GET /config prints
    the effective config of the running generation."""
    srv = server(BASE)
    p, a, p3, _ = srv.ports
    assert os.access(LOAD, os.X_OK), LOAD
    lp = load(f"http://127.0.0.1:{p}/x", 4)
    wait_for(lambda: sum_responses(a) > 100, 20, "load to run", lp)
    new = BASE.format(port=p, port2=a).replace('"one', '"two')
    st, r = jadmin(a, "POST", "/config", new)
    assert st == 200 and r["ok"] is True and r["generation"] == 2, r
    assert r["diff"]["routes"]["changed"] == [{"index": 2, "match": "path: /"}]
    assert http_request(p, "/x")[2] == b"two\n"
    st, r = jadmin(a, "POST", "/config/rollback")
    assert st == 200 and r["generation"] == 3, r
    assert http_request(p, "/x")[2] == b"one\n"
    out, err = lp.communicate(timeout=60)
    rep = json.loads(out)
    assert rep["errors"] == 0 and rep["requests"] > 0, rep
    st, r = jadmin(a, "POST", "/config/rollback")
    assert st == 200 and r["generation"] == 4
    assert http_request(p, "/x")[2] == b"two\n"
    st, h, body = admin(a, path="/config")
    assert st == 200 and h["content-type"] == "application/yaml"
    assert body.decode().startswith("# effective configuration of <rollback>"), body
    assert 'body: "two\\n"' in body.decode(), body
    assert jadmin(a)[1]["rollback_available"] is True


def sum_responses(a):
    n = 0
    for line in admin(a, path="/metrics")[2].decode().splitlines():
        if line.startswith("ferry_http_responses_total{"):
            n += int(line.rsplit(" ", 1)[1])
    return n


def test_admin_rollback_without_previous(server):
    srv = server(BASE)
    st, r = jadmin(srv.ports[1], "POST", "/config/rollback")
    assert st == 409 and r["ok"] is False
    st, r = jadmin(srv.ports[1], "GET", "/config/rollback")
    assert st == 405
    assert admin(srv.ports[1], path="/nope")[0] == 404
    assert admin(srv.ports[1], path="/config%2f")[0] == 400
    st, _, _ = admin(srv.ports[1], "POST", "/config", "x" * (2 << 20))
    assert st == 413


class Named(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        b = self.server.name.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def log_message(self, *a):
        pass


def origin(name):
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Named)
    s.name = name
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s


def test_admin_upstreams_drain_enable(server):
    """GET /upstreams lists the servers with their state; drain takes a server out of the
    balance (no new requests), enable puts it back; a reload keeps the drained mark."""
    o1, o2 = origin("one"), origin("two")
    try:
        srv = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: app
    servers: [http://127.0.0.1:{o1.server_port}, http://127.0.0.1:{o2.server_port}]
routes:
  - proxy: app
admin:
  address: 127.0.0.1:{{port2}}
""")
        p, a = srv.ports[0], srv.ports[1]
        st, r = jadmin(a, path="/upstreams")
        assert st == 200
        sv = r["upstreams"][0]["servers"]
        assert r["upstreams"][0]["name"] == "app"
        assert [s["url"] for s in sv] == [f"http://127.0.0.1:{o1.server_port}",
                                          f"http://127.0.0.1:{o2.server_port}"]
        assert all(s["healthy"] and not s["drained"] and not s["ejected"] for s in sv), sv
        got = {http_request(p, "/")[2] for _ in range(6)}
        assert got == {b"one", b"two"}
        st, r = jadmin(a, "POST", "/upstreams/app/servers/0/drain")
        assert st == 200 and r["drained"] is True and r["url"].endswith(str(o1.server_port))
        assert {http_request(p, "/")[2] for _ in range(8)} == {b"two"}
        assert jadmin(a, path="/upstreams")[1]["upstreams"][0]["servers"][0]["drained"] is True
        m = admin(a, path="/metrics")[2].decode()
        assert (f'ferry_upstream_server_drained{{upstream="app",server="http://127.0.0.1:'
                f'{o1.server_port}"}} 1') in m
        # a reload keeps it drained (same upstream name and server URL)
        st, r = jadmin(a, "POST", "/config/reload")
        assert st == 200 and r["generation"] == 2, r
        assert {http_request(p, "/")[2] for _ in range(8)} == {b"two"}
        st, r = jadmin(a, "POST", "/upstreams/app/servers/0/enable")
        assert st == 200 and r["drained"] is False
        assert {http_request(p, "/")[2] for _ in range(6)} == {b"one", b"two"}
        assert jadmin(a, "POST", "/upstreams/nope/servers/0/drain")[0] == 404
        assert jadmin(a, "POST", "/upstreams/app/servers/2/drain")[0] == 404
        assert jadmin(a, "POST", "/upstreams/app/servers/01/drain")[0] == 404
        assert jadmin(a, "GET", "/upstreams/app/servers/0/drain")[0] == 405
    finally:
        o1.shutdown()
        o2.shutdown()


def test_admin_upstreams_ewma_and_ejection(server):
    """GET /upstreams shows the least-time balancer's EWMA of the time to first byte per
    server (null before any response, a number once proxied) and a passive ejection of a
    server that refuses connections."""
    o1 = origin("one")
    try:
        srv = server(f"""
workers: 1
listeners:
  - address: 127.0.0.1:{{port}}
upstreams:
  - name: app
    balance: least-time
    servers: [http://127.0.0.1:{o1.server_port}]
  - name: dead
    servers: [http://127.0.0.1:9]
    max-fails: 1
    fail-timeout: 60s
routes:
  - match: {{{{path: /dead}}}}
    proxy: dead
  - proxy: app
admin:
  address: 127.0.0.1:{{port2}}
""")
        p, a = srv.ports[0], srv.ports[1]
        ups = {u["name"]: u for u in jadmin(a, path="/upstreams")[1]["upstreams"]}
        s0 = ups["app"]["servers"][0]
        assert s0["ewma_ttfb_seconds"] is None and s0["ewma_workers"] == 0, s0
        for _ in range(5):
            assert http_request(p, "/")[0] == 200
        ups = {u["name"]: u for u in jadmin(a, path="/upstreams")[1]["upstreams"]}
        s0 = ups["app"]["servers"][0]
        assert s0["ewma_workers"] == 1, s0
        assert 0 < s0["ewma_ttfb_seconds"] < 30, s0  # a loopback origin: microseconds to ms
        assert s0["healthy"] and not s0["ejected"]
        d = ups["dead"]["servers"][0]
        assert not d["ejected"] and d["ewma_ttfb_seconds"] is None
        assert http_request(p, "/dead")[0] == 502
        d = {u["name"]: u for u in jadmin(a, path="/upstreams")[1]["upstreams"]}["dead"]
        d = d["servers"][0]
        assert d["ejected"] is True and d["healthy"] is False, d
        assert 0 < d["ejected_for_ms"] <= 60000, d
    finally:
        o1.shutdown()


def test_admin_cli_reload_and_status(server):
    """`ferry status` and `ferry reload` ask the admin listener when the config has one:
    reload reports the new generation (or the errors, exit 1) synchronously."""
    srv = server(BASE)
    p, a = srv.ports[0], srv.ports[1]
    cfg = srv.tmp / "ferry.yaml"
    st = subprocess.run([FERRY, "status", "-c", str(cfg)], capture_output=True, text=True,
                        timeout=30)
    assert st.returncode == 0, st.stderr
    j = json.loads(st.stdout)
    assert j["pid"] == srv.proc.pid and j["generation"] == 1 and j["config"] == str(cfg)
    cfg.write_text(cfg.read_text().replace('"one', '"three'))
    r = subprocess.run([FERRY, "reload", "-c", str(cfg), "--pid-file", str(srv.tmp / "none")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert '"generation": 2' in r.stderr, r.stderr
    assert http_request(p, "/x")[2] == b"three\n"
    # the server reads the file itself: an error there is reported back, nothing changes
    good = cfg.read_text()
    cfg.write_text(good.replace("respond: {status: 200, body: \"three", "respond: {status: 1, "
                                                                        "body: \"three"))
    st, r = jadmin(a, "POST", "/config/reload")
    assert st == 400 and r["generation"] == 2 and r["errors"][0].startswith(str(cfg)), r
    assert http_request(p, "/x")[2] == b"three\n"
    cfg.write_text(good)
    st2 = subprocess.run([FERRY, "status", "-c", str(cfg)], capture_output=True, text=True,
                         timeout=30)
    assert json.loads(st2.stdout)["generation"] == 2


def test_admin_status_not_running(tmp_path):
    f = tmp_path / "c.yaml"
    port = free_port()
    f.write_text(f"listeners:\n  - address: 127.0.0.1:1\nroutes:\n  - respond: {{status: 204}}\n"
                 f"admin:\n  address: 127.0.0.1:{port}\n")
    p = subprocess.run([FERRY, "status", "-c", str(f), "--pid-file", str(tmp_path / "no.pid")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert f"admin listener 127.0.0.1:{port}: Connection refused" in p.stderr, p.stderr


def _free(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_admin_example_metrics_yaml(tmp_path):
    """examples/metrics.yaml is valid, and runs as written when its ports are free: the proxy
    on 8080 reaches an origin on 9000 and the admin listener on 9901 serves /metrics."""
    ex = ROOT / "examples" / "metrics.yaml"
    p = subprocess.run([FERRY, "check", "-c", str(ex)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr
    if not all(_free(x) for x in (8080, 9000, 9901)):
        pytest.skip("ports 8080, 9000 or 9901 are taken on this machine")

    class O(http.server.ThreadingHTTPServer):
        allow_reuse_address = True
    o = O(("127.0.0.1", 9000), Named)
    o.name = "origin"
    threading.Thread(target=o.serve_forever, daemon=True).start()
    env = dict(os.environ, HOME=str(tmp_path))
    fp = subprocess.Popen([FERRY, "run", "-c", str(ex), "--pid-file", str(tmp_path / "p")],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env)
    try:
        def up():
            try:
                return admin(9901, path="/metrics")[0] == 200
            except OSError:
                return False
        wait_for(up, 15, "the admin listener", fp)
        assert http_request(8080, "/")[2] == b"origin"
        m = admin(9901, path="/metrics")[2].decode()
        assert 'ferry_http_responses_total{listener="web",route="0",code="2xx",proto="h1"} 1' \
            in m, m
    finally:
        fp.terminate()
        _, err = fp.communicate(timeout=30)
        o.shutdown()
    assert fp.returncode == 0, err


def test_admin_client_certificate(server, tmp_path):
    """admin.tls with client-ca: the TLS handshake needs a client certificate that CA signed;
    without one (or with one from another CA) there is no answer at all."""
    d = tmp_path / "pki"
    d.mkdir()

    def run(*a):
        subprocess.run(["openssl", *a], check=True, capture_output=True, timeout=60)

    for ca in ("ca", "other"):
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"), "-days", "2",
            "-subj", f"/CN={ca}")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{ca}-client.key"), "-out", str(d / f"{ca}-client.csr"),
            "-subj", "/CN=operator")
        run("x509", "-req", "-in", str(d / f"{ca}-client.csr"), "-CA", str(d / f"{ca}.pem"),
            "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-out",
            str(d / f"{ca}-client.pem"), "-days", "2")
    srv = server(BASE.replace("admin:\n", f"data-dir: {{data}}\nadmin:\n  tls: self-signed\n"
                                          f"  client-ca: {d / 'ca.pem'}\n"))
    a = srv.ports[1]

    def curl(*extra):
        return subprocess.run(["curl", "-sS", "-k", "--max-time", "10", "-o", "/dev/null", "-w",
                               "%{http_code}", *extra, f"https://127.0.0.1:{a}/metrics"],
                              capture_output=True, text=True, timeout=30)
    ok = curl("--cert", str(d / "ca-client.pem"), "--key", str(d / "ca-client.key"))
    assert ok.returncode == 0 and ok.stdout == "200", ok.stderr
    no = curl()
    assert no.returncode != 0 and no.stdout == "000", (no.stdout, no.stderr)
    wrong = curl("--cert", str(d / "other-client.pem"), "--key", str(d / "other-client.key"))
    assert wrong.returncode != 0 and wrong.stdout == "000", (wrong.stdout, wrong.stderr)
    # ferry check: client-ca counts as auth for a remote address; without tls it is an error
    lst = "listeners:\n  - address: 127.0.0.1:1\nroutes:\n  - respond: {status: 204}\n"
    rc, err, _ = check(tmp_path, lst + f"admin:\n  address: 0.0.0.0:1\n  allow-remote: true\n"
                                       f"  tls: self-signed\n  client-ca: {d / 'ca.pem'}\n")
    assert rc == 0 and "warning" not in err, err
    rc, err, _ = check(tmp_path, lst + f"admin:\n  client-ca: {d / 'ca.pem'}\n")
    assert rc == 1 and "admin.client-ca: needs tls" in err, err
