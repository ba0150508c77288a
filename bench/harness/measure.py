"""bench/run: Measuring cells: load samples, ramps, callgrind instructions, reload, slow consumer, idle memory."""
from harness.common import *  # noqa: F401,F403
from harness.env import *  # noqa: F401,F403
from harness.arms import *  # noqa: F401,F403

# ----------------------------------------------------------------------------- measuring

class Instance:
    def __init__(self, env, name, argv, ports, extra_env):
        self.server = Server(name, argv, ports, env.path(f"{name}.log"))
        self.extra_env = extra_env

    def start(self):
        if self.extra_env:
            old = {k: os.environ.get(k) for k in self.extra_env}
            os.environ.update(self.extra_env)
            try:
                return self.server.start()
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        return self.server.start()

    def pid(self):
        return self.server.proc.pid

    def stop(self):
        self.server.stop()


def load_cmd(env, url, conns, dur, extra, warm=0):
    cmd = ["taskset", "-c", LOAD_CPU, env.load, url, "-t", "1", "-c", str(conns), "-d", f"{dur}s",
           "-w", f"{warm}s", "--json", "--insecure", "--timeout", "10s"] + extra
    return cmd


def sample(env, inst, origin, url, conns, args, extra):
    """One ferry-load run; /proc figures of the frontend tree around it."""
    pid = inst.pid() if inst else None
    cmd = load_cmd(env, url, conns, args.duration, extra)
    others = [p for p in (origin.pids() if origin and origin.started else [])]
    t0 = time.monotonic()
    busy0 = all_busy()
    me0 = sum(os.times()[:2])
    s0 = base.cpu_ticks(pid) if pid else 0
    o0 = sum(base.cpu_ticks(p) for p in others)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss_max = 0
    deadline = t0 + args.duration + 60
    while p.poll() is None and time.monotonic() < deadline:
        if pid:
            rss_max = max(rss_max, rss_kib(pid))
        time.sleep(0.25)
    if p.poll() is None:
        p.kill()
    out, err = p.communicate(timeout=30)
    wall = time.monotonic() - t0
    s1 = base.cpu_ticks(pid) if pid else 0
    o1 = sum(base.cpu_ticks(p_) for p_ in others)
    busy1 = all_busy()
    me = sum(os.times()[:2]) - me0  # this script's own polling
    res = {"cmd": " ".join(cmd[3:])}
    try:
        j = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        res["error"] = f"ferry-load exit {p.returncode}: {(err or out).strip()[-200:]}"
        return res
    res.update(rps=j["requests_per_sec"], mibs=j["body_mib_per_sec"], requests=j["requests"],
               errors=j["errors"], errors_by_kind={k: v for k, v in j["errors_by_kind"].items() if v},
               p99_ms=j["latency_us"]["p99"] / 1000.0, p50_ms=j["latency_us"]["p50"] / 1000.0,
               load_cpu=j["cpu_percent"])
    server_s = (s1 - s0) / CLK
    load_s = j["cpu_percent"] / 100.0 * j["duration_s"]
    origin_s = (o1 - o0) / CLK
    if pid:
        res["server_cpu_pct"] = 100.0 * server_s / wall
        res["rss_mib"] = rss_max / 1024.0
        if j["requests"]:
            res["cpu_us_per_req"] = 1e6 * server_s / j["requests"]
    res["origin_cpu_pct"] = 100.0 * origin_s / wall
    # CPU time of everything else on the machine during the step (other engineers' builds...)
    res["foreign_cpu_pct"] = max(0.0, 100.0 * ((busy1 - busy0) / CLK - server_s - load_s - origin_s - me) / wall)
    if j["errors"]:
        res["error"] = "errors: " + ", ".join(f"{k} {v}" for k, v in res["errors_by_kind"].items())
    elif j["requests"] == 0:
        res["error"] = "no request completed"
    elif inst and not inst.server.alive():
        res["error"] = "server exited during the run"
    return res


