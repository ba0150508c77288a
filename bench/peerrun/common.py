"""bench/run.py's common: constants, the row and arm tables, logging, small formatting helpers."""
import os
import shutil
import socket
import subprocess
import sys


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
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
