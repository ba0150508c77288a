#!/usr/bin/python3
"""Ferry benchmark: HTTP/1.1 (ferry vs nginx vs the bare epoll floor) and
HTTP/2 (h2c and h2 over TLS: ferry vs nginx vs h2o vs lighttpd).

Throughput (default): HTTP/1.1 rows with wrk -t1 -c64 keep-alive; HTTP/2 rows
with h2load -t1 -c16 -m16 and -c64 -m1. Server pinned to CPU 0 with ONE
worker, load pinned to CPU 1, warm-up then median of N runs, zero-error gate.

Cost (--cost): marginal per-request instructions (callgrind), syscalls
(strace -f -c) and CPU time (/proc/<pid>/stat) of the server process.

Python 3 standard library only.  See bench/README.md.
"""
import argparse
import collections
import datetime
import hashlib
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERVER_CPU = "0"
LOAD_CPU = "1"
HELLO = b"Hello, world!"
FILE_NAME = "file-4k.bin"
FILE_SIZE = 4096
ARMS = ("ferry", "nginx", "haproxy", "h2o", "lighttpd", "bare")
# the arms each table group compares (h2o and lighttpd are HTTP/2 peers only; haproxy is a
# reverse-proxy peer only); group "rp" = the reverse-proxy rows
PROTO_ARMS = {"h1": ("ferry", "nginx", "bare"), "h2": ("ferry", "nginx", "h2o", "lighttpd", "bare"),
              "rp": ("ferry", "nginx", "haproxy", "h2o", "lighttpd", "bare")}
PEERS = ("nginx", "h2o", "lighttpd")
ORIGIN_CPU = "1"  # the reverse rows' origin shares the load generator's CPU
# row id -> (content, transport, protocol)
ROWS = {
    "static": ("static", "plain", "h1"),
    "static-tls": ("static", "tls", "h1"),
    "file-4k": ("file-4k", "plain", "h1"),
    "file-4k-tls": ("file-4k", "tls", "h1"),
    "static-h2c": ("static", "plain", "h2"),
    "static-h2-tls": ("static", "tls", "h2"),
    # reverse proxy: client -> arm (CPU 0) -> one shared HTTP/1.1 origin (nginx on CPU 1)
    "reverse-h1": ("reverse", "plain", "h1"),
    "reverse-h1-tls": ("reverse", "tls", "h1"),
    "reverse-h2-tls": ("reverse", "tls", "h2"),
}
ROW_LABEL = {
    "static": "static 13 B · h1",
    "static-tls": "static 13 B · h1 + TLS 1.3",
    "file-4k": "file 4 KiB · h1",
    "file-4k-tls": "file 4 KiB · h1 + TLS 1.3",
    "static-h2c": "static 13 B · h2c",
    "static-h2-tls": "static 13 B · h2 + TLS",
    "reverse-h1": "proxy h1 → h1 origin",
    "reverse-h1-tls": "proxy h1 + TLS → h1 origin",
    "reverse-h2-tls": "proxy h2 + TLS → h1 origin",
}
# HTTP/2 rows whose throughput uses only some of the H2_LOADS (default: all)
ROW_LOADS = {"reverse-h2-tls": ("c16m16",)}
# HTTP/2 throughput loads: variant id -> (connections, max concurrent streams per connection)
H2_LOADS = {"c16m16": (16, 16), "c64m1": (64, 1)}
TOOLS = {  # binary -> Debian package
    "wrk": "wrk",
    "h2load": "nghttp2-client",
    "valgrind": "valgrind",
    "strace": "strace",
    "openssl": "openssl",
    "cc": "gcc",
    "taskset": "util-linux",
    "nghttp": "nghttp2-client",
}
NGINX_BIN = "/usr/sbin/nginx"
HAPROXY_BIN = "/usr/sbin/haproxy"
H2O_BIN = "/usr/bin/h2o"
LIGHTTPD_BIN = "/usr/sbin/lighttpd"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(argv, timeout, **kw):
    """Run a command to completion with a hard timeout; returns CompletedProcess."""
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, **kw)