def measure_cell(env, inst, origin, url, args, extra, bound_ms, ramp):
    """Warm-up, ramp, repeats; returns the cell dict."""
    if args.warmup > 0:
        w = run(load_cmd(env, url, ramp[-1], args.warmup, extra), timeout=args.warmup + 60)
        if w.returncode not in (0, 1):
            return {"status": "failed", "reason": f"warm-up: ferry-load exit {w.returncode}: "
                    + (w.stderr or w.stdout).strip()[-200:]}
    steps = []
    for c in ramp:
        good, rejected = [], []
        for _ in range(args.repeats):
            before = len(good)
            for _ in range(args.retries + 1):
                s = sample(env, inst, origin, url, c, args, extra)
                if "error" not in s:
                    good.append(s)
                    break
                rejected.append(s)
                log(f"      c={c}: rejected sample ({s['error']})")
                if inst and not inst.server.alive():
                    break
            if len(good) == before or (inst and not inst.server.alive()):
                break  # every retry failed: the step has failed, skip its other repeats
        step = {"connections": c, "samples": good, "rejected": rejected}
        if len(good) == args.repeats:
            med = lambda k: statistics.median(x.get(k, 0.0) for x in good)  # noqa: E731
            for k in ("rps", "mibs", "p99_ms", "p50_ms", "load_cpu", "server_cpu_pct", "rss_mib",
                      "cpu_us_per_req", "foreign_cpu_pct"):
                if all(k in x for x in good):
                    step[k] = med(k)
            step["client_bound"] = step["load_cpu"] > 90.0
            step["disturbed"] = step["foreign_cpu_pct"] > args.disturbed_pct
            log(f"      c={c}: {step['rps']:,.0f}/s p99 {step['p99_ms']:.2f} ms"
                + (f", server {step['server_cpu_pct']:.0f}% {step.get('cpu_us_per_req', 0):.1f} µs/req"
                   f" {step['rss_mib']:.1f} MiB" if "server_cpu_pct" in step else "")
                + f", load {step['load_cpu']:.0f}%, foreign {step['foreign_cpu_pct']:.0f}%")
        else:
            step["error"] = (rejected[-1]["error"] if rejected else "no sample")
        steps.append(step)
        if inst and not inst.server.alive():
            break
    ok = [s for s in steps if "rps" in s]
    cell = {"url": url, "steps": steps}
    if not ok:
        cell.update(status="failed", reason=steps[-1].get("error", "?") if steps else "no step")
        return cell
    peak = max(ok, key=lambda s: s["rps"])
    sus = [s for s in ok if bound_ms is None or s["p99_ms"] <= bound_ms]
    cell.update(status="ok", peak=peak["rps"], peak_mibs=peak["mibs"],
                peak_connections=peak["connections"],
                sustain=max(s["rps"] for s in sus) if sus else 0.0,
                rss_mib=peak.get("rss_mib"), cpu_pct=peak.get("server_cpu_pct"),
                cpu_us_per_req=peak.get("cpu_us_per_req"), p99_ms=peak["p99_ms"],
                client_bound=peak["client_bound"], disturbed=any(s["disturbed"] for s in ok),
                failed_steps=[s["connections"] for s in steps if "rps" not in s])
    return cell


CG_SEQ = __import__("itertools").count(1)


def instructions(env, key, argv, ports, xenv, url, extra, args):
    """User-space instructions per request of the frontend (callgrind): the marginal cost
    (Ir(K2) - Ir(K1)) / (K2 - K1) over K sequential requests on one connection, as
    bench/run.py --cost does; start-up, the first connection and shutdown cancel out."""
    k1, k2 = args.instructions
    x = [a for a in extra]
    if "-m" in x:  # one stream: sequential requests
        i = x.index("-m")
        x[i + 1] = "1"
    if "--pipeline" in x:
        i = x.index("--pipeline")
        del x[i:i + 2]
    ir = {}
    for k in (k1, k2):
        # one prefix per measurement: cells sharing an instance must not sum each other's files
        prefix = f"cg{next(CG_SEQ)}-{k}."
        srv = Server(f"cg-{key}-{k}", argv, ports, env.path(f"callgrind-{key.replace(':', '-')}-{k}.log"),
                     wrap=["valgrind", "--tool=callgrind", "--trace-children=yes",
                           f"--callgrind-out-file={env.dir}/{prefix}%p"],
                     ready_timeout=120, stop_timeout=120)
        inst = Instance.__new__(Instance)
        inst.server, inst.extra_env = srv, xenv
        err = inst.start()
        if err:
            return None, f"callgrind start: {err}"
        try:
            cmd = ["taskset", "-c", LOAD_CPU, env.load, url, "-n", str(k), "-c", "1", "-t", "1",
                   "--json", "--insecure", "--timeout", "30s"] + x
            r = run(cmd, timeout=900)
        finally:
            srv.stop()
        try:
            j = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None, f"ferry-load exit {r.returncode}: {(r.stderr or r.stdout).strip()[-200:]}"
        if j["errors"] or j["requests"] != k:
            return None, f"K={k}: {j['requests']} requests, {j['errors']} errors"
        v = None
        for _ in range(60):
            v = base.parse_callgrind(env.dir, prefix)
            if v is not None:
                break
            time.sleep(0.5)
        if v is None:
            return None, "callgrind wrote no output"
        ir[k] = v
    return (ir[k2] - ir[k1]) / (k2 - k1), None


