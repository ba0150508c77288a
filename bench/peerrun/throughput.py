"""bench/run.py's throughput: the throughput rows: warm-up, median of N runs, the zero-error gate,
and their Markdown tables."""
import statistics
from .common import (
    H2_LOADS, ORIGIN_CPU, PEERS, PROTO_ARMS, ROWS, ROW_LOADS, SERVER_CPU, fmt_num, fmt_ratio,
    key_label, log, row_proto
)
from .server import Server
from .loads import h2_run, preflight, preflight_h2, wrk


def table_keys(rows):
    """Throughput cells: one per HTTP/1.1 row, one per (HTTP/2 row, load variant)."""
    keys = []
    for row in rows:
        if ROWS[row][2] == "h1":
            keys.append(row)
        else:
            keys += [f"{row}@{v}" for v in ROW_LOADS.get(row, H2_LOADS)]
    return keys


def throughput(args, env, arms, rows, origin=None):
    cells = {}  # (key, arm) -> dict
    for arm in arms:
        keys = [k for k in table_keys(rows) if arm.name in PROTO_ARMS[row_proto(k)]]
        if not keys:
            continue
        ok, why = arm.available()
        if not ok:
            for key in keys:
                cells[(key, arm.name)] = {"status": "absent", "reason": why}
            log(f"[{arm.name}] skipped: {why}")
            continue
        if not any(arm.supports(k.split("@")[0]) for k in keys):
            for key in keys:
                cells[(key, arm.name)] = {"status": "n/a", "reason": arm.why_not(key.split("@")[0])}
            continue
        servers = {}
        start_err = None
        needed = {arm.instance_for(k.split("@")[0]) for k in keys if arm.supports(k.split("@")[0])}
        for inst, (argv, ports) in arm.instances().items():
            if inst not in needed:
                continue
            s = Server(f"{arm.name}-{inst}", argv, ports, env.path(f"{arm.name}-{inst}.log"))
            servers[inst] = s
            start_err = s.start()
            if start_err:
                break
        try:
            for key in keys:
                row, _, variant = key.partition("@")
                cell = cells[(key, arm.name)] = {"url": arm.url(row)}
                if not arm.supports(row):
                    cell.update(status="n/a", reason=arm.why_not(row))
                    continue
                if ROWS[row][0] == "reverse" and (origin is None or not origin.server.alive()):
                    cell.update(status="failed", reason="the origin is not running")
                    continue
                if start_err:
                    cell.update(status="failed", reason=f"server {start_err}")
                    continue
                srv = servers[arm.instance_for(row)]
                if not srv.alive():
                    cell.update(status="failed", reason=f"server died earlier: {srv.log_tail()}")
                    continue
                h2 = ROWS[row][2] == "h2"
                if h2:
                    err, info = preflight_h2(arm.url(row), arm.expected(row))
                else:
                    err, info = preflight(arm.url(row), arm.expected(row), env.cert)
                cell["preflight"] = info
                if err:
                    cell.update(status="failed", reason=err)
                    log(f"[{arm.name}] {key}: {err}")
                    continue
                if h2:
                    c, m = H2_LOADS[variant]
                    log(f"[{arm.name}] {key}: {args.runs}×({args.warmup}s warm-up + {args.duration}s)")
                    warm = {}
                    one = lambda: h2_run(arm.url(row), c, m, args.duration, args.warmup, srv)
                else:
                    log(f"[{arm.name}] {key}: warm-up {args.warmup}s, {args.runs}×{args.duration}s")
                    warm = wrk(arm.url(row), args.warmup, args.connections, srv)
                    one = lambda: wrk(arm.url(row), args.duration, args.connections, srv)
                samples = []
                failure = None if "error" not in warm else "warm-up: " + warm["error"]
                for i in range(args.runs if not failure else 0):
                    s = one()
                    samples.append(s)
                    if "error" in s:
                        failure = f"run {i + 1}: {s['error']}"
                        break
                    p99 = s.get("latency_p99_ms")
                    log(f"    run {i + 1}: {s['rps']:,.0f} req/s, "
                        + (f"p99 {p99} ms, " if p99 is not None else
                           f"mean {s.get('latency_mean_ms')} ms, ")
                        + f"server cpu {s['server_cpu_pct']:.0f}%, cpu0 busy {s.get('cpu0_busy_pct', 0):.0f}%")
                cell["samples"] = samples
                if not failure and ROWS[row][0] == "reverse" and not origin.server.alive():
                    failure = "the origin exited during the run"
                if not failure:
                    failure = arm.check_unchanged()
                if failure:
                    cell.update(status="failed", reason=failure)
                    log(f"[{arm.name}] {key}: FAILED {failure}")
                else:
                    rps = [s["rps"] for s in samples]
                    cell.update(status="ok", rps=statistics.median(rps), rps_min=min(rps),
                                rps_max=max(rps),
                                cpu_pct=statistics.median([s["server_cpu_pct"] for s in samples]),
                                cpu0_foreign_pct=max(s.get("cpu0_foreign_pct", 0) for s in samples))
                    if h2:
                        cell["latency_mean_ms"] = statistics.median(
                            [s.get("latency_mean_ms") or 0 for s in samples])
                    else:
                        cell["p99_ms"] = statistics.median([s["latency_p99_ms"] or 0 for s in samples])
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
        return "not possible"  # the reason is in the JSON and under the table
    if st == "absent":
        return cell["reason"]
    return "FAILED: " + cell.get("reason", "?").replace("|", "/")


