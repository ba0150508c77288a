#!/usr/bin/python3
"""Ferry HTTP/1.1 benchmark: ferry vs nginx vs the bare epoll floor.

Throughput (default): wrk -t1 -c64 keep-alive, server pinned to CPU 0 with ONE
worker, load pinned to CPU 1, warm-up then median of N runs, zero-error gate.

Cost (--cost): marginal per-request instructions (callgrind), syscalls
(strace -f -c) and CPU time (/proc/<pid>/stat) of the server process.

Python 3 standard library only.  See bench/README.md.
"""
import argparse
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
ARMS = ("ferry", "nginx", "bare")
# row id -> (content, transport)
ROWS = {
    "static": ("static", "plain"),
    "static-tls": ("static", "tls"),
    "file-4k": ("file-4k", "plain"),
    "file-4k-tls": ("file-4k", "tls"),
}
ROW_LABEL = {
    "static": "static 13 B · h1",
    "static-tls": "static 13 B · h1 + TLS 1.3",
    "file-4k": "file 4 KiB · h1",
    "file-4k-tls": "file 4 KiB · h1 + TLS 1.3",
}
TOOLS = {  # binary -> Debian package
    "wrk": "wrk",
    "h2load": "nghttp2-client",
    "valgrind": "valgrind",
    "strace": "strace",
    "openssl": "openssl",
    "cc": "gcc",
    "taskset": "util-linux",
}
NGINX_BIN = "/usr/sbin/nginx"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(argv, timeout, **kw):
    """Run a command to completion with a hard timeout; returns CompletedProcess."""
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, **kw)


def ensure_tools(need_nginx, need_cost):
    needed = ["wrk", "openssl", "cc", "taskset"]
    if need_cost:
        needed += ["h2load", "valgrind", "strace"]
    pkgs = [TOOLS[t] for t in needed if shutil.which(t) is None]
    if need_nginx and not os.path.exists(NGINX_BIN):
        pkgs.append("nginx-light")
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
        self.port = {"plain": free_port(), "tls": free_port(),
                     "bare-static": free_port(), "bare-file": free_port()}
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

class Arm:
    name = ""
    tls = True

    def __init__(self, env):
        self.env = env

    def available(self):
        return True, ""

    def supports(self, row):
        return self.tls or ROWS[row][1] == "plain"

    def instances(self):
        """name -> (argv, [ports])"""
        raise NotImplementedError

    def instance_for(self, row):
        return "main"

    def url(self, row):
        content, transport = ROWS[row]
        path = "/hello" if content == "static" else "/" + FILE_NAME
        if transport == "tls":
            return f"https://127.0.0.1:{self.env.port['tls']}{path}"
        return f"http://127.0.0.1:{self.env.port['plain']}{path}"

    def expected(self, row):
        return HELLO if ROWS[row][0] == "static" else self.env.file_body


class Ferry(Arm):
    name = "ferry"

    def __init__(self, env, binary):
        super().__init__(env)
        self.binary = binary
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

    def available(self):
        if not os.access(self.binary, os.X_OK):
            return False, f"not built ({self.binary} missing)"
        return True, ""

    def instances(self):
        return {"main": ([self.binary, "run", "-c", self.conf],
                         [self.env.port["plain"], self.env.port["tls"]])}


class Nginx(Arm):
    name = "nginx"

    def __init__(self, env):
        super().__init__(env)
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

    def available(self):
        if not os.access(NGINX_BIN, os.X_OK):
            return False, "nginx not installed"
        return True, ""

    def instances(self):
        return {"main": ([NGINX_BIN, "-p", self.prefix, "-e", os.path.join(self.prefix, "error.log"),
                          "-c", self.conf], [self.env.port["plain"], self.env.port["tls"]])}


class Bare(Arm):
    name = "bare"
    tls = False

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


