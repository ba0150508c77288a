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
import json
import os
import platform
import signal
import subprocess
import sys
from peerrun.common import (
    ARMS, H2O_BIN, HAPROXY_BIN, HERE, LIGHTTPD_BIN, LOAD_CPU, NGINX_BIN, ORIGIN_CPU, ROOT, ROWS,
    SERVER_CPU, ensure_tools, log, run
)
from peerrun.arms import Bare, Env, Ferry, H2o, Haproxy, Lighttpd, Named, Nginx, Origin
from peerrun.throughput import throughput, throughput_md
from peerrun.cost import cost, cost_md


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