def ensure_tools(arms, need_h2, need_cost, need_rp=False):
    needed = ["wrk", "openssl", "cc", "taskset"]
    if need_cost or need_h2:
        needed += ["h2load", "nghttp"]
    if need_cost:
        needed += ["valgrind", "strace"]
    pkgs = sorted({TOOLS[t] for t in needed if shutil.which(t) is None})
    if "nginx" in arms and not os.path.exists(NGINX_BIN):
        pkgs.append("nginx-light")
    if need_h2 and "h2o" in arms and not os.path.exists(H2O_BIN):
        pkgs.append("h2o")
    if need_h2 and "lighttpd" in arms and not os.path.exists(LIGHTTPD_BIN):
        pkgs.append("lighttpd")
    if need_rp and "haproxy" in arms and not os.path.exists(HAPROXY_BIN):
        pkgs.append("haproxy")
    if need_rp and "nginx" not in arms and not os.path.exists(NGINX_BIN):
        pkgs.append("nginx-light")  # the origin
    if not pkgs:
        return
    if os.geteuid() != 0:
        sys.exit("missing tools; install: apt-get install -y " + " ".join(pkgs))
    log("installing: " + " ".join(pkgs))
    run(["apt-get", "install", "-y"] + pkgs, timeout=900, check=True,
        env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fmt_num(x, digits=0):
    if x is None:
        return "—"
    return f"{x:,.{digits}f}"


def fmt_ratio(a, b):
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "—"
    return f"{a / b:.2f}×"


def row_group(row):
    """Table group of a row: h1, h2, or rp (reverse proxy, both protocols)."""
    return "rp" if ROWS[row][0] == "reverse" else ROWS[row][2]


def row_proto(key):
    return row_group(key.split("@")[0])


def key_label(key):
    row, _, variant = key.partition("@")
    if not variant:
        return ROW_LABEL[row]
    c, m = H2_LOADS[variant]
    return f"{ROW_LABEL[row]} · -c{c} -m{m}"


# --------------------------------------------------------------------------- environment

class Env:
    """Temp dir with cert, docroot, configs and the built bare binary."""

    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="ferry-bench-")
        self.cert = os.path.join(self.dir, "cert.pem")
        self.key = os.path.join(self.dir, "key.pem")
        self.docroot = os.path.join(self.dir, "docroot")
        os.mkdir(self.docroot)
        # 4096 deterministic, non-text bytes
        blob = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(FILE_SIZE // 32))
        self.file_body = blob
        with open(os.path.join(self.docroot, FILE_NAME), "wb") as f:
            f.write(blob)
        # the 13 bytes as a file, for the arms that have no fixed-response directive
        with open(os.path.join(self.docroot, "hello"), "wb") as f:
            f.write(HELLO)
        self.port = {k: free_port() for k in
                     ("plain", "tls", "bare-static", "bare-file", "nginx-h2c", "nginx-h2",
                      "h2o-h2c", "h2o-h2", "lighttpd-h2c", "lighttpd-h2", "origin",
                      "ferry-rp", "ferry-rpt", "nginx-rp", "nginx-rpt", "haproxy-rp",
                      "haproxy-rpt", "h2o-rp", "h2o-rpt")}
        self._cert()
        self.bare = self._build_bare()

    def _cert(self):
        r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.key,
                 "-out", self.cert, "-days", "30", "-subj", "/CN=localhost",
                 "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], timeout=60)
        if r.returncode != 0:
            sys.exit("openssl failed: " + r.stderr)

    def _build_bare(self):
        out = os.path.join(self.dir, "bare")
        r = run(["cc", "-std=c17", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-o", out,
                 os.path.join(HERE, "bare.c")], timeout=120)
        if r.returncode != 0 or r.stderr.strip():
            sys.exit("building bench/bare.c failed or warned:\n" + r.stderr)
        return out

    def path(self, name):
        return os.path.join(self.dir, name)

    def cleanup(self):
        if self.args.keep_tmp:
            log(f"kept temp dir {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- arms

class Named:
    def __init__(self, name):
        self.name = name


class Arm:
    name = ""
    tls = True
    protos = ("h1",)
    reverse = None  # None: cannot proxy (reverse_why says why); else (plain port, TLS port)
    reverse_why = "not possible"

    def __init__(self, env):
        self.env = env

    def available(self):
        return True, ""

    def supports(self, row):
        content, transport, proto = ROWS[row]
        if content == "reverse":
            return self.reverse is not None
        return proto in self.protos and (self.tls or transport == "plain")

    def why_not(self, row):
        return self.reverse_why if ROWS[row][0] == "reverse" else "not possible"

    def check_unchanged(self):
        """None, or why the measured binary can no longer be trusted (ferry only)."""
        return None

    def instances(self):
        """name -> (argv, [ports])"""
        raise NotImplementedError

    def instance_for(self, row):
        return "reverse" if ROWS[row][0] == "reverse" else "main"

    def url(self, row):
        content, transport, _ = ROWS[row]
        path = "/hello" if content in ("static", "reverse") else "/" + FILE_NAME
        if content == "reverse":
            return (f"https://127.0.0.1:{self.reverse[1]}{path}" if transport == "tls"
                    else f"http://127.0.0.1:{self.reverse[0]}{path}")
        if ROWS[row][2] == "h2" and hasattr(self, "h2_ports"):
            return (f"https://127.0.0.1:{self.h2_ports[1]}{path}" if transport == "tls"
                    else f"http://127.0.0.1:{self.h2_ports[0]}{path}")
        if transport == "tls":
            return f"https://127.0.0.1:{self.env.port['tls']}{path}"
        return f"http://127.0.0.1:{self.env.port['plain']}{path}"

    def expected(self, row):
        return HELLO if ROWS[row][0] in ("static", "reverse") else self.env.file_body


class Ferry(Arm):
    name = "ferry"
    protos = ("h1", "h2")

    def __init__(self, env, binary):
        super().__init__(env)
        # Measure a copy taken now: others rebuild build/ferry while the benchmark runs,
        # and the K=200 and K=2200 runs must be the same binary.
        self.source = binary
        self.binary = binary
        self.sha256 = None
        if os.access(binary, os.X_OK):
            self.binary = env.path("ferry")
            shutil.copy2(binary, self.binary)
            with open(self.binary, "rb") as f:
                self.sha256 = hashlib.sha256(f.read()).hexdigest()
            self.built = datetime.datetime.fromtimestamp(
                os.stat(binary).st_mtime).isoformat(timespec="seconds")
        self.stamp = self._stamp()
        self.conf = env.path("ferry.yaml")
        with open(self.conf, "w") as f:
            f.write(f"""workers: 1
listeners:
  - address: 127.0.0.1:{env.port['plain']}
  - address: 127.0.0.1:{env.port['tls']}
    tls: {{cert: {env.cert}, key: {env.key}}}
routes:
  - match: {{path: /hello}}
    respond: {{status: 200, headers: {{content-type: text/plain}}, body: "Hello, world!"}}
  - static: {{root: {env.docroot}}}
log: {{level: warn}}
""")
        # reverse rows: its own instance; pooled keep-alive to the origin (the default)
        self.reverse = (env.port["ferry-rp"], env.port["ferry-rpt"])
        self.rconf = env.path("ferry-reverse.yaml")
        with open(self.rconf, "w") as f:
            f.write(f"""workers: 1
listeners:
  - address: 127.0.0.1:{self.reverse[0]}
  - address: 127.0.0.1:{self.reverse[1]}
    tls: {{cert: {env.cert}, key: {env.key}}}
upstreams:
  - name: app
    servers: ["http://127.0.0.1:{env.port['origin']}"]
routes:
  - proxy: app
log: {{level: warn}}
""")

    def _stamp(self):
        try:
            st = os.stat(self.binary)
            return (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            return None

    def check_unchanged(self):
        if self._stamp() != self.stamp:
            return f"{self.binary} changed during the run: re-run this row"
        return None

    def available(self):
        if not os.access(self.binary, os.X_OK):
            return False, f"not built ({self.source} missing)"
        return True, ""

    def instances(self):
        # the listeners keep their default protocols: h1,h2c plain and h1,h2 on TLS
        return {"main": ([self.binary, "run", "-c", self.conf],
                         [self.env.port["plain"], self.env.port["tls"]]),
                "reverse": ([self.binary, "run", "-c", self.rconf], list(self.reverse))}


class Nginx(Arm):
    name = "nginx"
    protos = ("h1", "h2")

    def __init__(self, env):
        super().__init__(env)
        self.h2_ports = (env.port["nginx-h2c"], env.port["nginx-h2"])
        d = env.path("nginx")
        os.makedirs(d, exist_ok=True)
        self.prefix = d
        self.conf = os.path.join(d, "nginx.conf")
        temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one process, no master, same content as ferry
worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
{temps}
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    default_type application/octet-stream;
    ssl_protocols TLSv1.3;
    server {{
        listen 127.0.0.1:{env.port['plain']};
        listen 127.0.0.1:{env.port['tls']} ssl;
        # HTTP/2 on their own ports, so the HTTP/1.1 listeners stay as they were:
        # h2c by prior knowledge (a plain `http2` listener speaks only h2c) and h2 by ALPN
        listen 127.0.0.1:{env.port['nginx-h2c']} http2;
        listen 127.0.0.1:{env.port['nginx-h2']} ssl http2;
        ssl_certificate {env.cert};
        ssl_certificate_key {env.key};
        root {env.docroot};
        location = /hello {{
            default_type text/plain;
            return 200 "Hello, world!";
        }}
    }}
}}
""")

        # reverse rows: a second nginx (own prefix and conf) proxying to the shared origin
        self.reverse = (env.port["nginx-rp"], env.port["nginx-rpt"])
        rd = env.path("nginx-reverse")
        os.makedirs(rd, exist_ok=True)
        self.rprefix = rd
        self.rconf = os.path.join(rd, "nginx.conf")
        rtemps = "\n".join(f"    {k}_temp_path {rd}/{k};" for k in
                           ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.rconf, "w") as f:
            f.write(f"""# generated by bench/run.py: one process, no master, reverse proxy to the origin
worker_processes 1;
daemon off;
master_process off;
pid {rd}/nginx.pid;
error_log {rd}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
{rtemps}
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    ssl_protocols TLSv1.3;
    upstream app {{
        server 127.0.0.1:{env.port['origin']};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{self.reverse[0]};
        listen 127.0.0.1:{self.reverse[1]} ssl http2;
        ssl_certificate {env.cert};
        ssl_certificate_key {env.key};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")

    def available(self):
        if not os.access(NGINX_BIN, os.X_OK):
            return False, "nginx not installed"
        return True, ""

    def instances(self):
        return {"main": ([NGINX_BIN, "-p", self.prefix, "-e", os.path.join(self.prefix, "error.log"),
                          "-c", self.conf], [self.env.port["plain"], self.env.port["tls"],
                                             self.env.port["nginx-h2c"], self.env.port["nginx-h2"]]),
                "reverse": ([NGINX_BIN, "-p", self.rprefix, "-e",
                             os.path.join(self.rprefix, "error.log"), "-c", self.rconf],
                            list(self.reverse))}


class Haproxy(Arm):
    """Reverse-proxy rows only: one thread, mode http, connection reuse to the origin."""
    name = "haproxy"
    protos = ()

    def __init__(self, env):
        super().__init__(env)
        self.reverse = (env.port["haproxy-rp"], env.port["haproxy-rpt"])
        self.pem = env.path("haproxy-cert.pem")  # haproxy wants cert + key in one file
        with open(self.pem, "w") as f:
            f.write(open(env.cert).read() + open(env.key).read())
        self.conf = env.path("haproxy.cfg")
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one thread, reverse proxy to the origin, no logging
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 75s
    timeout server 75s
    timeout http-keep-alive 75s
frontend plain
    bind 127.0.0.1:{self.reverse[0]}
    default_backend app
frontend tls
    bind 127.0.0.1:{self.reverse[1]} ssl crt {self.pem} alpn h2,http/1.1 ssl-min-ver TLSv1.3
    default_backend app
backend app
    server origin 127.0.0.1:{env.port['origin']}
""")

    def available(self):
        if not os.access(HAPROXY_BIN, os.X_OK):
            return False, "haproxy not installed"
        return True, ""

    def instances(self):
        return {"reverse": ([HAPROXY_BIN, "-db", "-f", self.conf], list(self.reverse))}


class Origin:
    """The reverse rows' one shared HTTP/1.1 origin: nginx, pinned with the load generator."""

    def __init__(self, env):
        self.port = env.port["origin"]
        d = env.path("origin")
        os.makedirs(d, exist_ok=True)
        self.prefix, self.conf = d, os.path.join(d, "nginx.conf")
        temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: the origin of the reverse rows
worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
{temps}
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        location / {{
            default_type text/plain;
            return 200 "Hello, world!";
        }}
    }}
}}
""")
        self.server = Server("origin", [NGINX_BIN, "-p", d, "-e", os.path.join(d, "error.log"),
                                        "-c", self.conf], [self.port], env.path("origin.log"),
                             cpu=ORIGIN_CPU)


class H2o(Arm):
    name = "h2o"
    protos = ("h2",)

    def __init__(self, env):
        super().__init__(env)
        self.h2_ports = (env.port["h2o-h2c"], env.port["h2o-h2"])
        self.conf = env.path("h2o.yaml")
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one worker thread, /hello = a 13-byte file
user: root
num-threads: 1
listen:
  host: 127.0.0.1
  port: {self.h2_ports[0]}
listen:
  host: 127.0.0.1
  port: {self.h2_ports[1]}
  ssl:
    certificate-file: {env.cert}
    key-file: {env.key}
    ocsp-update-interval: 0
file.mime.setdefaulttype: text/plain
hosts:
  default:
    paths:
      /hello:
        file.file: {os.path.join(env.docroot, "hello")}
""")
        # reverse rows: a second h2o proxying to the origin (keep-alive to it by default)
        self.reverse = (env.port["h2o-rp"], env.port["h2o-rpt"])
        self.rconf = env.path("h2o-reverse.yaml")
        with open(self.rconf, "w") as f:
            f.write(f"""# generated by bench/run.py: one worker thread, reverse proxy to the origin
user: root
num-threads: 1
listen:
  host: 127.0.0.1
  port: {self.reverse[0]}
listen:
  host: 127.0.0.1
  port: {self.reverse[1]}
  ssl:
    certificate-file: {env.cert}
    key-file: {env.key}
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:{env.port['origin']}/
""")

    def available(self):
        if not os.access(H2O_BIN, os.X_OK):
            return False, "h2o not installed"
        return True, ""

    def instances(self):
        return {"main": ([H2O_BIN, "-m", "worker", "-c", self.conf], list(self.h2_ports)),
                "reverse": ([H2O_BIN, "-m", "worker", "-c", self.rconf], list(self.reverse))}


