"""`bench/run wt`: WebTransport capacity rows (wt-streams, wt-datagrams) beside Ferry's own
HTTP/3 100 MiB download, in one run.

Positions: direct (ferry-load → Ferry's `webtransport: echo`), through QUIC passthrough (a
second Ferry relaying QUIC by SNI at layer 4 in front of the echo) and through the L7
WebTransport proxy (`webtransport: proxy` re-originating the session to the echo) when the
binary has it. Every Ferry process runs on CPU 0 (one core for Ferry: in the passthrough and
proxy rows the relay and the echo origin share it), ferry-load on CPU 1. MiB/s counts echoed
bytes received by the client (each byte crossed Ferry twice); "per core" divides by the CPU
seconds all Ferry processes used during the sample; "relay ms/MiB" is the CPU the front Ferry
(passthrough relay or L7 proxy) alone used per MiB echoed. Round trips: one 1 MiB stream echo (streams),
one datagram echo (datagrams, latency from the timestamp it carries). Median of --repeats.
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

FERRY_CPU, LOAD_CPU = "0", "1"
SIZE = 1 << 20


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return int(v[11]) + int(v[12])
    except (OSError, IndexError, ValueError):
        return 0


class Proc:
    def __init__(self, d, name, ferry, conf, strace=None):
        self.name = name
        self.path = os.path.join(d, name + ".yaml")
        with open(self.path, "w") as f:
            f.write(conf)
        self.log = open(os.path.join(d, name + ".log"), "w")
        self.traced = bool(strace)
        pre = ["strace", "-c", "-f", "-o", strace] if strace else []
        self.p = subprocess.Popen(pre + ["taskset", "-c", FERRY_CPU, ferry, "run", "-c", self.path],
                                  stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self):
        if self.traced:  # stop Ferry itself: strace then writes its summary and exits
            try:
                with open(f"/proc/{self.p.pid}/task/{self.p.pid}/children") as f:
                    for c in f.read().split():
                        os.kill(int(c), 15)
            except OSError:
                pass
        else:
            self.p.terminate()
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def check(ferry, conf, d):
    path = os.path.join(d, "check.yaml")
    with open(path, "w") as f:
        f.write(conf)
    return subprocess.run([ferry, "check", "-c", path], capture_output=True, timeout=30).returncode == 0


def sample(load, url, extra, dur, procs):
    t0 = [ticks(p.p.pid) for p in procs]
    w0 = time.monotonic()
    r = subprocess.run(["taskset", "-c", LOAD_CPU, load, url, "-d", f"{dur}s", "--json",
                        "--insecure", "--timeout", "10s"] + extra,
                       capture_output=True, text=True, timeout=dur + 60)
    wall = time.monotonic() - w0
    by = {p.name: (ticks(p.p.pid) - a) / os.sysconf("SC_CLK_TCK") for p, a in zip(procs, t0)}
    cpu = sum(by.values())
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"ferry-load printed nothing: {r.stderr[-500:]}")
    rep = json.loads(lines[0])
    rep["ferry_cpu_s"], rep["wall_s"], rep["cpu_s_by_proc"] = cpu, wall, by
    if len(lines) > 1:
        rep.update(json.loads(lines[1]))
    return rep


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def run(ferry, load, out, day, repeats=3, dur=5.0, log=print):
    d = tempfile.mkdtemp(prefix="ferry-bench-wt-")
    procs = []
    try:
        key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "30", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=60)
        root = os.path.join(d, "root")
        os.mkdir(root)
        with open(os.path.join(root, "f100m.bin"), "wb") as f:
            f.write(os.urandom(1 << 20) * 100)
        pe, pp, pl = free_port(), free_port(), free_port()
        tls = f"{{cert: {cert}, key: {key}}}"
        quic = "quic:\n  webtransport-max-sessions: 64\n  webtransport-max-streams: 256\n"
        echo = f"""workers: 1
listeners:
  - address: 127.0.0.1:{pe}
    protocols: [h1, h2, h3]
    tls: {tls}
{quic}routes:
  - match: {{path: /echo}}
    webtransport: echo
  - match: {{path: /f100m.bin}}
    static: {{root: {root}}}
log: {{level: warn}}
"""
        passthrough = f"""workers: 1
l4:
  - listen: 127.0.0.1:{pp}
    mode: quic-passthrough
    target: 127.0.0.1:{pe}
log: {{level: warn}}
"""
        proxy = f"""workers: 1
