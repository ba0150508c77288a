"""Transform filter (src/policy/transform.c), black box: path rewrites by regex with captures,
every redirect status with templates, request and response header set/append/remove with
variables (client address, host, path, method, a JWT claim through the header the jwt filter
set, request id), the request-id header generated when absent and kept when sane; over h1, h2
(prior knowledge) and h3."""
import json
import re
import shutil
import subprocess
import time
from http.server import BaseHTTPRequestHandler

import jwt
import pytest
from conftest import http_origin


class Origin(BaseHTTPRequestHandler):
    """Answers with the request's path and headers as JSON, plus a header to remove."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({"path": self.path,
                           "headers": {k.lower(): v for k, v in self.headers.items()},
                           "all": [[k.lower(), v] for k, v in self.headers.items()]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("x-origin-secret", "hide me")
        self.send_header("x-origin", "o")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def origin():
    with http_origin(Origin) as port:
        yield port


def config(origin_port, transform, protocols="[h1, h2c]", extra=""):
    return f"""
workers: 2
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: {protocols}
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - match: {{{{path: /static/}}}}
    static: {{{{root: {{docroot}}}}}}
    transform:
      rewrite:
        - {{{{match: "^/static/v(\\\\d+)/(.*)$", to: "/static/$2"}}}}
  - proxy: o
{extra}    transform:
{transform}
"""


def curl(url, *args, h2=False):
    cmd = ["curl", "-s", "--max-time", "10", "-D", "-", "-o", "-"]
    if h2:
        cmd.append("--http2-prior-knowledge")
    cmd += list(args) + [url]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=20).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs.setdefault(k.strip().lower(), []).append(v.strip())
    return status, hdrs, body


REWRITE = """      rewrite:
        - {match: "^/old/(\\\\w+)/(\\\\d+)$", to: "/new/$2/$1"}
        - {match: "^/search/(.*)$", to: "/find?q=$1&by={method}"}
        - {match: "^/dots/(.*)$", to: "/a/../b/$1"}
"""


@pytest.mark.parametrize("h2", [False, True])
def test_transform_rewrite_with_captures(server, origin, h2):
    srv = server(config(origin, REWRITE.replace("{", "{{").replace("}", "}}")))
    st, h, body = curl(srv.url("/old/abc/42?x=1"), h2=h2)
    assert st == 200 and json.loads(body)["path"] == "/new/42/abc?x=1"
    st, h, body = curl(srv.url("/search/ferry?ignored=1"), h2=h2)
    assert st == 200 and json.loads(body)["path"] == "/find?q=ferry&by=GET"
    st, h, body = curl(srv.url("/dots/c"), h2=h2)
    assert st == 200 and json.loads(body)["path"] == "/b/c"  # normalised again
    st, h, body = curl(srv.url("/other"), h2=h2)
    assert st == 200 and json.loads(body)["path"] == "/other"


def test_transform_rewrite_for_static_files(server, origin):
    srv = server(config(origin, "      request-id: x-request-id"))
    (srv.docroot / "static").mkdir()
    (srv.docroot / "static" / "app.js").write_text("console.log(1)\n")
    st, _, body = curl(srv.url("/static/v123/app.js"))
    assert st == 200 and body == b"console.log(1)\n"


REDIRECTS = """      redirect:
        - {match: "^/r301/(.*)$", to: "https://{host}/moved/$1", status: 301}
        - {match: "^/r302/(.*)$", to: "https://{host}/moved/$1"}
        - {match: "^/r303/(.*)$", to: "/seen/$1", status: 303}
        - {match: "^/r307/(.*)$", to: "https://{authority}{request_uri}", status: 307}
        - {match: "^/r308/(.*)$", to: "https://example.com/{method}/$1?{query}", status: 308}
      response-headers:
        set: {x-edited: "yes"}
