"""bench/run: Output: tables, SVG charts and result files."""
from harness.common import *  # noqa: F401,F403

# ----------------------------------------------------------------------------- output

def fmt_rate(x, mib):
    if mib:
        return f"{x:,.0f} MiB/s"
    return f"{x:,.0f}"


def cell_text(c, mode):
    st = c.get("status")
    if st in ("n/a", "absent"):
        return c["reason"].replace("|", "/")
    if st != "ok":
        r = str(c.get("reason", "?")).replace("|", "/")
        return "FAILED: " + (r if len(r) <= 200 else "…" + r[-200:])
    if MODES[mode][0] == "idle":
        return (f"{c['kib_per_conn']:.2f} KiB ({c['conns']:,} connections: "
                f"{c['rss_before_kib'] / 1024:.1f} → {c['rss_after_kib'] / 1024:.1f} MiB)")
    if MODES[mode][0] == "slow":
        return (f"{c['rss_max_mib']:.1f} MiB max, +{c['rss_max_mib'] - c['rss_idle_mib']:.1f} over "
                f"idle (end {c['rss_end_mib']:.1f}; clients read {c['received_mib']:.0f} MiB)")
    if MODES[mode][0] == "reload":
        return (f"{c['peak']:,.0f}/s p99 {c['p99_ms']:.2f} ms with {c['reloads']} reloads; "
                f"{c['base']:,.0f}/s p99 {c['base_p99_ms']:.2f} ms without: ratio "
                f"{c['ratio']:.3f}, {c['errors']} errors; CPU {c['cpu_us_per_req'] or 0:.2f} vs "
                f"{c['base_cpu_us_per_req'] or 0:.2f} µs/request")
    mib = mode == "file-100m"
    val = c["peak_mibs"] if mib else c["peak"]
    s = fmt_rate(val, mib)
    if c.get("rss_mib") is not None:
        s += f" ({c['rss_mib']:.1f} MiB / {c['cpu_pct']:.0f}%)"
    if c.get("client_bound"):
        s += " †"
    if c.get("disturbed"):
        s += " ‡"
    if c.get("failed_steps"):
        s += f" (steps failed: c={','.join(map(str, c['failed_steps']))})"
    return s


def value(c, mode, key="peak"):
    if c.get("status") != "ok":
        return None
    if MODES[mode][0] == "slow":
        return c.get("rss_max_mib")
    if MODES[mode][0] == "idle":
        return c.get("kib_per_conn")
    if mode == "file-100m" and key == "peak":
        return c["peak_mibs"]
    return c.get(key)


def best_peer(cells, v, names, mode, key="peak", lower=False):
    vals = [(value(cells.get((v, n), {}), mode, key), n) for n in names if n in PEERS]
    vals = [x for x in vals if x[0]]
    if not vals:
        return None
    return (min if lower else max)(vals)


def ratio(cells, v, names, mode, key="peak", lower=False):
    f = value(cells.get((v, "ferry"), {}), mode, key)
    b = best_peer(cells, v, names, mode, key, lower)
    if not f or not b:
        return "—"
    r = (b[0] / f) if lower else (f / b[0])
    return f"{r:.2f}× ({b[1]})"


def table(cells, mode, variants, names, key, title, fmt, lower=False):
    head = ["variant"] + names + ["ferry / best peer"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in variants:
        row = [V[v][0]]
        for n in names:
            c = cells.get((v, n), {"status": "absent", "reason": "not measured"})
            row.append(fmt(c))
        row.append(ratio(cells, v, names, mode, key, lower))
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def svg_chart(cells, mode, variants, names, disturbed=False):
    """Grouped horizontal bars drawn by hand: one panel per metric (the peak rate, and the
    frontend's CPU µs per request), one group per variant, one bar per arm."""
    from html import escape
    kind = MODES[mode][0]
    if kind == "slow":
        panels = [("peak", "proxy RSS, MiB (max; lower is better)")]
    elif kind == "idle":
        panels = [("peak", "KiB per idle connection (lower is better)")]
    else:
        panels = [("peak", "MiB/s (peak)" if mode == "file-100m" else "requests/s (peak)"),
                  ("cpu_us_per_req", "frontend CPU µs per request (lower is better)")]
    bar, gap, left, width = 14, 10, 190, 460
    group_h = len(names) * bar + gap
    panel_h = 30 + len(variants) * group_h
    h = 40 + len(panels) * panel_h + 10
    title = f"{mode}" + (" — disturbed run (‡): compare ratios with care" if disturbed else "")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 170}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="20" font-size="14">{escape(title)}</text>']
    y = 40
    for key, unit in panels:
        vals = [value(cells.get((v, n), {}), mode, key) for v in variants for n in names]
        vmax = max([x for x in vals if x] or [1])
        out.append(f'<text x="10" y="{y + 12}" font-weight="bold">{escape(unit)}</text>')
        y += 22
        for v in variants:
            out.append(f'<text x="10" y="{y + len(names) * bar / 2 + 4}">{escape(V[v][0])}</text>')
            for n in names:
                val = value(cells.get((v, n), {}), mode, key)
                if val:
                    w = max(1.0, width * val / vmax)
                    out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" '
                               f'fill="{COLORS.get(n, "#000")}"/>')
                    num = f"{val:,.0f}" if val >= 100 else f"{val:.2f}"
                    out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar - 4}">{escape(n)} {num}</text>')
                else:
                    out.append(f'<text x="{left + 4}" y="{y + bar - 4}" fill="#999">{escape(n)}: —</text>')
                y += bar
            y += gap
        y += 8
    out.append("</svg>")
    return "\n".join(out) + "\n"


