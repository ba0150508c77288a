"""WAF filter (src/policy/waf.c), black box: ModSecurity v3 with the OWASP CRS 3.3.4 from Debian
at paranoia level 1 in front of a Python origin. Classic attacks (SQL injection, XSS, path
traversal, shell injection, scanner user agents) are answered 403 and never reach the origin;
browser-like GETs, a form POST and a JSON POST pass with their bodies intact; detection mode
logs the rule and passes; request bodies over `body-limit` are refused (413) or, with
`body-overflow: pass`, inspected up to the limit and streamed whole; the audit log is JSON; a
rules file that does not parse is a config error naming the file and the reason. Over h1, h2
(prior knowledge) and h3 (gtlsclient)."""
import hashlib
import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import http_origin
from test_mitm import nginx  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent
CRS = Path("/usr/share/modsecurity-crs/rules")
pytestmark = pytest.mark.skipif(not CRS.is_dir(), reason="modsecurity-crs not installed")

SEEN = []  # paths the origin got (attacks must not appear)
SEEN_LOCK = threading.Lock()


class Origin(BaseHTTPRequestHandler):
    """Answers with the sha256 and length of the request body, and records the path."""
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        with SEEN_LOCK:
            SEEN.append(self.path)
        out = json.dumps({"path": self.path, "len": len(body),
                          "sha": hashlib.sha256(body).hexdigest()}).encode()
        self.send_response(200)
        if self.path.startswith("/leak"):
            self.send_header("x-debug-secret", "db-password=hunter2")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = answer

    def log_message(self, *a):
        pass


@pytest.fixture
def origin():
    with SEEN_LOCK:
        SEEN.clear()
    with http_origin(Origin) as port:
        yield port


def config(origin_port, waf="{mode: blocking}", protocols="[h1, h2c]", extra_route=""):
    waf = waf.replace("{", "{{").replace("}", "}}")
    return f"""
workers: 2
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: {protocols}
upstreams:
  - name: app
    servers: [http://127.0.0.1:{origin_port}]
routes:
{extra_route}  - proxy: app
    waf: {waf}
"""


