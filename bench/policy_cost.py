#!/usr/bin/python3
"""Instructions per request of the issue-15 policy filters (JWT, transforms, compression, WAF)
as ratios to the plain reverse proxy h1->h1 route, measured with callgrind the way bench/run's
`--instructions` does: ferry (workers: 1) under callgrind, K requests on one keep-alive
connection, marginal Ir = (Ir(K2) - Ir(K1)) / (K2 - K1). The origin is bench/bare.c. The
nginx-* rows run nginx (one process, master_process off) the same way: its plain proxy, and
with ModSecurity-nginx (Debian libnginx-mod-http-modsecurity) and the same CRS files.

    /usr/bin/python3 bench/policy_cost.py --rows plain+browser,waf-norules,waf-crs-pl1,\
        nginx-plain+browser,nginx-modsec-crs-pl1

    /usr/bin/python3 bench/policy_cost.py [--ferry build/ferry] [--k 200,1200] [--rows ...]

The haproxy-* rows run HAProxy 2.6 (one thread) the same way, as the JWT peer; the big-* and
nginx-big-* rows put 64 KiB of text behind the proxy, plain and with gzip level 1 (Ferry's
compress filter, nginx's gzip; big-br4 and big-zstd3 Ferry's br and zstd, the client accepting
only that coding); they are slow under callgrind, so use --k 20,120 for them.
"""
import argparse
import contextlib
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "bench-secret-0123456789abcdef"
# A benign GET as a browser sends it (the WAF rows: the CRS looks at every header)
BROWSER = ("User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
           "Chrome/120.0.0.0 Safari/537.36\r\n"
           "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,"
           "image/webp,*/*;q=0.8\r\n"
           "Accept-Language: en-GB,en;q=0.9\r\n"
           "Referer: http://x/products?page=2\r\n"
           "Cookie: session=3f9a1c2b7d; theme=dark\r\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} never opened")


def tokens(tmp):
    import jwt
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-out", f"{tmp}/ec.key"], check=True)
    subprocess.run(["openssl", "pkey", "-in", f"{tmp}/ec.key", "-pubout", "-out",
                    f"{tmp}/ec.pem"], check=True)
    c = {"sub": "bench", "exp": int(time.time()) + 3600}
    key = open(f"{tmp}/ec.key").read()
    # a fresh token per request: each differs (jti), so each is a signature check
    fresh = [jwt.encode({**c, "jti": str(i)}, key, algorithm="ES256") for i in range(1300)]
    return {"hs256": jwt.encode(c, SECRET, algorithm="HS256"),
            "es256": jwt.encode(c, key, algorithm="ES256"), "es256-fresh": fresh}


