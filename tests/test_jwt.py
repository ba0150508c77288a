"""JWT filter (src/policy/jwt.c), black box: tokens minted with python3-jwt and with the openssl
command line for every algorithm; refusals (bad signature, wrong alg, alg none, algorithm
confusion, expired, not yet valid, wrong audience/issuer, unknown kid); JWKS file rotation and a
JWKS URL served over https by a Python server on loopback; claims copied to request headers;
tokens from the header, a cookie and the query; over h1, h2 (prior knowledge) and h3."""
import base64
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest

from conftest import free_port, http_origin

ROOT = Path(__file__).resolve().parent.parent
SECRET = "ferry-test-secret-0123456789abcdef"


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def run(*args, cwd=None, inp=None):
    return subprocess.run(list(args), cwd=cwd, input=inp, check=True, timeout=30,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    run("openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out",
        "rsa.key", cwd=d)
    run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
        "ec256.key", cwd=d)
    run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out",
        "ec384.key", cwd=d)
    run("openssl", "genpkey", "-algorithm", "ED25519", "-out", "ed.key", cwd=d)
    for k in ("rsa", "ec256", "ec384", "ed"):
        run("openssl", "pkey", "-in", f"{k}.key", "-pubout", "-out", f"{k}.pem", cwd=d)
    return d


class Origin(BaseHTTPRequestHandler):
    """Answers every request with its headers as JSON."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def origin():
    with http_origin(Origin) as port:
        yield port


def config(origin_port, jwt_yaml, extra_listener="", protocols="[h1, h2c]"):
    return f"""
workers: 2
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: {protocols}
{extra_listener}
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - match: {{{{path: /open}}}}
    respond: {{{{body: "open\\n"}}}}
  - proxy: o
    jwt:
{jwt_yaml}
"""


def curl(url, token=None, *args, h2=False):
    cmd = ["curl", "-s", "--max-time", "10", "-D", "-", "-o", "-"]
    if h2:
        cmd.append("--http2-prior-knowledge")
    if token is not None:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    cmd += list(args) + [url]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=20).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


def claims(**kw):
    now = int(time.time())
    c = {"sub": "alice", "iat": now, "exp": now + 600}
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def error_of(hdrs):
    return hdrs.get("www-authenticate", "")


# ---- keys and tokens ----------------------------------------------------------------------------

def pem(keys, name):
    return (keys / name).read_bytes()


def pyjwt_token(keys, alg, payload=None, headers=None):
    key = {"HS": SECRET, "RS": pem(keys, "rsa.key"), "PS": pem(keys, "rsa.key"),
           "ES": pem(keys, "ec256.key" if alg == "ES256" else "ec384.key"),
           "Ed": pem(keys, "ed.key")}[alg[:2]]
    return jwt.encode(payload or claims(), key, algorithm=alg, headers=headers)


def der_to_raw(der, w):
    # ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 3
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        v = der[i + 2:i + 2 + n].lstrip(b"\0")
        out += v.rjust(w, b"\0")
        i += 2 + n
    return out


def openssl_token(keys, alg, payload=None, kid=None):
    hdr = {"alg": alg, "typ": "JWT"}
    if kid:
        hdr["kid"] = kid
    msg = (b64u(json.dumps(hdr).encode()) + "." +
           b64u(json.dumps(payload or claims()).encode())).encode()
    bits = alg[2:]
    if alg.startswith("HS"):
        sig = run("openssl", "dgst", f"-sha{bits}", "-mac", "HMAC", "-macopt", f"key:{SECRET}",
                  "-binary", inp=msg)
    elif alg.startswith("RS"):
        sig = run("openssl", "dgst", f"-sha{bits}", "-binary", "-sign", str(keys / "rsa.key"),
                  inp=msg)
    elif alg.startswith("PS"):
        sig = run("openssl", "dgst", f"-sha{bits}", "-binary", "-sign", str(keys / "rsa.key"),
                  "-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:digest",
                  inp=msg)
    elif alg.startswith("ES"):
        key = "ec256.key" if alg == "ES256" else "ec384.key"
        der = run("openssl", "dgst", f"-sha{bits}", "-binary", "-sign", str(keys / key), inp=msg)
        sig = der_to_raw(der, 32 if alg == "ES256" else 48)
    else:
        f = keys / "msg.bin"
        f.write_bytes(msg)
        sig = run("openssl", "pkeyutl", "-sign", "-rawin", "-inkey", str(keys / "ed.key"),
                  "-in", str(f))
    return msg.decode() + "." + b64u(sig)


ALGS = ["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
        "ES256", "ES384", "EdDSA"]


def all_keys_yaml(keys):
    return f"""      secret: {SECRET}
      keys: [{keys}/rsa.pem, {keys}/ec256.pem, {keys}/ec384.pem, {keys}/ed.pem]
      claims-to-headers: {{{{sub: x-user}}}}