class Lighttpd(Arm):
    name = "lighttpd"
    protos = ("h2",)
    reverse_why = ("not possible: mod_proxy in 1.4 opens a new origin connection per request "
                   "(no keep-alive pool)")

    def __init__(self, env):
        super().__init__(env)
        self.h2_ports = (env.port["lighttpd-h2c"], env.port["lighttpd-h2"])
        d = env.path("lighttpd")
        os.makedirs(d, exist_ok=True)
        self.conf = os.path.join(d, "lighttpd.conf")
        with open(self.conf, "w") as f:
            f.write(f"""# generated by bench/run.py: one process, /hello = a 13-byte file (static file handler)
server.document-root = "{env.docroot}"
server.bind = "127.0.0.1"
server.port = {self.h2_ports[0]}
server.max-worker = 0
server.errorlog = "{d}/error.log"
server.max-keep-alive-requests = 100000000
server.max-keep-alive-idle = 75
server.feature-flags += ("server.h2proto" => "enable", "server.h2c" => "enable")
server.modules += ("mod_openssl")
mimetype.assign = ("" => "text/plain")
$SERVER["socket"] == "127.0.0.1:{self.h2_ports[1]}" {{
    ssl.engine = "enable"
    ssl.pemfile = "{env.cert}"
    ssl.privkey = "{env.key}"
    ssl.openssl.ssl-conf-cmd = ("MinProtocol" => "TLSv1.3")
}}
""")

    def available(self):
        if not os.access(LIGHTTPD_BIN, os.X_OK):
            return False, "lighttpd not installed"
        return True, ""

    def instances(self):
        return {"main": ([LIGHTTPD_BIN, "-D", "-f", self.conf], list(self.h2_ports))}


class Bare(Arm):
    name = "bare"
    tls = False
    reverse_why = "not possible: no proxying"

    def instances(self):
        p = self.env.port
        return {"static": ([self.env.bare, str(p["bare-static"])], [p["bare-static"]]),
                "file": ([self.env.bare, str(p["bare-file"]),
                          os.path.join(self.env.docroot, FILE_NAME)], [p["bare-file"]])}

    def instance_for(self, row):
        return "static" if ROWS[row][0] == "static" else "file"

    def url(self, row):
        if ROWS[row][0] == "static":
            return f"http://127.0.0.1:{self.env.port['bare-static']}/hello"
        return f"http://127.0.0.1:{self.env.port['bare-file']}/{FILE_NAME}"


# --------------------------------------------------------------------------- processes

def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid, depth=0):
    if depth > 8:
        return [pid]
    out = [pid]
    for c in children(pid):
        out += tree(c, depth + 1)
    return out


def cpu_busy(cpu):
    """(busy, total) jiffies of one CPU from /proc/stat (busy excludes idle and iowait)."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return sum(v) - v[3] - v[4], sum(v)
    return 0, 0


def cpu_ticks(pid):
    """utime+stime (clock ticks) of pid and its descendants (all threads included)."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # stat fields 14, 15
        except (OSError, IndexError, ValueError):
            pass
    return total


