"""The inspector (docs/INSPECTOR.md): flows of the intercepting listener and of routes with
`capture:` kept in the disk store, read back through the JSON API on the inspector's own
listener. Store bounds and RSS, the drop paths (an unwritable store directory, a full queue),
redaction, HAR export (validated with json and the HAR 1.2 required fields) and import, the
filter language over HTTP, server-sent events, replay and edit-and-resend, the token, and
examples/inspector.yaml as written."""
import http.client
import json
import os
import socket
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

from conftest import FERRY, ROOT, SANITIZED, bound, wait_for
from test_mitm import nginx  # noqa: F401  (fixtures)

CFG = """\
workers: 2
listeners:
  - address: 127.0.0.1:{port}
    kind: intercept
  - address: 127.0.0.1:{port3}
routes:
  - match: {{path: /echo}}
    echo: {{}}
  - match: {{path: /rp/}}
    static: {{root: {docroot}}}
    capture: {{status-min: 400}}
  - match: {{path: /hdr/}}
    static: {{root: {docroot}}}
    capture: {{sample-percent: 0, header: x-debug}}
  - static: {{root: {docroot}}}
intercept:
  ca-dir: {data}/ca
inspector:
  dir: {tmp}/store
  address: 127.0.0.1:{port2}
  redact-headers: [x-secret]
  redact-json: [password]
"""


def api(srv, path, method="GET", body=None, headers=None, port=None):
    c = http.client.HTTPConnection("127.0.0.1", port or srv.ports[1], timeout=bound(20))
    h = {"Host": f"127.0.0.1:{port or srv.ports[1]}"}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.headers, data


def jget(srv, path, **kw):
    st, _, data = api(srv, path, **kw)
    assert st == 200, (st, data[:300])
    return json.loads(data)


def stats(srv):
    return jget(srv, "/api/stats")


def wait_handled(srv, n):
    """The store has stored, or dropped, at least n flows and its queue is empty."""
    def done():
        s = stats(srv)
        return s["queued"] == 0 and s["stored"] + s["dropped_queue"] + s["dropped_write"] >= n
    wait_for(done, 20, f"{n} flows to reach the store")
    return stats(srv)


