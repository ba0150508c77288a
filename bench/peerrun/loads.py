"""bench/run.py's loads: the load generators (wrk, h2load) and the preflight checks that a server
answers right."""
import http.client
import os
import re
import ssl
import subprocess
import time
from .common import LOAD_CPU, SERVER_CPU, run
from .server import cpu_busy, cpu_ticks


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