def proc_alive(pid):
    """True while pid exists and is not a zombie (an orphan nobody reaps stays a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Server:
    """A server process pinned to CPU 0, optionally wrapped (valgrind, strace)."""

    def __init__(self, name, argv, ports, logpath, wrap=(), ready_timeout=15.0, stop_timeout=15.0,
                 cpu=SERVER_CPU):
        self.name, self.argv, self.ports, self.logpath = name, argv, ports, logpath
        self.cpu = cpu
        self.wrap = list(wrap)
        self.ready_timeout, self.stop_timeout = ready_timeout, stop_timeout
        self.proc = None

    def start(self):
        self.logf = open(self.logpath, "ab")
        cmd = ["taskset", "-c", self.cpu] + self.wrap + self.argv
        self.logf.write(("$ " + " ".join(cmd) + "\n").encode())
        self.logf.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout
        pending = list(self.ports)
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with status {self.proc.returncode} before listening: {self.log_tail()}"
            try:
                with socket.create_connection(("127.0.0.1", pending[0]), timeout=1):
                    pending.pop(0)
            except OSError:
                time.sleep(0.05)
        if pending:
            self.stop()
            return f"not listening on {pending} after {self.ready_timeout:.0f}s: {self.log_tail()}"
        return None

    def target_pid(self):
        """The server itself: taskset and valgrind exec in place; strace forks it."""
        if self.wrap and self.wrap[0] == "strace":
            for _ in range(100):
                kids = children(self.proc.pid)
                if kids:
                    return kids[0]
                time.sleep(0.02)
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return None
        kids = []
        if self.proc.poll() is None:
            kids = [p for p in tree(self.proc.pid) if p != self.proc.pid]
            try:
                os.kill(self.target_pid(), signal.SIGTERM)
            except ProcessLookupError:
                pass
            # Under valgrind a signal does not interrupt an idle epoll_wait, and nginx
            # only acts on SIGTERM when it wakes: poke the listeners with empty TCP
            # connections until it exits (the same pokes for every K: they cancel out).
            deadline = time.monotonic() + self.stop_timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    self.proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                for port in self.ports:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    except OSError:
                        pass
            try:
                self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                log(f"{self.name}: no exit after SIGTERM, killing its process group")
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        # helpers the server forked (h2o: its key-signing process and a crash-log
        # filter) write their callgrind/strace output when they exit: wait for them
        deadline = time.monotonic() + 20
        while kids and time.monotonic() < deadline:
            kids = [p for p in kids if proc_alive(p)]
            if kids:
                time.sleep(0.1)
        for p in kids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.logf.close()
        return self.proc.returncode

    def log_tail(self, n=400):
        try:
            if not self.logf.closed:
                self.logf.flush()
            with open(self.logpath, "rb") as f:
                data = f.read()[-n:]
            return data.decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return ""


# --------------------------------------------------------------------------- checks and load

def preflight(url, expected, cafile):
    """Two keep-alive requests; status 200 and exact body bytes. Returns (error, info)."""
    m = re.match(r"(https?)://([^:/]+):(\d+)(/.*)", url)
    scheme, host, port, path = m.group(1), m.group(2), int(m.group(3)), m.group(4)
    info = {}
    try:
        if scheme == "https":
            ctx = ssl.create_default_context(cafile=cafile)
            ctx.set_alpn_protocols(["http/1.1"])
            conn = http.client.HTTPSConnection(host, port, timeout=10, context=ctx)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=10)
        for i in range(2):
            conn.request("GET", path, headers={"User-Agent": "ferry-bench"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                return f"preflight: status {resp.status}", info
            if body != expected:
                return f"preflight: body differs ({len(body)} bytes, want {len(expected)})", info
            if resp.will_close:
                return "preflight: server closes keep-alive connection", info
            if i == 0:
                info["headers"] = [f"{k}: {v}" for k, v in resp.getheaders()]
                if scheme == "https":
                    info["tls_version"] = conn.sock.version()
                    info["tls_cipher"] = conn.sock.cipher()[0]
        conn.close()
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        return f"preflight: {type(e).__name__}: {e}", info
    if scheme == "https" and info.get("tls_version") != "TLSv1.3":
        return f"preflight: negotiated {info.get('tls_version')}, not TLSv1.3", info
    return None, info


def preflight_h2(url, expected):
    """h2c (prior knowledge) or h2 (ALPN): status 200, exact body bytes (nghttp), then
    4 requests on one connection (h2load). Returns (error, info)."""
    info = {}
    tls = url.startswith("https")
    try:
        r = run(["nghttp", "-v", "-n", url], timeout=20)
        out = r.stdout + r.stderr
        heads = re.findall(r"recv \(stream_id=\d+\) (\S+): (.*)", out)
        if r.returncode != 0 or not heads:
            return f"preflight: nghttp exit {r.returncode}: {out.strip()[-200:]}", info
        info["headers"] = [f"{k}: {v}" for k, v in heads]
        status = dict(heads).get(":status")
        if status != "200":
            return f"preflight: status {status}", info
        if tls:
            m = re.search(r"The negotiated protocol: (\S+)", out)
            info["alpn"] = m.group(1) if m else None
            if info["alpn"] != "h2":
                return f"preflight: ALPN negotiated {info['alpn']}, not h2", info
        r = subprocess.run(["nghttp", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=20)
        if r.returncode != 0 or r.stdout != expected:
            return (f"preflight: body differs ({len(r.stdout)} bytes, want {len(expected)}; "
                    f"nghttp exit {r.returncode})"), info
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"preflight: nghttp: {e}", info
    res = h2load(url, 4, 1, timeout=30, proto="h2")
    if "error" in res:
        return "preflight: " + res["error"], info
    info["application_protocol"] = res.get("app_proto")
    if tls:
        info["tls_version"] = res.get("tls_protocol")
        info["tls_cipher"] = res.get("tls_cipher")
    return None, info


UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def to_ms(s):
    m = re.match(r"([\d.]+)(us|ms|s|m|h)$", s)
    return round(float(m.group(1)) * UNIT[m.group(2)], 4) if m else None


def wrk(url, duration, conns, server):
    pid = server.target_pid()
    b0 = cpu_busy(SERVER_CPU)
    t0, w0 = cpu_ticks(pid), time.monotonic()
    cmd = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", url]
    try:
        r = run(cmd, timeout=duration + 60)
    except subprocess.TimeoutExpired:
        return {"error": "wrk timed out", "cmd": " ".join(cmd)}
    t1, w1 = cpu_ticks(pid), time.monotonic()
    b1 = cpu_busy(SERVER_CPU)
    out = r.stdout
    res = {"cmd": " ".join(cmd),
           "server_cpu_pct": 100.0 * (t1 - t0) / os.sysconf("SC_CLK_TCK") / max(w1 - w0, 1e-9)}
    # CPU 0 busy time not spent by the server: other processes (or IRQ work) interfering
    if b1[1] > b0[1]:
        busy_pct = 100.0 * (b1[0] - b0[0]) / (b1[1] - b0[1])
        res["cpu0_busy_pct"] = busy_pct
        res["cpu0_foreign_pct"] = max(0.0, busy_pct - res["server_cpu_pct"])
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    res["rps"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in", out)
    res["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    res["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"),
                                    map(int, m.groups()))) if m else {}
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    res["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", out)
    if m:
        res["latency_avg_ms"] = to_ms(m.group(1))
        res["latency_max_ms"] = to_ms(m.group(3))
    m = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    res["latency_p99_ms"] = to_ms(m.group(1)) if m else None
    # the gate
    if r.returncode != 0:
        res["error"] = f"wrk exit {r.returncode}: {r.stderr.strip()[:200]}"
    elif res["rps"] is None or res["requests"] == 0:
        res["error"] = "no requests completed"
    elif res["non_2xx"]:
        res["error"] = f"{res['non_2xx']} non-2xx responses"
    elif any(res["socket_errors"].values()):
        res["error"] = "socket errors " + ", ".join(f"{k} {v}" for k, v in res["socket_errors"].items() if v)
    elif not server.alive():
        res["error"] = "server exited during the run"
    return res


def h2load(url, n, clients, timeout, proto="h1", streams=1, duration=None, warmup=None):
    """h2load; n requests, or (n=None) a timed run of `duration` s after `warmup` s.
    proto h1 adds --h1; h2 means h2c by prior knowledge on http://, ALPN h2 on https://."""
    cmd = ["taskset", "-c", LOAD_CPU, "h2load"] + (["--h1"] if proto == "h1" else [])
    if n is None:
        cmd += ["-t1", f"-c{clients}", f"-m{streams}", "-D", str(duration),
                "--warm-up-time", str(warmup), url]
    else:
        cmd += ["-n", str(n), "-c", str(clients), f"-m{streams}", "-t1", url]
    try:
        r = run(cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "h2load timed out", "cmd": " ".join(cmd)}
    out = r.stdout
    res = {"cmd": " ".join(cmd)}
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    st = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    fin = re.search(r"finished in ([\d.]+)(\w+), ([\d.]+) req/s", out)
    res["rps"] = float(fin.group(3)) if fin else None
    ap = re.search(r"Application protocol: (\S+)", out)
    res["app_proto"] = ap.group(1) if ap else None
    tp = re.search(r"TLS Protocol: (\S+)", out)
    res["tls_protocol"] = tp.group(1) if tp else None
    tc = re.search(r"Cipher: (\S+)", out)
    res["tls_cipher"] = tc.group(1) if tc else None
    if m:
        res["requests"] = dict(zip(("total", "started", "done", "succeeded", "failed", "errored",
                                    "timeout"), map(int, m.groups())))
    if st:
        res["status"] = dict(zip(("2xx", "3xx", "4xx", "5xx"), map(int, st.groups())))
    lat = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    if lat:
        res["latency_mean_ms"] = to_ms(lat.group(3))
        res["latency_max_ms"] = to_ms(lat.group(2))
    want_proto = ("http/1.1" if proto == "h1" else "h2" if url.startswith("https") else "h2c")
    if r.returncode != 0 or not m or not st:
        res["error"] = f"h2load exit {r.returncode}: {(r.stderr or out).strip()[-200:]}"
    elif res["app_proto"] != want_proto:
        res["error"] = f"negotiated {res['app_proto']}, not {want_proto}"
    elif n is None:
        # h2load counts a status when the headers arrive in the measured phase, and a success
        # when the stream closes in it: a request straddling the start (or the end) of the
        # measured phase is a success without a status (or a status without a success).
        # So allow that many (≤ clients × streams) either way.
        q, s2 = res["requests"], res["status"]
        res["status_uncounted"] = q["succeeded"] - s2["2xx"]
        if q["succeeded"] == 0:
            res["error"] = "no requests completed"
        elif (q["failed"] or q["errored"] or q["timeout"] or s2["3xx"] or s2["4xx"] or s2["5xx"]
              or abs(q["succeeded"] - s2["2xx"]) > clients * streams):
            res["error"] = (f"{q['succeeded']} succeeded, {q['failed']} failed, {q['errored']} errored, "
                            f"{q['timeout']} timeout; status {s2['2xx']} 2xx, {s2['3xx']} 3xx, "
                            f"{s2['4xx']} 4xx, {s2['5xx']} 5xx")
    elif int(m.group(4)) != n or int(st.group(1)) != n:
        res["error"] = (f"{m.group(4)}/{n} succeeded ({m.group(5)} failed, {m.group(6)} errored, "
                        f"{m.group(7)} timeout); status {st.group(1)} 2xx, {st.group(2)} 3xx, "
                        f"{st.group(3)} 4xx, {st.group(4)} 5xx")
    return res


