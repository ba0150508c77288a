"""Upstream discovery (issue 14): servers from a watched file and from DNS (A and SRV, on a
Python DNS server on loopback), changed while a bounded load runs: zero failed requests, the
new servers get requests (counted at the origins), the removed ones get none once drained and
their pooled connections are closed, a bad file or a failing DNS keeps the last good set and
says why. Every wait polls a condition with a bound."""
import http.client
import http.server
import os
import socket
import socketserver
import ssl
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import FERRY, free_port, wait_for, wait_port, _socket_inodes


class Origin:
    """A threaded HTTP/1.1 origin on ip:port that counts the requests it answers."""

    def __init__(self, ip="127.0.0.1", port=0, health=200, tls=None):
        self.hits = 0
        self.hosts = set()  # Host fields seen
        self.snis = set()
        self.health = health
        me = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if self.path == "/health":  # probes are not counted as traffic
                    self.send_response(me.health)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                me.hits += 1
                me.hosts.add(self.headers.get("Host"))
                b = f"{ip}:{me.port}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def log_message(self, *a):
                pass

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.srv = S((ip, port), H)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            ctx.sni_callback = lambda so, name, c: me.snis.add(name)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.ip, self.port = ip, self.srv.server_address[1]
        self.url = f"http://{ip}:{self.port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class Load:
    """`n` clients sending GETs over keep-alive connections until stopped; every failure
    (connect error, non-200) is counted. Bounded: stop() joins with a timeout."""

    def __init__(self, port, n=3):
        self.port, self.ok, self.failed, self.errors = port, 0, 0, []
        self.bodies = {}
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self):
        c = None
        while not self.stop_ev.is_set():
            try:
                if c is None:
                    c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                c.request("GET", "/")
                r = c.getresponse()
                body = r.read()
                if r.status == 200:
                    self.ok += 1
                    self.bodies[body] = self.bodies.get(body, 0) + 1
                else:
                    self.failed += 1
                    self.errors.append((r.status, body[:200]))
            except (OSError, http.client.HTTPException) as e:
                self.failed += 1
                self.errors.append(repr(e))
                c = None

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(30)


def established(pid, ip, port):
    """Established TCP connections of `pid` to ip:port."""
    ours = _socket_inodes(pid)
    want = socket.inet_aton(ip)[::-1].hex().upper() + f":{port:04X}"
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "01" and f[2] == want and f[9] in ours:
            n += 1
    return n


def grows(origin, by=5, timeout=20, what=None):
    start = origin.hits
    wait_for(lambda: origin.hits >= start + by, timeout, what or f"requests to {origin.url}")


CFG_FILE = """workers: 2
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1]
routes:
  - match: {{path: /}}
    proxy: {{upstream: app}}
upstreams:
  - name: app
    keepalive-timeout: 60s
    discovery: {{file: %s}}
"""


def test_discovery_file_add_remove_bad(server, tmp_path):
    a, b, c = Origin(), Origin(), Origin()
    lst = tmp_path / "servers.txt"
    lst.write_text(f"# the app's servers\n{a.url}\n")
    f = server(CFG_FILE % lst)
    load = Load(f.port)
    try:
        grows(a)
        # add: B takes traffic
        lst.write_text(f"{a.url}\n{b.url} weight=2\n")
        grows(b)
        # remove A: drained (its pooled connections close), then it gets nothing
        lst.write_text(f"{b.url}\n")
        wait_for(lambda: established(f.proc.pid, a.ip, a.port) == 0, 20,
                 "ferry's connections to the removed server to close")
        frozen = a.hits
        grows(b, 20)
        assert a.hits == frozen
        # a bad file: the last good set stays, the log says where
        lst.write_text(f"{b.url}\nhttp://not-an-ip:80\n")
        wait_for(lambda: f"{lst}:2: 'http://not-an-ip:80': 'not-an-ip' is not an IP address; "
                         "keeping the last good set of 1 servers" in f.log(), 20, "the warning")
        grows(b)
        # a YAML list, written elsewhere and renamed over the file (what deploy tools do)
        tmp = tmp_path / "servers.new"
        tmp.write_text(f"- {{url: {c.url}, weight: 3}}\n")
        os.rename(tmp, lst)
        grows(c)
        wait_for(lambda: established(f.proc.pid, b.ip, b.port) == 0, 20,
                 "ferry's connections to B to close")
        frozen = b.hits
        grows(c, 20)
        assert b.hits == frozen
    finally:
        load.stop()
    assert load.failed == 0, load.errors[:5]
    assert load.ok > 0
    for o in (a, b, c):
        o.close()


