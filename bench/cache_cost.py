#!/usr/bin/python3
"""bench/cache_cost.py — instructions per request (callgrind) of Ferry's cache, issue 16.

    /usr/bin/python3 bench/cache_cost.py [build/ferry] [--peers]

Rows (h1, one connection, `workers: 1`, a Python origin answering 13 bytes with
`Cache-Control: max-age=600`):
  proxy       plain reverse proxy, a distinct URL per request (the baseline)
  cache-cold  the same route with `cache:`: every request a miss that is stored
  cache-cold-disk  cache-cold with `disk-path`: each object also written by the disk's
              writer thread (counted: callgrind follows every thread)
  cache-hit   one URL, every request after the first a hit
Each row runs ferry under `valgrind --tool=callgrind` twice (500 and 2500 requests, h2load
`-i` cycling the URL list) and reports the marginal cost (Ir(2500) - Ir(500)) / 2000, so
start-up and the first miss drop out. With --peers, the same three rows for nginx
(`proxy_pass`, and `proxy_cache` with its keys in a shared-memory zone and bodies under a
temporary directory). Not a test: numbers, no assertions."""
import glob
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
PEERS = "--peers" in sys.argv
FERRY = ARGS[0] if ARGS else os.path.join(ROOT, "build", "ferry")
BODY = b"Hello, world!"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("Cache-Control", "max-age=600")
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *a):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ferry_argv(d, port, origin, row):
    cache = "    cache: {size: 256m}\n" if row != "proxy" else ""
    if row == "cache-cold-disk":
        cache = f"    cache: {{size: 256m, disk-path: {d}/disk}}\n"
    with open(os.path.join(d, "f.yaml"), "w") as f:
        f.write(f"workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    protocols: [h1]\n"
                f"upstreams:\n  - name: o\n    servers: [http://127.0.0.1:{origin}]\n"
                f"routes:\n  - proxy: o\n{cache}log:\n  level: warn\n")
    return [FERRY, "run", "-c", os.path.join(d, "f.yaml")]


def nginx_argv(d, port, origin, row):
    temps = "\n".join(f"    {k}_temp_path {d}/{k};" for k in
                      ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    cache = (f"    proxy_cache_path {d}/cache levels=1:2 keys_zone=z:64m max_size=1g;\n"
             if row != "proxy" else "")
    use = "            proxy_cache z;\n" if row != "proxy" else ""
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
{temps}
{cache}    upstream app {{ server 127.0.0.1:{origin}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
{use}        }}
    }}
}}
""")
    return ["/usr/sbin/nginx", "-p", d, "-e", f"{d}/error.log", "-c", f"{d}/nginx.conf"]


ARGV = {"ferry": ferry_argv, "nginx": nginx_argv}


def measure(tmp, origin, row, k, arm="ferry"):
    port = free_port()
    d = os.path.join(tmp, f"{arm}-{row}-{k}")
    os.makedirs(d)
    argv = ARGV[arm](d, port, origin, row)
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.%p"] +
                         argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    n = k if row != "cache-hit" else 1
    with open(os.path.join(d, "uris"), "w") as f:
        f.write("".join(f"http://127.0.0.1:{port}/u{i}\n" for i in range(n)))
    out = subprocess.run(["h2load", "--h1", "-n", str(k), "-c", "1", "-i",
                          os.path.join(d, "uris")], capture_output=True, text=True,
                         timeout=600, check=True).stdout
    # a failed request costs other instructions: the row is void then
    ok = [l for l in out.splitlines() if l.startswith("requests:")]
    if not ok or f"{k} succeeded, 0 failed" not in ok[0]:
        print(f"{arm} {row} {k}: {ok[0] if ok else out[-300:]}", file=sys.stderr)
    p.terminate()
    try:
        p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    total = 0
    for name in glob.glob(os.path.join(d, "cg.*")):
        with open(name, errors="replace") as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    total += int(line.split()[1])
                    break
    return total


def main():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    res = {}
    arms = ["ferry"] + (["nginx"] if PEERS else [])
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            rows = ("proxy", "cache-cold", "cache-cold-disk", "cache-hit")
            for row in rows if arm == "ferry" else rows[:2] + rows[3:]:
                a = measure(tmp, httpd.server_address[1], row, 500, arm)
                b = measure(tmp, httpd.server_address[1], row, 2500, arm)
                res[(arm, row)] = (b - a) / 2000.0
    print("| arm | row | instructions / request | vs the arm's proxy |\n|---|---|---|---|")
    for (arm, row), v in res.items():
        print(f"| {arm} | {row} | {v:,.0f} | {res[(arm, 'proxy')] / v:.2f}x |")


if __name__ == "__main__":
    main()
