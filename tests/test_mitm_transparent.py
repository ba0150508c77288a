"""Transparent interception in network namespaces the test makes: a client namespace and a
proxy namespace joined by a veth pair; in the proxy namespace an iptables REDIRECT sends the
client's port 443 and 80 traffic to Ferry's `kind: transparent` listener, which finds the
original destination with SO_ORIGINAL_DST and reaches Debian's nginx there. Skipped, with the
reason, where namespaces cannot be made (not root, no CAP_NET_ADMIN, no iptables)."""
import os
import re
import secrets
import shutil
import subprocess
import time

import pytest

from conftest import BAD_LOG, FERRY

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
error_log {d}/err;
pid {d}/pid;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/tb; proxy_temp_path {d}/tp; fastcgi_temp_path {d}/tf;
    uwsgi_temp_path {d}/tu; scgi_temp_path {d}/ts;
    server {{ listen 10.77.{n}.2:80; root {d}/www;
              location /hdr {{ return 200 "host=$host\\n"; }} }}
    server {{ listen 10.77.{n}.2:443 ssl; listen 127.0.0.1:443 ssl;
              ssl_certificate {d}/leaf.pem; ssl_certificate_key {d}/leaf.key; root {d}/www; }}
}}
"""


def sh(*args, check=True, timeout=30):
    return subprocess.run(list(args), capture_output=True, text=True, check=check,
                          timeout=timeout)


class Net:
    def __init__(self, tmp):
        tag = secrets.token_hex(3)
        self.n = int(tag[:2], 16)  # 10.77.N.0/24
        self.c, self.p = f"fyc{tag}", f"fyp{tag}"
        self.vc, self.vp = f"vc{tag}", f"vp{tag}"
        self.tmp = tmp
        self.procs = []
        try:
            sh("ip", "netns", "add", self.c)
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            pytest.skip(f"cannot create a network namespace (needs root/CAP_NET_ADMIN): {e}")
        sh("ip", "netns", "add", self.p)
        sh("ip", "link", "add", self.vc, "type", "veth", "peer", "name", self.vp)
        sh("ip", "link", "set", self.vc, "netns", self.c)
        sh("ip", "link", "set", self.vp, "netns", self.p)
        for ns, dev, ip in ((self.c, self.vc, 1), (self.p, self.vp, 2)):
            sh("ip", "-n", ns, "addr", "add", f"10.77.{self.n}.{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for port in ("443", "80"):
            r = sh("ip", "netns", "exec", self.p, "iptables", "-t", "nat", "-A", "PREROUTING",
                   "-i", self.vp, "-p", "tcp", "--dport", port, "-j", "REDIRECT",
                   "--to-ports", "8443", check=False)
            if r.returncode:
                self.close()
                pytest.skip(f"iptables REDIRECT unavailable in a namespace: {r.stderr.strip()}")

    def spawn(self, ns, *args, **kw):
        p = subprocess.Popen(["ip", "netns", "exec", ns, *args], **kw)
        self.procs.append(p)
        return p

    def run(self, ns, *args, timeout=30):
        return subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True,
                              timeout=timeout)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for ns in (self.c, self.p):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def net(tmp_path):
    if not shutil.which("iptables"):
        pytest.skip("iptables is not installed")
    n = Net(tmp_path)
    yield n
    n.close()


def make_certs(d, n):
    def o(*a):
        subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True, timeout=30)
    o("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=Transparent Origin CA",
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
      "keyUsage=critical,keyCertSign,cRLSign")
    o("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
      "leaf.key", "-out", "leaf.csr", "-subj", "/CN=origin.test")
    (d / "leaf.ext").write_text(f"subjectAltName=DNS:origin.test,DNS:localhost,IP:10.77.{n}.2\n"
                                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    o("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
      "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext")


def start(net, tmp, extra=""):
    d = tmp / "origin"
    (d / "www").mkdir(parents=True)
    (d / "www" / "index.html").write_text("hello from the original destination\n")
    make_certs(d, net.n)
    (d / "nginx.conf").write_text(NGINX_CONF.format(d=d, n=net.n))
    net.spawn(net.p, "/usr/sbin/nginx", "-p", str(d), "-c", str(d / "nginx.conf"),
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # nginx first: until it listens, Ferry's connect to the original destination is refused
    # and the client gets Ferry's 502 page (correctly), which is not what the tests measure
    deadline = time.time() + 15
    while True:
        r = net.run(net.p, "curl", "-sS", "--max-time", "2", f"http://10.77.{net.n}.2/index.html")
        if r.returncode == 0 and r.stdout == b"hello from the original destination\n":
            break
        if time.time() > deadline:
            raise AssertionError("setup: nginx did not answer: " + r.stderr.decode())
        time.sleep(0.1)
    cfg = tmp / "ferry.yaml"
    cfg.write_text("workers: 2\nlisteners:\n  - address: \":8443\"\n    kind: transparent\n"
                   f"intercept:\n  ca-dir: {tmp}/ca\n  upstream-ca: {d}/ca.pem\n"
                   f"  allow: [10.77.{net.n}.0/24]\n" + extra)
    log = open(tmp / "ferry.log", "w")
    net.ferry = net.spawn(net.p, FERRY, "run", "-c", str(cfg), stdout=subprocess.DEVNULL,
                          stderr=log, env=dict(os.environ, HOME=str(tmp)))
    net.ferry_log = tmp / "ferry.log"
    net.ca = tmp / "ca" / "ferry-ca.pem"
    # both up: a plain request through the redirect succeeds (bounded retries)
    deadline = time.time() + 15
    while True:
        r = net.run(net.c, "curl", "-sS", "--max-time", "2", f"http://10.77.{net.n}.2/index.html")
        if r.returncode == 0 and r.stdout:
            return r
        if time.time() > deadline:
            raise AssertionError("setup: " + r.stderr.decode() + (tmp / "ferry.log").read_text())
        time.sleep(0.1)


def finish(net):
    net.ferry.terminate()
    assert net.ferry.wait(timeout=30) == 0
    text = net.ferry_log.read_text()
    assert not any(b in text for b in BAD_LOG), text


def test_mitm_transparent_redirect(net, tmp_path):
    r = start(net, tmp_path)
    assert r.stdout == b"hello from the original destination\n"
    ip = f"10.77.{net.n}.2"
    # HTTPS with SNI: intercepted with a forged certificate, sent to the original destination
    r = net.run(net.c, "curl", "-sS", "-v", "--max-time", "10", "--cacert", str(net.ca),
                "--resolve", f"origin.test:443:{ip}", "https://origin.test/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from the original destination\n"
    assert "Ferry interception CA" in r.stderr.decode()
    # no SNI (an IP URL): the leaf is forged for the destination address
    r = net.run(net.c, "curl", "-sS", "--max-time", "10", "--cacert", str(net.ca),
                f"https://{ip}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    # plain HTTP keeps its Host
    r = net.run(net.c, "curl", "-sS", "--max-time", "10", "-H", "Host: any.test",
                f"http://{ip}/hdr")
    assert r.stdout == b"host=any.test\n"
    # pointed at directly (8443 is not redirected): the SNI names the origin (port 443)...
    r = net.run(net.c, "curl", "-sS", "--max-time", "10", "--cacert", str(net.ca),
                "--resolve", f"localhost:8443:{ip}", "https://localhost:8443/index.html")
    assert r.returncode == 0, r.stderr.decode() + net.ferry_log.read_text()
    assert r.stdout == b"hello from the original destination\n"
    # ...and for plain HTTP the Host does (port 80)
    r = net.run(net.c, "curl", "-sS", "--max-time", "10", "-H", f"Host: {ip}",
                f"http://{ip}:8443/hdr")
    assert r.stdout == f"host={ip}\n".encode(), r.stderr.decode()
    finish(net)


def test_mitm_transparent_generic_certificate_and_forward(net, tmp_path):
    ip = f"10.77.{net.n}.2"
    start(net, tmp_path, extra=f"  generic-certificate: generic.test\n  forward: {ip}:443\n")
    # forward: even the redirected port-80 connection goes to ip:443 (TLS inside)
    r = net.run(net.c, "openssl", "s_client", "-connect", f"{ip}:443", "-noservername",
                timeout=20)
    subj = re.search(rb"subject=(.*)", r.stdout)
    assert subj and b"generic.test" in subj.group(1), r.stdout.decode(errors="replace")
    # pointed at directly (port 8443 is not redirected): forward decides
    r = net.run(net.c, "curl", "-sS", "--max-time", "10", "--cacert", str(net.ca),
                "--resolve", f"origin.test:8443:{ip}", "https://origin.test:8443/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from the original destination\n"
    finish(net)