def reload_cell(env, inst, origin, url, args, extra, conns):
    """`args.repeats` pairs of samples at `conns` connections, alternated: one with no reload,
    one while a thread sends SIGHUP to the server once a second. The cell's peak is the median
    rate under reloads; `base` the median without; `ratio` = peak ÷ base."""
    import threading
    if args.warmup > 0:
        run(load_cmd(env, url, conns, args.warmup, extra), timeout=args.warmup + 60)
    quiet, busy, rejected, nreloads = [], [], [], 0
    for _ in range(args.repeats):
        for with_reload in (False, True):
            stop = threading.Event()
            sent = [0]

            def hup():
                while not stop.wait(1.0):
                    try:
                        os.kill(inst.pid(), signal.SIGHUP)
                        sent[0] += 1
                    except OSError:
                        return
            t = threading.Thread(target=hup, daemon=True)
            if with_reload:
                t.start()
            s = sample(env, inst, origin, url, conns, args, extra)
            stop.set()
            if with_reload:
                t.join()
                nreloads += sent[0]
                s["reloads"] = sent[0]
            (rejected if "error" in s else busy if with_reload else quiet).append(s)
            if "error" in s:
                log(f"      {'reload' if with_reload else 'none'}: rejected sample ({s['error']})")
            if not inst.server.alive():
                return {"status": "failed", "reason": "server died: " + inst.server.log_tail()}
    if len(quiet) < args.repeats or len(busy) < args.repeats:
        return {"status": "failed", "reason": rejected[-1]["error"] if rejected else "no sample",
                "samples": quiet + busy, "rejected": rejected}
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    base_rps, rps = med(quiet, "rps"), med(busy, "rps")
    cell = {"status": "ok", "url": url, "connections": conns, "peak": rps, "sustain": rps,
            "peak_mibs": med(busy, "mibs"), "base": base_rps, "ratio": rps / base_rps,
            "p99_ms": med(busy, "p99_ms"), "base_p99_ms": med(quiet, "p99_ms"),
            "reloads": nreloads, "errors": sum(x["errors"] for x in busy + quiet),
            "cpu_us_per_req": med(busy, "cpu_us_per_req") if all(
                "cpu_us_per_req" in x for x in busy) else None,
            "base_cpu_us_per_req": med(quiet, "cpu_us_per_req") if all(
                "cpu_us_per_req" in x for x in quiet) else None,
            "rss_mib": max(x.get("rss_mib", 0) for x in busy), "cpu_pct": med(busy, "server_cpu_pct"),
            "client_bound": med(busy, "load_cpu") > 90.0,
            "disturbed": any(x["foreign_cpu_pct"] > args.disturbed_pct for x in quiet + busy),
            "samples": quiet + busy, "rejected": rejected}
    log(f"      reload: {rps:,.0f}/s p99 {cell['p99_ms']:.2f} ms ({nreloads} reloads) vs none "
        f"{base_rps:,.0f}/s p99 {cell['base_p99_ms']:.2f} ms: ratio {cell['ratio']:.3f}")
    return cell


def slow_consumer(env, inst, url, args):
    """N clients each read a 100 MiB response at a fixed slow rate; RSS of the proxy tree."""
    import select
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    n, rate, secs = 32, 256 * 1024, args.slow_seconds
    pid = inst.pid()
    idle = rss_kib(pid) / 1024.0
    socks, got = [], {}
    for _ in range(n):
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\n\r\n".encode())
        s.setblocking(False)
        socks.append(s)
        got[s] = 0
    t0 = time.monotonic()
    samples, errors = [], 0
    tick = 0.05
    while time.monotonic() - t0 < secs:
        budget = int(rate * tick)
        r, _, _ = select.select(socks, [], [], tick)
        for s in r:
            try:
                data = s.recv(budget)
            except OSError:
                data = b""
            if not data:
                errors += 1
                socks.remove(s)
                continue
            got[s] += len(data)
        samples.append(rss_kib(pid) / 1024.0)
        time.sleep(tick)
    for s in socks:
        s.close()
    total = sum(got.values())
    return {"status": "ok" if not errors else "failed",
            "reason": f"{errors} connections closed early" if errors else None,
            "rss_idle_mib": idle, "rss_max_mib": max(samples) if samples else idle,
            "rss_end_mib": samples[-1] if samples else idle, "clients": n,
            "client_rate_kib_s": rate // 1024, "seconds": secs,
            "received_mib": total / 1048576.0, "alive": inst.server.alive()}


