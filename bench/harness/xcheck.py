"""bench/run: The ferry-load cross-check against wrk and h2load."""
from harness.common import *  # noqa: F401,F403
from harness.env import *  # noqa: F401,F403
from harness.arms import *  # noqa: F401,F403
from harness.measure import *  # noqa: F401,F403

# ----------------------------------------------------------------------------- cross-check

def xcheck(env, args, info):
    """ferry-load vs wrk (h1) and h2load (h2 over TLS) against one nginx, alternated in the same
    run, with each tool's own CPU (wait4 rusage) and nginx's CPU per request for every run: if
    the two tools disagree while nginx spends the same µs per request, the slower tool was the
    bottleneck (client-bound), not the server."""
    import re
    arm = Nginx(env, None)
    key, argv, ports, _, _ = arm.server("xcheck", "xcheck:server", "h1", "/hello")
    inst = Instance(env, "nginx-xcheck", argv, ports, None)
    err = inst.start()
    if err:
        sys.exit("nginx: " + err)
    P = ports_for(arm, key)
    h1 = f"http://127.0.0.1:{P('plain')}/hello"
    h2 = f"https://127.0.0.1:{P('tls')}/hello"
    d = args.duration

    def measure(cmd, parse):
        pid = inst.pid()
        s0, b0, t0 = base.cpu_ticks(pid), all_busy(), time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = p.stdout.read()
        p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        server_s = (base.cpu_ticks(pid) - s0) / CLK
        tool_s = ru.ru_utime + ru.ru_stime
        rps = parse(out)
        return {"rps": rps, "tool_cpu": 100.0 * tool_s / wall,
                "server_cpu": 100.0 * server_s / wall,
                "server_us_per_req": 1e6 * server_s / (rps * d) if rps else None,
                "foreign_cpu": max(0.0, 100.0 * ((all_busy() - b0) / CLK - server_s - tool_s) / wall),
                "rc": p.returncode, "cmd": " ".join(cmd[3:])}

    def wrk_rps(out):
        m = re.search(r"Requests/sec:\s+([\d.]+)", out)
        e = re.search(r"Socket errors|Non-2xx", out)
        return float(m.group(1)) if m and not e else None

    def h2load_rps(out):
        m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
        f = re.search(r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
        return float(m.group(1)) if m and f and f.groups() == ("0", "0", "0") else None

    def fl_rps(out):
        try:
            j = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return j["requests_per_sec"] if j["errors"] == 0 else None

    pairs = []
    try:
        for i in range(args.repeats):
            row = {"loadavg": loadavg()}
            row["wrk"] = measure(["taskset", "-c", LOAD_CPU, "wrk", "-t1", "-c64", f"-d{d:g}s", h1],
                                 wrk_rps)
            row["fl_h1"] = measure(load_cmd(env, h1, 64, d, []), fl_rps)
            row["h2load"] = measure(["taskset", "-c", LOAD_CPU, "h2load", "-t1", "-c16", "-m16",
                                     "-D", f"{d:g}", h2], h2load_rps)
            row["fl_h2"] = measure(load_cmd(env, h2.replace("https", "h2"), 16, d, ["-m", "16"]),
                                   fl_rps)
            pairs.append(row)
            log("  xcheck {}: ".format(i + 1) + "; ".join(
                f"{k} {row[k]['rps'] or 0:,.0f}/s (tool {row[k]['tool_cpu']:.0f}%, nginx "
                f"{row[k]['server_us_per_req'] or 0:.2f} µs/req)" for k in ("wrk", "fl_h1", "h2load", "fl_h2")))
    finally:
        inst.stop()

    def med(k, f="rps"):
        v = [r[k][f] for r in pairs if r[k][f] is not None]
        return statistics.median(v) if v else None

    def cell(x):
        if x["rps"] is None:
            return f"FAILED (exit {x['rc']})"
        return f"{x['rps']:,.0f} ({x['tool_cpu']:.0f}% / {x['server_us_per_req']:.2f})"

    def rat(a, b):
        return f"{a / b:.2f}" if a and b else "—"

    md = [f"# ferry-load cross-check — {info['date']}", "",
          f"nginx ({info['nginx']}), one process on CPU {SERVER_CPU}; each tool pinned to CPU {LOAD_CPU}; "
          f"{d:g} s per run, the four runs alternated, {args.repeats} rounds. h1: `wrk -t1 -c64` vs "
          "`ferry-load -c64`; h2 over TLS: `h2load -t1 -c16 -m16` vs `ferry-load -c16 -m16`. Cells: "
          "requests/s (the tool's own CPU% of one core, from wait4 rusage / nginx's CPU µs per "
          "request). Load average at start "
          f"{info['loadavg_start']:.2f}; `foreign` = CPU% used by other processes during the run.", "",
          "| round | load avg | wrk h1 | ferry-load h1 | ratio | h2load h2 | ferry-load h2 | ratio | "
          "foreign % (max) |", "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(pairs, 1):
        fo = max(r[k]["foreign_cpu"] for k in ("wrk", "fl_h1", "h2load", "fl_h2"))
        md.append(f"| {i} | {r['loadavg']:.2f} | {cell(r['wrk'])} | {cell(r['fl_h1'])} | "
                  f"{rat(r['fl_h1']['rps'], r['wrk']['rps'])} | {cell(r['h2load'])} | {cell(r['fl_h2'])} | "
                  f"{rat(r['fl_h2']['rps'], r['h2load']['rps'])} | {fo:.0f} |")
    md.append(f"| median | | {med('wrk') or 0:,.0f} | {med('fl_h1') or 0:,.0f} | "
              f"**{rat(med('fl_h1'), med('wrk'))}** | {med('h2load') or 0:,.0f} | {med('fl_h2') or 0:,.0f} | "
              f"**{rat(med('fl_h2'), med('h2load'))}** | |")
    md.append("")
    md.append("Median tool CPU: wrk {:.0f}%, ferry-load h1 {:.0f}%, h2load {:.0f}%, ferry-load h2 {:.0f}%; "
              "nginx µs/request: {:.2f} / {:.2f} (h1), {:.2f} / {:.2f} (h2).".format(
                  *(med(k, "tool_cpu") or 0 for k in ("wrk", "fl_h1", "h2load", "fl_h2")),
                  *(med(k, "server_us_per_req") or 0 for k in ("wrk", "fl_h1", "h2load", "fl_h2"))))
    def tool_us(k):
        v = [1e4 * r[k]["tool_cpu"] / r[k]["rps"] for r in pairs if r[k]["rps"]]
        return statistics.median(v) if v else 0.0
    md.append("The tools' own CPU µs per request (lower = leaner client): wrk {:.2f}, ferry-load h1 "
              "{:.2f}; h2load {:.2f}, ferry-load h2 {:.2f}.".format(
                  *(tool_us(k) for k in ("wrk", "fl_h1", "h2load", "fl_h2"))))
    stem = os.path.join(args.out, f"{info['day']}-xcheck")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    with open(stem + ".json", "w") as f:
        json.dump({"meta": info, "pairs": pairs}, f, indent=1)
    print("\n".join(md))