"""


@pytest.mark.parametrize("h2", [False, True])
def test_transform_redirect_every_status(server, origin, h2):
    srv = server(config(origin, REDIRECTS.replace("{", "{{").replace("}", "}}")))
    cases = {
        "/r301/a": (301, "https://127.0.0.1/moved/a"),
        "/r302/b": (302, "https://127.0.0.1/moved/b"),
        "/r303/c": (303, "/seen/c"),
        "/r307/d?x=1": (307, f"https://127.0.0.1:{srv.port}/r307/d?x=1"),
        "/r308/e?k=v": (308, "https://example.com/GET/e?k=v"),
    }
    for path, (status, loc) in cases.items():
        st, h, body = curl(srv.url(path), h2=h2)
        assert st == status, (path, h)
        assert h["location"] == [loc], (path, h)
        assert h["x-edited"] == ["yes"]  # response edits apply to redirects too
        assert str(status).encode() in body
    assert curl(srv.url("/r309/x"), h2=h2)[0] == 200


HEADERS = """      request-id: X-Request-Id
      request-headers:
        remove: [x-drop]
        set: {x-client: "{client}", x-where: "{method} {host}{path}", x-user-copy: "{header.x-user}"}
        append: {x-multi: "two"}
      response-headers:
        remove: [x-origin-secret]
        set: {x-origin: "ferry:{path}", x-reqid: "{request_id}"}
        append: {x-origin-extra: "{scheme}"}
"""

JWT = """    jwt:
      secret: transform-test-secret-0123456789
      claims-to-headers: {sub: x-user}
"""


@pytest.mark.parametrize("h2", [False, True])
def test_transform_header_edits_with_variables(server, origin, h2):
    srv = server(config(origin, HEADERS.replace("{", "{{").replace("}", "}}"),
                        extra=JWT.replace("{", "{{").replace("}", "}}")))
    tok = jwt.encode({"sub": "carol", "exp": int(time.time()) + 600},
                     "transform-test-secret-0123456789", algorithm="HS256")
    st, h, body = curl(srv.url("/p/q"), "-H", f"Authorization: Bearer {tok}", "-H", "X-Drop: 1",
                       "-H", "X-Multi: one", "-H", "X-Client: 6.6.6.6", h2=h2)
    assert st == 200, h
    seen = json.loads(body)
    hs = seen["headers"]
    assert "x-drop" not in hs
    assert hs["x-client"] == "127.0.0.1"  # set replaces what the client sent
    assert hs["x-where"] == "GET 127.0.0.1/p/q"
    assert hs["x-user-copy"] == "carol"  # the jwt filter ran first (stage auth < rewrite)
    assert [v for k, v in seen["all"] if k == "x-multi"] == ["one", "two"]
    rid = hs["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert h["x-request-id"] == [rid] and h["x-reqid"] == [rid]
    assert "x-origin-secret" not in h
    assert h["x-origin"] == ["ferry:/p/q"]
    assert h["x-origin-extra"] == ["http"]


def test_transform_request_id_kept_or_replaced(server, origin):
    srv = server(config(origin, "      request-id: x-request-id"))
    st, h, body = curl(srv.url("/"), "-H", "X-Request-Id: abc-123")
    assert json.loads(body)["headers"]["x-request-id"] == "abc-123"
    assert h["x-request-id"] == ["abc-123"]
    ids = set()
    for _ in range(3):
        st, h, body = curl(srv.url("/"))
        ids.add(json.loads(body)["headers"]["x-request-id"])
        assert h["x-request-id"] == [json.loads(body)["headers"]["x-request-id"]]
    assert len(ids) == 3
    st, h, body = curl(srv.url("/"), "-H", "X-Request-Id: " + "x" * 200)  # too long: replaced
    assert re.fullmatch(r"[0-9a-f]{32}", json.loads(body)["headers"]["x-request-id"])


def test_transform_request_id_on_error_pages(server):
    """An origin that refuses connections: the 502 error page carries the edits too. (A filter
    of an earlier stage that answers, such as jwt's 401, runs before this one: see
    docs/ARCHITECTURE.md, "Filters".)"""
    from conftest import free_port
    srv = server(config(free_port(), "      request-id: x-request-id\n"
                        "      response-headers: {{set: {{x-edited: \"yes\"}}}}"))
    st, h, _ = curl(srv.url("/"), "-H", "X-Request-Id: err-1")
    assert st == 502 and h["x-request-id"] == ["err-1"] and h["x-edited"] == ["yes"]


def test_transform_config_errors(tmp_path):
    from conftest import FERRY
    bad = tmp_path / "bad.yaml"
    bad.write_text("""listeners: [{address: "127.0.0.1:1"}]