def test_discovery_file_bad_at_start_then_fixed(server, tmp_path):
    """No good set yet: 502 naming the reason; fixing the file brings the servers."""
    a = Origin()
    lst = tmp_path / "servers.txt"
    lst.write_text("http://127.0.0.1:80 weight=zero\n")
    f = server(CFG_FILE % lst)
    assert "weight=N (1 to 1000)" in f.log()
    c = http.client.HTTPConnection("127.0.0.1", f.port, timeout=10)
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    assert r.status == 502
    lst.write_text(f"{a.url}\n")

    def ok():
        c = http.client.HTTPConnection("127.0.0.1", f.port, timeout=10)
        c.request("GET", "/")
        r = c.getresponse()
        return r.status == 200 and r.read() == f"{a.ip}:{a.port}".encode()

    wait_for(ok, 20, "the fixed file's server to answer")
    a.close()


def test_discovery_file_with_health_checks(server, tmp_path):
    """Discovered servers are probed like listed ones: one failing its check gets no traffic;
    a server added later is probed too."""
    a, b, c = Origin(), Origin(health=503), Origin(health=503)
    lst = tmp_path / "servers.txt"
    lst.write_text(f"{a.url}\n{b.url}\n")
    text = (CFG_FILE % lst).replace("    keepalive-timeout: 60s\n",
                                    "    health-check: {{path: /health, interval: 100ms, "
                                    "fall: 1, rise: 1}}\n")
    f = server(text)
    wait_for(lambda: f"server {b.ip}:{b.port} is down" in f.log(), 20, "B marked down")
    load = Load(f.port, n=2)
    try:
        frozen = b.hits
        grows(a, 20)
        assert b.hits == frozen
        lst.write_text(f"{a.url}\n{b.url}\n{c.url}\n")
        wait_for(lambda: f"server {c.ip}:{c.port} is down" in f.log(), 20, "C marked down")
        c.health = 200
        wait_for(lambda: f"server {c.ip}:{c.port} is up" in f.log(), 20, "C up")
        grows(c)
    finally:
        load.stop()
    assert load.failed == 0, load.errors[:5]
    for o in (a, b, c):
        o.close()


NGINX_H2C = """daemon off;
master_process off;
worker_processes 1;
error_log {d}/err;
pid {d}/pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/tb; proxy_temp_path {d}/tp; fastcgi_temp_path {d}/tf;
    uwsgi_temp_path {d}/tu; scgi_temp_path {d}/ts;
    keepalive_timeout 60s;
    server {{ listen 127.0.0.1:{p1} http2; location / {{ return 200 "h2c-a"; }} }}
    server {{ listen 127.0.0.1:{p2} http2; location / {{ return 200 "h2c-b"; }} }}
}}
"""