def ratio_pairs(names):
    if "ferry" not in names:
        return []
    return [("ferry", n) for n in names if n != "ferry"]


def throughput_md(args, cells, arms, rows):
    lines = []
    for proto in ("h1", "h2", "rp"):
        keys = [k for k in table_keys(rows) if row_proto(k) == proto]
        names = [a.name for a in arms if a.name in PROTO_ARMS[proto]]
        if not keys or not names:
            continue
        pairs = [p for p in ratio_pairs(names) if proto == "h1" or p[1] != "bare"]
        if proto == "rp":
            pairs = [p for p in pairs if p[1] not in ("bare", "lighttpd")]
        best = proto == "h2" and "ferry" in names and any(n in PEERS for n in names)
        head = ["row"] + [f"{n} req/s" for n in names] + [f"{a}/{b}" for a, b in pairs]
        if best:
            head.append("ferry/best peer")
        if proto == "rp":
            lines += [f"## Throughput, reverse proxy: h1 rows wrk -t1 -c{args.connections}, h2 row "
                      f"h2load -t1 -c16 -m16 -D {args.duration} --warm-up-time {args.warmup}; median "
                      f"of {args.runs}", "",
                      f"Client → proxy (one worker, CPU {SERVER_CPU}) → one shared HTTP/1.1 origin "
                      f"(nginx, `return 200 \"Hello, world!\"`, CPU {ORIGIN_CPU}, the load "
                      "generator's CPU). The origin and the load share one CPU, so req/s is capped "
                      "for every proxy: rank by the cost tables (CPU µs / request).", ""]
        elif proto == "h1":
            lines += [f"## Throughput, HTTP/1.1: wrk -t1 -c{args.connections}, keep-alive, median of "
                      f"{args.runs} × {args.duration}s after {args.warmup}s warm-up", ""]
        else:
            lines += [f"## Throughput, HTTP/2: h2load -t1 -cC -mM -D {args.duration} --warm-up-time "
                      f"{args.warmup}, median of {args.runs}", "",
                      "h2c = prior knowledge on a plain listener; h2 + TLS = ALPN h2 over TLS 1.3. "
                      "-c16 -m16: 16 connections × up to 16 concurrent streams each (lighttpd "
                      "advertises at most 8). -c64 -m1: 64 connections, one stream at a time.", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in keys:
            cols = [key_label(key)] + [cell_text(cells[(key, n)]) for n in names]
            ok = lambda n: cells[(key, n)].get("status") == "ok"
            for a, b in pairs:
                cols.append(fmt_ratio(cells[(key, a)].get("rps"), cells[(key, b)].get("rps"))
                            if ok(a) and ok(b) else "—")
            if best:
                peers = [(cells[(key, n)]["rps"], n) for n in names if n in PEERS and ok(n)]
                if ok("ferry") and peers:
                    v, n = max(peers)
                    cols.append(f"{fmt_ratio(cells[(key, 'ferry')]['rps'], v)} ({n})")
                else:
                    cols.append("—")
            lines.append("| " + " | ".join(cols) + " |")
        lines.append("")
        if proto == "rp":
            why = sorted({f"{n}: {cells[(k, n)]['reason']}" for k in keys for n in names
                          if cells[(k, n)].get("status") == "n/a"})
            if why:
                lines += ["Not possible — " + "; ".join(why) + ".", ""]
    lines += ["(N% cpu) = the server's utime+stime over the run's wall time on its one CPU; "
              "well below 100% means the cell is bound by the load generator, not the server.",
              "", "Spread (min–max req/s of the counted runs), latency (wrk: median p99; "
              "h2load: median of the mean time per request):", ""]
    for key in table_keys(rows):
        for a in arms:
            c = cells.get((key, a.name))
            if c and c.get("status") == "ok":
                lat = (f"p99 {c['p99_ms']:.2f} ms" if "p99_ms" in c
                       else f"mean {c.get('latency_mean_ms') or 0:.2f} ms")
                lines.append(f"- {key_label(key)}, {a.name}: {fmt_num(c['rps_min'])}–{fmt_num(c['rps_max'])}"
                             f" req/s, {lat}, CPU {SERVER_CPU} busy outside the server "
                             f"≤ {c['cpu0_foreign_pct']:.0f}%"
                             + (" — **disturbed: re-run**" if c["cpu0_foreign_pct"] > 10 else ""))
    return lines


# --------------------------------------------------------------------------- cost
