"""bench/run: Constants, modes and small helpers of bench/run."""
import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from peerrun import common as _pr_common, cost as _pr_cost, server as _pr_server  # noqa: E402

# what bench/run shares with bench/run.py (its modules are bench/peerrun/): the server process
# wrapper and the /proc and callgrind readers
base = types.SimpleNamespace(log=_pr_common.log, free_port=_pr_common.free_port,
                             Server=_pr_server.Server, tree=_pr_server.tree,
                             cpu_ticks=_pr_server.cpu_ticks,
                             parse_callgrind=_pr_cost.parse_callgrind)
log, free_port, Server, tree = base.log, base.free_port, base.Server, base.tree
SERVER_CPU, LOAD_CPU = "0", "1"
NGINX, HAPROXY, H2O, LIGHTTPD, CADDY = ("/usr/sbin/nginx", "/usr/sbin/haproxy", "/usr/bin/h2o",
                                        "/usr/sbin/lighttpd", "/usr/bin/caddy")
MITMDUMP = "/usr/bin/mitmdump"
HELLO = b"Hello, world!"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
ARMS = ("ferry", "nginx", "haproxy", "lighttpd", "caddy", "h2o", "bare")
PEERS = ("nginx", "haproxy", "lighttpd", "caddy", "h2o", "mitmdump")
COLORS = {"ferry": "#d62728", "nginx": "#2ca02c", "haproxy": "#1f77b4", "lighttpd": "#ff7f0e",
          "caddy": "#17becf", "h2o": "#9467bd", "bare": "#7f7f7f", "mitmdump": "#8c564b",
          "ferry-reverse": "#f4a6a6"}
PKG = {"nginx": "nginx-light", "haproxy": "haproxy", "lighttpd": "lighttpd", "caddy": "caddy",
       "h2o": "h2o", "mitmdump": "mitmproxy"}
BIN = {"nginx": NGINX, "haproxy": HAPROXY, "lighttpd": LIGHTTPD, "caddy": CADDY, "h2o": H2O,
       "mitmdump": MITMDUMP}
TOOLS = {"wrk": "wrk", "h2load": "nghttp2-client", "openssl": "openssl", "cc": "gcc",
         "taskset": "util-linux"}
STREAM_MOD = "/usr/lib/nginx/modules/ngx_stream_module.so"

