#!/usr/bin/python3
"""bench/cache_cost.py — instructions per request (callgrind) of Ferry's cache, issue 16.

    /usr/bin/python3 bench/cache_cost.py [build/ferry]

Rows (h1, one connection, `workers: 1`, a Python origin answering 13 bytes with
`Cache-Control: max-age=600`):
  proxy       plain reverse proxy, a distinct URL per request (the baseline)
  cache-cold  the same route with `cache:`: every request a miss that is stored
  cache-hit   one URL, every request after the first a hit
Each row runs ferry under `valgrind --tool=callgrind` twice (500 and 2500 requests, h2load
`-i` cycling the URL list) and reports the marginal cost (Ir(2500) - Ir(500)) / 2000, so
start-up and the first miss drop out. Not a test: numbers, no assertions."""
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
FERRY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "ferry")
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


def measure(tmp, origin, row, k):
    port = free_port()
    d = os.path.join(tmp, f"{row}-{k}")
    os.makedirs(d)
    cache = "    cache: {size: 256m}\n" if row != "proxy" else ""
    with open(os.path.join(d, "f.yaml"), "w") as f:
        f.write(f"workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    protocols: [h1]\n"
                f"upstreams:\n  - name: o\n    servers: [http://127.0.0.1:{origin}]\n"
                f"routes:\n  - proxy: o\n{cache}log:\n  level: warn\n")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.%p",
                          FERRY, "run", "-c", os.path.join(d, "f.yaml")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    n = k if row != "cache-hit" else 1
    with open(os.path.join(d, "uris"), "w") as f:
        f.write("".join(f"http://127.0.0.1:{port}/u{i}\n" for i in range(n)))
    subprocess.run(["h2load", "--h1", "-n", str(k), "-c", "1", "-i", os.path.join(d, "uris")],
                   stdout=subprocess.DEVNULL, timeout=600, check=True)
    p.terminate()
    p.wait(120)
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
    with tempfile.TemporaryDirectory() as tmp:
        for row in ("proxy", "cache-cold", "cache-hit"):
            a = measure(tmp, httpd.server_address[1], row, 500)
            b = measure(tmp, httpd.server_address[1], row, 2500)
            res[row] = (b - a) / 2000.0
    print("| row | instructions / request | vs proxy |\n|---|---|---|")
    for row, v in res.items():
        print(f"| {row} | {v:,.0f} | {res['proxy'] / v:.2f}x |")


if __name__ == "__main__":
    main()