def via_proxy(srv, path, method="GET", body=None, headers=None, keep=None):
    """A request to the origin listener (port3) through the intercepting proxy (absolute
    form); `keep` reuses an HTTPConnection to the proxy."""
    c = keep or http.client.HTTPConnection("127.0.0.1", srv.port, timeout=bound(20))
    url = f"http://127.0.0.1:{srv.ports[2]}{path}"
    c.request(method, url, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if keep is None:
        c.close()
    return r.status, data


def flows(srv, flt=None, **params):
    if flt is not None:
        params["filter"] = flt
    q = urllib.parse.urlencode(params)
    return jget(srv, "/api/flows" + ("?" + q if q else ""))["flows"]


def detail(srv, fid):
    return jget(srv, f"/api/flows/{fid}")


def hdr(pairs, name):
    for n, v in pairs:
        if n.lower() == name:
            return v
    return None


@pytest.fixture
def insp(server):
    srv = server(CFG)
    (srv.docroot / "data.json").write_text('{"items": [1, 2, 3], "password": "pw-in-file"}')
    (srv.docroot / "rp").mkdir()
    (srv.docroot / "rp" / "ok.txt").write_text("ok\n")
    (srv.docroot / "hdr").mkdir()
    (srv.docroot / "hdr" / "a.txt").write_text("a\n")
    return srv


def test_inspector_api_redaction_and_filters(insp):
    st, body = via_proxy(insp, "/data.json", headers={
        "Authorization": "Bearer very-secret", "Cookie": "sid=1", "X-Secret": "s3",
        "Accept": "application/json"})
    assert st == 200 and b"pw-in-file" in body  # the client gets the real bytes
    st, body = via_proxy(insp, "/echo", "POST", body=b'{"user": "ann", "password": "hunter2"}',
                         headers={"Content-Type": "application/json"})
    assert st == 200 and b"hunter2" in body
    st, _ = via_proxy(insp, "/missing.txt")
    assert st == 404
    s = wait_handled(insp, 3)
    assert s["stored"] == 3 and s["flows"] == 3

    all_ = flows(insp)
    # newest first; ids follow completion, which two workers may swap for back-to-back flows
    assert [f["id"] for f in all_] == sorted((f["id"] for f in all_), reverse=True)
    assert sorted(f["path"] for f in all_) == ["/data.json", "/echo", "/missing.txt"]
    assert all(f["flags"] == ["intercepted"] for f in all_)
    assert [f["path"] for f in flows(insp, "~m POST")] == ["/echo"]
    assert [f["path"] for f in flows(insp, "~c 4xx")] == ["/missing.txt"]
    assert [f["path"] for f in flows(insp, "~c 200 & ~t json & ~m GET")] == ["/data.json"]
    assert [f["path"] for f in flows(insp, "~b ann")] == ["/echo"]
    assert [f["path"] for f in flows(insp, '~hq "accept: application/json"')] == ["/data.json"]
    assert [f["path"] for f in flows(insp, "!~c 200")] == ["/missing.txt"]
    assert len(flows(insp, "~d 127.0.0.1 | ~m PUT")) == 3
    page = jget(insp, "/api/flows?limit=2")
    assert page["more"] is True and len(page["flows"]) == 2
    older = jget(insp, f"/api/flows?limit=2&before={page['flows'][-1]['id']}")
    assert [f["path"] for f in older["flows"]] == ["/data.json"] and older["more"] is False
    st, _, data = api(insp, "/api/flows?filter=" + urllib.parse.quote("~c (200"))
    assert st == 400 and "at" in json.loads(data)

    d = detail(insp, all_[2]["id"])
    rq = d["request"]["headers"]
    assert hdr(rq, "authorization") == "[redacted]"
    assert hdr(rq, "cookie") == "[redacted]"
    assert hdr(rq, "x-secret") == "[redacted]"
    assert hdr(rq, "accept") == "application/json"
    assert json.loads(d["response"]["text"]) == {"items": [1, 2, 3], "password": "[redacted]"}
    assert d["response"]["size"] == len(body) or d["response"]["size"] > 0
    e = detail(insp, all_[1]["id"])
    assert json.loads(e["request"]["text"]) == {"user": "ann", "password": "[redacted]"}
    assert json.loads(e["response"]["text"]) == {"user": "ann", "password": "[redacted]"}
    st, h, raw = api(insp, f"/api/flows/{all_[2]['id']}/response/body")
    assert st == 200 and h["Content-Type"] == "application/json" and b"[redacted]" in raw
    st, _, curl = api(insp, f"/api/flows/{all_[1]['id']}/curl")
    assert st == 200 and curl.startswith(b"curl -X 'POST'") and b"--data-binary" in curl
    assert api(insp, "/api/flows/999999")[0] == 404
    # the on-disk store holds no secret either
    raw_store = b"".join(p.read_bytes() for p in (insp.tmp / "store").iterdir())
    for secret in (b"very-secret", b"hunter2", b"pw-in-file", b"sid=1", b"s3\x00"):
        assert secret not in raw_store
    # a DNS-rebinding Host is refused without a token
    assert api(insp, "/api/stats", headers={"Host": "evil.example:80"})[0] == 403


HAR_REQ = {"method", "url", "httpVersion", "cookies", "headers", "queryString", "headersSize",
           "bodySize"}
HAR_RES = {"status", "statusText", "httpVersion", "cookies", "headers", "content", "redirectURL",
           "headersSize", "bodySize"}


def check_har(doc):
    log = doc["log"]
    assert log["version"] == "1.2" and log["creator"]["name"] == "ferry"
    assert isinstance(log["entries"], list)
    for e in log["entries"]:
        assert {"startedDateTime", "time", "request", "response", "cache", "timings"} <= set(e)
        assert HAR_REQ <= set(e["request"]), e["request"].keys()
        assert HAR_RES <= set(e["response"]), e["response"].keys()
        assert {"size", "mimeType"} <= set(e["response"]["content"])
        assert {"send", "wait", "receive"} <= set(e["timings"])
        for h in e["request"]["headers"] + e["response"]["headers"]:
            assert set(h) == {"name", "value"}
    return log["entries"]


def test_inspector_har_export_and_import(insp):
    via_proxy(insp, "/data.json?x=1&y")
    via_proxy(insp, "/echo", "POST", body=b"plain body")
    wait_handled(insp, 2)
    st, h, data = api(insp, "/api/export.har")
    assert st == 200 and "attachment" in h["Content-Disposition"]
    entries = check_har(json.loads(data))
    assert [e["request"]["url"] for e in entries] == [
        f"http://127.0.0.1:{insp.ports[2]}/data.json?x=1&y", f"http://127.0.0.1:{insp.ports[2]}/echo"]
    assert entries[0]["request"]["queryString"] == [{"name": "x", "value": "1"},
                                                    {"name": "y", "value": ""}]
    assert entries[1]["request"]["postData"]["text"] == "plain body"
    assert entries[1]["response"]["content"]["text"] == "plain body"
    only = check_har(jget(insp, "/api/export.har?filter=" + urllib.parse.quote("~m POST")))
    assert len(only) == 1
    ids = [f["id"] for f in flows(insp)]
    assert len(check_har(jget(insp, f"/api/export.har?ids={ids[0]},{ids[1]},424242"))) == 2
    # import it back: two more flows, marked imported, with the same bodies
    st, _, out = api(insp, "/api/import", "POST", body=data,
                     headers={"Content-Type": "application/json"})
    assert st == 200 and json.loads(out) == {"imported": 2}
    imp = flows(insp, None)[:2]
    assert all("imported" in f["flags"] for f in imp)
    assert detail(insp, imp[0]["id"])["response"]["text"] == "plain body"
    st, _, out = api(insp, "/api/import", "POST", body=b'{"not": "har"}')
    assert st == 400 and b"log.entries" in out


def test_inspector_reverse_proxy_capture_conditions(insp):
    # /rp/ keeps only status >= 400; /hdr/ only flows with an x-debug header
    st, _, _ = raw_get(insp, "/rp/ok.txt")
    assert st == 200
    st, _, _ = raw_get(insp, "/rp/nope.txt")
    assert st == 404
    raw_get(insp, "/hdr/a.txt")
    raw_get(insp, "/hdr/a.txt", {"X-Debug": "1"})
    raw_get(insp, "/data.json")  # no capture: on this route
    s = wait_handled(insp, 2)
    assert s["sampled_out"] == 2
    got = flows(insp)
    assert sorted((f["path"], f["status"]) for f in got) == [("/hdr/a.txt", 200),
                                                             ("/rp/nope.txt", 404)]
    assert all(f["flags"] == [] for f in got)


def raw_get(srv, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", srv.ports[2], timeout=bound(20))
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.headers, data


def test_inspector_events_stream(insp):
    via_proxy(insp, "/data.json")
    wait_handled(insp, 1)
    s = socket.create_connection(("127.0.0.1", insp.ports[1]), timeout=bound(20))
    q = urllib.parse.quote("~u echo")
    s.sendall(f"GET /api/events?after=0&filter={q} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    assert b"text/event-stream" in buf
    via_proxy(insp, "/echo", "POST", body=b"live")
    while b"data: {" not in buf:  # the /data.json flow does not match the filter
        chunk = s.recv(4096)
        assert chunk, "event stream closed"
        buf += chunk
    while not buf.endswith(b"\n\n"):
        buf += s.recv(4096)
    s.close()
    events = [json.loads(line[6:]) for line in buf.decode().split("\n") if line.startswith("data: {")]
    assert [e["path"] for e in events] == ["/echo"]


def test_inspector_replay_and_edit(insp):
    via_proxy(insp, "/echo", "POST", body=b'{"n": 1}', headers={"X-Orig": "yes"})
    wait_handled(insp, 1)
    fid = flows(insp)[0]["id"]
    out = jget(insp, f"/api/flows/{fid}/replay", method="POST", body=b"")
    assert out == {"status": 200}
    s = wait_handled(insp, 2)
    assert s["stored"] == 2
    again = detail(insp, flows(insp)[0]["id"])
    assert again["path"] == "/echo" and again["request"]["text"] == '{"n": 1}'
    assert hdr(again["request"]["headers"], "x-orig") == "yes"
    form = urllib.parse.urlencode({"method": "PUT", "url": f"http://127.0.0.1:{insp.ports[2]}/echo",
                                   "headers": "X-Edited: 1\nContent-Type: text/plain",
                                   "body": "edited"}).encode()
    out = jget(insp, f"/api/flows/{fid}/replay", method="POST", body=form,
               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert out == {"status": 200}
    wait_handled(insp, 3)
    e = detail(insp, flows(insp)[0]["id"])
    assert e["method"] == "PUT" and e["response"]["text"] == "edited"
    assert hdr(e["request"]["headers"], "x-edited") == "1"
    assert hdr(e["request"]["headers"], "x-orig") is None
    # a cross-site form post cannot trigger a replay
    st, _, _ = api(insp, f"/api/flows/{fid}/replay", "POST", body=b"",
                   headers={"Origin": "http://evil.example"})
    assert st == 403


def dir_size(d):
    return sum(p.stat().st_size for p in Path(d).iterdir() if p.is_file())


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_inspector_store_bound_and_flat_rss(server):
    srv = server(CFG.replace("  redact-json: [password]\n",
                             "  max-size: 1m\n  segment-size: 64k\n  body-cap: 16k\n"))
    (srv.docroot / "blob.bin").write_bytes(os.urandom(12 * 1024))
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=bound(20))
    n = 0

    def burst(k):
        nonlocal n
        for _ in range(k):
            st, data = via_proxy(srv, "/blob.bin", keep=c)
            assert st == 200 and len(data) == 12 * 1024
            n += 1
        return wait_handled(srv, n)

    burst(300)  # ~3.7 MB: the ring is full and deleting
    rss1 = rss_kib(srv.proc.pid)
    s = burst(600)  # ~7.4 MB more
    rss2 = rss_kib(srv.proc.pid)
    c.close()
    assert s["dropped_queue"] + s["dropped_write"] == 0
    assert s["deleted"] > 0 and s["stored"] == 900
    assert s["bytes"] <= 1 << 20
    assert dir_size(srv.tmp / "store") <= 1 << 20
    assert s["flows"] == len(flows(srv, limit=5000)) < 900
    if not SANITIZED:  # ASan's quarantine keeps freed memory: RSS is not the heap there
        assert rss2 - rss1 < 4096, (rss1, rss2)  # KiB: twice the writes, no growth
    # the index is rebuilt from the segments at start: the same flows after a restart
    last = s["last"]
    srv.stop()
    srv2 = server(CFG.replace("{tmp}/store", str(srv.tmp / "store"))
                  .replace("  redact-json: [password]\n", "  max-size: 1m\n  segment-size: 64k\n"))
    s2 = stats(srv2)
    assert s2["flows"] == s["flows"] and s2["last"] == last


def test_inspector_unwritable_store_drops_and_counts(server):
    # every flow opens a new segment (segment-size 4k < a flow); then the store's folder is
    # replaced by a regular file: segments cannot be created, flows are dropped and counted
    # and the requests are answered as before
    srv = server(CFG.replace("  redact-json: [password]\n", "  segment-size: 4k\n"))
    store = srv.tmp / "store"
    st, _ = via_proxy(srv, "/echo", "POST", body=b"x" * 5000)
    assert st == 200
    assert wait_handled(srv, 1)["stored"] == 1
    for p in store.iterdir():
        p.unlink()
    store.rmdir()
    store.write_text("a file where the store's folder was")
    for i in range(5):
        st, body = via_proxy(srv, "/echo", "POST", body=b"x" * 5000)
        assert st == 200 and len(body) == 5000
    s = wait_handled(srv, 6)
    assert s["dropped_write"] == 5 and s["stored"] == 1
    assert "flows are dropped and counted" in srv.log()
    # and an unusable folder named in the config is refused at load time
    r = subprocess.run([FERRY, "check", "-c", "/dev/stdin"], input=CFG.format(
        port=1, port2=2, port3=3, docroot=srv.docroot, data=srv.data, tmp=store),
        capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "inspector.dir: cannot create" in r.stderr


def test_inspector_full_queue_drops_and_counts(server):
    # a flow larger than queue-bytes can never be queued: dropped at once, the request is fine
    srv = server(CFG.replace("  redact-json: [password]\n", "  queue-bytes: 4k\n"))
    st, body = via_proxy(srv, "/echo", "POST", body=b"y" * 20000)
    assert st == 200 and body == b"y" * 20000
    st, _ = via_proxy(srv, "/echo", "POST", body=b"small")
    assert st == 200
    s = wait_handled(srv, 2)
    assert s["dropped_queue"] == 1 and s["stored"] == 1


def test_inspector_token(server):
    srv = server(CFG + "  token: s3cret-token\n")
    assert api(srv, "/api/stats")[0] == 401
    assert api(srv, "/")[0] == 401
    assert api(srv, "/api/stats?token=wrong")[0] == 401
    assert api(srv, "/api/stats?token=s3cret-token")[0] == 200
    assert api(srv, "/api/stats", headers={"Authorization": "Bearer s3cret-token"})[0] == 200
    # with a token, other host names are fine (e.g. behind an SSH tunnel)
    assert api(srv, "/api/stats?token=s3cret-token", headers={"Host": "inspector.lan"})[0] == 200


def test_inspector_ui_is_embedded(insp):
    st, h, page = api(insp, "/")
    assert st == 200 and h["Content-Type"].startswith("text/html")
    assert b"Ferry inspector" in page and b'src="/ui/app.js"' in page
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        st, h, data = api(insp, "/ui/" + name)
        assert st == 200 and h["Content-Type"].startswith(kind)
        assert data == (ROOT / "ui" / name).read_bytes()  # served as built, nothing fetched
    assert b"http" not in (ROOT / "ui" / "index.html").read_bytes().replace(b"http-equiv", b"")


def _bindable(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no holder
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_inspector_example_runs_as_written(server, tmp_path):
    example = ROOT / "examples" / "inspector.yaml"
    r = subprocess.run([FERRY, "check", "-c", str(example)], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, HOME=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    if not (_bindable(8888) and _bindable(9902)):
        pytest.skip("ports 8888/9902 of examples/inspector.yaml are held by another process")
    srv = server(args=["run", "-c", str(example)], start=False)
    srv.start(wait_ports=[8888, 9902])
    origin = server("listeners:\n  - address: 127.0.0.1:{port}\nroutes:\n"
                    "  - respond: {{status: 200, body: \"example ok\\n\"}}\n")
    c = http.client.HTTPConnection("127.0.0.1", 8888, timeout=bound(20))
    c.request("GET", f"http://127.0.0.1:{origin.port}/via-example")
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"example ok\n"
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", 9902, timeout=bound(20))
    c.request("GET", "/")
    r = c.getresponse()
    assert r.status == 200 and b"Ferry inspector" in r.read()
    c.close()

    def seen():
        c = http.client.HTTPConnection("127.0.0.1", 9902, timeout=bound(20))
        c.request("GET", "/api/flows")
        out = json.loads(c.getresponse().read())
        c.close()
        return [f["path"] for f in out["flows"]] == ["/via-example"]
    wait_for(seen, 20, "the example's flow in the inspector")
    assert (srv.tmp / ".local" / "share" / "ferry" / "inspector").is_dir()


def test_inspector_https_interception_h1_and_h2(server, certs, nginx):  # noqa: F811
    """Flows inside intercepted TLS tunnels (HTTP/1.1 and HTTP/2 to the client) are stored
    with their protocol; the CONNECT itself is not a flow."""
    srv = server(CFG.replace("  ca-dir: {data}/ca\n", f"  ca-dir: {{data}}/ca\n  upstream-ca: {certs['ca']}\n"))
    ca = srv.data / "ca" / "ferry-ca.pem"
    url = f"https://localhost:{nginx.tls_port}/index.html"
    for flag in ("--http1.1", "--http2"):
        p = subprocess.run(["curl", "-sS", "--max-time", "20", flag, "-x", f"http://127.0.0.1:{srv.port}",
                            "--cacert", str(ca), url], capture_output=True, timeout=30)
        assert p.returncode == 0 and p.stdout == b"hello from nginx\n", p.stderr
    wait_handled(srv, 2)
    got = flows(srv)
    assert [(f["method"], f["path"], f["status"], f["protocol"]) for f in got] == [
        ("GET", "/index.html", 200, "HTTP/2"), ("GET", "/index.html", 200, "HTTP/1.1")]
    d = detail(srv, got[0]["id"])
    assert d["scheme"] == "https" and d["host"] == f"localhost:{nginx.tls_port}"
    assert d["response"]["text"] == "hello from nginx\n"
    # the client's HTTP/2 stream id (curl's first stream is 1); HTTP/1.1 has none
    assert got[0]["stream"] == 1 and d["stream"] == 1 and got[1]["stream"] == 0
    # TLS of both sides: what curl agreed with us, the certificate we forged for localhost
    # (issued by Ferry's CA), and the origin's certificate (nginx's, issued by the test CA)
    ca_pem = ca.read_text()
    forged_issuer = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253"],
                                   input=ca_pem, capture_output=True, text=True).stdout
    origin_fp = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in",
                                str(certs["cert"])], capture_output=True, text=True).stdout
    for f in got:
        tls = detail(srv, f["id"])["tls"]
        assert tls["sni"] == "localhost" and tls["client_version"].startswith("TLSv1.")
        assert tls["client_alpn"] == ("h2" if f["protocol"] == "HTTP/2" else "http/1.1")
        assert tls["client_cipher"] and tls["origin_version"].startswith("TLSv1.")
        assert "CN=localhost" in tls["forged_subject"]
        assert tls["forged_issuer"] in forged_issuer and tls["forged_issuer"]
        assert tls["origin_sha256"] == origin_fp.strip().split("=", 1)[1], (tls, origin_fp)
        assert tls["origin_sha256"] != tls["forged_sha256"]
    assert "origin_seen" in detail(srv, got[0]["id"])["tls"]  # the second tunnel's probe was cached


def test_inspector_doc_samples_pass_check(tmp_path):
    """Every YAML sample in docs/INSPECTOR.md is a valid config (a route sample gets the
    listener and upstream it needs)."""
    text = (ROOT / "docs" / "INSPECTOR.md").read_text()
    blocks = text.split("```yaml\n")[1:]
    assert len(blocks) >= 2
    for i, b in enumerate(blocks):
        y = b.split("```", 1)[0]
        y = "\n".join(line[2:] if line.startswith("  ") and not y.startswith("listeners") else line
                      for line in y.splitlines()) + "\n"
        if not y.startswith("listeners"):
            y = ("listeners:\n  - address: 127.0.0.1:1\nupstreams:\n  - name: backend\n"
                 "    servers: [http://127.0.0.1:2]\ninspector: {}\n" + y)
        cfg = tmp_path / f"s{i}.yaml"
        cfg.write_text(y)
        r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, HOME=str(tmp_path)))
        assert r.returncode == 0, (y, r.stderr)


def test_inspector_breakpoints_hold_edit_drop_timeout(server, nginx):  # noqa: F811
    """A breakpoint holds matching requests: released with an edited header the origin sees
    the edit; dropped the client gets 502; unanswered it goes on unchanged after
    breakpoint-timeout. Requests that do not match pass."""
    import threading
    srv = server(CFG + "  breakpoint-timeout: 1s\n")
    st, _, out = api(srv, "/api/breakpoint", "POST", body=b"filter=~c+(")
    assert st == 400 and "at" in json.loads(out)
    out = jget(srv, "/api/breakpoint", method="POST",
               body=urllib.parse.urlencode({"filter": "~u /hdr & ~hq x-test"}).encode())
    assert out["filter"] == "~u /hdr & ~hq x-test" and out["held"] == []
    results = {}

    def client(key, headers):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=bound(30))
        c.request("GET", f"http://127.0.0.1:{nginx.port}/hdr", headers=headers)
        r = c.getresponse()
        results[key] = (r.status, r.read())
        c.close()

    # not matching (no x-test header): passes at once
    client("free", {})
    assert results["free"][0] == 200

    def held_one():
        h = jget(srv, "/api/breakpoint")["held"]
        return h[0] if len(h) == 1 else None

    t = threading.Thread(target=client, args=("edit", {"X-Test": "orig"}))
    t.start()
    h = wait_for(held_one, 20, "a held request")
    assert h["path"] == "/hdr" and hdr(h["headers"], "x-test") == "orig"
    assert "edit" not in results
    headers = "\n".join(f"{n}: {v}" for n, v in h["headers"] if n.lower() != "x-test")
    out = jget(srv, f"/api/held/{h['id']}/release", method="POST",
               body=urllib.parse.urlencode({"headers": headers + "\nX-Test: edited"}).encode())
    assert out == {"released": h["id"]}
    t.join(bound(30))
    assert results["edit"][0] == 200 and b"x=edited" in results["edit"][1]
    assert api(srv, f"/api/held/{h['id']}/drop", "POST", body=b"")[0] == 404  # already gone

    t = threading.Thread(target=client, args=("drop", {"X-Test": "1"}))
    t.start()
    h = wait_for(held_one, 20, "a held request")
    assert jget(srv, f"/api/held/{h['id']}/drop", method="POST", body=b"") == {"dropped": h["id"]}
    t.join(bound(30))
    assert results["drop"][0] == 502

    t = threading.Thread(target=client, args=("timeout", {"X-Test": "late"}))
    t.start()
    wait_for(held_one, 20, "a held request")
    t.join(bound(30))  # breakpoint-timeout: 1s, then it goes on as it was
    assert results["timeout"][0] == 200 and b"x=late" in results["timeout"][1]
    assert jget(srv, "/api/breakpoint")["held"] == []
    # cleared: nothing is held any more
    jget(srv, "/api/breakpoint", method="POST", body=b"filter=")
    client("after", {"X-Test": "2"})
    assert results["after"][0] == 200