def curl(url, *args, h2=False):
    cmd = ["curl", "-s", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"]
    if h2:
        cmd.append("--http2-prior-knowledge")
    p = subprocess.run(cmd + list(args) + [url], stdout=subprocess.PIPE, timeout=30)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body


ATTACKS = {
    "sqli": ["/search?id=1%27%20OR%20%271%27=%271"],
    "sqli-union": ["/item?id=1%20UNION%20SELECT%20username,password%20FROM%20users--"],
    "xss": ["/search?q=%3Cscript%3Ealert(document.cookie)%3C/script%3E"],
    "xss-attr": ["/search?q=%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E"],
    "path-traversal": ["/download?file=../../../../etc/passwd"],
    "shell": ["/ping?host=127.0.0.1;cat%20/etc/passwd"],
    "shell-subst": ["/ping?host=%24(id)%60whoami%60"],
    "sqlmap": ["/", "-A", "sqlmap/1.7.2#stable (https://sqlmap.org)"],
    "nikto": ["/", "-A", "Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000001)"],
    "form-sqli": ["/login", "--data", "user=admin&pass=x%27%20OR%201=1--"],
    "multipart-xss": ["/upload", "--form-string",
                      "comment=<script>alert(document.domain)</script>", "-F", "name=x"],
    "json-xss": ["/api", "-H", "content-type: application/json", "--data",
                 '{"comment": "<script>alert(1)</script>"}'],
}

CHROME = [
    "-H", "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
          "Chrome/120.0.0.0 Safari/537.36",
    "-H", "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,"
          "image/webp,*/*;q=0.8",
    "-H", "Accept-Language: en-GB,en;q=0.9,de;q=0.8",
    "-H", "Accept-Encoding: gzip, deflate, br",
    "-H", "Referer: http://127.0.0.1/products?page=2",
    "-H", "Cookie: session=3f9a1c2b7d; theme=dark; _ga=GA1.1.123456789.1700000000",
    "-H", "Upgrade-Insecure-Requests: 1",
    "-H", "Sec-Fetch-Mode: navigate",
]

BENIGN = [
    ["/"],
    ["/products?page=2&sort=price&order=asc"] + CHROME,
    ["/search?q=red+shoes+size+42&category=footwear"] + CHROME,
    ["/static/app.js?v=1.4.2"] + CHROME,
    ["/blog/2026/11/how-to-choose-a-bike"] + CHROME,
    ["/contact", "--data", "name=Jane+Doe&email=jane%40example.com&message=Hello%2C+when+does"
     "+the+shop+open+on+Sunday%3F"] + CHROME,
    ["/upload", "-F", "title=Holiday photos", "-F", "caption=Our trip to the lake, July 2026"],
    ["/api/orders", "-H", "content-type: application/json", "--data",
     '{"items": [{"sku": "A-1001", "qty": 2}], "note": "leave at the door, please"}'],
]


@pytest.mark.parametrize("h2", [False, True], ids=["h1", "h2"])
def test_waf_blocks_classic_attacks_at_pl1(server, origin, h2):
    srv = server(config(origin))
    for name, (path, *args) in ATTACKS.items():
        st, body = curl(srv.url(path), *args, h2=h2)
        assert st == 403, (name, st, body[:200])
    with SEEN_LOCK:
        assert SEEN == [], SEEN  # nothing reached the origin, not even a body
    assert srv.log().count("blocked 403 by rule 949110") == len(ATTACKS)


@pytest.mark.parametrize("h2", [False, True], ids=["h1", "h2"])
def test_waf_passes_ordinary_browsing(server, origin, h2):
    srv = server(config(origin))
    for path, *args in BENIGN:
        st, body = curl(srv.url(path), *args, h2=h2)
        assert st == 200, (path, st, body[:300], srv.log()[-2000:])
        got = json.loads(body)
        assert got["path"] == path
        if "--data" in args:
            sent = args[args.index("--data") + 1].encode()
            assert got["len"] == len(sent) and got["sha"] == hashlib.sha256(sent).hexdigest()
    assert "blocked" not in srv.log()


def test_waf_detection_logs_without_blocking(server, origin):
    srv = server(config(origin, "detection"))
    st, _ = curl(srv.url("/search?id=1%27%20OR%20%271%27=%271"))
    assert st == 200
    st, _ = curl(srv.url("/"), "-A", "sqlmap/1.7.2")
    assert st == 200
    with SEEN_LOCK:
        assert len(SEEN) == 2
    log = srv.log()
    assert "detected rule 942100: SQL Injection Attack Detected via libinjection" in log
    assert "detected rule 913100: Found User-Agent associated with security scanner" in log
    assert "detected rule 949110: Inbound Anomaly Score Exceeded" in log
    assert "blocked" not in log


def test_waf_body_over_limit_rejected(server, origin):
    srv = server(config(origin, "{body-limit: 4k}"))
    small = b"a=" + b"x" * 3000
    st, body = curl(srv.url("/up"), "--data-binary", small)
    assert st == 200 and json.loads(body)["len"] == len(small)
    st, _ = curl(srv.url("/up"), "--data-binary", b"a=" + b"x" * 5000)
    assert st == 413
    st, _ = curl(srv.url("/up"), "--data-binary", b"a=" + b"x" * 5000, h2=True)
    assert st == 413
    with SEEN_LOCK:
        assert SEEN == ["/up"]
    assert "request body over body-limit" in srv.log()


def test_waf_body_over_limit_pass_streams_the_rest(server, origin, tmp_path):
    srv = server(config(origin, "{body-limit: 4k, body-overflow: pass}"))
    big = tmp_path / "big"
    data = b"a=" + b"0123456789abcdef" * 65536  # 1 MiB
    big.write_bytes(data)
    for h2 in (False, True):
        st, body = curl(srv.url("/up"), "--data-binary", f"@{big}", h2=h2)
        assert st == 200, (st, body[:200])
        got = json.loads(body)
        assert got["len"] == len(data) and got["sha"] == hashlib.sha256(data).hexdigest()
    # an attack inside the inspected part is still blocked; past it, it is not seen
    st, _ = curl(srv.url("/up"), "--data-binary", "q=1' UNION SELECT password FROM users--&p="
                 + "x" * 8000)
    assert st == 403
    st, _ = curl(srv.url("/up"), "--data-binary", "p=" + "x" * 8000
                 + "&q=1' UNION SELECT password FROM users--")
    assert st == 200


def test_waf_client_gone_while_body_is_held(server, origin):
    """The client sends half of a body and goes away while the filter holds it (h1 and h2):
    the exchange is cancelled through the arena reset, nothing reaches the origin, and the
    server goes on serving (no alert, no sanitizer report at teardown)."""
    import socket
    srv = server(config(origin, "{body-limit: 64k}"))
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/x-www-form-urlencoded\r\n"
                  b"Content-Length: 20000\r\n\r\n" + b"a=" + b"x" * 5000)
        s.close()
    # h2: curl gives up (max-time) while it still has body to send
    subprocess.run(["curl", "-s", "--http2-prior-knowledge", "--max-time", "1", "--limit-rate",
                    "2k", "--data-binary", "a=" + "x" * 20000, srv.url("/up")],
                   stdout=subprocess.DEVNULL, timeout=30)
    st, body = curl(srv.url("/after"))
    assert st == 200 and json.loads(body)["path"] == "/after"
    with SEEN_LOCK:
        assert SEEN == ["/after"], SEEN