class Server:
    """A server process pinned to CPU 0, optionally wrapped (valgrind, strace)."""

    def __init__(self, name, argv, ports, logpath, wrap=(), ready_timeout=15.0, stop_timeout=15.0):
        self.name, self.argv, self.ports, self.logpath = name, argv, ports, logpath
        self.wrap = list(wrap)
        self.ready_timeout, self.stop_timeout = ready_timeout, stop_timeout
        self.proc = None

    def start(self):
        self.logf = open(self.logpath, "ab")
        cmd = ["taskset", "-c", SERVER_CPU] + self.wrap + self.argv
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
        if self.proc.poll() is None:
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
        self.logf.close()
        return self.proc.returncode

    def log_tail(self, n=400):
        try:
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


def h2load(url, n, clients, timeout):
    cmd = ["taskset", "-c", LOAD_CPU, "h2load", "--h1", "-n", str(n), "-c", str(clients),
           "-m1", "-t1", url]
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
    if r.returncode != 0 or not m or not st:
        res["error"] = f"h2load exit {r.returncode}: {(r.stderr or out).strip()[-200:]}"
    elif int(m.group(4)) != n or int(st.group(1)) != n:
        res["error"] = (f"{m.group(4)}/{n} succeeded ({m.group(5)} failed, {m.group(6)} errored, "
                        f"{m.group(7)} timeout); status {st.group(1)} 2xx, {st.group(2)} 3xx, "
                        f"{st.group(3)} 4xx, {st.group(4)} 5xx")
    return res


# --------------------------------------------------------------------------- throughput

def throughput(args, env, arms, rows):
    cells = {}  # (row, arm) -> dict
    for arm in arms:
        ok, why = arm.available()
        if not ok:
            for row in rows:
                cells[(row, arm.name)] = {"status": "absent", "reason": why}
            log(f"[{arm.name}] skipped: {why}")
            continue
        servers = {}
        start_err = None
        for key, (argv, ports) in arm.instances().items():
            s = Server(f"{arm.name}-{key}", argv, ports, env.path(f"{arm.name}-{key}.log"))
            servers[key] = s
            start_err = s.start()
            if start_err:
                break
        try:
            for row in rows:
                cell = cells[(row, arm.name)] = {"url": arm.url(row)}
                if not arm.supports(row):
                    cell.update(status="n/a", reason="not possible")
                    continue
                if start_err:
                    cell.update(status="failed", reason=f"server {start_err}")
                    continue
                srv = servers[arm.instance_for(row)]
                err, info = preflight(arm.url(row), arm.expected(row), env.cert)
                cell["preflight"] = info
                if err:
                    cell.update(status="failed", reason=err)
                    log(f"[{arm.name}] {row}: {err}")
                    continue
                log(f"[{arm.name}] {row}: warm-up {args.warmup}s, {args.runs}×{args.duration}s")
                warm = wrk(arm.url(row), args.warmup, args.connections, srv)
                samples = []
                failure = None if "error" not in warm else "warm-up: " + warm["error"]
                for i in range(args.runs if not failure else 0):
                    s = wrk(arm.url(row), args.duration, args.connections, srv)
                    samples.append(s)
                    if "error" in s:
                        failure = f"run {i + 1}: {s['error']}"
                        break
                    log(f"    run {i + 1}: {s['rps']:,.0f} req/s, p99 {s.get('latency_p99_ms')} ms, "
                        f"server cpu {s['server_cpu_pct']:.0f}%, cpu0 busy {s.get('cpu0_busy_pct', 0):.0f}%")
                cell["samples"] = samples
                if failure:
                    cell.update(status="failed", reason=failure)
                    log(f"[{arm.name}] {row}: FAILED {failure}")
                else:
                    rps = [s["rps"] for s in samples]
                    cell.update(status="ok", rps=statistics.median(rps), rps_min=min(rps),
                                rps_max=max(rps),
                                p99_ms=statistics.median([s["latency_p99_ms"] or 0 for s in samples]),
                                cpu_pct=statistics.median([s["server_cpu_pct"] for s in samples]),
                                cpu0_foreign_pct=max(s.get("cpu0_foreign_pct", 0) for s in samples))
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
        return "not possible"
    if st == "absent":
        return cell["reason"]
    return "FAILED: " + cell.get("reason", "?").replace("|", "/")