routes:
  - respond: {}
    transform:
      redirect: [{match: "^/a", to: "/b", status: 305}]
      rewrite: [{match: "^/(", to: "/x"}, {match: "^/b", to: "b{nope}"}]
      request-headers: {set: {"x-a": "{foo}"}}
""")
    p = subprocess.run([FERRY, "check", "-c", str(bad)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20, text=True)
    assert p.returncode == 1
    out = p.stdout
    assert "routes[0].transform.redirect[0].status: must be 301, 302, 303, 307 or 308" in out
    assert "routes[0].transform.rewrite[0].match: invalid regular expression" in out
    assert "routes[0].transform.rewrite[1].to: a rewritten path must start with '/'" in out
    assert "routes[0].transform.request-headers.set: x-a: unknown variable" in out


@pytest.mark.skipif(shutil.which("gtlsclient") is None, reason="gtlsclient missing")
def test_transform_h3(server, origin, tmp_path):
    from test_h3 import gtls, header, statuses
    t = (REDIRECTS + "      request-id: x-request-id\n").replace("{", "{{").replace("}", "}}")
    srv = server(config(origin, t, protocols="[h1, h2, h3]\n    tls: self-signed"))
    rc, out, _ = gtls(srv.port, ["/r308/z"], tmp_path)
    assert statuses(out) == [308], out[-2000:]
    assert header(out, "location") == ["https://example.com/GET/z?"]
    assert len(header(out, "x-request-id")) == 1
    rc, out, _ = gtls(srv.port, ["/plain"], tmp_path)
    assert statuses(out) == [200]
    assert header(out, "x-edited") == ["yes"]


NAMES = """      request-id: X-Request-ID
      response-headers:
        set: {ETag: '"v1"', www-authenticate: Basic, X-XSS-Protection: "0",
              x-frame-options: DENY, X-Custom-ID: c1, X-ORIGIN: replaced}
        append: {x-dns-prefetch-control: "off"}
"""


def raw_names(url, h2):
    """The response's field names as they came on the wire, in order."""
    cmd = ["curl", "-s", "--max-time", "10", "-D", "-", "-o", "/dev/null"]
    if h2:
        cmd.append("--http2-prior-knowledge")
    out = subprocess.run(cmd + [url], stdout=subprocess.PIPE, timeout=20).stdout
    lines = out.decode("latin-1").split("\r\n")[1:]
    return [l.partition(":")[0] for l in lines if ":" in l]


@pytest.mark.parametrize("h2", [False, True])
def test_transform_configured_names_spelling(server, origin, h2):
    """Configured response names go out in their h1 spelling on h1 (the config's own when it
    has a capital, else the canonical one, irregular ones included) and lowercase on h2; a set
    replaces the origin's field whatever its case."""
    srv = server(config(origin, NAMES.replace("{", "{{").replace("}", "}}")))
    names = raw_names(srv.url("/"), h2)
    want = ["ETag", "WWW-Authenticate", "X-XSS-Protection", "X-Frame-Options", "X-Custom-ID",
            "X-ORIGIN", "X-DNS-Prefetch-Control", "X-Request-ID"]
    for n in want:
        assert (n.lower() if h2 else n) in names, (n, names)
    assert [n for n in names if n.lower() == "x-origin"] == ["x-origin" if h2 else "X-ORIGIN"]
    if h2:
        assert all(n == n.lower() for n in names), names
    st, h, _ = curl(srv.url("/"), h2=h2)
    assert st == 200 and h["x-origin"] == ["replaced"] and h["etag"] == ['"v1"']
    assert h["www-authenticate"] == ["Basic"] and h["x-dns-prefetch-control"] == ["off"]


def test_transform_request_id_replaced_once(server, origin):
    """A bad request id is replaced by one field however many the client sent, and the echo
    on the response is one field."""
    srv = server(config(origin, "      request-id: x-request-id"))
    st, h, body = curl(srv.url("/"), "-H", "X-Request-Id: bad id", "-H", "x-request-id: two")
    seen = [v for k, v in json.loads(body)["all"] if k == "x-request-id"]
    assert len(seen) == 1 and re.fullmatch(r"[0-9a-f]{32}", seen[0]), seen
    assert h["x-request-id"] == seen
