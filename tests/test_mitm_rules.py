"""intercept.rules with real clients (curl through the proxy) against Debian's nginx (gzip,
a zstd file) and a small Python echo origin (request bodies)."""
import gzip
import hashlib
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_mitm import Nginx, curl, mitm  # noqa: F401  (fixtures)

TEXT = b"hello world, hello again\n" * 400  # 10 KB, compressible


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, certs):  # noqa: F811
    d = tmp_path_factory.mktemp("nginx-rules")
    n = Nginx(d, certs)
    www = d / "www"
    (www / "text.txt").write_bytes(TEXT)
    (www / "text.zst").write_bytes(subprocess.run(["zstd", "-c", "-q"], input=TEXT,
                                                  capture_output=True, check=True).stdout)
    (www / "big.txt").write_bytes(TEXT * 40)  # 400 KB
    yield n
    n.stop()


def nginx_with_gzip(n):
    """Restart the module's nginx with gzip on and a zstd location."""
    conf = (n.d / "nginx.conf").read_text()
    if "gzip on" not in conf:
        conf = conf.replace("root {d}/www;\n        location /hdr".format(d=n.d),
                            "root {d}/www;\n        gzip on; gzip_types *; "
                            "gzip_min_length 10;\n        location /zst {{ default_type "
                            "text/plain; add_header Content-Encoding zstd; alias {d}/www/text.zst; }}"
                            "\n        location /hdr".format(d=n.d))
        (n.d / "nginx.conf").write_text(conf)
        n.restart()
    return n


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(n)
        out = json.dumps({"body": body.decode("latin-1"), "len": n,
                          "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_PUT = do_POST
    do_GET = do_POST


@pytest.fixture(scope="module")
def echo():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()


RULES = """\
  rules:
    - match: {path: /hdr}
      request-headers: {set: {x-test: from-rule}, remove: [user-agent]}
      response-headers: {append: {x-ferry: "r1"}, set: {server: rewritten}}
    - match: {path: /hdr, method: [GET], header: {x-flag: "*"}}
      response-headers: {append: {x-flag-seen: "yes"}}
    - match: {path: /text}
      replace:
        - {search: hello, with: HOWDY}
        - {regex: "w(or)ld", with: "W$1LD"}
    - match: {path: /zst}
      replace: [{search: hello, with: zzz}]
    - match: {path: /big.txt}
      replace: [{search: hello, with: BIG}]
    - match: {path: /teapot}
      status: 418
    - match: {path: /blocked}
      block: true
    - match: {host: [localhost], path: /local}
      respond: {status: 201, body: "local body\\n", headers: {content-type: text/x-local, x-l: "1"}}
    - match: {path: /file}
      respond: {file: "{tmp}/mapped.txt"}
    - match: {path: /remote}
      map-remote: "http://127.0.0.1:{echo}"
    - match: {path: /post}
      replace: [{search: secret, with: public, in: request}]
"""


ECHO_TLS_CONF = """\
daemon off;
master_process off;
worker_processes 1;
error_log {d}/err;
pid {d}/pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp_body;
    proxy_temp_path {d}/tmp_proxy;
    fastcgi_temp_path {d}/tmp_fastcgi;
    uwsgi_temp_path {d}/tmp_uwsgi;
    scgi_temp_path {d}/tmp_scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{ proxy_pass http://127.0.0.1:{echo}; }}
    }}
}}
"""


@pytest.fixture(scope="module")
def echo_tls(tmp_path_factory, certs, echo):  # noqa: F811
    """The echo origin behind a TLS origin that really speaks h2 (nginx): the probe sees h2,
    the client is offered h2 and Ferry forwards over h2 (protocol mirroring)."""
    from conftest import free_port, wait_port
    d = tmp_path_factory.mktemp("nginx-echo-tls")
    port = free_port()
    (d / "nginx.conf").write_text(ECHO_TLS_CONF.format(d=d, port=port, echo=echo,
                                                       cert=certs["cert"], key=certs["key"]))
    proc = subprocess.Popen(["/usr/sbin/nginx", "-p", str(d), "-c", str(d / "nginx.conf")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc=proc)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("http", ["--http1.1", "--http2"])
def test_mitm_rule_request_body_replace_in_tunnel(rsrv, echo_tls, http):
    body = "secret " * 2000  # 14 KB: several h2 DATA frames
    r = curl(http, "-v", "-x", rsrv.proxy, "--cacert", str(rsrv.ca), "--data-binary", body,
             f"https://localhost:{echo_tls}/post")
    assert r.returncode == 0, r.stderr.decode()
    assert ("using HTTP/2" in r.stderr.decode()) == (http == "--http2")
    j = json.loads(r.stdout)
    assert j["body"] == body.replace("secret", "public")


@pytest.fixture
def rsrv(server, certs, nginx, echo, tmp_path):  # noqa: F811
    nginx_with_gzip(nginx)
    srv_tmp = tmp_path
    (srv_tmp / "mapped.txt").write_text("mapped local file\n")
    extra = RULES.replace("{tmp}", str(srv_tmp)).replace("{echo}", str(echo)) + \
        "  body-cap: 64k\n"
    s = mitm(server, certs, extra=extra.replace("{", "{{").replace("}", "}}"))
    s.nginx = nginx
    s.echo = echo
    return s


def test_mitm_rule_header_edits(rsrv):
    n = rsrv.nginx
    r = curl("-D", "-", "-x", rsrv.proxy, "-A", "curl-agent", f"http://127.0.0.1:{n.port}/hdr")
    out = r.stdout.decode()
    assert out.endswith("ua= x=from-rule h=\n")
    assert "x-ferry: r1" in out and "server: rewritten" in out.lower()
    assert "x-flag-seen" not in out
    r = curl("-D", "-", "-x", rsrv.proxy, "-H", "X-Flag: 1", "--cacert", str(rsrv.ca),
             f"https://localhost:{n.tls_port}/hdr")
    assert "x-flag-seen: yes" in r.stdout.decode()


@pytest.mark.parametrize("http", ["--http1.1", "--http2"])
def test_mitm_rule_body_replace_gzip(rsrv, http):
    n = rsrv.nginx
    want = TEXT.replace(b"hello", b"HOWDY").replace(b"world", b"WorLD")
    r = curl(http, "-D", rsrv.tmp / "h.txt", "-x", rsrv.proxy, "-H", "Accept-Encoding: gzip",
             "--cacert", str(rsrv.ca), f"https://localhost:{n.tls_port}/text.txt")
    head = (rsrv.tmp / "h.txt").read_text().lower()
    assert "content-encoding: gzip" in head  # re-encoded as it came
    assert gzip.decompress(r.stdout) == want
    r = curl("-x", rsrv.proxy, "-H", "Accept-Encoding: identity",
             f"http://127.0.0.1:{n.port}/text.txt")
    assert r.stdout == want


def test_mitm_rule_body_replace_zstd(rsrv):
    n = rsrv.nginx
    r = curl("-D", rsrv.tmp / "h.txt", "-x", rsrv.proxy, f"http://127.0.0.1:{n.port}/zst")
    assert "content-encoding: zstd" in (rsrv.tmp / "h.txt").read_text().lower()
    plain = subprocess.run(["zstd", "-d", "-c", "-q"], input=r.stdout, capture_output=True,
                           check=True).stdout
    assert plain == TEXT.replace(b"hello", b"zzz")


def test_mitm_rule_body_past_cap_streams_unchanged(rsrv):
    n = rsrv.nginx
    r = curl("-x", rsrv.proxy, "-H", "Accept-Encoding: identity",
             f"http://127.0.0.1:{n.port}/big.txt")
    assert hashlib.sha256(r.stdout).digest() == hashlib.sha256(TEXT * 40).digest()


def test_mitm_rule_status_block_respond_file(rsrv):
    n = rsrv.nginx
    r = curl("-x", rsrv.proxy, "-o", "/dev/null", "-w", "%{http_code}",
             f"http://127.0.0.1:{n.port}/teapot")
    assert r.stdout == b"418"
    r = curl("-x", rsrv.proxy, "-w", " %{http_code}", "--cacert", str(rsrv.ca),
             f"https://localhost:{n.tls_port}/blocked")
    assert r.stdout == b"Blocked by an intercept rule\n 403"
    r = curl("-D", "-", "-x", rsrv.proxy, "--cacert", str(rsrv.ca),
             f"https://localhost:{n.tls_port}/local")
    out = r.stdout.decode()
    assert " 201" in out.split("\r\n")[2] or " 201" in out
    assert "x-l: 1" in out and "text/x-local" in out and out.endswith("local body\n")
    # host-scoped: 127.0.0.1 is not localhost, so the origin answers (404 from nginx)
    r = curl("-x", rsrv.proxy, "-o", "/dev/null", "-w", "%{http_code}",
             f"http://127.0.0.1:{n.port}/local")
    assert r.stdout == b"404"
    r = curl("-x", rsrv.proxy, f"http://127.0.0.1:{n.port}/file")
    assert r.stdout == b"mapped local file\n"


def test_mitm_rule_map_remote(rsrv):
    n = rsrv.nginx
    r = curl("-x", rsrv.proxy, "--cacert", str(rsrv.ca), f"https://localhost:{n.tls_port}/remote")
    j = json.loads(r.stdout)
    assert j["headers"]["host"] == f"127.0.0.1:{rsrv.echo}"


@pytest.mark.parametrize("chunked", [False, True])
def test_mitm_rule_request_body_replace(rsrv, chunked):
    body = "my secret is secret " * 10
    args = ["-x", rsrv.proxy, "--data-binary", body]
    if chunked:
        args += ["-H", "Transfer-Encoding: chunked"]
    r = curl(*args, f"http://127.0.0.1:{rsrv.echo}/post")
    j = json.loads(r.stdout)
    assert j["body"] == body.replace("secret", "public")
    assert j["len"] == len(body.replace("secret", "public"))


def test_mitm_rule_config_errors(tmp_path):
    from conftest import FERRY
    cfg = tmp_path / "f.yaml"
    cfg.write_text("listeners:\n  - address: 127.0.0.1:1\n    kind: intercept\n"
                   "intercept:\n  rules:\n    - replace: [{regex: \"(\"}]\n"
                   "    - replace: [{with: x}]\n    - map-remote: ftp://x\n"
                   "    - respond: {file: /nonexistent/file}\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       env=dict(os.environ, HOME=str(tmp_path)))
    assert r.returncode == 1
    assert "intercept.rules[0].replace[0].regex: invalid regular expression" in r.stderr
    assert "intercept.rules[1].replace[0]: needs exactly one of search, regex" in r.stderr
    assert "intercept.rules[2].map-remote: expected http://HOST[:PORT]" in r.stderr
    assert "intercept.rules[3].respond.file: cannot read '/nonexistent/file'" in r.stderr