# --------------------------------------------------------------------------- throughput

def h2_run(url, clients, streams, duration, warmup, server):
    """One timed h2load run with the same server-CPU accounting as wrk()."""
    pid = server.target_pid()
    b0 = cpu_busy(SERVER_CPU)
    t0, w0 = cpu_ticks(pid), time.monotonic()
    res = h2load(url, None, clients, timeout=duration + warmup + 60, proto="h2", streams=streams,
                 duration=duration, warmup=warmup)
    t1, w1 = cpu_ticks(pid), time.monotonic()
    b1 = cpu_busy(SERVER_CPU)
    # the server is loaded during the warm-up too: the whole run is the window
    res["server_cpu_pct"] = 100.0 * (t1 - t0) / os.sysconf("SC_CLK_TCK") / max(w1 - w0, 1e-9)
    if b1[1] > b0[1]:
        busy_pct = 100.0 * (b1[0] - b0[0]) / (b1[1] - b0[1])
        res["cpu0_busy_pct"] = busy_pct
        res["cpu0_foreign_pct"] = max(0.0, busy_pct - res["server_cpu_pct"])
    res["latency_p99_ms"] = None  # h2load gives no percentiles
    if "error" not in res and not server.alive():
        res["error"] = "server exited during the run"
    return res


def table_keys(rows):
    """Throughput cells: one per HTTP/1.1 row, one per (HTTP/2 row, load variant)."""
    keys = []
    for row in rows:
        if ROWS[row][2] == "h1":
            keys.append(row)
        else:
            keys += [f"{row}@{v}" for v in ROW_LOADS.get(row, H2_LOADS)]
    return keys


def throughput(args, env, arms, rows, origin=None):
    cells = {}  # (key, arm) -> dict
    for arm in arms:
        keys = [k for k in table_keys(rows) if arm.name in PROTO_ARMS[row_proto(k)]]
        if not keys:
            continue
        ok, why = arm.available()
        if not ok:
            for key in keys:
                cells[(key, arm.name)] = {"status": "absent", "reason": why}
            log(f"[{arm.name}] skipped: {why}")
            continue
        if not any(arm.supports(k.split("@")[0]) for k in keys):
            for key in keys:
                cells[(key, arm.name)] = {"status": "n/a", "reason": arm.why_not(key.split("@")[0])}
            continue
        servers = {}
        start_err = None
        needed = {arm.instance_for(k.split("@")[0]) for k in keys if arm.supports(k.split("@")[0])}
        for inst, (argv, ports) in arm.instances().items():
            if inst not in needed:
                continue
            s = Server(f"{arm.name}-{inst}", argv, ports, env.path(f"{arm.name}-{inst}.log"))
            servers[inst] = s
            start_err = s.start()
            if start_err:
                break
        try:
            for key in keys:
                row, _, variant = key.partition("@")
                cell = cells[(key, arm.name)] = {"url": arm.url(row)}
                if not arm.supports(row):
                    cell.update(status="n/a", reason=arm.why_not(row))
                    continue
                if ROWS[row][0] == "reverse" and (origin is None or not origin.server.alive()):
                    cell.update(status="failed", reason="the origin is not running")
                    continue
                if start_err:
                    cell.update(status="failed", reason=f"server {start_err}")
                    continue
                srv = servers[arm.instance_for(row)]
                if not srv.alive():
                    cell.update(status="failed", reason=f"server died earlier: {srv.log_tail()}")
                    continue
                h2 = ROWS[row][2] == "h2"
                if h2:
                    err, info = preflight_h2(arm.url(row), arm.expected(row))
                else:
                    err, info = preflight(arm.url(row), arm.expected(row), env.cert)
                cell["preflight"] = info
                if err:
                    cell.update(status="failed", reason=err)
                    log(f"[{arm.name}] {key}: {err}")
                    continue
                if h2:
                    c, m = H2_LOADS[variant]
                    log(f"[{arm.name}] {key}: {args.runs}×({args.warmup}s warm-up + {args.duration}s)")
                    warm = {}
                    one = lambda: h2_run(arm.url(row), c, m, args.duration, args.warmup, srv)
                else:
                    log(f"[{arm.name}] {key}: warm-up {args.warmup}s, {args.runs}×{args.duration}s")
                    warm = wrk(arm.url(row), args.warmup, args.connections, srv)
                    one = lambda: wrk(arm.url(row), args.duration, args.connections, srv)
                samples = []
                failure = None if "error" not in warm else "warm-up: " + warm["error"]
                for i in range(args.runs if not failure else 0):
                    s = one()
                    samples.append(s)
                    if "error" in s:
                        failure = f"run {i + 1}: {s['error']}"
                        break
                    p99 = s.get("latency_p99_ms")
                    log(f"    run {i + 1}: {s['rps']:,.0f} req/s, "
                        + (f"p99 {p99} ms, " if p99 is not None else
                           f"mean {s.get('latency_mean_ms')} ms, ")
                        + f"server cpu {s['server_cpu_pct']:.0f}%, cpu0 busy {s.get('cpu0_busy_pct', 0):.0f}%")
                cell["samples"] = samples
                if not failure and ROWS[row][0] == "reverse" and not origin.server.alive():
                    failure = "the origin exited during the run"
                if not failure:
                    failure = arm.check_unchanged()
                if failure:
                    cell.update(status="failed", reason=failure)
                    log(f"[{arm.name}] {key}: FAILED {failure}")
                else:
                    rps = [s["rps"] for s in samples]
                    cell.update(status="ok", rps=statistics.median(rps), rps_min=min(rps),
                                rps_max=max(rps),
                                cpu_pct=statistics.median([s["server_cpu_pct"] for s in samples]),
                                cpu0_foreign_pct=max(s.get("cpu0_foreign_pct", 0) for s in samples))
                    if h2:
                        cell["latency_mean_ms"] = statistics.median(
                            [s.get("latency_mean_ms") or 0 for s in samples])
                    else:
                        cell["p99_ms"] = statistics.median([s["latency_p99_ms"] or 0 for s in samples])
        finally:
            for s in servers.values():
                s.stop()
    return cells


def cell_text(cell, value_key="rps", digits=0):
    st = cell.get("status")
    if st == "ok":
        txt = fmt_num(cell[value_key], digits)
        return txt + (f" ({cell['cpu_pct']:.0f}% cpu)" if "cpu_pct" in cell else "")
    if st == "n/a":
        return "not possible"  # the reason is in the JSON and under the table
    if st == "absent":
        return cell["reason"]
    return "FAILED: " + cell.get("reason", "?").replace("|", "/")


def ratio_pairs(names):
    if "ferry" not in names:
        return []
    return [("ferry", n) for n in names if n != "ferry"]