# ----------------------------------------------------------------------------- modes
# Variant: (label, client scheme, origin protocol or None, ferry-load extra args)
#   client scheme: h1 | h1-tls | h2c | h2-tls | h3 | tcp | udp
V = {
    "h1": ("h1", "h1", None, []),
    "h1-pipe": ("h1 ×16 pipelined", "h1", None, ["--pipeline", "16"]),
    "h1-tls": ("h1 + TLS 1.3", "h1-tls", None, []),
    "h2c": ("h2c ×16 streams", "h2c", None, ["-m", "16"]),
    "h2-tls": ("h2 + TLS ×16 streams", "h2-tls", None, ["-m", "16"]),
    "h2-tls-1": ("h2 + TLS", "h2-tls", None, ["-m", "1"]),
    "h3": ("h3 ×16 streams", "h3", None, ["-m", "16"]),
    "h3-1": ("h3", "h3", None, ["-m", "1"]),
    "h3>h1": ("h3 → h1", "h3", "h1", ["-m", "16"]),
    "h1>h3": ("h1 → h3", "h1", "h3", []),
    "h3>h3": ("h3 → h3", "h3", "h3", ["-m", "16"]),
    "h1>h1": ("h1 → h1", "h1", "h1", []),
    "h1-tls>h1": ("h1 TLS → h1", "h1-tls", "h1", []),
    "h2-tls>h1": ("h2 TLS → h1", "h2-tls", "h1", ["-m", "16"]),
    "h2c>h2c": ("h2c → h2c", "h2c", "h2c", ["-m", "16"]),
    "h2-tls>h2-tls": ("h2 TLS → h2 TLS", "h2-tls", "h2-tls", ["-m", "16"]),
    "tcp": ("TCP echo 64 B", "tcp", "tcp", ["--size", "64", "-m", "1"]),
    "tcp-16k": ("TCP echo 16 KiB", "tcp", "tcp", ["--size", "16384", "-m", "1"]),
    "udp": ("UDP echo 64 B", "udp", "udp", ["--size", "64", "-m", "1"]),
    "tls-pass": ("TLS passthrough → h1 TLS origin", "h1-tls", "tls-pass", []),
    "ws": ("WebSocket echo 64 B", "ws", "ws", ["--size", "64", "-m", "1"]),
}
RAMP = [8, 16, 32, 64]
MITM_VARIANTS = ["mitm-h1", "mitm-h2>h1", "mitm-h2>h2"]
FORGE_HOSTS = 200  # 127.0.1.1 .. 127.0.1.200
BIG_RAMP = [1, 2, 4, 8]
MODES = {
    # name: (kind, path, variants, p99 bound ms, extra ferry-load args, what it measures)
    "static": ("server", "/hello", ["h1", "h1-pipe", "h1-tls", "h2c", "h2-tls", "h3"], 20, [],
               "a fixed 13-byte response from config: per-request overhead of accept, parse, "
               "route and write"),
    "file-4k": ("server", "/file-4k.bin", ["h1", "h1-tls", "h2c", "h2-tls"], 20,
                ["--expect-bytes", "4096"], "a 4096-byte file from the page cache"),
    "file-100m": ("server", "/file-100m.bin", ["h1", "h1-tls", "h2-tls-1", "h3-1"], 5000,
                  ["--expect-bytes", str(100 << 20)],
                  "a 100 MiB file (MiB/s): sendfile or read+encrypt throughput"),
    "reverse": ("proxy", "/hello", ["h1>h1", "h1-tls>h1", "h2-tls>h1", "h2c>h2c", "h2-tls>h2-tls"],
                50, [], "client protocol × origin protocol, 13-byte response from one shared origin"),
    "reverse-h3": ("proxy", "/hello", ["h3>h1", "h1>h3", "h3>h3"], 50, [],
                   "HTTP/3 on either side of the proxy: h3 clients to the shared HTTP/1.1 origin, "
                   "and HTTP/1.1 or h3 clients to an HTTP/3 origin (Caddy, on the origin's CPU)"),
    "reverse-body-64k": ("proxy", "/body-64k.bin", ["h1>h1", "h1-tls>h1", "h2-tls>h1"], 50,
                         ["--expect-bytes", "65536"], "a 64 KiB response relayed from the origin"),
    "reverse-body-256k": ("proxy", "/body-256k.bin", ["h1>h1", "h1-tls>h1", "h2-tls>h1"], 100,
                          ["--expect-bytes", "262144"], "a 256 KiB response relayed from the origin"),
    "post-64k": ("proxy", "/hello", ["h1>h1", "h1-tls>h1", "h2-tls>h1"], 50,
                 ["--body-size", "65536"], "a 64 KiB request body relayed to the origin"),
    "tls-new-conn": ("server", "/hello", ["h1-tls"], 100, ["-H", "Connection: close"],
                     "a new TLS 1.3 connection (full handshake, ECDSA P-256) per request"),
    "tls-passthrough": ("l4", None, ["tls-pass"], 50, [],
                        "TLS bytes relayed untouched to a TLS origin (layer 4; new connection "
                        "reuse by the client)"),
    "tcp-echo": ("l4", None, ["tcp", "tcp-16k"], 20, [], "TCP relay to an echo origin, every byte verified"),
    "udp-echo": ("l4", None, ["udp"], 20, [], "UDP relay to an echo origin, every datagram verified"),
    "slow-consumer": ("slow", "/file-100m.bin", ["h1>h1"], None, [],
                      "32 clients reading a 100 MiB proxied response at 256 KiB/s each: the "
                      "proxy's RSS must stay bounded (it must not buffer the origin's speed)"),
    "idle-memory": ("idle", "/hello", ["h1", "h1-tls", "h2-tls", "h3"], None, [],
                    "memory per idle keep-alive connection: N connections (--idle-conns, 10,000) "
                    "each after one request, (RSS of the frontend's tree after − before) ÷ N "
                    "(h3: at most 2,000 of ferry-load's QUIC connections, about one request "
                    "each, held open)"),
    "early-response": ("server", "/hello", ["h1", "h1-tls", "h2-tls"], 100,
                       ["--body-size", str(1 << 20)],
                       "POST of 1 MiB to the fixed response: the server answers before the body "
                       "is read, then must drain or close cleanly"),
    "websocket-echo": ("ws", "/ws", ["ws"], 20, [],
                       "64-byte WebSocket messages echoed through the proxy by a C echo origin "
                       "(bare = the origin directly, the floor)"),
    "tls-terminate": ("l4", None, ["tls-term"], 20, [],
                      "TLS ended at the proxy (layer 4), 64-byte messages relayed in plaintext to "
                      "the TCP echo origin, every byte verified"),
    "mitm-lite": ("mitm", "/hello", MITM_VARIANTS, 200, [],
                  "interception on, no rule matches: the client CONNECTs through the explicit proxy, "
                  "TLS is ended with a certificate forged for the host and the requests are proxied "
                  "to the TLS origin (Ferry: one rule that matches no host; mitmdump: no addon)"),
    "mitm-full": ("mitm", "/hello", MITM_VARIANTS, 200, [],
                  "as mitm-lite, with one header appended each way (Ferry: an `intercept.rules` rule "
                  "with request-headers and response-headers `append`; mitmdump: a 4-line addon "
                  "doing the same)"),
    "mitm-har": ("mitm", "/hello", MITM_VARIANTS, 200, [],
                 "as mitm-lite, and every flow recorded (Ferry `intercept.capture.har`, mitmdump "
                 "`-w FILE`)"),
    "mitm-forge": ("forge", "/hello", ["forge-cold", "forge-warm"], 500, ["-H", "Connection: close"],
                   "one request per connection, each connection CONNECTs to the next of 200 host "
                   "addresses (127.0.1.1-200, one origin listening on all): `cold` has "
                   "`cert-cache: 1`, so nearly every handshake forges a new leaf; `warm` keeps the "
                   "default cache (all 200 leaves cached) and shows the same path without forging"),
    "reload": ("reload", "/hello", ["h1", "h1>h1"], 50, [],
               "requests/s and p99 at a fixed concurrency while the config is reloaded once a "
               "second (SIGHUP to `ferry run`: a new generation each time) versus no reload, "
               "samples alternated; target ratio ≥ 0.98 with zero errors (Ferry only: it "
               "compares Ferry with itself)"),
}
V["mitm-h1"] = ("h1 TLS → h1 TLS", "h1-tls", "tls", [])
V["mitm-h2>h1"] = ("h2 TLS → h1 TLS", "h2-tls", "tls-h1", ["-m", "16"])
V["mitm-h2>h2"] = ("h2 TLS → h2 TLS", "h2-tls", "h2-tls", ["-m", "16"])
V["forge-cold"] = ("new host per connection, cold leaf cache", "h1-tls", "forge-cold",
                   ["--connect-hosts", "200"])