def test_waf_audit_log_is_json(server, origin, tmp_path):
    audit = tmp_path / "audit.json"
    srv = server(config(origin, f"{{audit-log: {audit}}}"))
    assert curl(srv.url("/search?id=1%27%20OR%20%271%27=%271"))[0] == 403
    assert curl(srv.url("/x"), "-A", "Nikto/2.1.6")[0] == 403
    srv.stop()
    lines = [l for l in audit.read_text().splitlines() if l.strip()]
    assert len(lines) >= 2
    entries = [json.loads(l) for l in lines]  # every line is one JSON object
    tx = [e["transaction"] for e in entries]
    blocked = [t for t in tx if t["response"]["http_code"] == 403]
    assert len(blocked) == 2
    ids = {m["details"]["ruleId"] for t in blocked for m in t["messages"]}
    assert {"942100", "913100", "949110"} <= ids
    assert blocked[0]["request"]["uri"].startswith("/search?id=1")


def test_waf_bad_rules_file_is_a_config_error(origin, tmp_path):
    from conftest import FERRY, free_port
    bad = tmp_path / "bad.conf"
    bad.write_text('SecRule ARGS "@rx a" "id:1,phase:2,deny"\nSecRuleBogus xyz\n')
    cfg = tmp_path / "ferry.yaml"

    def write(waf):
        cfg.write_text(config(origin, waf).format(port=free_port(), data=tmp_path / "data"))

    write(f"{{rules: [{bad}]}}")
    p = subprocess.run([FERRY, "run", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert p.returncode != 0
    assert f"routes[0].waf: {bad}: " in p.stderr and "Line: 2." in p.stderr, p.stderr
    # a rules file that is missing is caught by `ferry check`, with the YAML position
    write("{rules: [/nonexistent/rules.conf]}")
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1
    assert f"{cfg}:" in p.stderr and "routes[0].waf.rules" in p.stderr, p.stderr
    assert "/nonexistent/rules.conf" in p.stderr


def test_waf_extra_rules_after_the_crs(server, origin, tmp_path):
    extra = tmp_path / "extra.conf"
    extra.write_text('SecRule REQUEST_HEADERS:X-Ferry-Test "@streq deny-me" '
                     '"id:1000001,phase:1,deny,status:418,log,msg:\'test rule\'"\n')
    srv = server(config(origin, f"{{rules: [{extra}]}}"))
    assert curl(srv.url("/"), "-H", "X-Ferry-Test: deny-me")[0] == 418
    assert curl(srv.url("/"), "-H", "X-Ferry-Test: fine")[0] == 200
    assert "blocked 418 by rule 1000001: test rule" in srv.log()


@pytest.mark.skipif(shutil.which("gtlsclient") is None, reason="gtlsclient missing")
def test_waf_h3(server, origin, tmp_path):
    from test_h3 import gtls, statuses
    srv = server(config(origin, protocols="[h1, h2, h3]\n    tls: self-signed"))
    rc, out, _ = gtls(srv.port, ["/search?id=1%27%20OR%20%271%27=%271"], tmp_path)
    assert statuses(out) == [403], out[-2000:]
    rc, out, _ = gtls(srv.port, ["/?q=%3Cscript%3Ealert(1)%3C/script%3E"], tmp_path)
    assert statuses(out) == [403], out[-2000:]
    rc, out, dl = gtls(srv.port, ["/products?page=2"], tmp_path)
    assert statuses(out) == [200], out[-2000:]
    # POSTs as a browser sends them: to a host name (a numeric Host scores 3 in the CRS), and
    # gtlsclient sends no Content-Type (920340 scores 2)
    def post(path, body):
        f = tmp_path / f"body{len(body)}"
        f.write_bytes(body)
        dl = tmp_path / f"dl-{len(body)}"
        dl.mkdir()
        p = subprocess.run(["gtlsclient", "--exit-on-all-streams-close", f"--download={dl}",
                            "--no-quic-dump", "--no-http-dump", "--timeout=20s", "-m", "POST",
                            "-d", str(f), "127.0.0.1", str(srv.port),
                            f"https://localhost:{srv.port}{path}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode(errors="replace")
        return statuses(out), out, dl
    form = b"name=Jane+Doe&message=hello+there"
    st, out, dl = post("/contact", form)
    assert st == [200], out[-2000:]
    got = json.loads((dl / "contact").read_bytes())
    assert got["len"] == len(form) and got["sha"] == hashlib.sha256(form).hexdigest()
    st, out, _ = post("/login", b"user=admin&pass=x' OR 1=1--")
    assert st == [403], out[-2000:]
    with SEEN_LOCK:
        assert SEEN == ["/products?page=2", "/contact"], SEEN


def test_waf_on_listeners_and_intercepted_flows(server, origin):
    """A named policy on listeners: a plain reverse-proxy listener and an intercepting one
    (forward-proxy requests in absolute form), both before routing; the route has no waf."""
    srv = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    waf: edge
  - address: 127.0.0.1:{{port2}}
    kind: intercept
    waf: edge
intercept:
  ca-dir: {{data}}/ca
waf-policies:
  - name: edge
    mode: blocking
upstreams:
  - name: app
    servers: [http://127.0.0.1:{origin}]
routes:
  - proxy: app
""")
    attack = "/search?id=1%27%20OR%20%271%27=%271"
    assert curl(srv.url(attack))[0] == 403
    assert curl(srv.url("/products?page=2"), *CHROME)[0] == 200
    fwd = ["-x", f"http://127.0.0.1:{srv.ports[1]}"]
    st, body = curl(f"http://localhost:{origin}{attack}", *fwd)
    assert st == 403, body[:300]
    st, body = curl(f"http://localhost:{origin}/products?page=2", *fwd, *CHROME)
    assert st == 200 and json.loads(body)["path"] == "/products?page=2"
    with SEEN_LOCK:
        assert SEEN == ["/products?page=2", "/products?page=2"], SEEN
    log = srv.log()
    assert log.count("blocked 403 by rule 949110") == 2
    # one rule set for both listeners (same policy, same generation)
    assert log.count("rules (CRS) loaded in") == 1, log


@pytest.mark.parametrize("proto", ["--http1.1", "--http2"])
def test_waf_inside_an_intercepted_tls_tunnel(server, nginx, certs, proto):
    """CONNECT + TLS through the intercepting listener: the decrypted requests inside the
    tunnel (HTTP/1.1 or h2 to the forged certificate) meet the listener's WAF; the attack is
    answered 403 by Ferry and never reaches the TLS origin (nginx), the benign GET does."""
    srv = server(f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    kind: intercept
    waf: edge
intercept:
  ca-dir: {{data}}/ca
  upstream-ca: {certs['ca']}
waf-policies:
  - name: edge
    mode: blocking
""")
    via = ["-x", f"http://127.0.0.1:{srv.port}", "--cacert", str(srv.data / "ca" / "ferry-ca.pem"),
           proto]
    base = f"https://localhost:{nginx.tls_port}"
    attack = "/index.html?id=1%27%20OR%20%271%27=%271&q=%3Cscript%3Ealert(1)%3C/script%3E"
    st, body = curl(base + attack, *via)
    assert st == 403, (body[:300], srv.log()[-3000:])
    st, body = curl(base + "/index.html", *via, *CHROME)
    assert st == 200 and body == b"hello from nginx\n"
    log = nginx.access_log.read_text()
    assert "OR%20%271" not in log and "script" not in log
    assert "blocked 403 by rule 949110" in srv.log()


def test_waf_policy_names_are_checked(tmp_path):
    from conftest import FERRY
    cfg = tmp_path / "c.yaml"
    cfg.write_text("listeners:\n  - address: 127.0.0.1:18080\n    waf: nope\n"
                   "waf-policies:\n  - mode: detection\nroutes:\n  - echo: {}\n")
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1
    assert "listeners[0].waf: no waf-policies entry named 'nope'" in p.stderr, p.stderr
    assert "waf-policies: entry 0 needs a `name`" in p.stderr, p.stderr


def test_waf_reload_loads_the_rules_again(server, origin):
    """SIGHUP with the mode changed: the new generation's filter loads the rules again and
    detects instead of blocking; the old one is freed when its exchanges are gone (clean exit
    at teardown). A keep-alive connection of the old generation keeps its old filter."""
    import signal as _signal
    import socket
    from conftest import wait_for
    srv = server(config(origin))
    attack = "/search?id=1%27%20OR%20%271%27=%271"
    old = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    old.sendall(b"GET /products HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert old.recv(65536).startswith(b"HTTP/1.1 200")
    assert curl(srv.url(attack))[0] == 403
    cfg = srv.tmp / "ferry.yaml"
    cfg.write_text(cfg.read_text().replace("mode: blocking", "mode: detection"))
    srv.proc.send_signal(_signal.SIGHUP)
    wait_for(lambda: "generation 2 active on all workers" in srv.log(), 60, "the reload",
             srv.proc)
    assert curl(srv.url(attack))[0] == 200
    assert "detected rule 942100" in srv.log()
    old.sendall(f"GET {attack} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                .encode())
    resp = b""
    while True:
        b = old.recv(65536)
        if not b:
            break
        resp += b
    old.close()
    assert resp.startswith(b"HTTP/1.1 403"), resp[:200]
    assert srv.log().count("rules (CRS) loaded in") == 2


@pytest.mark.parametrize("h2", [False, True], ids=["h1", "h2"])
def test_waf_response_headers(server, origin, tmp_path, h2):
    """response: true runs phase 3: a rule on a response header replaces the origin's answer
    with its status before the head leaves; other responses pass untouched."""
    rule = tmp_path / "resp.conf"
    rule.write_text('SecRule RESPONSE_HEADERS:X-Debug-Secret "@contains password" '
                    '"id:1000020,phase:3,deny,status:502,log,msg:\'secret in a response header\'"\n')
    srv = server(config(origin, f"{{response: true, rules: [{rule}]}}"))
    st, body = curl(srv.url("/leak"), h2=h2)
    assert st == 502 and b"hunter2" not in body
    st, body = curl(srv.url("/fine"), h2=h2)
    assert st == 200 and json.loads(body)["path"] == "/fine"
    st, body = curl(srv.url("/leak"), "--data", "a=1", h2=h2)  # with a held request body
    assert st == 502
    assert "blocked 502 by rule 1000020: secret in a response header" in srv.log()
    # without `response` the rule does not run
    srv2 = server(config(origin, f"{{rules: [{rule}]}}"))
    assert curl(srv2.url("/leak"), h2=h2)[0] == 200


def test_waf_identical_blocks_share_one_rule_set(server, origin):
    """Routes with the same waf settings load the CRS once per generation (each copy costs
    ~20 MB and a few hundred ms); different settings load their own."""
    srv = server(config(origin, "{mode: blocking}", extra_route="""  - match: {{path: /a/}}
    proxy: app
    waf: {{mode: blocking}}
  - match: {{path: /b/}}
    proxy: app
    waf: {{mode: blocking, paranoia: 2}}
"""))
    log = srv.log()
    assert log.count("rules (CRS) loaded in") == 2, log
    assert "waf: routes[2]: the rules of routes[0] (identical settings)" in log
    for path in ("/a/x", "/b/x", "/c"):
        assert curl(srv.url(path + "?id=1%27%20OR%20%271%27=%271"))[0] == 403
        assert curl(srv.url(path), *CHROME)[0] == 200


def test_waf_example_runs_as_written(server, origin):
    """examples/waf.yaml: a reverse proxy on 127.0.0.1:8080 to 127.0.0.1:9000, CRS at paranoia
    level 1, blocking (ports moved to free ones here, nothing else changed)."""
    text = (ROOT / "examples" / "waf.yaml").read_text()
    assert "127.0.0.1:8080" in text and "http://127.0.0.1:9000" in text
    text = text.replace("{", "{{").replace("}", "}}")
    text = text.replace("127.0.0.1:8080", "127.0.0.1:{port}")
    text = text.replace("http://127.0.0.1:9000", f"http://127.0.0.1:{origin}")
    srv = server(text)
    assert curl(srv.url("/products?page=2"), *CHROME)[0] == 200
    assert curl(srv.url("/search?id=1%27%20OR%20%271%27=%271"))[0] == 403
