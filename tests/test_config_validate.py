"""`ferry check` refuses config values that would reach a wire unescaped (header and request-line
injection) and files that `ferry run` could not use, each as `file:line:col: key: message`."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import FERRY

L = "listeners: [{address: 127.0.0.1:8080}]\n"
U = "upstreams:\n  - name: o\n    servers: [http://127.0.0.1:9]\n"


def check(tmp_path, text, name="c.yaml"):
    cfg = tmp_path / name
    cfg.write_text(text)
    env = dict(os.environ, HOME=str(tmp_path))
    env.pop("XDG_DATA_HOME", None)
    return subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                          timeout=15, env=env, cwd=tmp_path), str(cfg)


# (key the error must name, config text); the value with the CR LF is on the line holding "\r\n"
INJECTIONS = [
    ("routes[0].static.cache-control",
     L + "routes:\n  - static:\n      root: /tmp\n      cache-control: \"max-age=1\\r\\nX-Evil: 1\"\n"),
    ("routes[0].proxy.set-headers.x-a",
     L + U + "routes:\n  - proxy:\n      upstream: o\n      set-headers: {x-a: \"v\\r\\nX-Evil: 1\"}\n"),
    ("routes[0].proxy.set-headers",
     L + U + "routes:\n  - proxy:\n      upstream: o\n      set-headers: {\"x\\r\\nX-Evil\": v}\n"),
    ("routes[0].proxy.response-set-headers.x-a",
     L + U + "routes:\n  - proxy:\n      upstream: o\n"
     "      response-set-headers:\n        x-a: \"v\\r\\nSet-Cookie: s=1\"\n"),
    ("routes[0].proxy.remove-headers",
     L + U + "routes:\n  - proxy:\n      upstream: o\n      remove-headers: [\"a\\r\\nb\"]\n"),
    ("routes[0].proxy.add-prefix",
     L + U + "routes:\n  - proxy:\n      upstream: o\n"
     "      add-prefix: \"/x HTTP/1.1\\r\\nHost: evil\\r\\n\\r\\nGET /\"\n"),
    ("routes[0].proxy.strip-prefix",
     L + U + "routes:\n  - proxy:\n      upstream: o\n      strip-prefix: \"/a\\r\\nb\"\n"),
    ("upstreams[0].sticky.cookie",
     L + "upstreams:\n  - name: o\n    servers: [http://127.0.0.1:9]\n"
     "    sticky: {cookie: \"s=1\\r\\nSet-Cookie: admin\"}\nroutes: [{proxy: o}]\n"),
    ("upstreams[0].sticky.header",
     L + "upstreams:\n  - name: o\n    servers: [http://127.0.0.1:9]\n"
     "    sticky: {header: \"x\\r\\ny\"}\nroutes: [{proxy: o}]\n"),
    ("upstreams[0].servers[0].url",
     L + "upstreams:\n  - name: o\n    servers: [\"http://127.0.0.1:9\\r\\nX-Evil: 1\"]\n"
     "routes: [{proxy: o}]\n"),
    ("upstreams[0].sni",
     L + "upstreams:\n  - name: o\n    servers: [https://127.0.0.1:9]\n"
     "    sni: \"a.example\\r\\nb\"\nroutes: [{proxy: o}]\n"),
    ("upstreams[0].health-check.path",
     L + "upstreams:\n  - name: o\n    servers: [http://127.0.0.1:9]\n"
     "    health-check: \"/h HTTP/1.1\\r\\nX: y\"\nroutes: [{proxy: o}]\n"),
    ("routes[0].respond.headers.x-a",
     L + "routes:\n  - respond:\n      headers: {x-a: \"v\\r\\nX-Evil: 1\"}\n"),
    ("intercept.rules[0].request-headers.set.x-a",
     "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\nintercept:\n  rules:\n"
     "    - request-headers: {set: {x-a: \"v\\r\\nX-Evil: 1\"}}\n"),
    ("intercept.rules[0].request-headers.append.x-a",
     "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\nintercept:\n  rules:\n"
     "    - request-headers: {append: {x-a: \"v\\r\\nX-Evil: 1\"}}\n"),
    ("intercept.rules[0].response-headers.set.x-a",
     "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\nintercept:\n  rules:\n"
     "    - response-headers: {set: {x-a: \"v\\r\\nX-Evil: 1\"}}\n"),
    ("intercept.rules[0].response-headers.append",
     "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\nintercept:\n  rules:\n"
     "    - response-headers: {append: {\"x\\r\\ny\": v}}\n"),
    ("intercept.rules[0].map-remote",
     "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\nintercept:\n  rules:\n"
     "    - map-remote: \"http://a.example\\r\\nX-Evil: 1\"\n"),
    ("intercept.rules[0].respond.headers.x-a",
     "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\nintercept:\n  rules:\n"
     "    - respond: {headers: {x-a: \"v\\r\\nX-Evil: 1\"}}\n"),
]


@pytest.mark.parametrize("key,text", INJECTIONS, ids=[k for k, _ in INJECTIONS])
def test_config_validate_crlf_refused(tmp_path, key, text):
    p, cfg = check(tmp_path, text)
    assert p.returncode == 1, (p.returncode, p.stderr)
    line = next(i for i, l in enumerate(text.split("\n"), 1) if "\\r\\n" in l)
    m = re.search(r"^(?:ferry: )?" + re.escape(cfg) + r":(\d+):(\d+): " + re.escape(key) + ": (.*)$",
                  p.stderr, re.M)
    assert m, p.stderr
    assert int(m.group(1)) == line, p.stderr
    assert "line break" in m.group(3), p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("key,value,why", [
    ("cache-control", "\" max-age=1\"", "whitespace"),
    ("cache-control", "\"a\\x01b\"", "control"),
    ("cache-control", "\"a\\0b\"", "NUL"),
])
def test_config_validate_field_value_rules(tmp_path, key, value, why):
    p, cfg = check(tmp_path, L + f"routes:\n  - static: {{root: /tmp, {key}: {value}}}\n")
    assert p.returncode == 1, p.stderr
    assert re.search(re.escape(cfg) + r":3:\d+: ", p.stderr), p.stderr
    assert why in p.stderr


def test_config_validate_good_values_pass(tmp_path):
    p, _ = check(tmp_path, L + U + "routes:\n  - proxy:\n      upstream: o\n"
                 "      add-prefix: /v1;x=1/~a%20b\n      set-headers: {x-a: \"b\\tc\", x-e: \"\"}\n"
                 "      remove-headers: [x-b]\n  - static: {root: /tmp, cache-control: \"max-age=60, public\"}\n")
    assert p.returncode == 0, p.stderr


# ---- files a config names (what `ferry run` would fail to open) ----

def make_pair(d, name):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem")],
                   check=True, capture_output=True)
    return d / f"{name}.pem", d / f"{name}.key"


def tls_cfg(cert, key):
    return f"listeners:\n  - address: 127.0.0.1:8443\n    tls:\n      cert: {cert}\n      key: {key}\n"


def expect_error(p, cfg, line, key, *words):
    assert p.returncode == 1, (p.returncode, p.stderr)
    m = re.search(r"^(?:ferry: )?" + re.escape(cfg) + rf":{line}:\d+: " + re.escape(key) + ": (.*)$",
                  p.stderr, re.M)
    assert m, p.stderr
    for w in words:
        assert w in m.group(1), p.stderr
    assert "error:0" not in p.stderr  # no raw OpenSSL error stack


def test_config_validate_missing_cert_and_key(tmp_path):
    p, cfg = check(tmp_path, tls_cfg(tmp_path / "nope.pem", tmp_path / "nope.key"))
    expect_error(p, cfg, 4, "listeners[0].tls.cert", "nope.pem", "No such file")
    expect_error(p, cfg, 5, "listeners[0].tls.key", "nope.key", "No such file")


def test_config_validate_cert_not_pem(tmp_path):
    cert, key = make_pair(tmp_path, "a")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    p, cfg = check(tmp_path, tls_cfg(junk, key))
    expect_error(p, cfg, 4, "listeners[0].tls.cert", "junk.pem", "no PEM certificate")
    p, cfg = check(tmp_path, tls_cfg(cert, junk))
    expect_error(p, cfg, 4, "listeners[0].tls.cert", "junk.pem", "no PEM private key")


def test_config_validate_cert_key_mismatch(tmp_path):
    cert, _ = make_pair(tmp_path, "a")
    _, key_b = make_pair(tmp_path, "b")
    p, cfg = check(tmp_path, tls_cfg(cert, key_b))
    expect_error(p, cfg, 4, "listeners[0].tls.cert", "b.key", "not the private key", "a.pem")
    # the same in an SNI certificate list
    p, cfg = check(tmp_path, "listeners:\n  - address: 127.0.0.1:8443\n    tls:\n"
                   f"      certificates:\n        - {{cert: {cert}, key: {key_b}}}\n")
    expect_error(p, cfg, 5, "listeners[0].tls.certificates[0].cert", "not the private key")
    cert_b, _ = make_pair(tmp_path, "c")
    p, _ = check(tmp_path, tls_cfg(cert, tmp_path / "a.key"))
    assert p.returncode == 0, p.stderr


def test_config_validate_cert_is_a_folder(tmp_path):
    _, key = make_pair(tmp_path, "a")
    p, cfg = check(tmp_path, tls_cfg(tmp_path, key))
    expect_error(p, cfg, 4, "listeners[0].tls.cert", "Is a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_config_validate_unreadable_key(tmp_path):
    cert, key = make_pair(tmp_path, "a")
    key.chmod(0)
    p, cfg = check(tmp_path, tls_cfg(cert, key))
    expect_error(p, cfg, 5, "listeners[0].tls.key", "Permission denied")


def test_config_validate_upstream_ca_and_client_cert(tmp_path):
    base = L + "upstreams:\n  - name: o\n    servers: [https://127.0.0.1:9]\n"
    p, cfg = check(tmp_path, base + f"    ca: {tmp_path}/nope-ca.pem\nroutes: [{{proxy: o}}]\n")
    expect_error(p, cfg, 5, "upstreams[0].ca", "nope-ca.pem", "No such file")
    junk = tmp_path / "junk.pem"
    junk.write_text("junk\n")
    p, cfg = check(tmp_path, base + f"    ca: {junk}\nroutes: [{{proxy: o}}]\n")
    expect_error(p, cfg, 5, "upstreams[0].ca", "no PEM certificate")
    cert, _ = make_pair(tmp_path, "a")
    _, key_b = make_pair(tmp_path, "b")
    p, cfg = check(tmp_path, base + f"    ca: {cert}\nroutes: [{{proxy: o}}]\n")
    assert p.returncode == 0, p.stderr
    p, cfg = check(tmp_path, base + f"    cert: {cert}\n    key: {key_b}\nroutes: [{{proxy: o}}]\n")
    expect_error(p, cfg, 5, "upstreams[0].cert", "not the private key")


def test_config_validate_intercept_upstream_ca(tmp_path):
    p, cfg = check(tmp_path, "listeners: [{address: 127.0.0.1:8888, kind: intercept}]\n"
                   f"intercept:\n  upstream-ca: {tmp_path}/nope.pem\n")
    expect_error(p, cfg, 3, "intercept.upstream-ca", "nope.pem", "No such file")


def test_config_validate_access_log_folder(tmp_path):
    p, cfg = check(tmp_path, L + f"routes: [{{echo: {{}}}}]\nlog:\n  access: {tmp_path}/no/such/access.log\n")
    expect_error(p, cfg, 4, "log.access", "does not exist", f"{tmp_path}/no/such")
    p, cfg = check(tmp_path, L + f"routes: [{{echo: {{}}}}]\nlog: {{error: {tmp_path}}}\n")
    expect_error(p, cfg, 3, "log.error", "is a folder")
    p, cfg = check(tmp_path, L + f"routes: [{{echo: {{}}}}]\nlog: {{access: {tmp_path}/access.log}}\n")
    assert p.returncode == 0, p.stderr


def test_config_validate_run_reports_the_same(tmp_path):
    """`run` goes through the same checks: file:line:col, no OpenSSL stack, nothing started."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(tls_cfg(tmp_path / "nope.pem", tmp_path / "nope.key"))
    p = subprocess.run([FERRY, "run", "-c", str(cfg)], capture_output=True, text=True, timeout=15)
    assert p.returncode == 1, p.stderr
    assert re.search(re.escape(str(cfg)) + r":4:\d+: listeners\[0\]\.tls\.cert: cannot read", p.stderr)
    assert "error:0" not in p.stderr