def rows(tmp):
    jwt_hs = f"    jwt: {{secret: {SECRET}, algorithms: [HS256], claims-to-headers: {{sub: x-user}}}}\n"
    jwt_es = f"    jwt: {{keys: [{tmp}/ec.pem], algorithms: [ES256], claims-to-headers: {{sub: x-user}}}}\n"
    transform = """    transform:
      rewrite: [{match: "^/hel(lo)$", to: "/hel$1"}]
      request-headers: {set: {x-client: "{client}"}}
      response-headers: {set: {x-frame-options: DENY}}
      request-id: x-request-id
"""
    compress = "    compress: enabled\n"
    one_header = "    transform: {response-headers: {set: {x-frame-options: DENY}}}\n"
    insp = f"inspector: {{dir: {tmp}/insp, address: 127.0.0.1:{free_port()}}}\n"
    return {"plain": ("", None), "jwt-hs256": (jwt_hs, "hs256"), "jwt-es256": (jwt_es, "es256"),
            "jwt-es256-fresh": (jwt_es, "es256-fresh"),
            "jwt-hs256-nohdr": (f"    jwt: {{secret: {SECRET}, algorithms: [HS256]}}\n", "hs256"),
            "jwt-es256-nohdr": (f"    jwt: {{keys: [{tmp}/ec.pem], algorithms: [ES256]}}\n",
                                "es256"),
            # the same requests without the filter: what the token's bytes cost by themselves
            "plain+hs256-token": ("", "hs256"), "plain+es256-token": ("", "es256"),
            "transforms": (transform, None), "transform-1hdr": (one_header, None),
            "compress-skip": (compress, None),
            # WAF: the full CRS 3.3.4 at PL1 on a benign browser GET; with the engine on and no
            # rules (the library's own cost); the plain proxy with the same request
            "waf-crs-pl1": ("    waf: {mode: blocking, paranoia: 1}\n", "BROWSER"),
            "waf-norules": ("    waf: {crs: false}\n", "BROWSER"),
            "plain+browser": ("", "BROWSER"),
            # the peer: nginx 1.22 plain proxy, and with ModSecurity-nginx 1.0.3 + the same CRS
            "nginx-plain+browser": ("NGINX:plain", "BROWSER"),
            "nginx-modsec-crs-pl1": ("NGINX:modsec", "BROWSER"),
            # the same header set by the proxy handler itself: what the header costs the codec
            "proxy-1hdr": ("ROUTE:  - proxy: {upstream: app, response-set-headers: "
                           "{x-frame-options: DENY}}\n", None),
            # issue 15 resilience: breaker and retry budget on the upstream, never tripping
            "resilience": ("UPSTREAM:    circuit-breaker: {consecutive-failures: 5, "
                           "error-rate: 50%, window: 10s, min-requests: 20, open-for: 10s, "
                           "half-open-requests: 3}\n    retry-budget: {ratio: 0.2, "
                           "min-per-second: 10}\n    retries: 1\n", None),
            # hedging armed on every GET, never firing (the origin answers within the delay)
            "plain-2srv": ("TWO:", None),
            "hedge-2srv": ("TWO:UPSTREAM:    hedge: {delay: 1s}\n", None),
            # the JWT peer: HAProxy 2.6 (one thread), its plain proxy with and without the
            # token, and `jwt_verify` on every request (HAProxy keeps no verified-token cache)
            "haproxy-plain": ("HAPROXY:", None),
            "haproxy-plain+es256-token": ("HAPROXY:", "es256"),
            "haproxy-jwt-hs256": ("HAPROXY:HS256", "hs256"),
            "haproxy-jwt-es256": ("HAPROXY:ES256", "es256"),
            # gzip level 1 on 64 KiB of text (BIG: the origin that answers with it; bare.c
            # labels a body file application/octet-stream, so both compress that type)
            "big-plain": ("BIG:", None),
            "big-gzip1": ("BIG:    compress: {encodings: [gzip], gzip-level: 1, "
                          "types: [application/octet-stream]}\n", None),
            # the same body in br (quality 4) and zstd (level 3), the client accepting only that
            # coding (AE:): one-shot BrotliEncoderCompress / ZSTD_compressCCtx since session 8
            "big-br4": ("BIG:AE:br:    compress: {encodings: [br], brotli-level: 4, "
                        "types: [application/octet-stream]}\n", None),
            "big-zstd3": ("BIG:AE:zstd:    compress: {encodings: [zstd], zstd-level: 3, "
                          "types: [application/octet-stream]}\n", None),
            "nginx-big-plain": ("BIG:NGINX:plain", None),
            "nginx-big-gzip1": ("BIG:NGINX:gzip1", None),
            # issue 18: every flow of the route stored by the inspector (bodies, or heads only)
            "capture": ("    capture: {}\nTOP:" + insp, None),
            "capture-nobody": ("    capture: {bodies: false}\nTOP:" + insp, None),
            # issue 14: W3C trace context on, a new trace per request (no traceparent sent)
            "tracing": ("TOP:tracing: {enabled: true}\n", None),
            # issue 15: a local rate limit per client address that never rejects, and its
            # peers: nginx `limit_req` (a zone keyed by address) and an HAProxy stick table
            # tracking the request rate per source, each beside its own plain proxy
            "ratelimit": ("    rate-limit: {rate: 1000000/s, burst: 1000000, "
                          "key: [client-address]}\n", None),
            "nginx-plain": ("NGINX:plain", None),
            "nginx-limit-req": ("NGINX:limitreq", None),
            "haproxy-stick": ("HAPROXY:STICK", None)}


def text64k(path):
    """64 KiB of English-like text with numbers, compressible about as well as HTML."""
    words = ("the quick brown fox jumps over a lazy dog while proxy servers compress "
             "responses for clients that accept gzip and every request carries headers").split()
    out, i = [], 0
    while sum(len(x) for x in out) < 65536:
        line = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(12))
        out.append(f"{i:05d} {line} {i * 2654435761 % 1000003}\n")
        i += 1
    open(path, "w").write("".join(out)[:65536])


def haproxy_conf(tmp, port, origin, alg):
    """HAProxy as the JWT peer: one thread, keep-alive to the origin, and with `alg` the
    documented jwt_verify recipe (alg from the token's header must be the one expected)."""
    jwt = ""
    if alg == "STICK":
        jwt = ("  stick-table type ip size 100k expire 30s store http_req_rate(10s)\n"
               "  http-request track-sc0 src\n"
               "  http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000 }\n")
    elif alg:
        key = f'"{SECRET}"' if alg == "HS256" else f'"{tmp}/ec.pem"'
        jwt = (f"  http-request set-var(txn.bearer) http_auth_bearer\n"
               f"  http-request set-var(txn.alg) var(txn.bearer),jwt_header_query('$.alg')\n"
               f'  http-request deny unless {{ var(txn.alg) -m str "{alg}" }}\n'
               f"  http-request deny unless {{ var(txn.bearer),jwt_verify(txn.alg,{key}) "
               f"-m int 1 }}\n")
    return f"""global
  nbthread 1
  tune.ssl.default-dh-param 2048
defaults
  mode http
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  timeout http-keep-alive 600s
  option http-keep-alive
frontend f
  bind 127.0.0.1:{port}
{jwt}  default_backend b
backend b
  http-reuse always
  server s 127.0.0.1:{origin}
"""