def test_discovery_h2c_servers_drain(server, tmp_path):
    """HTTP/2 origins (multiplexed connections): the removed server's connections close once
    idle, the new one takes the requests."""
    d = tmp_path / "nginx"
    d.mkdir()
    p1, p2 = free_port(), free_port()
    (d / "nginx.conf").write_text(NGINX_H2C.format(d=d, p1=p1, p2=p2))
    ng = subprocess.Popen(["/usr/sbin/nginx", "-p", str(d), "-c", str(d / "nginx.conf")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for p in (p1, p2):
            wait_port(p, proc=ng)
        lst = tmp_path / "servers.txt"
        lst.write_text(f"h2c://127.0.0.1:{p1}\n")
        f = server(CFG_FILE % lst)
        load = Load(f.port)
        try:
            wait_for(lambda: load.bodies.get(b"h2c-a", 0) >= 5, 20, "requests to A")
            lst.write_text(f"h2c://127.0.0.1:{p2}\n")
            wait_for(lambda: load.bodies.get(b"h2c-b", 0) >= 5, 20, "requests to B")
            wait_for(lambda: established(f.proc.pid, "127.0.0.1", p1) == 0, 20,
                     "ferry's HTTP/2 connections to A to close")
            frozen = load.bodies[b"h2c-a"]
            n = load.bodies[b"h2c-b"]
            wait_for(lambda: load.bodies[b"h2c-b"] >= n + 20, 20, "more requests to B")
            assert load.bodies[b"h2c-a"] == frozen
        finally:
            load.stop()
        assert load.failed == 0, load.errors[:5]
    finally:
        ng.terminate()
        ng.wait(10)


# ---- DNS ----

class Dns:
    """A UDP DNS server on loopback answering A and SRV questions from `records`
    {(name, type): [(ttl, rdata)]} (name lowercase, no final dot); `fail` answers SERVFAIL,
    `silent` answers nothing (a resolver that is gone). Counts the questions it got per
    (name, type)."""

    def __init__(self):
        self.records, self.fail, self.asked, self.silent = {}, False, {}, False
        self.held = None  # a list: answers kept there until release()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    @staticmethod
    def a(ip):
        return socket.inet_aton(ip)

    @staticmethod
    def srv(prio, weight, port, target):
        name = b"".join(bytes([len(p)]) + p.encode() for p in target.split(".")) + b"\0"
        return struct.pack("!HHH", prio, weight, port) + name

    def serve(self):
        while True:
            try:
                q, addr = self.sock.recvfrom(512)
            except OSError:
                return
            if len(q) < 12:
                continue
            i, labels = 12, []
            while i < len(q) and q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode(errors="replace").lower())
                i += 1 + q[i]
            qtype = struct.unpack("!H", q[i + 1:i + 3])[0]
            qend = i + 5
            name = ".".join(labels)
            self.asked[(name, qtype)] = self.asked.get((name, qtype), 0) + 1
            if self.silent:
                continue
            rcode = 2 if self.fail else 0
            rrs = [] if self.fail else self.records.get((name, qtype), [])
            if not self.fail and not rrs and not any(k[0] == name for k in self.records):
                rcode = 3  # NXDOMAIN
            hdr = q[:2] + struct.pack("!BBHHHH", 0x81, 0x80 | rcode, 1, len(rrs), 0, 0)
            ans = b"".join(struct.pack("!HHHIH", 0xC00C, qtype, 1, ttl, len(rd)) + rd
                           for ttl, rd in rrs)
            if self.held is not None:
                self.held.append((hdr + q[12:qend] + ans, addr))
                continue
            try:
                self.sock.sendto(hdr + q[12:qend] + ans, addr)
            except OSError:  # closed at the end of the test
                return

    def release(self):
        """Send the answers held since `held` was set, and answer at once from now on."""
        held, self.held = self.held, None
        for msg, addr in held or []:
            self.sock.sendto(msg, addr)

    def close(self):
        self.sock.close()


CFG_DNS = """workers: 2
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1]
routes:
  - match: {{path: /}}
    proxy: {{upstream: app}}
upstreams:
  - name: app
    discovery: {{dns: %s, type: %s, %s resolver: "127.0.0.1:%d", min-ttl: 100ms, max-ttl: 2s}}
"""


def serving(port, what="the first DNS answer's servers"):
    """Wait until the proxy route answers 200 (the first lookup runs after the start)."""
    def ok():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/")
        r = c.getresponse()
        r.read()
        return r.status == 200

    wait_for(ok, 20, what)


def test_discovery_dns_a_records_move_traffic(server):
    port = free_port()
    a, b = Origin("127.0.0.1", port), Origin("127.0.0.2", port)
    dns = Dns()
    dns.records[("app.test", 1)] = [(1, Dns.a("127.0.0.1"))]
    f = server(CFG_DNS % ("app.test", "A", f"port: {port},", dns.port))
    serving(f.port)
    load = Load(f.port)
    try:
        grows(a)
        dns.records[("app.test", 1)] = [(1, Dns.a("127.0.0.1")), (1, Dns.a("127.0.0.2"))]
        grows(b)
        dns.records[("app.test", 1)] = [(1, Dns.a("127.0.0.2"))]
        wait_for(lambda: established(f.proc.pid, a.ip, a.port) == 0, 20,
                 "ferry's connections to the dropped address to close")
        frozen = a.hits
        grows(b, 20)
        assert a.hits == frozen
        # the DNS fails: the last set stays, said once
        dns.fail = True
        wait_for(lambda: "keeping the last good set of 1 servers" in f.log(), 20, "the warning")
        grows(b)
        dns.fail = False
        wait_for(lambda: "app.test answers again" in f.log(), 20, "the recovery")
    finally:
        load.stop()
    assert load.failed == 0, load.errors[:5]
    # re-resolved per TTL (1 s, within 100 ms .. 2 s): more than the one lookup at start
    assert dns.asked[("app.test", 1)] >= 3
    for o in (a, b):
        o.close()
    dns.close()


def test_discovery_dns_srv_records_move_traffic(server):
    a, b, c = Origin(), Origin(), Origin()
    dns = Dns()
    dns.records[("a.svc.test", 1)] = [(30, Dns.a("127.0.0.1"))]
    dns.records[("b.svc.test", 1)] = [(30, Dns.a("127.0.0.1"))]
    srv = ("_http._tcp.svc.test", 33)
    dns.records[srv] = [(1, Dns.srv(10, 1, a.port, "a.svc.test"))]
    f = server(CFG_DNS % ("_http._tcp.svc.test", "SRV", "", dns.port))
    serving(f.port)
    load = Load(f.port)
    try:
        grows(a)
        # a second target, and a lower-priority (higher number) one that must stay unused
        dns.records[srv] = [(1, Dns.srv(10, 1, a.port, "a.svc.test")),
                            (1, Dns.srv(10, 3, b.port, "b.svc.test")),
                            (1, Dns.srv(20, 1, c.port, "a.svc.test"))]
        grows(b)
        # A goes; B stays
        dns.records[srv] = [(1, Dns.srv(10, 3, b.port, "b.svc.test")),
                            (1, Dns.srv(20, 1, c.port, "a.svc.test"))]
        wait_for(lambda: established(f.proc.pid, a.ip, a.port) == 0, 20,
                 "ferry's connections to the dropped target to close")
        frozen = a.hits
        grows(b, 20)
        assert a.hits == frozen
        assert c.hits == 0
        # only the backup priority is left: it takes over
        dns.records[srv] = [(1, Dns.srv(20, 1, c.port, "a.svc.test"))]
        grows(c)
    finally:
        load.stop()
    assert load.failed == 0, load.errors[:5]
    for o in (a, b, c):
        o.close()
    dns.close()


def test_discovery_dns_https_uses_the_name(server, tmp_path):
    """scheme: https: the servers are verified for the DNS name (SNI and certificate), and Host
    is the name with the port, not the address, when the client's is not preserved."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=app.test", "-addext",
                    "subjectAltName=DNS:app.test"], check=True, capture_output=True, timeout=30)
    port = free_port()
    a = Origin("127.0.0.1", port, tls=(str(cert), str(key)))
    dns = Dns()
    dns.records[("app.test", 1)] = [(30, Dns.a("127.0.0.1"))]
    text = (CFG_DNS % ("app.test", "A", f"port: {port}, scheme: https,", dns.port)).replace(
        "  - name: app\n", f"  - name: app\n    ca: {cert}\n").replace(
        "proxy: {{upstream: app}}", "proxy: {{upstream: app, preserve-host: false}}")
    f = server(text)
    serving(f.port)
    c = http.client.HTTPConnection("127.0.0.1", f.port, timeout=10)
    c.request("GET", "/", headers={"Host": "client.example"})
    r = c.getresponse()
    assert r.status == 200 and r.read() == f"127.0.0.1:{port}".encode()
    assert a.snis == {"app.test"}
    assert a.hosts == {f"app.test:{port}"}
    a.close()
    dns.close()


def test_discovery_reload_keeps_set(server, tmp_path):
    """A reload whose first lookup fails keeps the running generation's servers."""
    port = free_port()
    a = Origin("127.0.0.1", port)
    dns = Dns()
    dns.records[("app.test", 1)] = [(1, Dns.a("127.0.0.1"))]
    f = server(CFG_DNS % ("app.test", "A", f"port: {port},", dns.port))
    serving(f.port)
    load = Load(f.port, n=2)
    try:
        grows(a)
        dns.fail = True
        f.proc.send_signal(1)  # SIGHUP
        wait_for(lambda: "reload: generation 2 active on all workers" in f.log(), 30, "reload")
        grows(a)
    finally:
        load.stop()
    assert load.failed == 0, load.errors[:5]
    a.close()
    dns.close()


def test_discovery_reload_does_not_wait_for_dns(server):
    """A reload asking DNS what the running generation asks starts from that generation's set
    and looks up on the worker loop: with a resolver that no longer answers (and a 30 s
    resolve-timeout) the reload is active at once, traffic goes on without an error, and the
    new generation's lookups start as soon as it runs."""
    port = free_port()
    a = Origin("127.0.0.1", port)
    dns = Dns()
    dns.records[("app.test", 1)] = [(1, Dns.a("127.0.0.1"))]
    f = server(CFG_DNS % ("app.test", "A", f"port: {port}, resolve-timeout: 30s,", dns.port))
    serving(f.port)
    load = Load(f.port, n=2)
    try:
        grows(a)
        dns.silent = True
        asked = dns.asked[("app.test", 1)]
        f.proc.send_signal(1)  # SIGHUP
        wait_for(lambda: "reload: generation 2 active on all workers" in f.log(), 10,
                 "the reload (well before resolve-timeout)")
        grows(a)
        wait_for(lambda: dns.asked[("app.test", 1)] > asked, 10, "the new generation's lookup")
        dns.silent = False
        grows(a)
    finally:
        load.stop()
    assert load.failed == 0, load.errors[:5]
    a.close()
    dns.close()


def test_discovery_first_lookup_does_not_block_start(server):
    """The first DNS lookup runs on the worker loop after the start: while the resolver holds
    its answer, Ferry is up (a static route answers, the discovered upstream has no server
    yet: 502), and once the answer is released the upstream's server gets the requests."""
    port = free_port()
    a = Origin("127.0.0.1", port)
    dns = Dns()
    dns.records[("app.test", 1)] = [(30, Dns.a("127.0.0.1"))]
    dns.held = []
    text = (CFG_DNS % ("app.test", "A", f"port: {port}, resolve-timeout: 30s,", dns.port)).replace(
        "routes:\n", "routes:\n  - match: {{path: /ready}}\n"
        "    respond: {{status: 200, body: \"up\\n\"}}\n")
    f = server(text)
    wait_for(lambda: dns.asked.get(("app.test", 1), 0) >= 1, 20, "the first lookup")
    c = http.client.HTTPConnection("127.0.0.1", f.port, timeout=10)
    c.request("GET", "/ready")
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"up\n"
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    assert r.status == 502 and a.hits == 0
    assert len(dns.held) >= 1  # the answer is still held: nothing waited for it
    dns.release()
    serving(f.port, "the upstream once the answer is released")
    assert a.hits >= 1
    a.close()
    dns.close()


@pytest.mark.parametrize("disc,msg", [
    ("{file: /x, dns: a.test}", "needs exactly one of file, dns"),
    ("{dns: a.test}", "discovery.port: is required for type A and AAAA"),
    ("{dns: a.test, port: 80, min-ttl: 10s, max-ttl: 1s}", "min-ttl: is above max-ttl"),
    ("{dns: a.test, port: 80, resolver: 'dns.example'}", "expected IP[:PORT]"),
    ("{file: /x, max-servers: 63}", "max-servers"),
])
def test_discovery_config_errors(tmp_path, disc, msg):
    cfg = tmp_path / "f.yaml"
    cfg.write_text("upstreams:\n  - name: app\n    discovery: " + disc + "\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and msg in r.stderr and "f.yaml:3:" in r.stderr, r.stderr


def test_discovery_and_servers_exclusive(tmp_path):
    cfg = tmp_path / "f.yaml"
    cfg.write_text("upstreams:\n  - name: app\n    servers: [http://127.0.0.1:1]\n"
                   "    discovery: {file: /x}\n")
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and "servers and discovery: choose one" in r.stderr, r.stderr