def test_config_validate_tls_ciphers(tmp_path):
    p, cfg = check(tmp_path, "listeners:\n  - address: 127.0.0.1:8443\n"
                   "    tls: {self-signed: true, ciphers: NOPE-NOPE}\n")
    expect_error(p, cfg, 3, "listeners[0].tls.ciphers", "NOPE-NOPE")


# ---- YAML and key mistakes: hints, and the right position ----

@pytest.mark.parametrize("text,line,hint", [
    ("listeners:\n\t- address: 127.0.0.1:8080\n", 2, "tabs are not allowed for indentation"),
    ("listeners:\n  - address: 127.0.0.1:8080\n  \tprotocols: [h1]\n", 3,
     "tabs are not allowed for indentation"),
    ("listeners:\n  - address: 127.0.0.1:8080\n   protocols: [h1]\n", 3, "check the indentation"),
    ("log:\n  level: info\n access: off\n", 3, "check the indentation"),
    ("routes:\n  - respond: {body: \"ok}\n", 3, "not closed"),
])
def test_config_validate_yaml_hints(tmp_path, text, line, hint):
    p, cfg = check(tmp_path, text)
    assert p.returncode == 1, p.stderr
    assert re.search(re.escape(cfg) + rf":{line}:\d+: yaml: .*" + re.escape(hint), p.stderr), p.stderr