V["forge-warm"] = ("new host per connection, warm leaf cache", "h1-tls", "forge-warm",
                   ["--connect-hosts", "200"])
V["tls-term"] = ("TLS-terminated echo 64 B", "tls", "tls-term", ["--size", "64", "-m", "1"])
MODE_ORDER = list(MODES)


class NotPossible(Exception):
    pass


# ----------------------------------------------------------------------------- helpers

def run(argv, timeout, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, **kw)


def rss_kib(pid):
    """Sum of VmRSS over pid's process tree (shared pages counted per process)."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE // 1024
        except (OSError, IndexError, ValueError):
            pass
    return total


def all_busy():
    """Busy jiffies of all CPUs (excludes idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]


def loadavg():
    return os.getloadavg()[0]


def ensure_tools(arms, modes):
    pkgs = sorted({TOOLS[t] for t in TOOLS if shutil.which(t) is None})
    for a in arms:
        if a in BIN and not os.path.exists(BIN[a]):
            pkgs.append(PKG[a])
    need_origin = any(MODES[m][0] in ("proxy", "slow", "l4", "ws", "mitm", "forge") for m in modes)
    if need_origin and not os.path.exists(NGINX):
        pkgs.append("nginx-light")
    if "nginx" in arms and any(MODES[m][0] == "l4" for m in modes) and not os.path.exists(STREAM_MOD):
        pkgs.append("libnginx-mod-stream")
    if any(MODES[m][0] == "mitm" for m in modes) and not os.path.exists(MITMDUMP):
        pkgs.append("mitmproxy")
    pkgs = sorted(set(pkgs))
    if not pkgs:
        return
    if os.geteuid() != 0:
        sys.exit("missing tools; install: apt-get install -y " + " ".join(pkgs))
    log("installing: " + " ".join(pkgs))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = run(["apt-get", "install", "-y", "--no-install-recommends"] + pkgs, timeout=1800, env=env)
    if r.returncode != 0:  # a stale package list: refresh once
        run(["apt-get", "update"], timeout=900, env=env)
        run(["apt-get", "install", "-y", "--no-install-recommends"] + pkgs, timeout=1800,
            env=env, check=True)
    # Debian starts the daemons it installs: stop them, they would share our CPUs
    for svc in ("nginx", "haproxy", "lighttpd", "caddy", "h2o"):
        subprocess.run(["systemctl", "stop", svc], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, check=False)


def cc(src, out, libs=()):
    r = run(["cc", "-std=c17", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-o", out, src] + list(libs),
            timeout=120)
    if r.returncode != 0 or r.stderr.strip():
        sys.exit(f"building {src} failed or warned:\n{r.stderr}")
    return out
