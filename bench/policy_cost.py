#!/usr/bin/python3
"""Instructions per request of the issue-15 policy filters (JWT, transforms, compression) as
ratios to the plain reverse proxy h1->h1 route, measured with callgrind the way bench/run's
`--instructions` does: ferry (workers: 1) under callgrind, K requests on one keep-alive
connection, marginal Ir = (Ir(K2) - Ir(K1)) / (K2 - K1). The origin is bench/bare.c.

    /usr/bin/python3 bench/policy_cost.py [--ferry build/ferry] [--k 200,1200] [--rows ...]
"""
import argparse
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
            # the same header set by the proxy handler itself: what the header costs the codec
            "proxy-1hdr": ("ROUTE:  - proxy: {upstream: app, response-set-headers: "
                           "{x-frame-options: DENY}}\n", None),
            # issue 18: every flow of the route stored by the inspector (bodies, or heads only)
            "capture": ("    capture: {}\nTOP:" + insp, None),
            "capture-nobody": ("    capture: {bodies: false}\nTOP:" + insp, None)}


def run_one(ferry, origin, extra, token, k, tmp, tag):
    port = free_port()
    route = "  - proxy: app\n"
    if extra.startswith("ROUTE:"):
        route, extra = extra[6:], ""
    top = ""
    if "TOP:" in extra:  # top-level sections the row needs (after the routes)
        extra, top = extra.split("TOP:", 1)
    cfg = f"""workers: 1
data-dir: {tmp}/data
log: {{level: warn}}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1]
upstreams:
  - name: app
    servers: [http://127.0.0.1:{origin}]
routes:
{route}{extra}{top}"""
    path = f"{tmp}/{tag}-{k}.yaml"
    open(path, "w").write(cfg)
    out = f"{tmp}/cg-{tag}-{k}"
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
                          ferry, "run", "-c", path], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        for n in range(k):
            t = token[n] if isinstance(token, list) else token
            hdr = f"Authorization: Bearer {t}\r\n" if t else ""
            s.sendall(f"GET /hello HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n{hdr}\r\n"
                      .encode())
            buf = b""
            while True:
                buf += s.recv(65536)
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    continue
                m = re.search(rb"content-length: *(\d+)", buf[:i].lower())
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", default=os.path.join(HERE, "..", "build", "ferry"))
    ap.add_argument("--k", default="200,1200")
    ap.add_argument("--rows", default="plain,jwt-hs256,jwt-es256,transforms,transform-1hdr,"
                    "compress-skip")
    a = ap.parse_args()
    k1, k2 = (int(x) for x in a.k.split(","))
    with tempfile.TemporaryDirectory() as tmp:
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
                t = toks[tk] if tk else None
                i1 = run_one(a.ferry, origin, extra, t, k1, tmp, name)
                i2 = run_one(a.ferry, origin, extra, t, k2, tmp, name)
                res[name] = (i2 - i1) / (k2 - k1)
                print(f"{name:14} {res[name]:10.0f} instructions/request", flush=True)
        finally:
            o.terminate()
            o.wait()
    base = res.get("plain")
    if base:
        print("\n| row | instructions/request | kept (plain / row) |\n|---|---|---|")
        for n, v in res.items():
            print(f"| {n} | {v:.0f} | {base / v:.3f}× |")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
