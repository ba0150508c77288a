#!/usr/bin/python3
"""bench/cache_cost.py — instructions per request (callgrind) of Ferry's cache, issue 16.

    /usr/bin/python3 bench/cache_cost.py [build/ferry] [--peers] [--only-peers] [--arm=NAME]... [--idle]

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
temporary directory), under callgrind like Ferry.

Also with --peers, under callgrind the same way (every process of the server: callgrind
follows forks, so Varnish's manager and its child, the cache process, are both counted; their
files are summed): Varnish 7.1 (`varnishd -F -j none`, `-s malloc,256m`, one thread pool of
10-50 threads so that it runs under valgrind; the proxy row's VCL says `return (pass)`) and
Apache Traffic Server 9.2 (`traffic_server` from a run-root in the temporary directory, one
exec thread, `map / origin`, a 64 MB cache file; the proxy row sets
`proxy.config.http.cache.http 0`). Hardware counters (`perf stat -e instructions:u`) are
not available on this machine (`<not supported>`: a VM without a PMU), so callgrind it is
for every arm. Varnish and ATS do work of their own while idle (Varnish's waiter, pool
herder and expiry threads; ATS's event threads wake every 10 ms), and under callgrind a run
of 2,500 requests lasts much longer than one of 500, so that work lands in the marginal
figure: with --idle, each arm is first run idle for 2 s and 12 s, and its instructions per
second of idling times the runs' difference in duration is subtracted (a second column).
Each row also reports the origin's fetches per request (hit ~0, cold and
proxy 1), so a row that did not do what it says shows. Not a test: numbers, no assertions."""
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
ONLY_PEERS = "--only-peers" in sys.argv
IDLE = "--idle" in sys.argv  # also subtract what the server does per second when idle
PEERS = "--peers" in sys.argv or ONLY_PEERS
FERRY = os.path.abspath(ARGS[0]) if ARGS else os.path.join(ROOT, "build", "ferry")
BODY = b"Hello, world!"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    fetches = 0

    def do_GET(self):
        H.fetches += 1
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


def varnish_argv(d, port, origin, row):
    recv = "    return (pass);\n" if row == "proxy" else ""
    with open(os.path.join(d, "v.vcl"), "w") as f:
        f.write(f"vcl 4.1;\nbackend o {{ .host = \"127.0.0.1\"; .port = \"{origin}\"; }}\n"
                f"sub vcl_recv {{\n{recv}}}\n")
    return ["/usr/sbin/varnishd", "-F", "-j", "none", "-a", f"127.0.0.1:{port}", "-f",
            os.path.join(d, "v.vcl"), "-n", os.path.join(d, "vn"), "-s", "malloc,256m", "-p", "thread_pools=1",
            "-p", "thread_pool_min=10", "-p", "thread_pool_max=50"]


def ats_argv(d, port, origin, row):
    etc = os.path.join(d, "etc")
    for sub in ("etc", "run", "log", "cache", "var"):
        os.makedirs(os.path.join(d, sub))
    subprocess.run(["cp", "-r"] + glob.glob("/etc/trafficserver/*") + [etc], check=True)
    rec = os.path.join(etc, "records.config")
    with open(rec) as f:
        lines = [l for l in f if not l.startswith((
            "CONFIG proxy.config.exec_thread.", "CONFIG proxy.config.http.server_ports",
            "CONFIG proxy.config.log.logging_enabled", "CONFIG proxy.config.admin.user_id",
            "CONFIG proxy.config.http.cache.http "))]
    lines += [f"CONFIG proxy.config.exec_thread.autoconfig INT 0\n",
              "CONFIG proxy.config.exec_thread.limit INT 1\n",
              f"CONFIG proxy.config.http.server_ports STRING {port}\n",
              "CONFIG proxy.config.log.logging_enabled INT 0\n",
              "CONFIG proxy.config.admin.user_id STRING #-1\n",
              f"CONFIG proxy.config.http.cache.http INT {0 if row == 'proxy' else 1}\n"]
    with open(rec, "w") as f:
        f.writelines(lines)
    with open(os.path.join(etc, "storage.config"), "w") as f:
        f.write(f"{d}/cache 64M\n")
    with open(os.path.join(etc, "remap.config"), "w") as f:
        f.write(f"map / http://127.0.0.1:{origin}/\n")
    with open(os.path.join(d, "runroot.yaml"), "w") as f:
        f.write("prefix: /usr\nexec_prefix: /usr\nbindir: /usr/bin\nsbindir: /usr/sbin\n"
                f"sysconfdir: {etc}\ndatadir: {d}/var\nincludedir: /usr/include\n"
                "libdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n"
                f"localstatedir: {d}/var\nruntimedir: {d}/run\nlogdir: {d}/log\n"
                f"cachedir: {d}/cache\n")
    return ["/usr/bin/traffic_server", f"--run-root={d}/runroot.yaml"]


