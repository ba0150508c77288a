"""Black-box tests of the command line (DESIGN.md §6, src/main.c)."""
import hashlib
import os
import re
import select
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import FERRY, free_port, http_request


def ferry(*args, timeout=15, cwd=None, home=None):
    env = dict(os.environ)
    if home is not None:
        env["HOME"] = str(home)
        env.pop("XDG_DATA_HOME", None)
    return subprocess.run([FERRY, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def one_line_naming(stderr, *words):
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1, f"expected one line on stderr, got: {stderr!r}"
    for w in words:
        assert w in lines[0], f"{w!r} not named in {lines[0]!r}"


# ---- help, version, usage errors ----

def test_cli_help():
    for flag in ("--help", "-h"):
        p = ferry(flag)
        assert p.returncode == 0
        for cmd in ("run", "check", "serve", "-c FILE", "--version"):
            assert cmd in p.stdout


def test_cli_version():
    p = ferry("--version")
    assert p.returncode == 0
    assert re.match(r"^ferry \d+\.\d+\.\d+", p.stdout), p.stdout


@pytest.mark.parametrize("args,named", [
    (["frobnicate"], ["frobnicate"]),
    (["--frobnicate"], ["--frobnicate"]),
    (["run", "--frobnicate"], ["--frobnicate"]),
    (["check", "-c", "x.yaml", "--frobnicate"], ["--frobnicate"]),
    (["serve", ".", "--frobnicate"], ["--frobnicate"]),
    (["serve", ".", "--listen"], ["--listen"]),
    (["serve"], ["DIR"]),
    (["proxy"], ["URL"]),
    (["proxy", "http://127.0.0.1:1", "--frobnicate"], ["--frobnicate"]),
    (["serve", "a", "b"], ["'b'"]),
    (["serve", ".", "--tls", "nonsense"], ["--tls", "nonsense"]),
    (["run"], ["-c"]),
    (["run", "-c"], ["-c"]),
    (["check", "-c"], ["-c"]),
    (["help", "frobnicate"], ["frobnicate"]),
    (["proxy", "http://127.0.0.1:1", "--check", "--har", "x"], ["--har"]),
    (["serve", ".", "--upstream-ca", "x"], ["serve", "--upstream-ca"]),
    (["ca", "show", "--out", "x"], ["--out"]),
    (["l4", "127.0.0.1:1", "--udp", "--tls", "self-signed"], ["--udp", "--tls"]),
])
def test_cli_usage_errors_exit_2(args, named):
    p = ferry(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    one_line_naming(p.stderr, *named)
    assert p.stdout == ""


@pytest.mark.parametrize("value", ["0", "-1", "abc", "257", "2x", ""])
@pytest.mark.parametrize("cmd", [["run", "-c", "x.yaml"], ["serve", "."], []])
def test_cli_bad_workers_exit_2(cmd, value):
    p = ferry(*cmd, "--workers", value)
    assert p.returncode == 2, (p.returncode, p.stderr)
    one_line_naming(p.stderr, "--workers")
    if value:
        assert value in p.stderr


# ---- check ----

GOOD = """\
listeners:
  - address: 127.0.0.1:9000
routes:
  - static: /tmp
"""

BAD = """\
listeners:
  - address: 127.0.0.1:9000
    bogus: 1
limits:
  keepalive-timeout: abc
routes:
  - static:
      root: /tmp
      listing: maybe
"""


def test_cli_check_good(tmp_path):
    cfg = tmp_path / "good.yaml"
    cfg.write_text(GOOD)
    p = ferry("check", "-c", cfg, home=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert re.search(r"^\s*keepalive-timeout: 75s$", out, re.M), out
    assert re.search(r"^\s*header-timeout: 10s$", out, re.M)
    assert re.search(r"^\s*backlog: 4096$", out, re.M)
    assert re.search(r"^\s*index: \[index\.html\]$", out, re.M)
    assert re.search(r"^\s*root: /tmp$", out, re.M)
    assert re.search(r"^[\s-]*address: 127\.0\.0\.1:9000$", out, re.M)


def test_cli_check_output_is_a_valid_config(tmp_path):
    cfg = tmp_path / "good.yaml"
    cfg.write_text(GOOD)
    p1 = ferry("check", "-c", cfg, home=tmp_path)
    assert p1.returncode == 0
    eff = tmp_path / "effective.yaml"
    eff.write_text(p1.stdout)
    p2 = ferry("check", "-c", eff, home=tmp_path)
    assert p2.returncode == 0, p2.stderr
    body = lambda s: [l for l in s.splitlines() if not l.startswith("#")]
    assert body(p2.stdout) == body(p1.stdout)


def test_cli_check_bad(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(BAD)
    p = ferry("check", "-c", cfg, home=tmp_path)
    assert p.returncode == 1
    errs = [l for l in p.stderr.splitlines() if re.match(r"^\S*bad\.yaml:\d+:\d+: ", l)]
    assert len(errs) == 3, p.stderr
    by_key = {}
    for l in errs:
        m = re.match(r"^(\S*bad\.yaml):(\d+):(\d+): (\S+): (.*)$", l)
        assert m, l
        assert m.group(1).endswith("bad.yaml")
        by_key[m.group(4)] = (int(m.group(2)), int(m.group(3)), m.group(5))
    assert by_key["listeners[0].bogus"][:2] == (3, 5)
    assert "bogus" in by_key["listeners[0].bogus"][2]
    assert by_key["limits.keepalive-timeout"][0] == 5
    assert "abc" in by_key["limits.keepalive-timeout"][2]
    assert by_key["routes[0].static.listing"][0] == 9
    assert "maybe" in by_key["routes[0].static.listing"][2]
    assert "keepalive-timeout: 75s" not in p.stdout


def test_cli_check_missing_file(tmp_path):
    p = ferry("check", "-c", tmp_path / "nope.yaml")
    assert p.returncode != 0
    assert "nope.yaml" in p.stderr


def test_cli_run_bad_config_exits_nonzero(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(BAD)
    p = ferry("run", "-c", cfg, home=tmp_path)
    assert p.returncode != 0
    assert re.search(r"bad\.yaml:3:5: ", p.stderr)


# ---- serve ----

def start_serve(server, *extra, port=None):
    f = server(args=None, start=False)
    port = port or f.port
    f.args = ["serve", str(f.docroot), "--listen", f"127.0.0.1:{port}", *extra]
    (f.docroot / "hello.txt").write_text("hello serve\n")
    return f


def test_cli_serve_dir(server):
    f = start_serve(server)
    f.start(wait_ports=[f.port])
    st, h, body = http_request(f.port, "/hello.txt")
    assert st == 200 and body == b"hello serve\n"
    assert h["content-type"].startswith("text/plain")


def test_cli_serve_workers_2(server):
    f = start_serve(server, "--workers", "2")
    f.start(wait_ports=[f.port])
    for _ in range(8):
        st, _, body = http_request(f.port, "/hello.txt")
        assert st == 200 and body == b"hello serve\n"
    assert f.stop() == 0
    assert "2 workers" in f.log()


def test_cli_serve_tls_self_signed(server):
    f = start_serve(server, "--tls", "self-signed")
    f.start(wait_ports=[f.port])
    p = subprocess.run(["curl", "-sk", "--max-time", "10",
                        f"https://127.0.0.1:{f.port}/hello.txt"], capture_output=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"hello serve\n"
    # plain HTTP on the TLS port is not served
    p = subprocess.run(["curl", "-s", "--max-time", "5", f"http://127.0.0.1:{f.port}/hello.txt"],
                       capture_output=True, timeout=20)
    assert p.stdout != b"hello serve\n"


def test_cli_serve_tls_cert_key(server, tmp_path):
    crt, key = tmp_path / "c.crt", tmp_path / "c.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "2", "-subj", "/CN=localhost"], check=True, capture_output=True,
                   timeout=30)
    f = start_serve(server, "--tls", f"{crt}:{key}")
    f.start(wait_ports=[f.port])
    st, _, body = http_request(f.port, "/hello.txt", tls=True, server_hostname="localhost")
    assert st == 200 and body == b"hello serve\n"


def test_cli_serve_access_log_stdout(server):
    f = start_serve(server, "--access-log", "stdout")
    f.start(wait_ports=[f.port])
    assert http_request(f.port, "/hello.txt")[0] == 200
    assert f.stop() == 0
    out = f.proc.stdout.read()
    assert re.search(r'"GET /hello\.txt HTTP/1\.1" 200 ', out), out


def test_cli_serve_missing_dir(tmp_path):
    p = ferry("serve", tmp_path / "no-such-dir", "--listen", f"127.0.0.1:{free_port()}",
              home=tmp_path)
    assert p.returncode != 0
    assert "no-such-dir" in p.stderr


def test_cli_serve_bad_listen(tmp_path):
    p = ferry("serve", tmp_path, "--listen", "not-an-address", home=tmp_path)
    assert p.returncode == 2
    assert "not-an-address" in p.stderr


# ---- signals: drain ----

BIG = 32 * 1024 * 1024


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_signal_drains_in_flight_download(server, sig):
    f = start_serve(server)
    data = os.urandom(1024 * 1024 + 11) * 32
    data = data[:BIG]
    (f.docroot / "big.bin").write_bytes(data)
    f.start(wait_ports=[f.port])
    with socket.create_connection(("127.0.0.1", f.port), timeout=15) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = s.recv(65536)
            assert b
            buf += b
        head, _, body = buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert re.search(rb"(?i)\r\ncontent-length: *%d\r\n" % BIG, head + b"\r\n"), head
        # the download is in flight (the client has read little of it): ask ferry to stop
        f.proc.send_signal(sig)
        time.sleep(0.5)
        assert f.proc.poll() is None, "ferry exited before the in-flight response completed"
        h = hashlib.sha256(body)
        n = len(body)
        while n < BIG:
            b = s.recv(min(1 << 20, BIG - n))
            assert b, f"connection closed after {n} of {BIG} body bytes"
            h.update(b)
            n += len(b)
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    # the client has its response and has gone away: nothing holds the exit up
    rc = wait_exit(f, 12)
    assert rc == 0
    assert "exited cleanly" in f.log()


def wait_exit(f, timeout):
    """Exit code of ferry, or fail (after killing it) when it is still running after timeout."""
    try:
        return f.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        f.proc.kill()
        f.proc.wait()
        f.expect_exit = None  # reported here, not again at teardown
        pytest.fail(f"ferry did not exit within {timeout} s of the signal; log:\n{f.log()[-3000:]}")


def test_cli_signal_drain_deadline(server):
    # a client that reads nothing of a big response cannot hold ferry forever: after the drain
    # deadline (10 s in main.c) the connection is closed and ferry exits 0
    f = start_serve(server)
    (f.docroot / "big.bin").write_bytes(os.urandom(1024 * 1024) * 32)
    f.start(wait_ports=[f.port])
    with socket.create_connection(("127.0.0.1", f.port), timeout=15) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
        f.proc.send_signal(signal.SIGTERM)
        rc = wait_exit(f, 18)
    assert rc == 0
    assert "exited cleanly" in f.log()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_signal_idle_exit_0(server, sig):
    f = start_serve(server)
    f.start(wait_ports=[f.port])
    assert http_request(f.port, "/hello.txt")[0] == 200
    f.proc.send_signal(sig)
    rc = f.proc.wait(timeout=15)
    assert rc == 0
    assert "exited cleanly" in f.log()


def test_cli_signal_closes_idle_keepalive(server):
    # an idle keep-alive connection does not hold the exit up
    f = start_serve(server)
    f.start(wait_ports=[f.port])
    with socket.create_connection(("127.0.0.1", f.port), timeout=10) as s:
        s.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = b""
        while not buf.endswith(b"hello serve\n"):
            b = s.recv(4096)
            assert b
            buf += b
        f.proc.send_signal(signal.SIGTERM)
        rc = f.proc.wait(timeout=8)
        assert rc == 0
    assert "exited cleanly" in f.log()


# ---- the embedded default ----

def read_stdout_until(proc, needles, timeout=10.0):
    fd = proc.stdout.fileno()
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline and not all(n.encode() in out for n in needles):
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            b = os.read(fd, 4096)
            if not b:
                break
            out += b
    return out.decode(errors="replace")


def port_is_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_cli_default_embedded(server, monkeypatch):
    busy = [p for p in (8080, 8443, 8888) if not port_is_free(p)]
    if busy:
        pytest.fail(f"the embedded default listens on 127.0.0.1:8080, :8443 and :8888, but "
                    f"{busy} is in use on this machine: free it to run this test")
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("FERRY_DEMO_DIR", raising=False)
    f = server(args=[], start=False)
    f.start(wait_ports=[8080, 8443, 8888])  # all three are bound before it serves
    out = read_stdout_until(f.proc, ["http://127.0.0.1:8080/", "https://127.0.0.1:8443/"])
    assert "http://127.0.0.1:8080" in out, out
    assert "https://127.0.0.1:8443" in out, out
    st, h, body = http_request(8080, "/")
    assert st == 200
    assert h["content-type"].startswith("text/html")
    assert b"Ferry" in body and b"<html" in body.lower()
    st, h, body2 = http_request(8443, "/", tls=True, server_hostname="localhost")
    assert st == 200
    assert body2 == body
    for port, tls in ((8080, False), (8443, True)):
        st, _, body = http_request(port, "/health", tls=tls, server_hostname="localhost")
        assert st == 200 and body == b"ok\n"
    p = subprocess.run(["curl", "-sk", "--max-time", "10", "https://127.0.0.1:8443/health"],
                       capture_output=True, timeout=20)
    assert p.stdout == b"ok\n"
    assert (f.tmp / ".local" / "share" / "ferry" / "selfsigned.crt").is_file()
    # h2c on 8080, h2 and an Alt-Svc for h3 on 8443
    p = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "--max-time", "10", "-o",
                        "/dev/null", "-w", "%{http_version}", "http://127.0.0.1:8080/health"],
                       capture_output=True, text=True, timeout=20)
    assert p.stdout == "2", p
    p = subprocess.run(["curl", "-sk", "--http2", "--max-time", "10", "-D", "-", "-o", "/dev/null",
                        "https://127.0.0.1:8443/health"], capture_output=True, text=True,
                       timeout=20)
    assert p.stdout.startswith("HTTP/2 200"), p
    assert 'alt-svc: h3=":8443"' in p.stdout.lower(), p
    # the reverse proxy demo: /proxy/X is X fetched through the proxy from 8080
    st, _, body = http_request(8080, "/proxy/health")
    assert st == 200 and body == b"ok\n"
    # the intercepting proxy on 8888, and its CA made on first run
    if "http://127.0.0.1:8888/" not in out:  # (bounded: not printed yet, or never)
        out = read_stdout_until(f.proc, ["http://127.0.0.1:8888/"]) + out
    assert "intercepting proxy on http://127.0.0.1:8888" in out + f.log(), out
    p = subprocess.run(["curl", "-s", "--max-time", "10", "-x", "http://127.0.0.1:8888",
                        "http://127.0.0.1:8080/health"], capture_output=True, timeout=20)
    assert p.stdout == b"ok\n", p
    assert (f.tmp / ".local" / "share" / "ferry" / "ferry-ca.pem").is_file()


# ---- proxy one-liner ----

def test_cli_proxy_to_a_ferry_origin(server):
    """`ferry proxy URL --listen ADDR` in front of `ferry serve`: the file comes through."""
    origin = start_serve(server)
    origin.start(wait_ports=[origin.port])
    front = server(args=None, start=False)
    port = free_port()
    front.args = ["proxy", f"http://127.0.0.1:{origin.port}", "--listen", f"127.0.0.1:{port}"]
    front.start(wait_ports=[port])
    st, hdrs, body = http_request(port, "/hello.txt")
    assert st == 200 and body == b"hello serve\n"


def test_cli_proxy_bad_url_names_it():
    p = ferry("proxy", "ftp://example.test")
    assert p.returncode == 2
    one_line_naming(p.stderr, "ferry: proxy: URL: ", "ftp://example.test")


# ---- per-command help, version, every flag that --help lists ----

COMMANDS = ["run", "check", "serve", "proxy", "mitm", "ca", "l4", "doc-config", "help", "version"]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_cli_help_per_command(cmd):
    outs = []
    for args in ([cmd, "--help"], [cmd, "-h"], ["help", cmd]):
        if cmd == "version" and args[0] == cmd:
            continue  # `version --help` prints the version
        p = ferry(*args)
        assert p.returncode == 0, (args, p.stderr)
        assert p.stderr == ""
        outs.append(p.stdout)
    assert all(o == outs[0] for o in outs), outs
    assert outs[0].startswith(f"usage: ferry {cmd}"), outs[0]
    assert cmd in ferry("--help").stdout


def test_cli_version_forms():
    a, b = ferry("version"), ferry("--version")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout and re.match(r"^ferry \d+\.\d+\.\d+\n$", a.stdout)


def help_flags(cmd):
    """The options `ferry CMD --help` lists: {flag: takes_value}."""
    out = ferry(cmd, "--help").stdout
    flags = {}
    for m in re.finditer(r"^  (-[-\w]+)(?:, (--[-\w]+))?(?: (\S+))?  ", out, re.M):
        for f in (m.group(1), m.group(2)):
            if f:
                flags[f] = m.group(3) is not None
    return flags


def global_help_flags():
    """{command: flags} from `ferry --help`'s synopsis lines."""
    out = ferry("--help").stdout
    res, cmd = {}, None
    for line in out.splitlines():
        m = re.match(r"^  ferry (\w[-\w]*)", line)
        if m:
            cmd = m.group(1)
        elif not line.startswith("    "):
            cmd = None
        if cmd:
            res.setdefault(cmd, set()).update(re.findall(r"\[(-[-\w]+)", line))
            res[cmd].update(re.findall(r"(?<![\[\w])(-c)\b", line))
    return res


def test_cli_global_help_flags_are_in_command_help():
    g = global_help_flags()
    assert set(g) >= {"run", "check", "serve", "proxy", "mitm", "ca", "l4"}, g
    for cmd, flags in g.items():
        assert flags <= set(help_flags(cmd)), (cmd, flags, help_flags(cmd))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("pair")
    crt, key = d / "c.pem", d / "c.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True,
                   capture_output=True, timeout=30)
    return crt, key


POSITIONAL = {"serve": ["."], "proxy": ["https://127.0.0.1:9"], "mitm": [],
              "l4": ["127.0.0.1:9"]}


def flag_cases(cmd, tmp, crt, key):
    """flag -> (extra args, regex the printed configuration must hold)"""
    return {
        "--listen": (["--listen", "127.0.0.1:18123"],
                     r"(address|listen): 127\.0\.0\.1:18123$"),
        "--tls": (["--tls", f"{crt}:{key}"], rf"cert: {re.escape(str(crt))}$"),
        "--protocols": (["--tls", "self-signed", "--protocols", "h1,h2,h3"],
                        r"protocols: \[h1, h2, h3\]$"),
        "--workers": (["--workers", "3"], r"^workers: 3$"),
        "--access-log": (["--access-log", "stdout"], r"access: stdout$"),
        "--upstream-ca": (["--upstream-ca", str(crt)],
                          rf"(ca|upstream-ca): {re.escape(str(crt))}$"),
        "--ca-dir": (["--ca-dir", str(tmp)], rf"ca-dir: {re.escape(str(tmp))}$"),
        "--har": (["--har", str(tmp / "x.har")], r"har: .*x\.har$"),
        "--udp": (["--udp"], r"mode: udp$"),
        "--check": ([], r"^listeners:|^l4:"),
    }


@pytest.mark.parametrize("cmd", ["serve", "proxy", "mitm", "l4"])
def test_cli_every_listed_flag_works(cmd, tmp_path, pair):
    """Each flag `ferry CMD --help` lists is accepted and has its effect on the configuration
    (`--check` prints the configuration the flags make)."""
    crt, key = pair
    flags = help_flags(cmd)
    cases = flag_cases(cmd, tmp_path, crt, key)
    assert set(flags) <= set(cases), f"untested flags of {cmd}: {set(flags) - set(cases)}"
    assert "--check" in flags
    for flag in flags:
        args, want = cases[flag]
        p = ferry(cmd, *POSITIONAL[cmd], *args, "--check", home=tmp_path)
        assert p.returncode == 0, (cmd, flag, p.stderr)
        assert re.search(want, p.stdout, re.M), (cmd, flag, want, p.stdout)
        assert p.stderr.startswith("ferry: "), p.stderr


def test_cli_ca_flags(tmp_path):
    assert set(help_flags("ca")) == {"--ca-dir", "--out"}
    d, out = tmp_path / "ca", tmp_path / "out"
    p = ferry("ca", "init", "--ca-dir", d, home=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (d / "ferry-ca.pem").is_file()
    out.mkdir()
    p = ferry("ca", "export", "--ca-dir", d, "--out", out, home=tmp_path)
    assert p.returncode == 0, p.stderr
    assert any(out.iterdir()), p.stdout


def test_cli_run_and_check_flags(server, tmp_path):
    assert set(help_flags("check")) == {"-c", "--config"}
    assert set(help_flags("run")) == {"-c", "--config", "--workers", "--pid-file"}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    for flag in ("-c", "--config"):
        p = ferry("check", flag, cfg, home=tmp_path)
        assert p.returncode == 0 and "address: 127.0.0.1:9000" in p.stdout, p.stderr
    f = server("listeners: [{{address: 127.0.0.1:{port}}}]\nroutes: [{{echo: {{}}}}]\n",
               start=False)
    f.args = ["run", "--config", str(tmp_path / "run.yaml"), "--workers", "2"]
    (tmp_path / "run.yaml").write_text(f.text)
    f.start(wait_ports=[f.port])
    assert f.stop() == 0
    assert "2 workers" in f.log()


def test_cli_proxy_upstream_ca_verifies_the_origin(server, pair):
    """`ferry proxy https://... --upstream-ca FILE` (DESIGN.md §6): the origin's certificate
    is verified against FILE; without it (system store) the same origin is refused."""
    crt, key = pair
    origin = start_serve(server, "--tls", f"{crt}:{key}")
    origin.start(wait_ports=[origin.port])
    front = server(args=None, start=False)
    port = free_port()
    front.args = ["proxy", f"https://127.0.0.1:{origin.port}", "--listen", f"127.0.0.1:{port}",
                  "--upstream-ca", str(crt)]
    front.start(wait_ports=[port])
    st, _, body = http_request(port, "/hello.txt")
    assert st == 200 and body == b"hello serve\n"
    bare = server(args=None, start=False)
    port2 = free_port()
    bare.args = ["proxy", f"https://127.0.0.1:{origin.port}", "--listen", f"127.0.0.1:{port2}"]
    bare.start(wait_ports=[port2])
    assert http_request(port2, "/hello.txt")[0] == 502


# ---- exit codes, messages ----

def test_cli_missing_config_file_exits_2_everywhere(tmp_path):
    for cmd in ("check", "run"):
        p = ferry(cmd, "-c", tmp_path / "nope.yaml")
        assert p.returncode == 2, (cmd, p.stderr)
        one_line_naming(p.stderr, f"ferry: {cmd}: -c: ", "nope.yaml", "No such file")


def test_cli_invalid_config_exits_1_everywhere(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(BAD)
    for cmd in ("check", "run"):
        p = ferry(cmd, "-c", cfg, home=tmp_path)
        assert p.returncode == 1, (cmd, p.stderr)
        lines = p.stderr.strip().split("\n")
        assert all(re.match(r"^\S*bad\.yaml:\d+:\d+: ", l) for l in lines[:-1]), p.stderr
        assert lines[-1] == f"ferry: {cmd}: {cfg} is not valid", p.stderr


@pytest.mark.parametrize("args,head", [
    (["serve", "{tmp}", "--tls", "nope.pem:nope.key"], "ferry: serve: --tls: cannot read 'nope.pem'"),
    (["serve", "{tmp}/no-such-dir"], "ferry: serve: DIR: "),
    (["serve", "{tmp}", "--listen", "nowhere"], "ferry: serve: --listen: bad address 'nowhere'"),
    (["serve", "{tmp}", "--protocols", "h9"], "ferry: serve: --protocols: unknown protocol 'h9'"),
    (["serve", "{tmp}", "--protocols", "h3"], "ferry: serve: --protocols: h3 needs tls"),
    (["serve", "{tmp}", "--access-log", "{tmp}/no/such/a.log"], "ferry: serve: --access-log: "),
    (["proxy", "https://127.0.0.1:9", "--upstream-ca", "{tmp}/nope.pem"],
     "ferry: proxy: --upstream-ca: cannot read"),
    (["proxy", "gopher://x"], "ferry: proxy: URL: "),
    (["mitm", "--upstream-ca", "{tmp}/nope.pem"], "ferry: mitm: --upstream-ca: cannot read"),
    (["mitm", "--listen", "x:y"], "ferry: mitm: --listen: "),
    (["mitm", "--ca-dir", "/dev/null/ca"], "ferry: mitm: --ca-dir: cannot create '/dev/null/ca'"),
    (["l4", "127.0.0.1:9", "--tls", "a.pem:b.key"], "ferry: l4: --tls: cannot read 'a.pem'"),
])
def test_cli_oneliner_errors_name_the_flag(tmp_path, args, head):
    """One line naming the flag, never a position in the generated config; exit 2."""
    p = ferry(*[a.format(tmp=tmp_path) for a in args], home=tmp_path, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    one_line_naming(p.stderr, head.format(tmp=tmp_path))
    assert "<command line>" not in p.stderr and "routes[" not in p.stderr
    assert "error:0" not in p.stderr  # no OpenSSL error stack


@pytest.mark.parametrize("args", [
    ["frobnicate"], ["serve"], ["serve", ".", "--bogus"], ["check", "-c", "/nonexistent.yaml"],
    ["run"], ["ca"], ["ca", "frob"], ["l4"], ["proxy", "ftp://x"], ["help", "nope"],
    ["serve", "/nonexistent-dir"], ["doc-config", "x"],
])
def test_cli_messages_start_with_ferry(args, tmp_path):
    p = ferry(*args, home=tmp_path)
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    for line in p.stderr.strip().split("\n"):
        assert line.startswith("ferry: "), (args, line)


def test_cli_check_without_file_prints_the_builtin(tmp_path):
    p = ferry("check", home=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "listeners:" in p.stdout and "127.0.0.1:8888" in p.stdout
    assert p.stderr == "ferry: check: the built-in configuration is valid\n"
    # what it prints is a configuration: it checks as a file too
    cfg = tmp_path / "builtin.yaml"
    cfg.write_text(p.stdout)
    p2 = ferry("check", "-c", cfg, home=tmp_path)
    assert p2.returncode == 0, p2.stderr
