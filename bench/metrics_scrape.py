#!/usr/bin/python3
"""Bench row "metrics enabled and scraped every second" against Ferry's plain reverse proxy
h1 -> h1 (issue 14's gate: >= 0.99x). Not a test.

Both arms: one worker pinned to CPU 0 proxying to a Ferry `respond` origin; ferry-load (32
connections, closed loop) and the origin share CPU 1. The metrics arm adds an `admin:`
listener (so the per-exchange observer is attached) and a scraper that GETs /metrics every
second during the run. Runs alternate (plain, metrics) RUNS times; the table has the medians
and the ratio. Every run must have zero errors.

    bench/metrics_scrape.py [--runs 3] [--seconds 8] [--build build]
    bench/metrics_scrape.py --instructions   # callgrind: marginal instructions per request

--instructions runs each arm's proxy under callgrind twice (200 and 2200 requests, no scrapes)
and prints (I(2200) - I(200)) / 2000: what one request costs, whatever the machine's load.
"""
import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc):
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"ferry exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"port {port} not listening")


def start(ferry, tmp, name, text, cpu):
    f = Path(tmp) / f"{name}.yaml"
    f.write_text(text)
    return subprocess.Popen(["taskset", "-c", cpu, ferry, "run", "-c", str(f), "--pid-file",
                             str(Path(tmp) / f"{name}.pid")], stdout=subprocess.DEVNULL,
                            stderr=open(Path(tmp) / f"{name}.log", "w"))


def arm_text(port, aport, origin_port, metrics):
    text = f"""workers: 1
listeners:
  - address: 127.0.0.1:{port}
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - proxy: o
log: {{level: warn}}
"""
    if metrics:
        text += f"admin:\n  address: 127.0.0.1:{aport}\n"
    return text


def instructions(args, tmp, origin_port, metrics, n):
    port, aport = free_port(), free_port()
    f = Path(tmp) / "cg.yaml"
    f.write_text(arm_text(port, aport, origin_port, metrics))
    out = Path(tmp) / f"cg.{metrics}.{n}"
    p = subprocess.Popen(["taskset", "-c", "0", "valgrind", "--tool=callgrind",
                          f"--callgrind-out-file={out}", args.ferry, "run", "-c", str(f),
                          "--pid-file", str(Path(tmp) / "cg.pid")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, p)
        r = subprocess.run(["taskset", "-c", "1", args.load, f"http://127.0.0.1:{port}/", "-c",
                            "1", "-n", str(n), "--json"], capture_output=True, text=True,
                           timeout=600)
        rep = json.loads(r.stdout)
        if rep["errors"] or rep["requests"] != n:
            raise SystemExit(f"bad callgrind run: {rep}")
    finally:
        p.terminate()
        p.wait(120)
    for line in out.read_text().splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit("no callgrind totals")


def one(args, tmp, origin_port, metrics):
    port, aport = free_port(), free_port()
    text = f"""workers: 1
listeners:
  - address: 127.0.0.1:{port}
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - proxy: o
log: {{level: warn}}
"""
    if metrics:
        text += f"admin:\n  address: 127.0.0.1:{aport}\n"
    p = start(args.ferry, tmp, "arm", text, "0")
    try:
        wait_port(port, p)
        stop = threading.Event()
        scrapes = []

        def scrape():
            while not stop.wait(1.0):
                with urllib.request.urlopen(f"http://127.0.0.1:{aport}/metrics", timeout=5) as r:
                    scrapes.append(len(r.read()))
        t = threading.Thread(target=scrape, daemon=True)
        if metrics:
            wait_port(aport, p)
            t.start()
        r = subprocess.run(["taskset", "-c", "1", args.load, f"http://127.0.0.1:{port}/",
                            "-c", "32", "-d", str(args.seconds), "-w", "1", "--json"],
                           capture_output=True, text=True, timeout=args.seconds + 60)
        stop.set()
        if metrics:
            t.join(10)
        rep = json.loads(r.stdout)
        if rep["errors"]:
            raise SystemExit(f"errors in a run: {rep['errors_by_kind']}")
        if metrics and len(scrapes) < args.seconds - 1:
            raise SystemExit(f"only {len(scrapes)} scrapes")
        return rep["requests_per_sec"], (statistics.mean(scrapes) if scrapes else 0)
    finally:
        p.terminate()
        p.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--instructions", action="store_true")
    args = ap.parse_args()
    args.ferry = str(Path(args.build) / "ferry")
    args.load = str(Path(args.build) / "ferry-load")
    with tempfile.TemporaryDirectory() as tmp:
        oport = free_port()
        origin = start(args.ferry, tmp, "origin", f"""workers: 1
listeners:
  - address: 127.0.0.1:{oport}
routes:
  - respond: {{status: 200, body: "hello world\\n"}}
log: {{level: warn}}
""", "1")
        try:
            wait_port(oport, origin)
            if args.instructions:
                cost = {}
                for m in (False, True):
                    a1 = instructions(args, tmp, oport, m, 200)
                    a2 = instructions(args, tmp, oport, m, 2200)
                    cost[m] = (a2 - a1) / 2000
                print("| row | instructions per request (callgrind, marginal) | vs plain |")
                print("|---|---|---|")
                print(f"| proxy h1 → h1 origin | {cost[False]:,.0f} | 1.00× |")
                print(f"| same, metrics on | {cost[True]:,.0f} | "
                      f"{cost[True] / cost[False]:.3f}× |")
                return
            plain, met, size = [], [], []
            for _ in range(args.runs):
                plain.append(one(args, tmp, oport, False)[0])
                rps, sz = one(args, tmp, oport, True)
                met.append(rps)
                size.append(sz)
        finally:
            origin.terminate()
            origin.wait(30)
    a, b = statistics.median(plain), statistics.median(met)
    print("| row | req/s (median of %d) | vs plain |" % args.runs)
    print("|---|---|---|")
    print(f"| proxy h1 → h1 origin | {a:,.0f} | 1.00× |")
    print(f"| same, metrics on and scraped every second ({statistics.mean(size) / 1024:.0f} "
          f"KiB/scrape) | {b:,.0f} | {b / a:.2f}× |")
    print("runs:", [round(x) for x in plain], [round(x) for x in met], file=sys.stderr)


if __name__ == "__main__":
    main()