def throughput_md(args, cells, arms, rows):
    names = [a.name for a in arms]
    head = ["row"] + [f"{n} req/s" for n in names]
    ratios = [("ferry", "nginx"), ("ferry", "bare")]
    ratios = [r for r in ratios if r[0] in names and r[1] in names]
    head += [f"{a}/{b}" for a, b in ratios]
    lines = [f"## Throughput: wrk -t1 -c{args.connections}, keep-alive, median of {args.runs} × "
             f"{args.duration}s after {args.warmup}s warm-up",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cols = [ROW_LABEL[row]] + [cell_text(cells[(row, n)]) for n in names]
        for a, b in ratios:
            ca, cb = cells[(row, a)], cells[(row, b)]
            cols.append(fmt_ratio(ca.get("rps"), cb.get("rps")) if ca.get("status") == "ok"
                        and cb.get("status") == "ok" else "—")
        lines.append("| " + " | ".join(cols) + " |")
    lines += ["", "(N% cpu) = the server's utime+stime over the run's wall time on its one CPU; "
              "well below 100% means the cell is bound by the load generator, not the server.",
              "", "Spread (min–max req/s of the counted runs) and median p99 latency:", ""]
    for row in rows:
        for n in names:
            c = cells[(row, n)]
            if c.get("status") == "ok":
                lines.append(f"- {ROW_LABEL[row]}, {n}: {fmt_num(c['rps_min'])}–{fmt_num(c['rps_max'])}"
                             f" req/s, p99 {c['p99_ms']:.2f} ms, CPU {SERVER_CPU} busy outside the server "
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
        res = h2load(arm.url(row), k, 1, timeout=600)
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
        warm = h2load(arm.url(row), max(args.cpu_requests // 10, 1000), args.cpu_clients, timeout=600)
        if "error" in warm:
            return None, "cpu warm-up: " + warm["error"]
        pid = srv.target_pid()
        t0 = cpu_ticks(pid)
        res = h2load(arm.url(row), args.cpu_requests, args.cpu_clients, timeout=900)
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


def cost(args, env, arms, rows):
    small, large = args.cost_k
    span = large - small
    results = {}
    for row in rows:
        for arm in arms:
            key = (row, arm.name)
            c = results[key] = {}
            ok, why = arm.available()
            if not ok:
                c.update(status="absent", reason=why)
                continue
            if not arm.supports(row):
                c.update(status="n/a", reason="not possible")
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
    names = [a.name for a in arms]
    small, large = args.cost_k
    ratios = [r for r in (("ferry", "nginx"), ("ferry", "bare")) if r[0] in names and r[1] in names]
    lines = [f"## Per-request cost of one worker (marginal: (X({large}) − X({small})) / {large - small})",
             "",
             f"Instructions: `valgrind --tool=callgrind` total Ir of the server; syscalls: "
             f"`strace -f -c` total calls; both under `h2load --h1 -n K -c1 -m1` "
             f"(one sequential keep-alive connection). CPU: utime+stime from /proc/<pid>/stat over "
             f"`h2load --h1 -n {args.cpu_requests} -c{args.cpu_clients} -m1` at full speed. "
             f"Lower is better; ratios > 1 mean ferry costs more.", ""]
    metrics = [("instr_per_req", "instructions / request", 0),
               ("syscalls_per_req", "syscalls / request", 2),
               ("cpu_us_per_req", "CPU µs / request", 2)]
    for key, title, digits in metrics:
        head = ["row"] + names + [f"{a}/{b}" for a, b in ratios]
        lines += [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            cols = [ROW_LABEL[row]]
            for n in names:
                c = res[(row, n)]
                if key in c:
                    cols.append(fmt_num(c[key], digits))
                elif c.get("status") in ("n/a", "absent"):
                    cols.append(c["reason"])
                else:
                    cols.append("FAILED: " + c.get("reason", "?").replace("|", "/"))
            for a, b in ratios:
                cols.append(fmt_ratio(res[(row, a)].get(key), res[(row, b)].get(key)))
            lines.append("| " + " | ".join(cols) + " |")
        lines.append("")
    lines += ["### syscalls per request, by call", ""]
    for row in rows:
        for n in names:
            br = res[(row, n)].get("syscalls_breakdown")
            if br:
                lines.append(f"- {ROW_LABEL[row]}, {n}: " +
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
        "nginx": version([NGINX_BIN, "-v"]), "wrk": version(["wrk", "--version"]),
        "h2load": version(["h2load", "--version"]), "valgrind": version(["valgrind", "--version"]),
        "strace": version(["strace", "-V"]), "openssl": version(["openssl", "version"]),
        "server_cpu": SERVER_CPU, "load_cpu": LOAD_CPU,
        "args": {k: v for k, v in vars(args).items()},
    }


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default=",".join(ARMS), help="comma list of ferry,nginx,bare")
    p.add_argument("--rows", default=",".join(ROWS), help="comma list of " + ",".join(ROWS))
    p.add_argument("--duration", type=int, default=8, help="seconds per measured wrk run (8)")
    p.add_argument("--warmup", type=int, default=2, help="seconds of wrk warm-up per cell (2)")
    p.add_argument("--runs", type=int, default=3, help="measured runs per cell; the median is reported (3)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (64)")
    p.add_argument("--cost", action="store_true", help="also measure per-request cost")
    p.add_argument("--no-throughput", action="store_true", help="skip the wrk part (use with --cost)")
    p.add_argument("--cost-k", default="200,2200", help="K small,large for the marginal cost (200,2200)")
    p.add_argument("--cpu-requests", type=int, default=200000, help="requests for the CPU-time run (200000)")
    p.add_argument("--cpu-clients", type=int, default=16, help="h2load clients for the CPU-time run (16)")
    p.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"), help="ferry binary")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="results directory")
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


def main(argv):
    args = parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs at least 2 CPUs (server on CPU 0, load on CPU 1)")
    ensure_tools("nginx" in args.arms, args.cost)
    env = Env(args)
    arms = []
    for name in args.arms:
        arms.append({"ferry": lambda: Ferry(env, args.ferry), "nginx": lambda: Nginx(env),
                     "bare": lambda: Bare(env)}[name]())
    info = meta(args)
    if info["loadavg"][0] > 0.5:
        log(f"warning: load average {info['loadavg'][0]:.2f}; other work on the machine skews results")
    report = {"meta": info}
    md = [f"# Ferry HTTP/1.1 benchmark — {info['date']}", "",
          f"Machine: {info['cpu']}, {info['cpus']} CPUs, Linux {info['kernel']}, "
          f"load average at start {info['loadavg'][0]:.2f}. Server pinned to CPU {SERVER_CPU} "
          f"(one worker), load generator to CPU {LOAD_CPU}.",
          f"Ferry {info['ferry_commit']} ({args.ferry}); {info['nginx']}; {info['wrk']}; "
          f"{info['h2load']}; {info['valgrind']}; {info['strace']}; {info['openssl']}.",
          "Only ratios carry between machines; absolute numbers do not.", ""]
    try:
        if not args.no_throughput:
            cells = throughput(args, env, arms, args.rows)
            report["throughput"] = [dict(row=r, arm=a, **c) for (r, a), c in cells.items()]
            md += throughput_md(args, cells, arms, args.rows) + [""]
        if args.cost:
            res = cost(args, env, arms, args.rows)
            report["cost"] = [dict(row=r, arm=a, **c) for (r, a), c in res.items()]
            md += cost_md(args, res, arms, args.rows) + [""]
    finally:
        env.cleanup()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"h1-{datetime.date.today().isoformat()}")
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