def throughput_md(args, cells, arms, rows):
    lines = []
    for proto in ("h1", "h2", "rp"):
        keys = [k for k in table_keys(rows) if row_proto(k) == proto]
        names = [a.name for a in arms if a.name in PROTO_ARMS[proto]]
        if not keys or not names:
            continue
        pairs = [p for p in ratio_pairs(names) if proto == "h1" or p[1] != "bare"]
        if proto == "rp":
            pairs = [p for p in pairs if p[1] not in ("bare", "lighttpd")]
        best = proto == "h2" and "ferry" in names and any(n in PEERS for n in names)
        head = ["row"] + [f"{n} req/s" for n in names] + [f"{a}/{b}" for a, b in pairs]
        if best:
            head.append("ferry/best peer")
        if proto == "rp":
            lines += [f"## Throughput, reverse proxy: h1 rows wrk -t1 -c{args.connections}, h2 row "
                      f"h2load -t1 -c16 -m16 -D {args.duration} --warm-up-time {args.warmup}; median "
                      f"of {args.runs}", "",
                      f"Client → proxy (one worker, CPU {SERVER_CPU}) → one shared HTTP/1.1 origin "
                      f"(nginx, `return 200 \"Hello, world!\"`, CPU {ORIGIN_CPU}, the load "
                      "generator's CPU). The origin and the load share one CPU, so req/s is capped "
                      "for every proxy: rank by the cost tables (CPU µs / request).", ""]
        elif proto == "h1":
            lines += [f"## Throughput, HTTP/1.1: wrk -t1 -c{args.connections}, keep-alive, median of "
                      f"{args.runs} × {args.duration}s after {args.warmup}s warm-up", ""]
        else:
            lines += [f"## Throughput, HTTP/2: h2load -t1 -cC -mM -D {args.duration} --warm-up-time "
                      f"{args.warmup}, median of {args.runs}", "",
                      "h2c = prior knowledge on a plain listener; h2 + TLS = ALPN h2 over TLS 1.3. "
                      "-c16 -m16: 16 connections × up to 16 concurrent streams each (lighttpd "
                      "advertises at most 8). -c64 -m1: 64 connections, one stream at a time.", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in keys:
            cols = [key_label(key)] + [cell_text(cells[(key, n)]) for n in names]
            ok = lambda n: cells[(key, n)].get("status") == "ok"
            for a, b in pairs:
                cols.append(fmt_ratio(cells[(key, a)].get("rps"), cells[(key, b)].get("rps"))
                            if ok(a) and ok(b) else "—")
            if best:
                peers = [(cells[(key, n)]["rps"], n) for n in names if n in PEERS and ok(n)]
                if ok("ferry") and peers:
                    v, n = max(peers)
                    cols.append(f"{fmt_ratio(cells[(key, 'ferry')]['rps'], v)} ({n})")
                else:
                    cols.append("—")
            lines.append("| " + " | ".join(cols) + " |")
        lines.append("")
        if proto == "rp":
            why = sorted({f"{n}: {cells[(k, n)]['reason']}" for k in keys for n in names
                          if cells[(k, n)].get("status") == "n/a"})
            if why:
                lines += ["Not possible — " + "; ".join(why) + ".", ""]
    lines += ["(N% cpu) = the server's utime+stime over the run's wall time on its one CPU; "
              "well below 100% means the cell is bound by the load generator, not the server.",
              "", "Spread (min–max req/s of the counted runs), latency (wrk: median p99; "
              "h2load: median of the mean time per request):", ""]
    for key in table_keys(rows):
        for a in arms:
            c = cells.get((key, a.name))
            if c and c.get("status") == "ok":
                lat = (f"p99 {c['p99_ms']:.2f} ms" if "p99_ms" in c
                       else f"mean {c.get('latency_mean_ms') or 0:.2f} ms")
                lines.append(f"- {key_label(key)}, {a.name}: {fmt_num(c['rps_min'])}–{fmt_num(c['rps_max'])}"
                             f" req/s, {lat}, CPU {SERVER_CPU} busy outside the server "
                             f"≤ {c['cpu0_foreign_pct']:.0f}%"
                             + (" — **disturbed: re-run**" if c["cpu0_foreign_pct"] > 10 else ""))
    return lines


# --------------------------------------------------------------------------- cost

def parse_callgrind(pattern_dir, prefix):
    total, files = 0, 0
    for name in os.listdir(pattern_dir):
        if not name.startswith(prefix):
            continue
        files += 1
        with open(os.path.join(pattern_dir, name), errors="replace") as f:
            summary = totals = None
            for line in f:
                if line.startswith("summary:"):
                    summary = int(line.split()[1])
                elif line.startswith("totals:"):
                    totals = int(line.split()[1])
        if summary is None and totals is None:
            return None  # killed before it could write its summary
        total += summary if summary is not None else totals
    return total if files else None


def parse_strace(path):
    calls = {}
    total = None
    with open(path, errors="replace") as f:
        for line in f:
            t = line.split()
            if len(t) < 5 or not re.match(r"^[\d.]+$", t[0]):
                continue
            name = t[-1]
            # columns: % time, seconds, usecs/call, calls, [errors], syscall
            n = int(t[3])
            if name == "total":
                total = n
            else:
                calls[name] = n
    return total, calls


def measure_once(args, env, arm, row, k, tool, tag):
    argv, ports = arm.instances()[arm.instance_for(row)]
    if tool == "callgrind":
        prefix = f"cg-{tag}-{k}."
        wrap = ["valgrind", "--tool=callgrind", "--trace-children=yes",
                f"--callgrind-out-file={env.dir}/{prefix}%p"]
    else:
        out = env.path(f"strace-{tag}-{k}.txt")
        wrap = ["strace", "-f", "-c", "-o", out]
    srv = Server(f"{tag}-{tool}-{k}", argv, ports, env.path(f"{tag}-{tool}-{k}.log"), wrap=wrap,
                 ready_timeout=120, stop_timeout=120)
    err = srv.start()
    if err:
        return None, None, f"{tool}: server {err}"
    try:
        res = h2load(arm.url(row), k, 1, timeout=600, proto=ROWS[row][2])
    finally:
        rc = srv.stop()
    if "error" in res:
        hint = ""
        try:
            with open(srv.logpath, errors="replace") as f:
                missing = sorted(set(re.findall(r"unhandled \S+ syscall: (\d+)", f.read())))
            if missing:
                hint = f" ({tool} does not implement syscall {', '.join(missing)}: the server saw ENOSYS)"
        except OSError:
            pass
        return None, None, f"{tool} K={k}: {res['error']}{hint}"
    if tool == "callgrind":
        ir = parse_callgrind(env.dir, prefix)
        deadline = time.monotonic() + 30
        while ir is None and time.monotonic() < deadline:
            time.sleep(0.5)  # a forked helper may still be writing its output
            ir = parse_callgrind(env.dir, prefix)
        if ir is None:
            return None, None, f"callgrind wrote no output (exit {rc}): {srv.log_tail()}"
        return ir, None, None
    try:
        total, calls = parse_strace(out)
    except OSError as e:
        return None, None, f"strace: {e}"
    if total is None:
        return None, None, f"strace summary unreadable (exit {rc})"
    return total, calls, None


def cpu_cost(args, env, arm, row, tag):
    argv, ports = arm.instances()[arm.instance_for(row)]
    srv = Server(f"{tag}-cpu", argv, ports, env.path(f"{tag}-cpu.log"))
    err = srv.start()
    if err:
        return None, f"cpu: server {err}"
    try:
        proto = ROWS[row][2]
        warm = h2load(arm.url(row), max(args.cpu_requests // 10, 1000), args.cpu_clients,
                      timeout=600, proto=proto)
        if "error" in warm:
            return None, "cpu warm-up: " + warm["error"]
        pid = srv.target_pid()
        t0 = cpu_ticks(pid)
        res = h2load(arm.url(row), args.cpu_requests, args.cpu_clients, timeout=900, proto=proto)
        t1 = cpu_ticks(pid)
        if "error" in res:
            return None, "cpu: " + res["error"]
        if not srv.alive():
            return None, "cpu: server exited during the run"
        hz = os.sysconf("SC_CLK_TCK")
        return {"us_per_req": (t1 - t0) / hz / args.cpu_requests * 1e6,
                "cpu_seconds": (t1 - t0) / hz, "requests": args.cpu_requests,
                "h2load_rps": res["rps"], "cmd": res["cmd"]}, None
    finally:
        srv.stop()


def cost(args, env, arms, rows, origin=None):
    small, large = args.cost_k
    span = large - small
    results = {}
    for row in rows:
        for arm in arms:
            if arm.name not in PROTO_ARMS[row_group(row)]:
                continue
            key = (row, arm.name)
            c = results[key] = {}
            ok, why = arm.available()
            if not ok:
                c.update(status="absent", reason=why)
                continue
            if not arm.supports(row):
                c.update(status="n/a", reason=arm.why_not(row))
                continue
            if ROWS[row][0] == "reverse" and (origin is None or not origin.server.alive()):
                c.update(status="failed", reason="the origin is not running")
                continue
            # one preflight on a normally started server (fail fast, record headers)
            tag = f"{arm.name}-{row}"
            log(f"[cost] {arm.name} {row}")
            errors = []
            for tool in ("callgrind", "strace"):
                vals = {}
                for k in (small, large):
                    v, calls, err = measure_once(args, env, arm, row, k, tool, tag)
                    if err:
                        errors.append(err)
                        c.setdefault("why", {})["instr_per_req" if tool == "callgrind"
                                                else "syscalls_per_req"] = err
                        break
                    vals[k] = (v, calls)
                if len(vals) == 2:
                    per = (vals[large][0] - vals[small][0]) / span
                    if tool == "callgrind":
                        c["instr_per_req"] = per
                        c["instr_total"] = {str(k): vals[k][0] for k in vals}
                    else:
                        c["syscalls_per_req"] = per
                        c["syscalls_total"] = {str(k): vals[k][0] for k in vals}
                        names = set(vals[large][1]) | set(vals[small][1])
                        br = {n: (vals[large][1].get(n, 0) - vals[small][1].get(n, 0)) / span
                              for n in names}
                        c["syscalls_breakdown"] = {n: round(v, 3) for n, v in
                                                   sorted(br.items(), key=lambda kv: -kv[1])
                                                   if abs(v) >= 0.005}
                    log(f"    {tool}: {per:,.1f} per request")
            cpu, err = cpu_cost(args, env, arm, row, tag)
            if err:
                errors.append(err)
                c.setdefault("why", {})["cpu_us_per_req"] = err
            changed = arm.check_unchanged()
            if changed:
                errors.append(changed)
                for k in ("instr_per_req", "syscalls_per_req", "cpu_us_per_req"):
                    c.pop(k, None)
                    c.setdefault("why", {})[k] = changed
            else:
                c["cpu"] = cpu
                c["cpu_us_per_req"] = cpu["us_per_req"]
                log(f"    cpu: {cpu['us_per_req']:.2f} µs/request ({cpu['h2load_rps']:,.0f} req/s)")
            c["status"] = "ok" if not errors else "failed"
            if errors:
                c["reason"] = "; ".join(errors)
                log("    FAILED: " + c["reason"])
    return results


def cost_md(args, res, arms, rows):
    small, large = args.cost_k
    lines = [f"## Per-request cost of one worker (marginal: (X({large}) − X({small})) / {large - small})",
             "",
             f"Instructions: `valgrind --tool=callgrind` total Ir of the server (all its processes "
             f"and threads); syscalls: `strace -f -c` total calls; both under `h2load [--h1] -n K "
             f"-c1 -m1` (one connection, one request at a time; --h1 for the HTTP/1.1 rows, h2c by "
             f"prior knowledge or ALPN h2 for the HTTP/2 rows). CPU: utime+stime from "
             f"/proc/<pid>/stat over `h2load [--h1] -n {args.cpu_requests} -c{args.cpu_clients} -m1` "
             f"at full speed. Lower is better; ratios > 1 mean ferry costs more.", ""]
    metrics = [("instr_per_req", "instructions / request", 0),
               ("syscalls_per_req", "syscalls / request", 2),
               ("cpu_us_per_req", "CPU µs / request", 2)]
    for proto in ("h1", "h2", "rp"):
        prow = [r for r in rows if row_group(r) == proto]
        names = [a.name for a in arms if a.name in PROTO_ARMS[proto]]
        if not prow or not names:
            continue
        ratios = [p for p in ratio_pairs(names) if proto == "h1" or p[1] != "bare"]
        if proto == "rp":
            ratios = [p for p in ratios if p[1] not in ("bare", "lighttpd")]
        for key, title, digits in metrics:
            head = ["row"] + names + [f"{a}/{b}" for a, b in ratios]
            group = {"h1": "HTTP/1.1", "h2": "HTTP/2",
                     "rp": "reverse proxy (the proxy process only; the origin is not counted)"}[proto]
            lines += [f"### {title} — {group}", "",
                      "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for row in prow:
                cols = [ROW_LABEL[row]]
                for n in names:
                    c = res[(row, n)]
                    if key in c:
                        cols.append(fmt_num(c[key], digits))
                    elif c.get("status") == "n/a":
                        cols.append("not possible")
                    elif c.get("status") == "absent":
                        cols.append(c["reason"])
                    else:
                        why = c.get("why", {}).get(key) or c.get("reason", "?")
                        cols.append("FAILED: " + why.replace("|", "/"))
                for a, b in ratios:
                    cols.append(fmt_ratio(res[(row, a)].get(key), res[(row, b)].get(key)))
                lines.append("| " + " | ".join(cols) + " |")
            lines.append("")
    lines += ["### syscalls per request, by call", ""]
    for row in rows:
        for a in arms:
            br = res.get((row, a.name), {}).get("syscalls_breakdown")
            if br:
                lines.append(f"- {ROW_LABEL[row]}, {a.name}: " +
                             ", ".join(f"{k} {v:.2f}" for k, v in br.items()))
    return lines


# --------------------------------------------------------------------------- main

def version(cmd):
    try:
        r = run(cmd, timeout=10)
        return (r.stdout + r.stderr).strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "?"


def meta(args):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = "?"
    try:
        commit = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(), "kernel": platform.release(), "cpu": cpu,
        "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
        "ferry_binary": args.ferry, "ferry_commit": commit,
        "nginx": version([NGINX_BIN, "-v"]), "haproxy": version([HAPROXY_BIN, "-v"]), "h2o": version([H2O_BIN, "-v"]),
        "lighttpd": version([LIGHTTPD_BIN, "-v"]), "nghttp": version(["nghttp", "--version"]),
        "wrk": version(["wrk", "--version"]),
        "h2load": version(["h2load", "--version"]), "valgrind": version(["valgrind", "--version"]),
        "strace": version(["strace", "-V"]), "openssl": version(["openssl", "version"]),
        "server_cpu": SERVER_CPU, "load_cpu": LOAD_CPU,
        "args": {k: v for k, v in vars(args).items()},
    }


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default=",".join(ARMS), help="comma list of " + ",".join(ARMS))
    p.add_argument("--rows", default=",".join(ROWS), help="comma list of " + ",".join(ROWS))
    p.add_argument("--duration", type=int, default=8, help="seconds per measured wrk/h2load run (8)")
    p.add_argument("--warmup", type=int, default=2,
                   help="seconds of warm-up: one wrk run per cell, h2load --warm-up-time per run (2)")
    p.add_argument("--runs", type=int, default=3, help="measured runs per cell; the median is reported (3)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections, HTTP/1.1 rows (64)")
    p.add_argument("--cost", action="store_true", help="also measure per-request cost")
    p.add_argument("--no-throughput", action="store_true", help="skip the throughput part (use with --cost)")
    p.add_argument("--cost-k", default="200,2200", help="K small,large for the marginal cost (200,2200)")
    p.add_argument("--cpu-requests", type=int, default=200000, help="requests for the CPU-time run (200000)")
    p.add_argument("--cpu-clients", type=int, default=16, help="h2load clients for the CPU-time run (16)")
    p.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"), help="ferry binary")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="results directory")
    p.add_argument("--merge", action="store_true",
                   help="replace only the re-measured cells in today's results file, keep the rest")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs)")
    a = p.parse_args(argv)
    a.arms = [x for x in a.arms.split(",") if x]
    a.rows = [x for x in a.rows.split(",") if x]
    bad = [x for x in a.arms if x not in ARMS] + [x for x in a.rows if x not in ROWS]
    if bad:
        p.error("unknown arm/row: " + ", ".join(bad))
    try:
        a.cost_k = tuple(int(x) for x in a.cost_k.split(","))
        assert len(a.cost_k) == 2 and 0 < a.cost_k[0] < a.cost_k[1]
    except (ValueError, AssertionError):
        p.error("--cost-k wants SMALL,LARGE with 0 < SMALL < LARGE")
    if a.runs < 1 or a.duration < 1 or a.warmup < 0 or a.connections < 1:
        p.error("--runs, --duration, --connections must be ≥ 1, --warmup ≥ 0")
    return a


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def ferry_binaries_note(cells, res, old_meta):
    """Which ferry binary each kept ferry cell measured (cells carry ferry_sha256; older
    untagged cells are attributed to the earlier run's header binary)."""
    by = collections.defaultdict(set)
    for (key, arm), c in list(cells.items()) + list(res.items()):
        if arm == "ferry" and c.get("status") == "ok" or (arm == "ferry" and "instr_per_req" in c):
            sha = c.get("ferry_sha256") or old_meta.get("ferry_sha256")
            if sha:
                by[sha[:12]].add(key.split("@")[0])
    if len(by) < 2:
        return ""
    return (" Ferry's cells come from different binaries (the tree is rebuilt during the day): "
            + "; ".join(f"{sha}: {', '.join(r for r in ROWS if r in rows)}" for sha, rows in by.items())
            + ".")