def nginx_conf(tmp, port, origin, modsec):
    """nginx as the WAF peer: one process (master_process off), a keep-alive upstream, and
    with `modsec` the ModSecurity-nginx connector with the same base directives and CRS files
    Ferry's `waf:` loads (policy/waf_conf.c)."""
    rules = f"{tmp}/modsec-main.conf"
    if modsec is True:
        crs = "/usr/share/modsecurity-crs/rules"
        with open(rules, "w") as f:
            f.write("SecRuleEngine On\nSecRequestBodyAccess On\nSecRequestBodyLimit 131072\n"
                    "SecRequestBodyLimitAction ProcessPartial\nSecResponseBodyAccess Off\n"
                    "SecAuditEngine Off\n"
                    'SecRule REQUEST_HEADERS:Content-Type "^application/json" '
                    '"id:200001,phase:1,t:none,t:lowercase,pass,nolog,'
                    'ctl:requestBodyProcessor=JSON"\n'
                    "Include /etc/modsecurity/crs/crs-setup.conf\n"
                    'SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level=1"\n')
            for r in sorted(glob.glob(f"{crs}/*.conf")):
                f.write(f"Include {r}\n")
    ms = (f"    modsecurity on;\n    modsecurity_rules_file {rules};\n" if modsec is True else "")
    zone = ""
    if modsec == "limitreq":
        zone = "  limit_req_zone $binary_remote_addr zone=perip:1m rate=1000000r/s;\n"
        ms = "    limit_req zone=perip burst=1000000 nodelay;\n"
    if modsec == "gzip1":
        ms = ("    gzip on;\n    gzip_comp_level 1;\n    gzip_min_length 256;\n"
              "    gzip_types application/octet-stream;\n")
    load = ("load_module /usr/lib/nginx/modules/ngx_http_modsecurity_module.so;\n"
            if modsec is True else "")
    return f"""{load}daemon off;
master_process off;
worker_processes 1;
error_log {tmp}/nginx-error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path {tmp}/ngx-body;
  proxy_temp_path {tmp}/ngx-proxy;
{zone}  upstream app {{ server 127.0.0.1:{origin}; keepalive 8; }}
  server {{
    listen 127.0.0.1:{port};
{ms}    location / {{
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""


def run_one(ferry, origin, extra, token, k, tmp, tag):
    port = free_port()
    # each run its own inspector store: the longer run would otherwise rebuild the shorter
    # run's flows at start, which is not a per-request cost
    extra = extra.replace(f"{tmp}/insp,", f"{tmp}/insp-{tag}-{k},")
    if extra.startswith("BIG:"):
        origin, extra = big_origin(tmp), extra[4:]
    ae = "gzip"
    if extra.startswith("AE:"):  # the client's Accept-Encoding (gzip unless the row says)
        ae, extra = extra[3:].split(":", 1)
    if extra.startswith("NGINX:"):
        path = f"{tmp}/{tag}-{k}.nginx.conf"
        open(path, "w").write(nginx_conf(tmp, port, origin, True if extra == "NGINX:modsec"
                                         else extra[6:] if extra in ("NGINX:gzip1", "NGINX:limitreq")
                                         else False))
        cmd = ["nginx", "-p", tmp, "-c", path]
        return measure(cmd, port, token, k, tmp, tag)
    if extra.startswith("HAPROXY:"):
        path = f"{tmp}/{tag}-{k}.haproxy.cfg"
        open(path, "w").write(haproxy_conf(tmp, port, origin, extra[8:]))
        return measure(["haproxy", "-db", "-f", path], port, token, k, tmp, tag)
    route = "  - proxy: app\n"
    if extra.startswith("ROUTE:"):
        route, extra = extra[6:], ""
    top = ""
    if "TOP:" in extra:  # top-level sections the row needs (after the routes)
        extra, top = extra.split("TOP:", 1)
    servers = f"[http://127.0.0.1:{origin}]"
    if extra.startswith("TWO:"):  # two servers (the same origin under two names)
        servers, extra = f"[http://127.0.0.1:{origin}, http://localhost:{origin}]", extra[4:]
    upstream = ""
    if extra.startswith("UPSTREAM:"):
        upstream, extra = extra[9:], ""
    cfg = f"""workers: 1
