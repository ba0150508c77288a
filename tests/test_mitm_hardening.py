"""Intercepting proxy hardening (issue 12): self-loop detection over every address form, CONNECT
answered only after the origin connect, `intercept.destinations`, CA directory and certificate
modes, and the `ferry mitm` one-liner's access log and untrusted-CA warning."""
import os
import re
import socket
import subprocess

import pytest

from conftest import FERRY, free_port, raw, statuses, wait_for, wait_port
from test_mitm import curl, mitm, nginx  # noqa: F401 (fixtures)


# ---- item 4: CA directory and certificate modes ----

def _ca_init(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    d = tmp_path / "ca"
    subprocess.run([FERRY, "ca", "init", "--ca-dir", str(d)], check=True, env=env,
                   capture_output=True, timeout=30)
    return d, env


@pytest.mark.parametrize("what", ["dir", "cert"])
def test_mitm_ca_world_writable_refused(tmp_path, what):
    d, env = _ca_init(tmp_path)
    path = d if what == "dir" else d / "ferry-ca.pem"
    os.chmod(path, 0o777 if what == "dir" else 0o666)
    r = subprocess.run([FERRY, "ca", "show", "--ca-dir", str(d)], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 1, r.stdout
    assert str(path) in r.stderr and "chmod o-w" in r.stderr, r.stderr
    # a proxy using that CA does not start either
    cfg = tmp_path / "f.yaml"
    cfg.write_text(f"listeners:\n  - address: 127.0.0.1:{free_port()}\n    kind: intercept\n"
                   f"intercept:\n  ca-dir: {d}\n")
    r = subprocess.run([FERRY, "run", "-c", str(cfg)], capture_output=True, text=True, env=env,
                       timeout=30)
    assert r.returncode != 0 and str(path) in r.stderr and "chmod o-w" in r.stderr, r.stderr
    # fixed as told: accepted again
    os.chmod(path, 0o700 if what == "dir" else 0o644)
    r = subprocess.run([FERRY, "ca", "show", "--ca-dir", str(d)], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stderr


def test_mitm_ca_world_writable_dir_not_created_into(tmp_path):
    """An existing world-writable directory is not used to make a new CA in."""
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([FERRY, "ca", "init", "--ca-dir", str(d)], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 1 and str(d) in r.stderr and "chmod" in r.stderr, r.stderr
    assert not (d / "ferry-ca.key").exists()


# ---- item 5: the one-liner's access log, the untrusted-CA warning ----

def test_mitm_oneliner_access_log_and_untrusted_ca_warning(tmp_path, certs, nginx):  # noqa: F811
    port = free_port()
    env = dict(os.environ, HOME=str(tmp_path))
    p = subprocess.Popen([FERRY, "mitm", "--listen", f"127.0.0.1:{port}", "--ca-dir",
                          str(tmp_path / "ca"), "--upstream-ca", str(certs["ca"]),
                          "--workers", "1"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, proc=p)
        proxy = f"http://127.0.0.1:{port}"
        r = curl("-x", proxy, f"http://localhost:{nginx.port}/index.html")
        assert r.stdout == b"hello from nginx\n", r.stderr
        # without Ferry's CA: curl refuses the forged certificate (alert unknown_ca)
        r = curl("-x", proxy, "--cacert", str(certs["ca"]),
                 f"https://localhost:{nginx.tls_port}/index.html")
        assert r.returncode == 60, r.stderr
    finally:
        p.terminate()
        out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    # the access log is on stdout by default
    assert '"GET /index.html HTTP/1.1" 200 17' in out, out
    assert '"CONNECT localhost:%d HTTP/1.1"' % nginx.tls_port in out, out
    warn = [l for l in err.splitlines() if "[warn]" in l and "refused the certificate" in l]
    assert warn, err
    assert "client 127.0.0.1" in warn[0] and "localhost" in warn[0], warn
    assert "unknown_ca" in warn[0] and "ferry ca export" in warn[0], warn


def test_mitm_oneliner_access_log_off(tmp_path, nginx):  # noqa: F811
    port = free_port()
    env = dict(os.environ, HOME=str(tmp_path))
    p = subprocess.Popen([FERRY, "mitm", "--listen", f"127.0.0.1:{port}", "--ca-dir",
                          str(tmp_path / "ca"), "--workers", "1", "--access-log", "off"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, proc=p)
        r = curl("-x", f"http://127.0.0.1:{port}", f"http://localhost:{nginx.port}/index.html")
        assert r.stdout == b"hello from nginx\n", r.stderr
    finally:
        p.terminate()
        out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "GET /" not in out, out


# ---- item 1: self-loop detection over every spelling of our own address ----

LOOP_FORMS = ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "0.0.0.0", "127.1", "[::1]",
              "[::]", "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:0.0.0.0]",
              "[0:0:0:0:0:ffff:7f00:1]"]


def _loop_proxy(server, certs):  # noqa: F811
    # the same port on IPv4 and IPv6 loopback: every loopback spelling reaches a listener
    srv = server("workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    kind: intercept\n"
                 "  - address: \"[::1]:{port}\"\n    kind: intercept\n"
                 "intercept:\n  ca-dir: {data}/ca\n"
                 f"  upstream-ca: {certs['ca']}\n"
                 "log: {{access: {tmp}/access.log, access-format: combined}}\n")
    srv.proxy = f"http://127.0.0.1:{srv.port}"
    return srv


@pytest.mark.parametrize("form", LOOP_FORMS)
def test_mitm_self_loop_every_address_form(server, certs, form):  # noqa: F811
    srv = _loop_proxy(server, certs)
    target = f"http://{form}:{srv.port}/loop"
    # curl (which may normalise the URL) and the raw request line exactly as written
    r = curl("-x", srv.proxy, "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
             "-g", target)
    assert r.stdout == b"508", (r.stdout, r.stderr, srv.log()[-2000:])
    resp = raw(srv.port, f"GET {target} HTTP/1.1\r\nHost: {form}:{srv.port}\r\n"
                         "Connection: close\r\n\r\n".encode(), timeout=10)
    assert statuses(resp) == [508], resp[:300]
    assert b"this proxy itself" in resp
    # a CONNECT to ourselves, by the same spelling: refused before any 200
    got, s = _connect(srv.port, f"{form}:{srv.port}")
    s.close()
    assert statuses(got) == [508] and b"this proxy itself" in got, got
    # one request each reached the proxy: nothing went round
    srv.stop()
    lines = (srv.tmp / "access.log").read_text().splitlines()
    assert len(lines) == 3 and all('" 508 ' in l for l in lines), lines


def test_mitm_self_loop_other_loopback_address_is_not_ours(server, certs):  # noqa: F811
    """127.0.0.2 does not reach a listener bound to 127.0.0.1 (the kernel refuses it): that is a
    502 naming the refusal, not a loop."""
    srv = _loop_proxy(server, certs)
    r = curl("-x", srv.proxy, "-w", "\n%{http_code}", f"http://127.0.0.2:{srv.port}/")
    assert r.stdout.endswith(b"\n502"), r.stdout


# ---- item 2: CONNECT connects to the origin first, then answers ----

def _closed_port():
    p = free_port()  # nothing listens there (free_port checked it and claimed it)
    return p


def _connect(port, target, extra=b"", timeout=10):
    """Raw CONNECT; returns (head+body bytes until the proxy stops sending or the 200, socket)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + extra)
    got = b""
    for _ in range(100):
        b = s.recv(65536)
        if not b:
            break
        got += b
        head, sep, body = got.partition(b"\r\n\r\n")
        if sep:
            m = re.search(rb"content-length: *(\d+)", head, re.I)
            if head.startswith(b"HTTP/1.1 200") or (m and len(body) >= int(m.group(1))):
                break
    return got, s


def _mode(server, certs, mode, extra=""):  # noqa: F811
    passthrough = '  passthrough: ["*"]\n' if mode == "passthrough" else ""
    return mitm(server, certs, extra=passthrough + extra)


@pytest.mark.parametrize("mode", ["intercept", "passthrough"])
def test_mitm_connect_closed_port_is_502_naming_why(server, certs, mode):  # noqa: F811
    srv = _mode(server, certs, mode)
    dead = _closed_port()
    got, s = _connect(srv.port, f"127.0.0.1:{dead}")
    s.close()
    assert statuses(got) == [502], got
    assert f"cannot connect to 127.0.0.1:{dead}: Connection refused".encode() in got, got
    # curl sees the CONNECT refused, never a 200 and then a reset
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca), "-w", "%{http_connect}",
             f"https://127.0.0.1:{dead}/")
    assert r.returncode == 56 and r.stdout == b"502", (r.returncode, r.stdout, r.stderr)
    r = curl("-p", "-x", srv.proxy, "-w", "%{http_connect}", f"http://127.0.0.1:{dead}/")
    assert r.returncode == 56 and r.stdout == b"502", (r.returncode, r.stdout, r.stderr)


def test_mitm_connect_unresolvable_is_502_naming_it(server, certs):  # noqa: F811
    srv = mitm(server, certs)
    got, s = _connect(srv.port, "nosuch-connect.invalid:443")
    s.close()
    assert statuses(got) == [502] and b"cannot resolve nosuch-connect.invalid" in got, got


def test_mitm_connect_timeout_is_502_naming_it(server, certs):  # noqa: F811
    # a listener whose accept queue is full drops the SYNs: the connect hangs
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    port = lst.getsockname()[1]
    fill = []
    try:
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fill.append(c)
        srv = mitm(server, certs, extra="  connect-timeout: 1s\n")
        got, s = _connect(srv.port, f"127.0.0.1:{port}", timeout=20)
        s.close()
        assert statuses(got) == [502], got
        assert f"cannot connect to 127.0.0.1:{port}: timed out after 1000 ms".encode() in got, got
    finally:
        for c in fill:
            c.close()
        lst.close()


@pytest.mark.parametrize("mode", ["intercept", "passthrough"])
def test_mitm_connect_open_port_200_after_origin_connect(server, certs, mode):  # noqa: F811
    srv = _mode(server, certs, mode)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    port = lst.getsockname()[1]
    try:
        got, s = _connect(srv.port, f"127.0.0.1:{port}")
        assert got == b"HTTP/1.1 200 Connection established\r\n\r\n", got
        # the 200 came after the origin's connection was established: it is already queued
        lst.setblocking(False)
        o, _ = lst.accept()
        o.settimeout(10)
        s.sendall(b"ping\n")  # not TLS: relayed as bytes either way
        assert o.recv(100) == b"ping\n"
        o.sendall(b"pong\n")
        assert s.recv(100) == b"pong\n"
        o.close()
        s.close()
    finally:
        lst.close()


@pytest.mark.parametrize("mode", ["intercept", "passthrough"])
def test_mitm_connect_open_tls_origin(server, certs, nginx, mode):  # noqa: F811
    srv = _mode(server, certs, mode)
    ca = srv.ca if mode == "intercept" else certs["ca"]
    r = curl("-x", srv.proxy, "--cacert", str(ca), f"https://localhost:{nginx.tls_port}/index.html")
    assert r.stdout == b"hello from nginx\n", r.stderr


def test_mitm_connect_over_h2_closed_port_is_502(server, certs):  # noqa: F811
    from test_mitm_h2 import h2_connect_get
    srv = mitm(server, certs)
    dead = _closed_port()
    status, _, _ = h2_connect_get(srv.port, "127.0.0.1", dead, srv.ca, "/")
    assert status == "502"
    assert f"cannot connect to 127.0.0.1:{dead}: Connection refused" in srv.log()


def _socks_connect(port, dport):
    import struct
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", dport))
    return s, s.recv(10)


def test_mitm_socks5_connect_first(server, certs):  # noqa: F811
    srv = server("workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    kind: socks5\n"
                 "intercept:\n  ca-dir: {data}/ca\n")
    dead = _closed_port()
    s, rep = _socks_connect(srv.port, dead)
    s.close()
    assert rep[:2] == b"\x05\x05", rep  # connection refused (RFC 1928 §6)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    try:
        s, rep = _socks_connect(srv.port, lst.getsockname()[1])
        assert rep[:2] == b"\x05\x00", rep
        lst.setblocking(False)
        o, _ = lst.accept()  # connected before the success reply
        o.settimeout(10)
        s.sendall(b"hi")
        assert o.recv(10) == b"hi"
        o.close()
        s.close()
    finally:
        lst.close()


# ---- item 3: intercept.destinations ----

def _dest(server, certs, rules):  # noqa: F811
    esc = [r.replace("{", "{{").replace("}", "}}") for r in rules]  # the fixture's format()
    return mitm(server, certs, extra="  destinations:\n" + "".join(f"    - {r}\n" for r in esc))


def _abs_get(port, url, host):
    return raw(port, f"GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode(),
               timeout=10)


def test_mitm_destinations_default_allows_loopback(server, certs, nginx):  # noqa: F811
    """The documented default: no rules, nothing denied (existing loopback origins work)."""
    srv = mitm(server, certs)
    got, s = _connect(srv.port, f"127.0.0.1:{nginx.port}")
    s.close()
    assert statuses(got) == [200]
    r = curl("-x", srv.proxy, f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.stdout == b"hello from nginx\n"


def test_mitm_destinations_deny_by_cidr(server, certs, nginx):  # noqa: F811
    srv = _dest(server, certs, ["{action: deny, hosts: [127.0.0.0/8]}"])
    for target in ("127.0.0.1:22", f"127.0.0.1:{nginx.port}", f"localhost:{nginx.port}",
                   f"[::ffff:127.0.0.1]:{nginx.port}", f"0.0.0.0:{nginx.port}"):
        got, s = _connect(srv.port, target)
        s.close()
        assert statuses(got) == [403], (target, got)
        assert b"is denied by intercept.destinations[0] (line 9: hosts 127.0.0.0/8)" in got, got
    # absolute-form: a name resolving into the CIDR is denied too
    got = _abs_get(srv.port, f"http://localhost:{nginx.port}/index.html", "localhost")
    assert statuses(got) == [403] and b"intercept.destinations[0]" in got, got
    r = curl("-x", srv.proxy, "-w", "%{http_connect}", "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/")
    assert r.stdout == b"403", r
    assert "[warn]" in srv.log() and "client 127.0.0.1: localhost:" in srv.log()


def test_mitm_destinations_deny_by_host_pattern(server, certs, nginx):  # noqa: F811
    srv = _dest(server, certs, ['{action: deny, hosts: ["*.example.test", localhost]}'])
    # decided by the name: no lookup of the denied name is needed
    got, s = _connect(srv.port, "www.example.test:443")
    s.close()
    assert statuses(got) == [403] and b"www.example.test:443 is denied by " \
        b"intercept.destinations[0] (line 9: hosts *.example.test)" in got, got
    got = _abs_get(srv.port, f"http://localhost:{nginx.port}/index.html", "localhost")
    assert statuses(got) == [403] and b"hosts localhost" in got, got
    # the same origin by address is not matched by the name rule
    r = curl("-x", srv.proxy, f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.stdout == b"hello from nginx\n"
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://127.0.0.1:{nginx.tls_port}/index.html")
    assert r.stdout == b"hello from nginx\n", r.stderr


def test_mitm_destinations_deny_by_port(server, certs, nginx):  # noqa: F811
    srv = _dest(server, certs, ['{action: deny, ports: [22, "6000-6063"]}'])
    for port in (22, 6000, 6063):
        got, s = _connect(srv.port, f"127.0.0.1:{port}")
        s.close()
        assert statuses(got) == [403] and \
            f"127.0.0.1:{port} is denied by intercept.destinations[0] (line 9: any host, " \
            f"port {port})".encode() in got, got
    got, s = _connect(srv.port, "127.0.0.1:6064")  # outside the range: connected (refused)
    s.close()
    assert statuses(got) in ([502], [200]), got
    r = curl("-x", srv.proxy, f"http://localhost:{nginx.port}/index.html")
    assert r.stdout == b"hello from nginx\n"


def test_mitm_destinations_allow_list(server, certs, nginx):  # noqa: F811
    """Squid-like: only the listed destinations, everything else denied by a last rule."""
    srv = _dest(server, certs, [f"{{action: allow, hosts: [localhost], ports: [{nginx.port}, "
                                f"{nginx.tls_port}]}}", "{action: deny}"])
    r = curl("-x", srv.proxy, f"http://localhost:{nginx.port}/index.html")
    assert r.stdout == b"hello from nginx\n"
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/index.html")
    assert r.stdout == b"hello from nginx\n", r.stderr
    got = _abs_get(srv.port, f"http://127.0.0.1:{nginx.port}/index.html", "127.0.0.1")
    assert statuses(got) == [403] and b"intercept.destinations[1] (line 10: any host)" in got, got
    got, s = _connect(srv.port, "localhost:22")
    s.close()
    assert statuses(got) == [403], got


def test_mitm_destinations_loopback_private_keywords(server, certs, nginx):  # noqa: F811
    srv = _dest(server, certs, ["{action: deny, hosts: [loopback, private]}"])
    for target in ("127.0.0.1:22", "[::1]:22", "0.0.0.0:22", "10.1.2.3:443", "192.168.0.1:80",
                   "[fd00::2]:443", "169.254.169.254:80"):
        got, s = _connect(srv.port, target)
        s.close()
        assert statuses(got) == [403], (target, got)
    got = _abs_get(srv.port, "http://169.254.169.254/latest/meta-data/", "169.254.169.254")
    assert statuses(got) == [403] and b"hosts private" in got, got


def test_mitm_destinations_socks5_denied(server, certs):  # noqa: F811
    srv = server("workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    kind: socks5\n"
                 "intercept:\n  ca-dir: {data}/ca\n  destinations:\n"
                 "    - {{action: deny, ports: [22]}}\n")
    s, rep = _socks_connect(srv.port, 22)
    s.close()
    assert rep[:2] == b"\x05\x02", rep  # connection not allowed by ruleset
    assert "127.0.0.1:22 is denied by intercept.destinations[0]" in srv.log()


def test_mitm_destinations_transparent_denied(server, certs, nginx):  # noqa: F811
    srv = server("workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    kind: transparent\n"
                 "  - address: 127.0.0.1:{port2}\n    kind: transparent\n"
                 f"intercept:\n  ca-dir: {{data}}/ca\n  upstream-ca: {certs['ca']}\n"
                 f"  forward: 127.0.0.1:{nginx.port}\n"
                 f"  destinations:\n    - {{{{action: deny, ports: [{nginx.port}]}}}}\n")
    st, _, body = __import__("conftest").http_request(srv.port, "/index.html")
    assert st == 403 and b"is denied by intercept.destinations[0]" in body, body
    # TLS: decrypted (forged for the SNI), then the request gets the 403 naming the rule
    r = curl("--cacert", str(srv.data / "ca" / "ferry-ca.pem"), "-w", "\n%{http_code}",
             "--resolve", f"localhost:{srv.port}:127.0.0.1", f"https://localhost:{srv.port}/")
    body, _, code = r.stdout.decode().rpartition("\n")
    assert code == "403" and "intercept.destinations[0]" in body, r


@pytest.mark.parametrize("bad,key", [
    ("{action: deny, hosts: [10.0.0.0/33]}", "hosts"),
    ("{action: deny, hosts: [\"bad host\"]}", "hosts"),
    ("{action: deny, ports: [0]}", "ports"),
    ("{action: deny, ports: [\"90-80\"]}", "ports"),
    ("{action: maybe}", "action"),
    ("{hosts: [localhost]}", "action"),
])
def test_mitm_destinations_config_errors(tmp_path, bad, key):
    cfg = tmp_path / "f.yaml"
    cfg.write_text("listeners:\n  - address: 127.0.0.1:1\n    kind: intercept\n"
                   f"intercept:\n  ca-dir: {tmp_path}/ca\n  destinations:\n    - {bad}\n")
    p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0, bad
    assert f"{cfg}:7:" in p.stderr and key in p.stderr, p.stderr


def test_mitm_destinations_wide_allow_warns(server, certs):  # noqa: F811
    srv = mitm(server, certs, extra="  allow: [127.0.0.0/8, 10.0.0.0/8]\n")
    assert "intercept.allow admits clients beyond loopback (10.0.0.0/8)" in srv.log()