def test_inspector_survives_reload(insp):
    """SIGHUP builds a new generation: the running inspector (store, listener, ids) carries on
    and the new generation's capture filter feeds it; the old one's is freed."""
    import signal
    via_proxy(insp, "/data.json")
    assert wait_handled(insp, 1)["stored"] == 1
    insp.proc.send_signal(signal.SIGHUP)
    line = "reload: generation 2 active on all workers"
    wait_for(lambda: line in insp.log(), 30, line, insp.proc)
    st, _ = via_proxy(insp, "/echo", "POST", body=b"after reload")
    assert st == 200
    s = wait_handled(insp, 2)
    assert s["stored"] == 2 and s["last"] == 2
    assert [f["path"] for f in flows(insp)] == ["/echo", "/data.json"]


def test_inspector_timings_in_detail_and_har(insp):
    """Each proxied flow records how its origin connection was made: the first on a fresh
    connection (connect measured, no TLS on plain HTTP), the next on the pooled one (connect,
    TLS and DNS did not happen: -1). HAR timings carry them (connect includes ssl)."""
    keep = http.client.HTTPConnection("127.0.0.1", insp.port, timeout=bound(20))
    assert via_proxy(insp, "/data.json", keep=keep)[0] == 200
    assert via_proxy(insp, "/rp/ok.txt", keep=keep)[0] == 200
    keep.close()
    wait_handled(insp, 2)
    second, first = flows(insp)
    t1, t2 = detail(insp, first["id"])["timings"], detail(insp, second["id"])["timings"]
    assert t1["connect"] is not None and t1["connect"] >= 0 and t1["tls"] == -1
    assert t1["dns"] is not None and t1["dns"] >= 0 and t1["wait"] is not None
    assert t2["connect"] == -1 and t2["tls"] == -1 and t2["dns"] == -1
    assert {"first_byte", "total"} <= set(t1)
    entries = check_har(jget(insp, f"/api/export.har?ids={first['id']},{second['id']}"))
    h1, h2 = (e["timings"] for e in entries)
    assert h1["connect"] >= 0 and h1["ssl"] == -1 and h1["dns"] >= 0
    assert h2["connect"] == -1 and h2["ssl"] == -1 and h2["dns"] == -1
    for e in entries:
        assert all(v == -1 or v >= 0 for v in e["timings"].values())
    # imported back, the timings come along
    doc = {"log": {"version": "1.2", "creator": {"name": "t", "version": "1"}, "entries": entries}}
    st, _, out = api(insp, "/api/import", "POST", body=json.dumps(doc).encode())
    assert st == 200 and json.loads(out) == {"imported": 2}
    imp = detail(insp, flows(insp)[1]["id"])
    assert "imported" in imp["flags"] and imp["timings"]["connect"] == t1["connect"]