listeners:
  - address: 127.0.0.1:{pl}
    protocols: [h3]
    tls: {tls}
{quic}upstreams:
  - name: wt-echo
    servers: [h3://127.0.0.1:{pe}]
    insecure: true
routes:
  - match: {{path: /echo}}
    webtransport: {{handler: proxy, upstream: wt-echo}}
log: {{level: warn}}
"""
        positions = [("direct", pe, None), ("QUIC passthrough", pp, passthrough)]
        if check(ferry, proxy, d):
            positions.append(("L7 proxy", pl, proxy))
        else:
            log("wt: this ferry has no `webtransport: proxy`: no L7 proxy rows")
        procs.append(Proc(d, "echo", ferry, echo))
        time.sleep(1.0)
        rows = []
        if not (os.environ.get("WT_POSITIONS") or os.environ.get("WT_WORKLOADS")):
            ref = [sample(load, f"h3://127.0.0.1:{pe}/f100m.bin",
                          ["-c", "1", "-m", "1", "--expect-bytes", str(100 << 20)], dur, procs)
                   for _ in range(repeats)]
            rows.append(("h3 download 100 MiB (reference)", "direct", ref))
        workloads = [
            ("wt-streams", ["-c", "1", "--sessions", "4", "-m", "4", "--size", str(SIZE)]),
            ("wt-datagrams", ["-c", "1", "--sessions", "4", "--datagrams-only",
                              "--datagram-rate", "2500", "--datagram-size", "1150"]),
        ]
        only = os.environ.get("WT_POSITIONS")
        if only:
            positions = [p for p in positions if p[0].split()[0].lower() in only.split(",")]
        wls = os.environ.get("WT_WORKLOADS")
        if wls:
            workloads = [w for w in workloads if w[0] in wls.split(",")]
        trace = os.environ.get("WT_STRACE") == "1"
        for pos, port, conf in positions:
            name = pos.split()[0].lower()
            st = os.path.join(d, f"strace-{name}.txt") if trace and conf else None
            front = Proc(d, name, ferry, conf, st) if conf else None
            if front:
                time.sleep(1.0)
            ps = procs + ([front] if front else [])
            try:
                for name, extra in workloads:
                    reps = [sample(load, f"wt://127.0.0.1:{port}/echo", extra, dur, ps)
                            for _ in range(repeats)]
                    rows.append((name, pos, reps))
                    log(f"wt: {name} {pos}: {median([r['body_mib_per_sec'] for r in reps]):.1f} MiB/s")
            finally:
                if front:
                    front.stop()
            if st:
                mib = sum(r["body_mib_per_sec"] * dur for _, p2, reps in rows if p2 == pos
                          for r in reps)
                log(f"wt: strace -c -f of the {pos} front, per MiB echoed ({mib:.0f} MiB):")
                for line in open(st).read().splitlines():
                    v = line.split()
                    if len(v) >= 5 and v[3].isdigit():
                        log(f"  {v[-1]:<16} {int(v[3]) / mib if mib else 0:8.1f} calls/MiB"
                            f"  {v[0]:>6}% of syscall time")
        return write(out, day, rows, repeats, dur)
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(d, ignore_errors=True)


def per_mib(reps, which, dur):
    """Median CPU ms per MiB echoed of the processes `which` names (— when there are none)."""
    v = []
    for r in reps:
        cpu = [c for n, c in r.get("cpu_s_by_proc", {}).items() if which(n)]
        mib = r["body_mib_per_sec"] * dur
        if cpu and mib:
            v.append(1000 * sum(cpu) / mib)
    return f"{median(v):.2f}" if v else "—"


def write(out, day, rows, repeats, dur):
    table = ["| row | position | MiB/s | Ferry CPU (cores) | MiB/s per core | round trips/s | "
             "p50 ms | p95 ms | p99 ms | errors | datagrams lost | relay ms/MiB | echo ms/MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    data = []
    for name, pos, reps in rows:
        mib = median([r["body_mib_per_sec"] for r in reps])
        m = [r for r in reps if r["body_mib_per_sec"] == mib][0]
        cores = m["ferry_cpu_s"] / m["wall_s"] if m["wall_s"] else 0
        lat = m["latency_us"]
        dg = m.get("datagrams", {})
        lost = f"{dg['lost']} of {dg['sent']}" if dg.get("sent") else "—"
        table.append(f"| {name} | {pos} | {mib:.1f} | {cores:.2f} | "
                     f"{mib / cores if cores else 0:.1f} | {m['requests_per_sec']:.0f} | "
                     f"{lat['p50'] / 1000:.2f} | {lat['p95'] / 1000:.2f} | {lat['p99'] / 1000:.2f} | "
                     f"{sum(r['errors'] for r in reps)} | {lost} | "
                     f"{per_mib(reps, lambda n: n != 'echo', dur)} | "
                     f"{per_mib(reps, lambda n: n == 'echo', dur)} |")
        data.append({"row": name, "position": pos, "samples": reps})
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"{day}-wt")
    with open(stem + ".json", "w") as f:
        json.dump({"repeats": repeats, "duration_s": dur, "rows": data}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(f"# WebTransport capacity ({day})\n\n{__doc__.strip()}\n\n"
                f"Median of {repeats} samples of {dur:g} s.\n\n" + "\n".join(table) + "\n")
    print("\n".join(table))
    return stem + ".md"