MITM_TARGET = {"mitm-lite": 0.95, "mitm-full": 0.90}


def mitm_vs_reverse(args, info, mode, cells):
    """Ferry MITM ÷ Ferry reverse (same wires, same origin, same run) and Ferry ÷ mitmdump,
    by peak rate and by CPU µs per request (the figure that holds on a disturbed machine)."""
    target = MITM_TARGET.get(mode)
    lines = ["### Ferry MITM ÷ Ferry reverse (same wires, same run) and Ferry ÷ mitmdump", "",
             "| wire | MITM ÷ reverse, req/s | reverse ÷ MITM, CPU µs/req | reverse ÷ MITM, "
             "instructions/req | target | Ferry ÷ mitmdump, req/s | mitmdump ÷ Ferry, CPU µs/req "
             "| target |",
             "|---|---|---|---|---|---|---|---|"]
    variants = [v for v in MODES[mode][2] if not args.variants or v in args.variants]

    def ok(v, n):
        c = cells.get((v, n), {})
        return c if c.get("status") == "ok" else None

    def met(x, t):
        return "—" if x is None or t is None else ("met" if x >= t else "NOT met")

    for v in variants:
        f, r, m = ok(v, "ferry"), ok(v, "ferry-reverse"), ok(v, "mitmdump")
        q = f["peak"] / r["peak"] if f and r else None
        qc = (r["cpu_us_per_req"] / f["cpu_us_per_req"]
              if f and r and f.get("cpu_us_per_req") and r.get("cpu_us_per_req") else None)
        k = f["peak"] / m["peak"] if f and m else None
        kc = (m["cpu_us_per_req"] / f["cpu_us_per_req"]
              if f and m and f.get("cpu_us_per_req") and m.get("cpu_us_per_req") else None)
        qi = (r["instr_per_req"] / f["instr_per_req"]
              if f and r and f.get("instr_per_req") and r.get("instr_per_req") else None)
        fx = lambda x: "—" if x is None else f"{x:.2f}×"  # noqa: E731
        lines.append(f"| {V[v][0]} | {fx(q)} | {fx(qc)} | {fx(qi)} | ≥ {target:.2f}×: "
                     f"{met(q, target)} (by CPU: {met(qc, target)}; by instructions: "
                     f"{met(qi, target)}) | {fx(k)} | {fx(kc)} | ≥ 20×: {met(k, 20)} "
                     f"(by CPU: {met(kc, 20)}) |" if target else
                     f"| {V[v][0]} | {fx(q)} | {fx(qc)} | {fx(qi)} | — | {fx(k)} | {fx(kc)} | — |")
    lines += ["", "Wires: the client reaches the proxy with `CONNECT` (ferry-load `--proxy`), then "
              "TLS 1.3 with a certificate the proxy forged for the host; `ferry-reverse` is Ferry's "
              "reverse proxy in front of the same origin port (no CONNECT, its own certificate). "
              "Ferry's interception (since main's d3ad278) and mitmdump both mirror the "
              "origin's protocol end to end: h2 to the client only when the origin has it, then "
              "h2 to the origin, so neither has an `h2 TLS → h1 TLS` cell (the reverse proxy "
              "does). (Ferry binaries before d3ad278 spoke HTTP/1.1 to every origin; mitmdump's "
              "mirroring was checked with curl, also with `connection_strategy=lazy`.)", ""]
    return lines