def _h2_request(authority, path):
    """Client preface, empty SETTINGS and one GET on stream 1 (END_STREAM), as bytes."""
    import hpack
    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "https"),
                                    (":authority", authority), (":path", path)])
    frame = lambda t, f, sid, p: (len(p).to_bytes(3, "big") + bytes([t, f])
                                  + sid.to_bytes(4, "big") + p)
    return (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
            + frame(1, 0x5, 1, block))


def _h2_read_response(s):
    """Frames until stream 1 ends; the server's SETTINGS get their ACK."""
    buf = b""
    while True:
        while len(buf) >= 9:
            ln = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + ln:
                break
            t, f, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            buf = buf[9 + ln:]
            if t == 4 and not f & 1:
                s.sendall(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
            if t == 7:
                raise OSError("GOAWAY")
            if sid == 1 and t in (0, 1) and f & 1:
                return
        d = s.recv(65536)
        if not d:
            raise OSError("closed before the response ended")
        buf += d


def _h1_read_response(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise OSError("closed before the response")
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(body) < n:
        d = s.recv(65536)
        if not d:
            raise OSError("closed in the body")
        body += d


def idle_memory(env, inst, url, scheme, args):
    """N keep-alive connections, each after one complete request, left idle; the frontend
    tree's RSS growth per connection.  A short settle lets lazily freed buffers go."""
    import ssl
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    n = args.idle_conns or (2000 if args.quick else 10000)
    ctx = None
    if scheme in ("h1-tls", "h2-tls"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"] if scheme == "h2-tls" else ["http/1.1"])
    pid = inst.pid()
    socks = []
    if scheme == "h3":
        return idle_memory_h3(env, inst, url, n)

    def one():
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        if ctx:
            s = ctx.wrap_socket(s, server_hostname="localhost")
        if scheme == "h2-tls":
            s.sendall(_h2_request(u.netloc, u.path))
            _h2_read_response(s)
        else:
            s.sendall(f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\n\r\n".encode())
            _h1_read_response(s)
        return s

    for _ in range(8):  # warm: pools, caches and session state that every connection shares
        one().close()
    time.sleep(0.5)
    before = rss_kib(pid)
    try:
        for _ in range(n):
            socks.append(one())
        time.sleep(1.0)
        after = rss_kib(pid)
        alive = sum(1 for s in socks if s.fileno() >= 0)
        closed = 0
        for s in socks:  # a server that dropped idle connections does not get to count them
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except OSError:
                closed += 1
    finally:
        for s in socks:
            s.close()
    if closed:
        return {"status": "failed", "reason": f"{closed} of {alive} idle connections closed"}
    return {"status": "ok", "conns": n, "rss_before_kib": before, "rss_after_kib": after,
            "kib_per_conn": (after - before) / n, "alive": inst.server.alive()}


H3_IDLE_MAX = 2000


def idle_memory_h3(env, inst, url, n):
    """The h3 row: ferry-load opens n QUIC connections, makes n requests over them (about one
    each), then holds them open and serviced (--hold) with nothing in flight; RSS is read once
    it says `holding` (after a short settle for lazily freed buffers). At most H3_IDLE_MAX
    connections: one ferry-load thread starting 10,000 QUIC handshakes at once loses most of
    them to timeouts (8,669 of 10,000 here), so the row would count connections that are gone."""
    n = min(n, H3_IDLE_MAX)
    pid = inst.pid()
    warm = subprocess.run([env.load, url, "-c", "8", "-n", "8", "--insecure", "--timeout", "10s"],
                          capture_output=True, timeout=60)
    if warm.returncode != 0:
        return {"status": "failed", "reason": f"warm-up: {warm.stderr.decode()[-300:]}"}
    time.sleep(0.5)
    before = rss_kib(pid)
    hold = 4.0
    p = subprocess.Popen(["taskset", "-c", LOAD_CPU, env.load, url, "-t", "1", "-c", str(n),
                          "-n", str(n), "--insecure", "--timeout", "30s", "--hold", f"{hold}s",
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    after = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            if line.strip() == b"holding":
                time.sleep(1.0)
                after = rss_kib(pid)
                break
        out, err = p.communicate(timeout=hold + 60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if after is None:
        return {"status": "failed", "reason": f"ferry-load never held: {err.decode()[-300:]}"}
    try:
        rep = json.loads(out)
        errors = sum(v for k, v in rep.get("errors", {}).items()) if isinstance(
            rep.get("errors"), dict) else rep.get("errors", 0)
    except (ValueError, AttributeError):
        errors = 0
    if errors:
        return {"status": "failed", "reason": f"{errors} errors while connecting"}
    return {"status": "ok", "conns": n, "rss_before_kib": before, "rss_after_kib": after,
            "kib_per_conn": (after - before) / n, "alive": inst.server.alive()}


def run_mode(env, mode, arms, origin, args):
    kind, path, variants, bound, extra, _ = MODES[mode]
    ramp = args.ramp or (BIG_RAMP if mode == "file-100m" else RAMP)
    if args.quick:
        ramp = [ramp[0], ramp[-1]] if len(ramp) > 1 else ramp
    variants = [v for v in variants if not args.variants or v in args.variants]
    cells = {}
    if kind in ("proxy", "slow", "l4", "ws", "mitm", "forge", "reload"):
        err = origin.start()
        if err:
            for a in arms:
                for v in variants:
                    cells[(v, a.name)] = {"status": "failed", "reason": "origin: " + err}
            return cells, ramp
    arm_list = list(arms)
    if kind in ("mitm", "forge"):
        arm_list = ([a for a in arms if a.name == "ferry"] + [FerryReverse(env, origin)]
                    + [Mitmdump(env, origin)])
    for arm in arm_list:
        why = arm.available()
        plans = {}
        for v in variants:
            if why:
                cells[(v, arm.name)] = {"status": "absent", "reason": why}
                continue
            try:
                plans[v] = arm.plan(mode, v)
            except NotPossible as e:
                cells[(v, arm.name)] = {"status": "n/a", "reason": f"not possible: {e}"}
        groups = {}
        for v, pl in plans.items():
            groups.setdefault(pl[0], []).append((v, pl))
        for key, items in groups.items():
            _, argv, ports, _, xenv = items[0][1]
            inst = None
            if argv:
                inst = Instance(env, f"{arm.name}-{key.replace(':', '-').replace('/', '_')}",
                                argv, ports, xenv)
                err = inst.start()
                if err:
                    for v, _ in items:
                        cells[(v, arm.name)] = {"status": "failed", "reason": f"start: {err}"}
                    continue
                time.sleep(0.3)
            try:
                for v, pl in items:
                    url = pl[3]
                    log(f"  {mode} · {V[v][0]} · {arm.name}: {url}")
                    if inst and kind == "idle" and v != items[0][0]:
                        inst.stop()  # a fresh process: heap freed by the last variant would
                        err = inst.start()  # be reused and hide this one's growth
                        if err:
                            cells[(v, arm.name)] = {"status": "failed", "reason": f"restart: {err}"}
                            continue
                        time.sleep(0.3)
                    if inst and not inst.server.alive():  # died in an earlier variant: restart
                        inst.stop()
                        err = inst.start()
                        if err:
                            cells[(v, arm.name)] = {"status": "failed", "reason": f"restart: {err}"}
                            continue
                    try:
                        if kind == "slow":
                            c = slow_consumer(env, inst, url, args)
                        elif kind == "idle":
                            c = idle_memory(env, inst, url, V[v][1], args)
                        elif kind == "reload":
                            c = reload_cell(env, inst, origin, url, args,
                                            list(extra) + list(V[v][3]), ramp[-1])
                        else:
                            x = list(extra) + list(V[v][3])
                            if isinstance(url, tuple):  # (origin URL, ferry-load args: --proxy)
                                url, more = url
                                x += more
                            c = measure_cell(env, inst, origin if kind != "server" else None, url,
                                             args, x, bound, ramp)
                    except (OSError, ValueError, subprocess.SubprocessError) as e:
                        c = {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
                    c["loadavg_after"] = loadavg()
                    if inst and not inst.server.alive():
                        c["status"], c["reason"] = "failed", "server died: " + inst.server.log_tail()
                    if (args.instructions and argv and arm.name in args.instr_arms
                            and c.get("status") == "ok" and kind not in ("slow", "idle")):
                        inst.stop()  # one server on CPU 0 at a time; restarted for the next
                        log(f"    callgrind K={args.instructions}")
                        c["instr_per_req"], c["instr_error"] = instructions(
                            env, key, argv, ports, xenv, url, x, args)
                        log(f"    → {c['instr_per_req'] or c['instr_error']} instructions/request")
                    cells[(v, arm.name)] = c
                    if c.get("status") != "ok":
                        log(f"    → {c.get('reason')}")
            finally:
                if inst:
                    inst.stop()
                    # recorded flows (mitm-har) can reach GBs per cell: drop them
                    for dp, _, fs in os.walk(env.dir):
                        for fn in fs:
                            if fn in ("flows.har", "flows.mitm"):
                                try:
                                    os.remove(os.path.join(dp, fn))
                                except OSError:
                                    pass
    return cells, ramp