@pytest.mark.parametrize("text,line,key,hint", [
    (L + "routes:\n  - match:\n    path: /x\n    echo: {}\n", 4, "routes[0].path",
     "did you mean to indent it under match?"),
    (L + "routes:\n  - match:\n      path: /x\n      echo: {}\n", 5, "routes[0].match.echo",
     "indent it less, out of match?"),
    ("listeners:\n  - address: 127.0.0.1:8443\n    self-signed: true\n", 3,
     "listeners[0].self-signed", "did you mean to indent it under tls?"),
])
def test_config_validate_unknown_key_hints(tmp_path, text, line, key, hint):
    p, cfg = check(tmp_path, text)
    assert p.returncode == 1, p.stderr
    m = re.search(re.escape(cfg) + rf":{line}:\d+: " + re.escape(key) + ": (.*)$", p.stderr, re.M)
    assert m and hint in m.group(1), p.stderr


def test_config_validate_unknown_upstream_at_the_route(tmp_path):
    p, cfg = check(tmp_path, L + U + "routes:\n  - echo: {}\n  - match: {path: /a}\n"
                   "    proxy: {upstream: nope}\n")
    expect_error(p, cfg, 8, "routes[1].proxy.upstream", "no upstream named 'nope'")
    assert ":1:1:" not in p.stderr


def test_config_validate_duplicate_listeners(tmp_path):
    p, cfg = check(tmp_path, "listeners:\n  - address: 127.0.0.1:8080\n"
                   "  - address: 127.0.0.1:8081\n  - address: 127.0.0.1:8080\n"
                   "routes: [{echo: {}}]\n")
    expect_error(p, cfg, 4, "listeners[2].address", "127.0.0.1:8080", "listeners[0]", "line 2")
    # TCP and UDP on one port are two sockets: fine
    p, _ = check(tmp_path, "listeners:\n  - address: 127.0.0.1:8443\n    tls: self-signed\n"
                 "l4:\n  - {listen: 127.0.0.1:8443, mode: udp, target: 127.0.0.1:9}\n"
                 "routes: [{echo: {}}]\n")
    assert p.returncode == 0, p.stderr
    p, cfg = check(tmp_path, "listeners:\n  - address: 127.0.0.1:8443\n    tls: self-signed\n"
                   "    protocols: [h1, h2, h3]\n"
                   "l4:\n  - {listen: 127.0.0.1:8443, mode: udp, target: 127.0.0.1:9}\n"
                   "routes: [{echo: {}}]\n")
    expect_error(p, cfg, 6, "l4[0].listen", "(UDP)", "listeners[0]")