def test_inspector_python_export_runs(insp):
    """Copy as Python: the snippet is valid Python that sends the same request (method,
    headers, body) and prints the response; run here against the origin listener."""
    body = b'{"q": "it\'s \\"quoted\\"", "bin": "\xc3\xa9"}'
    st, _ = via_proxy(insp, "/echo?a=1", "PUT", body=body,
                      headers={"Content-Type": "application/json", "X-Quote": "a'b\"c"})
    assert st == 200
    wait_handled(insp, 1)
    fid = flows(insp)[0]["id"]
    st, h, src = api(insp, f"/api/flows/{fid}/python")
    assert st == 200 and h["Content-Type"].startswith("text/x-python")
    src = src.decode()
    assert src.isascii() and "urllib.request.Request(" in src and "method='PUT'" in src
    compile(src, "snippet.py", "exec")
    p = subprocess.run(["/usr/bin/python3", "-c", src], capture_output=True, timeout=bound(30))
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode("utf-8")
    assert out.startswith("200 ")
    assert body.decode("utf-8") in out  # /echo answers the body it got
    assert api(insp, "/api/flows/424242/python")[0] == 404


def test_inspector_response_breakpoints(server):
    """A response breakpoint holds matching responses before their head reaches the client:
    released with an edited status and header the client (and the store) get the edit;
    released with a new body the client gets that body; dropped the client gets 502;
    unanswered it goes on unchanged after breakpoint-timeout. The request breakpoint is a
    separate filter."""
    import threading
    srv = server(CFG + "  breakpoint-timeout: 1s\n")
    (srv.docroot / "data.json").write_text('{"items": [1, 2, 3]}')
    st, _, out = api(srv, "/api/breakpoint", "POST", body=b"response=~c+(")
    assert st == 400 and "at" in json.loads(out)
    out = jget(srv, "/api/breakpoint", method="POST",
               body=urllib.parse.urlencode({"response": "~u /data.json & ~c 200 & ~t json"}).encode())
    assert out["response"] == "~u /data.json & ~c 200 & ~t json" and out["filter"] == ""
    results = {}

    def client(key, path="/data.json"):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=bound(30))
        c.request("GET", f"http://127.0.0.1:{srv.ports[2]}{path}")
        r = c.getresponse()
        results[key] = (r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read())
        c.close()

    client("free", "/rp/none.txt")  # not matching: passes at once
    assert results["free"][0] == 404

    def held_one():
        h = jget(srv, "/api/breakpoint")["held"]
        return h[0] if len(h) == 1 else None

    def hold(key):
        t = threading.Thread(target=client, args=(key,))
        t.start()
        h = wait_for(held_one, 20, "a held response")
        assert h["phase"] == "response" and h["status"] == 200 and h["path"] == "/data.json"
        assert "json" in hdr(h["headers"], "content-type") and key not in results
        return t, h

    t, h = hold("edit")
    headers = "\n".join(f"{n}: {v}" for n, v in h["headers"]) + "\nX-Edited: yes"
    out = jget(srv, f"/api/held/{h['id']}/release", method="POST",
               body=urllib.parse.urlencode({"headers": headers, "status": "203"}).encode())
    assert out == {"released": h["id"]}
    t.join(bound(30))
    st, hs, body = results["edit"]
    assert st == 203 and hs["x-edited"] == "yes" and json.loads(body) == {"items": [1, 2, 3]}

    t, h = hold("body")
    jget(srv, f"/api/held/{h['id']}/release", method="POST",
         body=urllib.parse.urlencode({"body": '{"replaced": true}'}).encode())
    t.join(bound(30))
    st, hs, body = results["body"]
    assert st == 200 and body == b'{"replaced": true}' and hs["content-length"] == str(len(body))

    t, h = hold("drop")
    assert jget(srv, f"/api/held/{h['id']}/drop", method="POST", body=b"") == {"dropped": h["id"]}
    t.join(bound(30))
    assert results["drop"][0] == 502 and results["drop"][2] == b""

    t, h = hold("timeout")
    t.join(bound(30))  # breakpoint-timeout: 1s, then it goes on as it was
    assert results["timeout"][0] == 200 and json.loads(results["timeout"][2]) == {"items": [1, 2, 3]}

    # a client that goes away while its response is held: the hold goes with it
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
    s.sendall(f"GET http://127.0.0.1:{srv.ports[2]}/data.json HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    wait_for(held_one, 20, "a held response")
    s.close()
    wait_for(lambda: jget(srv, "/api/breakpoint")["held"] == [], 20, "the hold to go")

    # the store keeps what the client got (the abandoned one too)
    wait_handled(srv, 6)
    got = {f["id"]: f for f in flows(srv, "~u /data.json")}
    stored = [detail(srv, i) for i in sorted(got)]
    assert [d["status"] for d in stored] == [203, 200, 502, 200, 200]
    assert hdr(stored[0]["response"]["headers"], "x-edited") == "yes"
    assert stored[1]["response"]["text"] == '{"replaced": true}'
    # cleared: nothing is held any more
    jget(srv, "/api/breakpoint", method="POST", body=b"response=")
    client("after")
    assert results["after"][0] == 200


WS_CFG = CFG.replace("routes:\n", """routes:
  - match: {{path: /ws/}}
    proxy: wsorigin
    capture: {{}}
""", 1).replace("intercept:\n", """upstreams:
  - name: wsorigin
    servers: [{ws}]
intercept:
""", 1)


def test_inspector_websocket_messages(server):
    """WebSocket flows are stored with their messages: through a reverse-proxy route with
    `capture:` (python3-websockets both ends) and through the intercepting proxy (a raw
    Upgrade in absolute form). Direction, opcode, size, the payload unmasked, a binary one as
    base64, a big one cut at body-cap, JSON redacted as bodies are."""
    import asyncio
    import websockets
    from proxy_kit import WsEchoOrigin, _ws_frame, _ws_parse
    o = WsEchoOrigin()
    try:
        srv = server(WS_CFG.replace("{ws}", o.url) + "  body-cap: 64k\n")

        async def run():
            # no permessage-deflate: the payloads are stored as sent (compressed ones are
            # marked so, not inflated)
            async with websockets.connect(f"ws://127.0.0.1:{srv.ports[2]}/ws/chat",
                                          open_timeout=5, close_timeout=5,
                                          compression=None) as ws:
                for m in ["hello", b"\x00\x01binary\xff", '{"password": "pw", "n": 1}',
                          "x" * 100000]:
                    await ws.send(m)
                    assert await asyncio.wait_for(ws.recv(), 5) == m

        asyncio.run(run())
        wait_handled(srv, 1)
        f = flows(srv)[0]
        assert f["status"] == 101 and f["path"] == "/ws/chat"
        d = detail(srv, f["id"])
        ws = [m for m in d["ws"] if m["opcode"] in (1, 2)]
        assert [(m["from"], m["opcode"]) for m in ws] == [
            ("client", 1), ("origin", 1), ("client", 2), ("origin", 2),
            ("client", 1), ("origin", 1), ("client", 1), ("origin", 1)]
        assert ws[0]["text"] == "hello" and ws[1]["text"] == "hello" and ws[0]["size"] == 5
        assert ws[2]["base64"] == "AAFiaW5hcnn/" and not ws[2]["cut"]
        assert ws[4]["text"] == '{"password": "[redacted]", "n": 1}' and ws[4]["size"] == 26
        big = ws[6]
        assert big["size"] == 100000 and big["cut"] and len(big["text"]) < 65536
        assert any(m["opcode"] == 8 for m in d["ws"])  # the close handshake
        # HAR: Chrome's `_webSocketMessages`, and back through an import
        har = json.loads(api(srv, f"/api/export.har?ids={f['id']}")[2])
        hm = [m for m in har["log"]["entries"][0]["_webSocketMessages"] if m["opcode"] in (1, 2)]
        assert [(m["type"], m["opcode"]) for m in hm[:4]] == [
            ("send", 1), ("receive", 1), ("send", 2), ("receive", 2)]
        assert hm[0]["data"] == "hello" and "_encoding" not in hm[0]
        assert hm[2]["data"] == "AAFiaW5hcnn/" and hm[2]["_encoding"] == "base64"
        assert hm[6]["_cut"] is True and hm[6]["_size"] == 100000
        st, _, out = api(srv, "/api/import", "POST", body=json.dumps(har).encode(),
                         headers={"Content-Type": "application/json"})
        assert st == 200 and json.loads(out) == {"imported": 1}
        imp = detail(srv, flows(srv, None)[0]["id"])
        assert [(m["from"], m["opcode"], m["size"], m["cut"], m.get("text"), m.get("base64"))
                for m in imp["ws"]] == [
            (m["from"], m["opcode"], m["size"], m["cut"], m.get("text"), m.get("base64"))
            for m in d["ws"]]

        # intercepted: an Upgrade in absolute form through the proxy
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=bound(10))
        host = o.url[len("http://"):]
        s.sendall((f"GET {o.url}/raw HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        head, buf = buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101")
        s.sendall(_ws_frame(b"via the proxy"))
        msgs = []
        while not msgs:
            got, buf = _ws_parse(buf + s.recv(4096))
            msgs += got
        assert msgs[0] == (1, b"via the proxy")
        s.sendall(_ws_frame(b"\x03\xe8", opcode=8))
        while s.recv(4096):
            pass
        s.close()
        wait_handled(srv, 2)
        f = flows(srv)[0]
        assert f["path"] == "/raw" and f["flags"] == ["intercepted"] and f["status"] == 101
        ws = detail(srv, f["id"])["ws"]
        assert [(m["from"], m["opcode"], m.get("text")) for m in ws][:2] == [
            ("client", 1, "via the proxy"), ("origin", 1, "via the proxy")]
    finally:
        o.stop()


def test_inspector_websocket_deflate_inflated(server):
    """permessage-deflate (python3-websockets negotiates it on both ends): the stored messages
    are the inflated text (context kept across messages), marked compressed and inflated, and
    JSON in them is redacted as in uncompressed ones."""
    import asyncio
    import websockets

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state = {}

    async def echo(ws, *_):
        async for m in ws:
            await ws.send(m)

    async def serve():
        state["srv"] = await websockets.serve(echo, "127.0.0.1", 0)
        state["port"] = state["srv"].sockets[0].getsockname()[1]
        ready.set()

    t = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()),
                         daemon=True)
    t.start()
    assert ready.wait(bound(10))
    try:
        srv = server(WS_CFG.replace("{ws}", f"http://127.0.0.1:{state['port']}"))
        msgs = ["hello " * 200, "hello " * 200 + "again", '{"password": "pw", "n": 2}']

        async def run():
            async with websockets.connect(f"ws://127.0.0.1:{srv.ports[2]}/ws/z",
                                          open_timeout=5, close_timeout=5) as ws:
                assert ws.extensions and ws.extensions[0].name == "permessage-deflate"
                for m in msgs:
                    await ws.send(m)
                    assert await asyncio.wait_for(ws.recv(), 5) == m

        asyncio.run(run())
        wait_handled(srv, 1)
        ws = [m for m in detail(srv, flows(srv)[0]["id"])["ws"] if m["opcode"] == 1]
        assert [m["from"] for m in ws] == ["client", "origin"] * 3
        assert all(m["compressed"] and m["inflated"] and not m["cut"] for m in ws)
        assert [m["text"] for m in ws[:4]] == [msgs[0], msgs[0], msgs[1], msgs[1]]
        assert ws[4]["text"] == '{"password": "[redacted]", "n": 2}' == ws[5]["text"]
        assert ws[0]["size"] == len(msgs[0])
    finally:
        async def stop():
            state["srv"].close()
            await state["srv"].wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(bound(10))
        loop.call_soon_threadsafe(loop.stop)
        t.join(bound(10))