def main(argv):
    args = parse_args(argv)
    # SIGTERM/SIGINT (even when started in the background) unwind through the finally
    # blocks, which stop the servers this script started
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs at least 2 CPUs (server on CPU 0, load on CPU 1)")
    need_rp = any(ROWS[r][0] == "reverse" for r in args.rows)
    ensure_tools(args.arms, any(ROWS[r][2] == "h2" for r in args.rows), args.cost, need_rp)
    env = Env(args)
    arms = []
    for name in args.arms:
        arms.append({"ferry": lambda: Ferry(env, args.ferry), "nginx": lambda: Nginx(env),
                     "haproxy": lambda: Haproxy(env),
                     "h2o": lambda: H2o(env), "lighttpd": lambda: Lighttpd(env),
                     "bare": lambda: Bare(env)}[name]())
    info = meta(args)
    for a in arms:
        if isinstance(a, Ferry) and a.sha256:
            info["ferry_sha256"] = a.sha256
            info["ferry_built"] = a.built
    if info["loadavg"][0] > 0.5:
        log(f"warning: load average {info['loadavg'][0]:.2f}; other work on the machine skews results")
    report = {"meta": info}
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, datetime.date.today().isoformat())
    cells, res = {}, {}
    origin = None
    try:
        if need_rp:
            origin = Origin(env)
            err = origin.server.start()
            if err:
                log(f"origin: {err}")
            else:
                info["origin"] = f"nginx on CPU {ORIGIN_CPU}, 127.0.0.1:{origin.port}"
        if not args.no_throughput:
            cells = throughput(args, env, arms, args.rows, origin)
        if args.cost:
            res = cost(args, env, arms, args.rows, origin)
    finally:
        if origin is not None:
            origin.server.stop()
        env.cleanup()
    for (_, arm_name), c in list(cells.items()) + list(res.items()):
        c.setdefault("measured_at", info["date"])
        if arm_name == "ferry" and info.get("ferry_sha256"):
            c.setdefault("ferry_sha256", info["ferry_sha256"])  # others rebuild it during the day
    rows, names = list(args.rows), list(args.arms)
    tp_done, cost_done = not args.no_throughput, args.cost
    merged_note = []
    if args.merge and os.path.exists(stem + ".json"):
        # re-measured cells replace the same cells of today's earlier run; the rest stay
        with open(stem + ".json") as f:
            old = json.load(f)
        old_tp = {(c["row"] + (f"@{c['load']}" if c.get("load") else ""), c["arm"]): c
                  for c in old.get("throughput", []) if c["row"] in ROWS}
        old_cost = {(c["row"], c["arm"]): c for c in old.get("cost", []) if c["row"] in ROWS}
        for k in list(old_tp) + list(old_cost):
            for c in (old_tp.get(k), old_cost.get(k)):
                if c is not None:
                    c.pop("row", None), c.pop("load", None), c.pop("arm", None)
                    c.setdefault("measured_at", old["meta"]["date"])
        cells = {**old_tp, **cells}
        res = {**old_cost, **res}
        tp_done, cost_done = bool(cells), bool(res)
        seen = {k[0].split("@")[0] for k in cells} | {k[0] for k in res}
        rows = [r for r in ROWS if r in seen or r in rows]
        arm_seen = {k[1] for k in cells} | {k[1] for k in res} | set(names)
        names = [n for n in ARMS if n in arm_seen]
        for k in ("ferry_sha256", "ferry_built", "ferry_commit"):
            if k in old["meta"] and not any(a.name == "ferry" for a in arms):
                info[k] = old["meta"][k]  # ferry not re-measured: its binary is the old one
        report["meta"]["merged_into"] = old["meta"]
        report["meta"]["merged_from_earlier"] = old["meta"].get("merged_from_earlier", []) + [old["meta"]["date"]]
        what = " and ".join(w for w, on in (("throughput", not args.no_throughput),
                                             ("cost", args.cost)) if on)
        merged_note = [f"Merged: this run ({info['date']}) re-measured the {what} of "
                       f"{', '.join(args.rows)} for {', '.join(args.arms)}; every other cell comes "
                       f"from the earlier run(s) of {', '.join(report['meta']['merged_from_earlier'])}. "
                       "Each cell's time is `measured_at` in the JSON."
                       + ferry_binaries_note(cells, res, old["meta"]), ""]
        if not (args.cost or not args.no_throughput):  # nothing measured: re-render only
            report["meta"] = old["meta"]
            info = old["meta"]
            merged_note = old["meta"].get("merged_note", [])
        report["meta"]["merged_note"] = merged_note
    missing = {"status": "absent", "reason": "not measured"}
    cells_v = collections.defaultdict(lambda: dict(missing), cells)
    res_v = collections.defaultdict(lambda: dict(missing), res)
    shown = [Named(n) for n in names]
    md = [f"# Ferry benchmark (HTTP/1.1 and HTTP/2) — {info['date']}", "",
          f"Machine: {info['cpu']}, {info['cpus']} CPUs, Linux {info['kernel']}, "
          f"load average at start {info['loadavg'][0]:.2f}. Server pinned to CPU {SERVER_CPU} "
          f"(one worker), load generator to CPU {LOAD_CPU}.",
          f"Ferry {info['ferry_commit']} (HEAD at start; {info.get('ferry_binary')} built {info.get('ferry_built', '?')}, "
          f"sha256 {info.get('ferry_sha256', '?')[:12]}, measured from a copy taken at start); "
          f"{info['nginx']}; {info.get('haproxy', '?')}; {info['h2o']}; "
          f"{info['lighttpd']}; {info['wrk']}; "
          f"{info['h2load']}; {info['valgrind']}; {info['strace']}; {info['openssl']}.",
          "Only ratios carry between machines; absolute numbers do not.", ""] + merged_note
    if tp_done:
        report["throughput"] = [dict(row=r.split("@")[0], load=(r.split("@") + [None])[1],
                                     arm=a, **c) for (r, a), c in cells.items()]
        md += throughput_md(args, cells_v, shown, rows) + [""]
    if cost_done:
        report["cost"] = [dict(row=r, arm=a, **c) for (r, a), c in res.items()]
        md += cost_md(args, res_v, shown, rows) + [""]
    text = "\n".join(md).rstrip() + "\n"
    with open(stem + ".md", "w") as f:
        f.write(text)
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    print(text)
    log(f"wrote {stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