"""


@pytest.mark.parametrize("alg", ALGS)
def test_jwt_every_algorithm_pyjwt_and_openssl(server, origin, keys, alg):
    srv = server(config(origin, all_keys_yaml(keys)))
    url = srv.url("/x")
    for tok in (pyjwt_token(keys, alg), openssl_token(keys, alg)):
        st, h, body = curl(url, tok)
        assert st == 200, (alg, h, body)
        assert json.loads(body)["x-user"] == "alice"
        # a flipped signature byte is refused (and the verified-token cache holds only the
        # good one)
        head, pay, sig = tok.split(".")
        raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
        raw[len(raw) // 2] ^= 1
        st, h, _ = curl(url, f"{head}.{pay}.{b64u(bytes(raw))}")
        assert st == 401 and 'error="invalid_token"' in error_of(h), (alg, h)
        assert "signature mismatch" in error_of(h)
        st, _, _ = curl(url, tok)  # the cached good token still passes
        assert st == 200


def test_jwt_no_token_is_401_with_realm_only(server, origin, keys):
    srv = server(config(origin, all_keys_yaml(keys) + "      realm: api\n"))
    st, h, _ = curl(srv.url("/x"))
    assert st == 401
    assert h["www-authenticate"] == 'Bearer realm="api"'
    st, _, body = curl(srv.url("/open"))
    assert st == 200 and body == b"open\n"


def test_jwt_refusals_name_the_error(server, origin, keys):
    srv = server(config(origin, f"""      secret: {SECRET}
      keys: [{keys}/rsa.pem]
      issuer: [https://issuer.example]
      audience: [api]
      leeway: 5s
"""))
    url = srv.url("/x")
    now = int(time.time())
    good = claims(iss="https://issuer.example", aud=["other", "api"])
    assert curl(url, jwt.encode(good, SECRET, algorithm="HS256"))[0] == 200
    cases = {
        "token expired": jwt.encode({**good, "exp": now - 60}, SECRET, algorithm="HS256"),
        "token not yet valid": jwt.encode({**good, "nbf": now + 600}, SECRET, algorithm="HS256"),
        "token issued in the future": jwt.encode({**good, "iat": now + 600}, SECRET,
                                                 algorithm="HS256"),
        "wrong audience": jwt.encode({**good, "aud": "nope"}, SECRET, algorithm="HS256"),
        "wrong issuer": jwt.encode({**good, "iss": "https://evil"}, SECRET, algorithm="HS256"),
        "signature mismatch": jwt.encode(good, "another-secret-of-enough-length-xx",
                                         algorithm="HS256"),
        "malformed token": "abc.def",
    }
    # alg none, by hand (python-jwt refuses to verify it but will make one)
    none = b64u(b'{"alg":"none","typ":"JWT"}') + "." + b64u(json.dumps(good).encode()) + "."
    cases["alg none is refused"] = none
    # algorithm confusion: HS256 "signed" with the RSA public key's PEM as the secret
    rsa_pub = pem(keys, "rsa.pem")
    import hmac, hashlib
    m = (b64u(b'{"alg":"HS256","typ":"JWT"}') + "." + b64u(json.dumps(good).encode())).encode()
    conf_tok = m.decode() + "." + b64u(hmac.new(rsa_pub, m, hashlib.sha256).digest())
    cases["signature mismatch "] = conf_tok
    # the RS key with a kid that no key has
    cases["unknown kid"] = jwt.encode(good, pem(keys, "rsa.key"), algorithm="RS256",
                                      headers={"kid": "nope"})
    for why, tok in cases.items():
        st, h, _ = curl(url, tok)
        assert st == 401, (why, h)
        assert 'error="invalid_token"' in error_of(h), (why, h)
        assert f'error_description="{why.strip()}' in error_of(h), (why, h)


def test_jwt_algorithms_list_refuses_others(server, origin, keys):
    srv = server(config(origin, f"""      secret: {SECRET}
      keys: [{keys}/ec256.pem]
      algorithms: [ES256]
"""))
    st, h, _ = curl(srv.url("/x"), pyjwt_token(keys, "HS256"))
    assert st == 401 and "alg not allowed here" in error_of(h)
    assert curl(srv.url("/x"), pyjwt_token(keys, "ES256"))[0] == 200


def test_jwt_claims_required_matched_and_copied(server, origin, keys):
    srv = server(config(origin, f"""      secret: {SECRET}
      require: [email]
      claims: {{{{role: admin}}}}
      claims-to-headers: {{{{sub: x-user, email: x-email, n: x-n}}}}
"""))
    url = srv.url("/x")
    ok = jwt.encode(claims(email="a@example.com", role=["user", "admin"], n=42), SECRET,
                    algorithm="HS256")
    for _ in range(2):  # the second time from the cache
        st, h, body = curl(url, ok, "-H", "X-User: mallory")
        assert st == 200
        seen = json.loads(body)
        assert seen["x-user"] == "alice" and seen["x-email"] == "a@example.com"
        assert seen["x-n"] == "42"
    st, h, _ = curl(url, jwt.encode(claims(role="admin"), SECRET, algorithm="HS256"))
    assert st == 401 and "required claim email missing" in error_of(h)
    st, h, _ = curl(url, jwt.encode(claims(email="e", role="user"), SECRET, algorithm="HS256"))
    assert st == 403 and 'error="insufficient_scope"' in error_of(h)


def test_jwt_token_from_cookie_and_query(server, origin, keys):
    srv = server(config(origin, f"""      secret: {SECRET}
      cookie: session
      query: access_token
"""))
    tok = pyjwt_token(keys, "HS256")
    assert curl(srv.url("/x"), None, "-H", f"Cookie: a=b; session={tok}; c=d")[0] == 200
    assert curl(srv.url(f"/x?q=1&access_token={tok}"))[0] == 200
    assert curl(srv.url("/x?access_token=abc.def.ghi"))[0] == 401


def test_jwt_max_token_size(server, origin, keys):
    srv = server(config(origin, f"""      secret: {SECRET}
      max-token-size: 200
"""))
    tok = jwt.encode(claims(pad="x" * 300), SECRET, algorithm="HS256")
    st, h, _ = curl(srv.url("/x"), tok)
    assert st == 401 and "token too large" in error_of(h)


def jwk_of(keys, name, kid):
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
    pub = load_pem_public_key(pem(keys, name))
    alg = {"rsa.pem": RSAAlgorithm, "ec256.pem": ECAlgorithm, "ec384.pem": ECAlgorithm,
           "ed.pem": OKPAlgorithm}[name]
    j = json.loads(alg.to_jwk(pub))
    j["kid"] = kid
    j["use"] = "sig"
    return j


def test_jwt_jwks_file_rotation(server, origin, keys, tmp_path):
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk_of(keys, "ec256.pem", "k1")]}))
    srv = server(config(origin, f"      jwks-file: {jwks}\n"))
    t1 = jwt.encode(claims(), pem(keys, "ec256.key"), algorithm="ES256", headers={"kid": "k1"})
    t2 = jwt.encode(claims(), pem(keys, "rsa.key"), algorithm="RS256", headers={"kid": "k2"})
    t3 = jwt.encode(claims(), pem(keys, "ed.key"), algorithm="EdDSA", headers={"kid": "k3"})
    assert curl(srv.url("/x"), t1)[0] == 200
    st, h, _ = curl(srv.url("/x"), t2)
    assert st == 401 and "unknown kid" in error_of(h)
    # rotate: k1 goes, k2 and k3 come (written to a new file and renamed, as tools do)
    new = tmp_path / "jwks.new"
    new.write_text(json.dumps({"keys": [jwk_of(keys, "rsa.pem", "k2"),
                                        jwk_of(keys, "ed.pem", "k3")]}))
    os.rename(new, jwks)
    assert curl(srv.url("/x"), t2)[0] == 200
    assert curl(srv.url("/x"), t3)[0] == 200
    st, h, _ = curl(srv.url("/x"), t1)  # its key left the set: no longer valid (nor cached)
    assert st == 401 and "unknown kid" in error_of(h)


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=d)
    return d


def test_jwt_jwks_url_over_https(server, origin, keys, tls_certs):
    doc = {"body": json.dumps({"keys": [jwk_of(keys, "ec384.pem", "u1")]}).encode()}
    hits = []

    class J(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(doc["body"])))
            self.end_headers()
            self.wfile.write(doc["body"])

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), J)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_certs / "cert.pem", tls_certs / "key.pem")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        srv = server(config(origin, f"""      jwks-url: https://127.0.0.1:{port}/keys.json
      jwks-ca: {tls_certs}/cert.pem
"""))
        assert hits == ["/keys.json"]  # fetched before the listener opened
        tok = jwt.encode(claims(), pem(keys, "ec384.key"), algorithm="ES384",
                         headers={"kid": "u1"})
        st, h, _ = curl(srv.url("/x"), tok)
        assert st == 200, [l for l in srv.log().splitlines() if "jwt" in l]
        bad = jwt.encode(claims(), pem(keys, "ec256.key"), algorithm="ES256",
                         headers={"kid": "u1"})
        assert curl(srv.url("/x"), bad)[0] == 401
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_jwt_jwks_url_bad_certificate_is_logged(server, origin, keys, tls_certs):
    # the system store does not trust our self-signed certificate: the fetch fails, is logged,
    # and tokens are refused (no key) while ferry runs
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_certs / "cert.pem", tls_certs / "key.pem")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        srv = server(config(origin, f"      jwks-url: https://127.0.0.1:{httpd.server_address[1]}/k\n"))
        assert "TLS handshake" in srv.log()
        st, h, _ = curl(srv.url("/x"), pyjwt_token(keys, "ES256"))
        assert st == 401 and "no key for this alg" in error_of(h)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_jwt_config_errors(server, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("""listeners: [{address: "127.0.0.1:1"}]
routes:
  - respond: {}
    jwt: {algorithms: [none]}
""")
    from conftest import FERRY
    p = subprocess.run([FERRY, "check", "-c", str(bad)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20, text=True)
    assert p.returncode == 1
    assert f"{bad}:4:23: routes[0].jwt.algorithms: unknown algorithm 'none'" in p.stdout
    bad.write_text(bad.read_text().replace("algorithms: [none]", "leeway: 1s"))
    p = subprocess.run([FERRY, "check", "-c", str(bad)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20, text=True)
    assert p.returncode == 1
    assert "routes[0].jwt: needs keys" in p.stdout


def test_jwt_h2(server, origin, keys):
    srv = server(config(origin, all_keys_yaml(keys)))
    st, h, body = curl(srv.url("/x"), pyjwt_token(keys, "ES256"), h2=True)
    assert st == 200 and json.loads(body)["x-user"] == "alice"
    st, h, _ = curl(srv.url("/x"), pyjwt_token(keys, "ES256", claims(exp=1)), h2=True)
    assert st == 401 and "token expired" in error_of(h)


@pytest.mark.skipif(shutil.which("gtlsclient") is None, reason="gtlsclient missing")
def test_jwt_h3(server, origin, keys, tmp_path):
    from test_h3 import gtls, statuses
    srv = server(config(origin, all_keys_yaml(keys) + "      query: access_token\n",
                        protocols="[h1, h2, h3]\n    tls: self-signed"))
    good = pyjwt_token(keys, "EdDSA")
    bad = pyjwt_token(keys, "EdDSA", claims(exp=1))
    rc, out, _ = gtls(srv.port, [f"/x?access_token={good}"], tmp_path)
    assert statuses(out) == [200], out[-2000:]
    rc, out, _ = gtls(srv.port, [f"/x?access_token={bad}"], tmp_path)
    assert statuses(out) == [401], out[-2000:]
    assert "token expired" in out


def test_jwt_example_runs_as_written(server, origin):
    """examples/jwt.yaml: a reverse proxy on 127.0.0.1:8080 to 127.0.0.1:9000 (ports swapped for
    free ones here, nothing else changed)."""
    text = (ROOT / "examples" / "jwt.yaml").read_text()
    assert "127.0.0.1:8080" in text and "http://127.0.0.1:9000" in text
    text = text.replace("{", "{{").replace("}", "}}")
    text = text.replace("127.0.0.1:8080", "127.0.0.1:{port}")
    text = text.replace("http://127.0.0.1:9000", f"http://127.0.0.1:{origin}")
    srv = server(text)
    assert curl(srv.url("/"))[0] == 401
    tok = jwt.encode(claims(), "ferry-example-secret", algorithm="HS256")
    st, _, body = curl(srv.url("/anything"), tok)
    assert st == 200 and json.loads(body)["x-user"] == "alice"


def test_jwt_reload_swaps_keys_and_stops_the_jwks_thread(server, origin, keys, tls_certs):
    """SIGHUP with a new secret: the new generation's filter verifies with it, the old one (and
    its JWKS thread) is destroyed cleanly when its last exchange is gone (ferry exits 0, no
    sanitizer report)."""
    import signal as _signal
    from conftest import wait_for
    doc = json.dumps({"keys": [jwk_of(keys, "ed.pem", "e1")]}).encode()

    class J(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), J)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_certs / "cert.pem", tls_certs / "key.pem")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{httpd.server_address[1]}/k"
        srv = server(config(origin, f"""      secret: first-secret-0123456789abcdef
      jwks-url: {url}
      jwks-ca: {tls_certs}/cert.pem
"""))
        t1 = jwt.encode(claims(), "first-secret-0123456789abcdef", algorithm="HS256")
        t2 = jwt.encode(claims(), "second-secret-0123456789abcdef", algorithm="HS256")
        ted = jwt.encode(claims(), pem(keys, "ed.key"), algorithm="EdDSA", headers={"kid": "e1"})
        assert curl(srv.url("/x"), t1)[0] == 200 and curl(srv.url("/x"), ted)[0] == 200
        cfg = srv.tmp / "ferry.yaml"
        cfg.write_text(cfg.read_text().replace("first-secret", "second-secret"))
        srv.proc.send_signal(_signal.SIGHUP)
        wait_for(lambda: "generation 2 active on all workers" in srv.log(), 30, "the reload",
                 srv.proc)
        assert curl(srv.url("/x"), t2)[0] == 200
        assert curl(srv.url("/x"), t1)[0] == 401
        assert curl(srv.url("/x"), ted)[0] == 200  # fetched again by the new generation
    finally:
        httpd.shutdown()
        httpd.server_close()