def test_inspector_compare_against_new_upstream(insp):
    """POST /api/compare sends a filtered set (or ids) to another upstream and reports the
    differences: status, headers (added, removed, changed; `ignore` leaves some out), a
    SHA-256 of the body (the new one redacted as the store redacts, so redaction alone is no
    difference), latency. The new upstream gets the flow's Host, method and body."""
    import hashlib
    from http.server import BaseHTTPRequestHandler
    from conftest import http_origin
    seen = []

    class New(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.command, self.path, self.headers["Host"], b""))
            if self.path == "/data.json":
                body, st = (insp.docroot / "data.json").read_bytes(), 200
            else:
                body, st = b"gone\n", 404
            self.send_response(st)
            self.send_header("Content-Type", "application/json" if st == 200 else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.command, self.path, self.headers["Host"], body))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("X-New", "1")
            self.send_header("Content-Length", str(len(body) + 1))
            self.end_headers()
            self.wfile.write(body + b"!")

        def log_message(self, *a):
            pass

    assert via_proxy(insp, "/data.json")[0] == 200
    assert via_proxy(insp, "/echo", "POST", body=b"shadow me",
                     headers={"Content-Type": "text/plain; charset=utf-8"})[0] == 200
    assert via_proxy(insp, "/rp/ok.txt")[0] == 200
    wait_handled(insp, 3)
    ign = "server,etag,last-modified,accept-ranges,cache-control,content-type"
    with http_origin(New) as port:
        form = {"upstream": f"http://127.0.0.1:{port}", "filter": "~d 127.0.0.1", "ignore": ign}
        rep = jget(insp, "/api/compare", method="POST", body=urllib.parse.urlencode(form).encode())
        assert rep["compared"] == 3 and rep["differ"] == 2
        by = {r["path"]: r for r in rep["results"]}
        d = by["/data.json"]
        assert d["status"] == [200, 200] and d["body"]["same"] is True and not d["differs"]
        assert d["headers"] == {"added": [], "removed": [], "changed": []}
        assert d["body"]["new"] == d["body"]["stored"]
        assert len(d["latency_ms"]) == 2 and all(v >= 0 for v in d["latency_ms"])
        e = by["/echo"]
        assert e["status"] == [200, 200] and e["differs"] and e["body"]["same"] is False
        assert e["body"]["new"] == hashlib.sha256(b"shadow me!").hexdigest()
        assert e["body"]["stored"] == hashlib.sha256(b"shadow me").hexdigest()
        assert ["X-New", "1"] in e["headers"]["added"]
        assert by["/rp/ok.txt"]["status"] == [200, 404] and by["/rp/ok.txt"]["differs"]
        # the new upstream got the requests as they were made, with the flow's Host
        assert ("POST", "/echo", f"127.0.0.1:{insp.ports[2]}", b"shadow me") in seen
        # by ids; a bad upstream and a bad filter are 400; an unreachable one is per flow
        ids = [f["id"] for f in flows(insp, "~m POST")]
        rep = jget(insp, "/api/compare", method="POST", body=urllib.parse.urlencode(
            {"upstream": f"http://127.0.0.1:{port}", "ids": ",".join(map(str, ids))}).encode())
        assert [r["path"] for r in rep["results"]] == ["/echo"]
    assert api(insp, "/api/compare", "POST", body=b"upstream=ftp://x")[0] == 400
    assert api(insp, "/api/compare", "POST",
               body=b"upstream=http://127.0.0.1:1&filter=~c+(")[0] == 400
    rep = jget(insp, "/api/compare", method="POST", body=b"upstream=http://127.0.0.1:1&limit=1")
    assert rep["compared"] == 1 and "error" in rep["results"][0] and rep["differ"] == 1


def test_inspector_h3_stream_ids(server, tmp_path):
    """Flows of an HTTP/3 listener's `capture:` route carry the client's QUIC stream ids
    (gtlsclient, Debian ngtcp2-client: two requests on one connection, streams 0 and 4)."""
    import shutil
    from test_h3 import gtls, statuses
    if not shutil.which("gtlsclient"):
        pytest.fail("gtlsclient (Debian ngtcp2-client) is not installed")
    srv = server("""workers: 1
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h2, h3]
    tls: self-signed
routes:
  - respond: {{status: 200, body: "h3 flow\\n"}}
    capture: {{}}
inspector:
  dir: {tmp}/store
  address: 127.0.0.1:{port2}
""")
    rc, out, _ = gtls(srv.port, ["/one", "/two"], tmp_path)
    assert rc == 0 and statuses(out) == [200, 200], out[-2000:]
    wait_handled(srv, 2)
    got = flows(srv)
    assert {f["path"] for f in got} == {"/one", "/two"}
    assert all(f["protocol"] == "HTTP/3" for f in got)
    assert sorted(f["stream"] for f in got) == [0, 4]
