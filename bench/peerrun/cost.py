"""bench/run.py's cost: the cost rows: marginal callgrind instructions, strace syscalls and CPU
time per request, and their tables."""
import os
import re
import time
from .common import PROTO_ARMS, ROWS, ROW_LABEL, fmt_num, fmt_ratio, log, row_group
from .server import Server, cpu_ticks
from .loads import h2load
from .throughput import ratio_pairs


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
        res = h2load(arm.url(row), k, 1, timeout=600, proto=ROWS[row][2])
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
        deadline = time.monotonic() + 30
        while ir is None and time.monotonic() < deadline:
            time.sleep(0.5)  # a forked helper may still be writing its output
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
        proto = ROWS[row][2]
        warm = h2load(arm.url(row), max(args.cpu_requests // 10, 1000), args.cpu_clients,
                      timeout=600, proto=proto)
        if "error" in warm:
            return None, "cpu warm-up: " + warm["error"]
        pid = srv.target_pid()
        t0 = cpu_ticks(pid)
        res = h2load(arm.url(row), args.cpu_requests, args.cpu_clients, timeout=900, proto=proto)
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


def cost(args, env, arms, rows, origin=None):
    small, large = args.cost_k
    span = large - small
    results = {}
    for row in rows:
        for arm in arms:
            if arm.name not in PROTO_ARMS[row_group(row)]:
                continue
            key = (row, arm.name)
            c = results[key] = {}
            ok, why = arm.available()
            if not ok:
                c.update(status="absent", reason=why)
                continue
            if not arm.supports(row):
                c.update(status="n/a", reason=arm.why_not(row))
                continue
            if ROWS[row][0] == "reverse" and (origin is None or not origin.server.alive()):
                c.update(status="failed", reason="the origin is not running")
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
                        c.setdefault("why", {})["instr_per_req" if tool == "callgrind"
                                                else "syscalls_per_req"] = err
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
                c.setdefault("why", {})["cpu_us_per_req"] = err
            changed = arm.check_unchanged()
            if changed:
                errors.append(changed)
                for k in ("instr_per_req", "syscalls_per_req", "cpu_us_per_req"):
                    c.pop(k, None)
                    c.setdefault("why", {})[k] = changed
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
    small, large = args.cost_k
    lines = [f"## Per-request cost of one worker (marginal: (X({large}) − X({small})) / {large - small})",
             "",
             f"Instructions: `valgrind --tool=callgrind` total Ir of the server (all its processes "
             f"and threads); syscalls: `strace -f -c` total calls; both under `h2load [--h1] -n K "
             f"-c1 -m1` (one connection, one request at a time; --h1 for the HTTP/1.1 rows, h2c by "
             f"prior knowledge or ALPN h2 for the HTTP/2 rows). CPU: utime+stime from "
             f"/proc/<pid>/stat over `h2load [--h1] -n {args.cpu_requests} -c{args.cpu_clients} -m1` "
             f"at full speed. Lower is better; ratios > 1 mean ferry costs more.", ""]
    metrics = [("instr_per_req", "instructions / request", 0),
               ("syscalls_per_req", "syscalls / request", 2),
               ("cpu_us_per_req", "CPU µs / request", 2)]
    for proto in ("h1", "h2", "rp"):
        prow = [r for r in rows if row_group(r) == proto]
        names = [a.name for a in arms if a.name in PROTO_ARMS[proto]]
        if not prow or not names:
            continue
        ratios = [p for p in ratio_pairs(names) if proto == "h1" or p[1] != "bare"]
        if proto == "rp":
            ratios = [p for p in ratios if p[1] not in ("bare", "lighttpd")]
        for key, title, digits in metrics:
            head = ["row"] + names + [f"{a}/{b}" for a, b in ratios]
            group = {"h1": "HTTP/1.1", "h2": "HTTP/2",
                     "rp": "reverse proxy (the proxy process only; the origin is not counted)"}[proto]
            lines += [f"### {title} — {group}", "",
                      "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for row in prow:
                cols = [ROW_LABEL[row]]
                for n in names:
                    c = res[(row, n)]
                    if key in c:
                        cols.append(fmt_num(c[key], digits))
                    elif c.get("status") == "n/a":
                        cols.append("not possible")
                    elif c.get("status") == "absent":
                        cols.append(c["reason"])
                    else:
                        why = c.get("why", {}).get(key) or c.get("reason", "?")
                        cols.append("FAILED: " + why.replace("|", "/"))
                for a, b in ratios:
                    cols.append(fmt_ratio(res[(row, a)].get(key), res[(row, b)].get(key)))
                lines.append("| " + " | ".join(cols) + " |")
            lines.append("")
    lines += ["### syscalls per request, by call", ""]
    for row in rows:
        for a in arms:
            br = res.get((row, a.name), {}).get("syscalls_breakdown")
            if br:
                lines.append(f"- {ROW_LABEL[row]}, {a.name}: " +
                             ", ".join(f"{k} {v:.2f}" for k, v in br.items()))
    return lines


# --------------------------------------------------------------------------- main