def write_mode(args, info, mode, cells, ramp, names):
    kind, _, variants, bound, _, what = MODES[mode]
    variants = [v for v in variants if not args.variants or v in args.variants]
    names = [n for n in names if any((v, n) in cells for v in variants)]
    md = [f"# {mode} — {info['date']}{' (quick profile)' if args.quick else ''}", "",
          f"{what}.", "",
          f"Machine: {info['cpu']}, {info['cpus']} CPUs, Linux {info['kernel']}. Frontend pinned to "
          f"CPU {SERVER_CPU} with one worker; ferry-load{' and the origin' if kind != 'server' else ''} "
          f"on CPU {LOAD_CPU}. Load average {info['loadavg_start']:.2f} at start.",
          f"Ferry: `{args.ferry}` (sha256 {info.get('ferry_sha256', '?')[:12]}; the tree's HEAD "
          f"{info['ferry_commit']}), load: `{args.load}`. Ramp: "
          f"{', '.join(map(str, ramp))} connections; {args.repeats} repeat(s) × {args.duration} s per "
          f"step after a {args.warmup} s warm-up; p99 bound for sustain {bound} ms.",
          "Versions: " + "; ".join(info[k] for k in ("nginx", "haproxy", "lighttpd", "caddy", "h2o",
                                                      "mitmdump", "openssl")
                                   if info.get(k)) + ".", ""]
    if any(c.get("disturbed") for c in cells.values()):
        md += ["**Disturbed:** ‡ marks cells where other processes used more than "
               f"{args.disturbed_pct:.0f}% of a CPU during a step (other engineers' builds and tests "
               "share this machine): their rates are not comparable; prefer the CPU µs / request "
               "column and instruction counts (`bench/run.py --cost`).", ""]
    if kind == "slow":
        md += table(cells, mode, variants, names, "peak",
                    "Proxy RSS while 32 clients read slowly (lower is better)",
                    lambda c: cell_text(c, mode), lower=True)
    elif kind == "idle":
        md += table(cells, mode, variants, names, "peak",
                    "KiB per idle keep-alive connection (lower is better; ratio = best peer ÷ "
                    "ferry)", lambda c: cell_text(c, mode), lower=True)
    else:
        md += table(cells, mode, variants, names, "peak",
                    "Peak: " + ("MiB/s" if mode == "file-100m" else "requests/s")
                    + " (RSS of the frontend's process tree / its CPU%) at the peak step",
                    lambda c: cell_text(c, mode))
        md += table(cells, mode, variants, names, "sustain",
                    f"Sustain: requests/s of the best step with zero errors and p99 ≤ {bound} ms",
                    lambda c: ((f"{c['sustain']:,.0f}" if c["sustain"] else f"none (p99 > {bound} ms)")
                               if c.get("status") == "ok" else cell_text(c, mode)))
        md += table(cells, mode, variants, names, "cpu_us_per_req",
                    "Frontend CPU µs per request at the peak step (lower is better; "
                    "ratio = best peer ÷ ferry)",
                    lambda c: (f"{c['cpu_us_per_req']:.2f}" if c.get("cpu_us_per_req") is not None
                               else ("—" if c.get("status") == "ok" else cell_text(c, mode))),
                    lower=True)
        if any("instr_per_req" in c for c in cells.values()):
            md += table(cells, mode, variants, names, "instr_per_req",
                        f"User-space instructions per request of the frontend (callgrind, marginal "
                        f"over {args.instructions[0]} and {args.instructions[1]} sequential requests on "
                        "one connection; lower is better; not disturbed by other load)",
                        lambda c: (f"{c['instr_per_req']:,.0f}" if c.get("instr_per_req")
                                   else (c.get("instr_error") or "—") if c.get("status") == "ok"
                                   else cell_text(c, mode)), lower=True)
        md += ["† client-bound: ferry-load used > 90% of its CPU at the peak step, so the rate is a "
               "lower bound; compare CPU µs / request. ‡ disturbed (see above). `not possible: …` "
               "says why an arm cannot do a variant.", ""]
    if kind == "mitm":
        md += mitm_vs_reverse(args, info, mode, cells)
    if kind == "forge":
        md += ["Forging: every request is a new connection (`Connection: close`) whose CONNECT "
               "names the next of 200 addresses (ferry-load `--connect-hosts 200`); the TLS "
               "handshake to the proxy is a full one (no resumption). `cold`: `intercept."
               "cert-cache: 1`; `warm`: default cache (1000), so it holds all 200 leaves. The "
               "origin connections are pooled per host in both (one verified origin probe per "
               "host per 60 s).", ""]
    stem = os.path.join(args.out, f"{info['day']}-{mode}")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    with open(stem + ".svg", "w") as f:
        f.write(svg_chart(cells, mode, variants, names,
                          any(c.get("disturbed") for c in cells.values())))
    with open(stem + ".json", "w") as f:
        json.dump({"meta": info, "mode": mode, "ramp": ramp,
                   "cells": [dict(variant=v, arm=a, **c) for (v, a), c in cells.items()]},
                  f, indent=1, default=str)
        f.write("\n")
    print("\n".join(md))
    log(f"wrote {stem}.md, .svg, .json")