ARGV = {"ferry": ferry_argv, "nginx": nginx_argv, "varnish": varnish_argv, "ats": ats_argv}


def measure(tmp, origin, row, k, arm="ferry", idle=0.0):
    """(Ir of every process, origin fetches, seconds from ready to stop) of k requests, or of
    `idle` seconds without any when k is 0."""
    port = free_port()
    d = os.path.join(tmp, f"{arm}-{row}-{k}-{idle:g}")
    os.makedirs(d)
    argv = ARGV[arm](d, port, origin, row)
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.%p"] +
                         argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=d)
    for _ in range(1800):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    n = k if row != "cache-hit" else 1
    with open(os.path.join(d, "uris"), "w") as f:
        f.write("".join(f"http://127.0.0.1:{port}/u{i}\n" for i in range(n)))
    if arm in ("varnish", "ats"):  # listening is not ready: wait for an answer
        for _ in range(600):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    c.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if c.recv(12).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            time.sleep(0.2)
    before = H.fetches
    t0 = time.monotonic()
    if k:
        out = subprocess.run(["h2load", "--h1", "-n", str(k), "-c", "1", "-i",
                              os.path.join(d, "uris")], capture_output=True, text=True,
                             timeout=600, check=True).stdout
        # a failed request costs other instructions: the row is void then
        ok = [l for l in out.splitlines() if l.startswith("requests:")]
        if not ok or f"{k} succeeded, 0 failed" not in ok[0]:
            print(f"{arm} {row} {k}: {ok[0] if ok else out[-300:]}", file=sys.stderr)
    else:
        time.sleep(idle)
    fetched = H.fetches - before
    elapsed = time.monotonic() - t0
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
    return total, fetched, elapsed


def main():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    res, fetches, corrected, rates = {}, {}, {}, {}
    arms = [] if ONLY_PEERS else ["ferry"]
    arms += ["nginx", "varnish", "ats"] if PEERS else []
    pick = [a[len("--arm="):] for a in sys.argv if a.startswith("--arm=")]
    arms = pick or arms
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            if IDLE:  # instructions a second of doing nothing (timers, housekeeping threads)
                i2, _, e2 = measure(tmp, httpd.server_address[1], "cache-hit", 0, arm, 2.0)
                i12, _, e12 = measure(tmp, httpd.server_address[1], "cache-hit", 0, arm, 12.0)
                rates[arm] = max(0.0, (i12 - i2) / (e12 - e2))
            rows = ("proxy", "cache-cold", "cache-cold-disk", "cache-hit")
            for row in rows if arm == "ferry" else rows[:2] + rows[3:]:
                a, fa, ea = measure(tmp, httpd.server_address[1], row, 500, arm)
                b, fb, eb = measure(tmp, httpd.server_address[1], row, 2500, arm)
                res[(arm, row)] = (b - a) / 2000.0
                fetches[(arm, row)] = (fb - fa) / 2000.0
                if IDLE:
                    corrected[(arm, row)] = (b - a - rates[arm] * (eb - ea)) / 2000.0
    print("| arm | row | instructions / request | vs the arm's proxy | origin fetches / request |"
          + (" without idle work | vs the arm's proxy |" if IDLE else ""))
    print("|---|---|---|---|---|" + ("---|---|" if IDLE else ""))
    for (arm, row), v in res.items():
        line = f"| {arm} | {row} | {v:,.0f} | {res[(arm, 'proxy')] / v:.2f}x | " \
               f"{fetches[(arm, row)]:.2f} |"
        if IDLE:
            c, cp = corrected[(arm, row)], corrected[(arm, "proxy")]
            line += f" {c:,.0f} | {cp / c:.2f}x |"
        print(line)
    for arm, r in rates.items():
        print(f"idle: {arm} {r:,.0f} instructions/s under callgrind")


if __name__ == "__main__":
    main()