data-dir: {tmp}/data
log: {{level: warn}}
# under callgrind on a busy machine one WAF request can take seconds: no timer may close the
# connection meanwhile (timers cost the same whatever their length)
limits: {{header-timeout: 600s, keepalive-timeout: 600s}}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1]
upstreams:
  - name: app
    servers: {servers}
{upstream}routes:
{route}{extra}{top}"""
    path = f"{tmp}/{tag}-{k}.yaml"
    open(path, "w").write(cfg)
    return measure([ferry, "run", "-c", path], port, token, k, tmp, tag, ae)


def measure(cmd, port, token, k, tmp, tag, ae="gzip"):
    out = f"{tmp}/cg-{tag}-{k}"
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p"]
                         + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=180)
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        for n in range(k):
            t = token[n] if isinstance(token, list) else token
            hdr = BROWSER if t == "BROWSER" else f"Authorization: Bearer {t}\r\n" if t else ""
            s.sendall(f"GET /hello HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {ae}\r\n{hdr}\r\n"
                      .encode())
            buf = b""
            while True:
                got = s.recv(65536)
                if not got:
                    raise SystemExit(f"{tag}: connection closed after {n} requests")
                buf += got
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    continue
                m = re.search(rb"content-length: *(\d+)", buf[:i].lower())
                if not m and b"transfer-encoding: chunked" in buf[:i].lower():
                    if buf.endswith(b"\r\n0\r\n\r\n"):  # the last chunk (no trailers)
                        break
                    continue
                if not m:
                    raise SystemExit(f"{tag}: no content-length: {buf[:300]!r}")
                if len(buf) >= i + 4 + int(m.group(1)):
                    break
            if not buf.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"{tag}: {buf[:200]!r}")
        s.close()
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
    ir = 0
    for f in glob.glob(out + ".*"):
        for line in open(f):
            if line.startswith("summary:") or line.startswith("totals:"):
                ir += int(line.split()[1])
                break
    return ir


BIG = {}


def big_origin(tmp):
    """A second bare.c origin answering with 64 KiB of text (started on first use)."""
    if "port" not in BIG:
        text64k(f"{tmp}/text64k")
        BIG["port"] = free_port()
        BIG["proc"] = subprocess.Popen([f"{tmp}/bare", str(BIG["port"]), f"{tmp}/text64k"])
        wait_port(BIG["port"])
    return BIG["port"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", default=os.path.join(HERE, "..", "build", "ferry"))
    ap.add_argument("--k", default="200,1200")
    ap.add_argument("--rows", default="plain,jwt-hs256,jwt-es256,transforms,transform-1hdr,"
                    "compress-skip")
    # keep the callgrind outputs (and configs) in this folder for callgrind_annotate
    ap.add_argument("--keep-tmp", metavar="DIR", default=None)
    a = ap.parse_args()
    k1, k2 = (int(x) for x in a.k.split(","))
    if a.keep_tmp:
        os.makedirs(a.keep_tmp, exist_ok=True)
    with (contextlib.nullcontext(os.path.abspath(a.keep_tmp)) if a.keep_tmp
          else tempfile.TemporaryDirectory()) as tmp:
        subprocess.run(["cc", "-std=c17", "-O2", "-o", f"{tmp}/bare", f"{HERE}/bare.c"],
                       check=True)
        origin = free_port()
        o = subprocess.Popen([f"{tmp}/bare", str(origin)])
        try:
            wait_port(origin)
            toks = tokens(tmp)
            res = {}
            for name in a.rows.split(","):
                extra, tk = rows(tmp)[name]
                t = "BROWSER" if tk == "BROWSER" else toks[tk] if tk else None
                i1 = run_one(a.ferry, origin, extra, t, k1, tmp, name)
                i2 = run_one(a.ferry, origin, extra, t, k2, tmp, name)
                res[name] = (i2 - i1) / (k2 - k1)
                print(f"{name:14} {res[name]:10.0f} instructions/request", flush=True)
        finally:
            o.terminate()
            o.wait()
            if "proc" in BIG:
                BIG["proc"].terminate()
                BIG["proc"].wait()
    base = res.get("plain")
    if base:
        print("\n| row | instructions/request | kept (plain / row) |\n|---|---|---|")
        for n, v in res.items():
            print(f"| {n} | {v:.0f} | {base / v:.3f}× |")
    peer = res.get("haproxy-plain")
    if peer:  # the HAProxy rows against HAProxy's own plain proxy
        print("\n| HAProxy row | instructions/request | kept (haproxy-plain / row) |\n|---|---|---|")
        for n, v in res.items():
            if n.startswith("haproxy-"):
                print(f"| {n} | {v:.0f} | {peer / v:.3f}× |")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
