"""Route matching: host, path prefix, path-exact, path-regex (PCRE2), header, query, method;
first match wins."""
import subprocess

import pytest

from conftest import FERRY, http_request

ROUTES = """\
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - match: {{path-regex: "^/v[0-9]+/items$"}}
    respond: {{body: "regex\\n"}}
  - match: {{path-exact: /exact}}
    respond: {{body: "exact\\n"}}
  - match: {{header: {{x-canary: "1"}}}}
    respond: {{body: "canary\\n"}}
  - match: {{header: {{x-any: "*"}}}}
    respond: {{body: "any-header\\n"}}
  - match: {{query: {{debug: "*"}}}}
    respond: {{body: "debug\\n"}}
  - match: {{query: {{mode: fast}}}}
    respond: {{body: "fast\\n"}}
  - match: {{host: "*.example.test", path: /api}}
    respond: {{body: "api\\n"}}
  - match: {{method: [POST]}}
    respond: {{body: "post\\n"}}
  - respond: {{body: "default\\n"}}
"""


@pytest.mark.parametrize("path,headers,method,want", [
    ("/v2/items", {}, "GET", b"regex\n"),
    ("/v10/items", {}, "GET", b"regex\n"),
    ("/v2/items/x", {}, "GET", b"default\n"),
    ("/vx/items", {}, "GET", b"default\n"),
    ("/exact", {}, "GET", b"exact\n"),
    ("/exact/", {}, "GET", b"default\n"),
    ("/exact?q=1", {}, "GET", b"exact\n"),
    ("/z", {"X-Canary": "1"}, "GET", b"canary\n"),
    ("/z", {"X-Canary": "2"}, "GET", b"default\n"),
    ("/z", {"X-Any": "whatever"}, "GET", b"any-header\n"),
    ("/z?debug", {}, "GET", b"debug\n"),
    ("/z?a=1&debug=0", {}, "GET", b"debug\n"),
    ("/z?mode=fast", {}, "GET", b"fast\n"),
    ("/z?mode=slow", {}, "GET", b"default\n"),
    ("/z?xmode=fast", {}, "GET", b"default\n"),
    ("/api/x", {"Host": "a.example.test"}, "GET", b"api\n"),
    ("/api/x", {"Host": "example.test"}, "GET", b"default\n"),
    ("/apix", {"Host": "a.example.test"}, "GET", b"default\n"),
    ("/z", {}, "POST", b"post\n"),
])
def test_route_matching(server, path, headers, method, want):
    srv = server(ROUTES)
    st, _, body = http_request(srv.port, path, method=method, headers=headers)
    assert st == 200 and body == want, (st, body)


def test_route_bad_regex_is_a_config_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text('listeners: [{address: "127.0.0.1:1"}]\nroutes:\n'
                   '  - match: {path-regex: "a(b"}\n    respond: {}\n')
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 1
    assert f"{cfg}:3:25: routes[0].match.path-regex: invalid regular expression 'a(b'" in p.stderr
