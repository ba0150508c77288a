"""Black-box tests of ferry-load (tools/load): request counts, verification, pipelining, TLS,
h2 against a local nginx when one is installed, echo, CLI errors.

ferry-load is found at $FERRY_LOAD_BIN (default build/ferry-load); a missing binary fails."""
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port, wait_port

LOAD = os.environ.get("FERRY_LOAD_BIN", str(ROOT / "build" / "ferry-load"))

ROUTES = """\
listeners:
  - address: 127.0.0.1:{port}
routes:
  - match:
      path: /echo
    echo: {{}}
  - match:
      path: /
    respond:
      status: 200
      body: "hello load\\n"
"""
BODY_LEN = len("hello load\n")


def load(*args, timeout=60, expect_rc=None):
    """Runs ferry-load with --json; returns (returncode, parsed report)."""
    assert os.access(LOAD, os.X_OK), f"ferry-load binary missing: {LOAD}"
    p = subprocess.run([LOAD, *map(str, args), "--json"], capture_output=True, text=True,
                       timeout=timeout)
    assert p.stdout.strip(), f"no report (rc {p.returncode}): {p.stderr}"
    rep = json.loads(p.stdout)
    if expect_rc is not None:
        assert p.returncode == expect_rc, (p.returncode, rep["errors_by_kind"], p.stderr)
    return p.returncode, rep


def assert_clean(rep, n=None):
    assert rep["errors"] == 0, rep["errors_by_kind"]
    assert all(v == 0 for v in rep["errors_by_kind"].values())
    if n is not None:
        assert rep["requests"] == n and rep["ok"] == n, rep
    assert rep["requests"] > 0 and rep["ok"] == rep["requests"]


def test_load_h3_exact_total(server):
    """h3:// (tools/load/h3.c) against ferry's HTTP/3 listener: exact -n, bodies checked."""
    srv = server("""
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h2, h3]
    tls: self-signed
routes:
  - respond:
      status: 200
      body: "hello load\\n"
""")
    rc, rep = load(f"h3://127.0.0.1:{srv.port}/", "--insecure", "-c", 4, "-m", 8, "-n", 2000,
                   "--expect-bytes", BODY_LEN, expect_rc=0)
    assert_clean(rep, 2000)
    assert rep["status"]["2xx"] == 2000


def test_load_counts_exact_total(server):
    srv = server(ROUTES)
    rc, rep = load(srv.url("/"), "-c", 8, "-n", 500, "--expect-bytes", BODY_LEN, expect_rc=0)
    assert_clean(rep, 500)
    assert rep["status"]["2xx"] == 500
    assert rep["body_bytes"] == 500 * BODY_LEN
    assert rep["protocol"] == "h1" and rep["tls"] is False
    assert rep["connects"] == 8
    lat = rep["latency_us"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]


def test_load_duration_run(server):
    srv = server(ROUTES)
    t = time.time()
    rc, rep = load(srv.url("/"), "-c", 4, "-d", 1, "-w", "0.2", expect_rc=0)
    assert time.time() - t < 10
    assert_clean(rep)
    assert 0.9 < rep["duration_s"] < 1.5
    assert rep["requests_per_sec"] == pytest.approx(rep["requests"] / rep["duration_s"], rel=0.01)


def test_load_expect_bytes_mismatch_counts_errors(server):
    srv = server(ROUTES)
    rc, rep = load(srv.url("/"), "-c", 2, "-n", 100, "--expect-bytes", BODY_LEN + 1)
    assert rc == 1
    assert rep["requests"] == 100 and rep["ok"] == 0
    assert rep["errors_by_kind"]["body"] == 100 and rep["errors"] == 100


def test_load_404_counts_status_errors(server):
    srv = server("""\
listeners:
  - address: 127.0.0.1:{port}
routes:
  - match:
      path: /only
    respond:
      body: "x"
""")
    rc, rep = load(srv.url("/missing"), "-c", 2, "-n", 200)
    assert rc == 1
    assert rep["requests"] == 200 and rep["ok"] == 0
    assert rep["errors_by_kind"]["status"] == 200
    assert rep["status"]["4xx"] == 200
    # with --expect-status 404 the same answers are successes
    rc, rep = load(srv.url("/missing"), "-c", 2, "-n", 200, "--expect-status", 404,
                   expect_rc=0)
    assert_clean(rep, 200)


def test_load_pipelining(server):
    srv = server(ROUTES)
    rc, rep = load(srv.url("/"), "-c", 2, "--pipeline", 16, "-n", 2000, "--expect-bytes",
                   BODY_LEN, expect_rc=0)
    assert_clean(rep, 2000)
    assert rep["pipeline"] == 16


def test_load_post_echo_body(server):
    srv = server(ROUTES)
    rc, rep = load(srv.url("/echo"), "-c", 4, "-n", 300, "--body-size", 1000,
                   "--expect-bytes", 1000, "--pipeline", 4, expect_rc=0)
    assert_clean(rep, 300)
    assert rep["body_bytes"] == 300 * 1000


def test_load_many_urls(server):
    srv = server(ROUTES)
    rc, rep = load(srv.url("/"), "--url", srv.url("/?a=1"), "--url", srv.url("/x"), "-c", 3,
                   "-n", 300, expect_rc=0)
    assert_clean(rep, 300)


def test_load_open_loop_rate(server):
    srv = server(ROUTES)
    rc, rep = load(srv.url("/"), "-c", 4, "--rate", 500, "-d", 1, expect_rc=0)
    assert_clean(rep)
    assert 400 <= rep["requests"] <= 560, rep["requests"]
    assert rep["rate"] == 500


def test_load_tls(server, tmp_path):
    crt, key = tmp_path / "c.crt", tmp_path / "c.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "2", "-subj", "/CN=localhost"], check=True, capture_output=True)
    srv = server(f"""\
listeners:
  - address: 127.0.0.1:{{port}}
    tls:
      cert: "{crt}"
      key: "{key}"
routes:
  - respond:
      body: "hello load\\n"
""")
    url = srv.url("/", scheme="https")
    rc, rep = load(url, "--insecure", "-c", 4, "-n", 400, "--pipeline", 2, "--expect-bytes",
                   BODY_LEN, expect_rc=0)
    assert_clean(rep, 400)
    assert rep["tls"] is True and rep["connects"] == 4
    # without --insecure the self-signed certificate is refused: tls errors, no requests
    rc, rep = load(url, "-c", 2, "-n", 3)
    assert rc == 1 and rep["requests"] == 0 and rep["errors_by_kind"]["tls"] == 3


def test_load_connect_errors_end_a_bounded_run():
    port = free_port()  # nothing listens here
    rc, rep = load(f"http://127.0.0.1:{port}/", "-c", 2, "-n", 5, timeout=30)
    assert rc == 1 and rep["requests"] == 0
    assert rep["errors_by_kind"]["connect"] == 5


def test_load_counts_reset_and_short_body():
    """A raw server that cuts a Content-Length body short, then one that resets."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    port = lsock.getsockname()[1]
    stop = threading.Event()

    def serve():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except socket.timeout:
                continue
            with c:
                try:
                    c.recv(65536)
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rc, rep = load(f"http://127.0.0.1:{port}/", "-c", 1, "-n", 3, timeout=30)
    finally:
        stop.set()
        t.join()
        lsock.close()
    assert rc == 1
    assert rep["errors_by_kind"]["body"] == 3 and rep["ok"] == 0


def test_load_chunked_and_close_delimited():
    """ferry-load's h1 parser against chunked (with extensions and trailers), close-delimited
    and interim 100 responses, sent in small pieces."""
    bodies = {
        b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
        b"/close": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nhello world",
    }
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    port = lsock.getsockname()[1]
    stop = threading.Event()

    def conn(c):
        with c:
            buf = b""
            while True:
                try:
                    d = c.recv(65536)
                except OSError:
                    return
                if not d:
                    return
                buf += d
                while b"\r\n\r\n" in buf:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    path = head.split(b" ")[1]
                    resp = bodies[path]
                    for i in range(0, len(resp), 7):
                        c.sendall(resp[i:i + 7])
                    if path == b"/close":
                        return

    def serve():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except socket.timeout:
                continue
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=conn, args=(c,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        for path in ("/chunked", "/close"):
            rc, rep = load(f"http://127.0.0.1:{port}{path}", "-c", 2, "-n", 40,
                           "--expect-bytes", 11, timeout=30)
            assert rc == 0, (path, rep)
            assert_clean(rep, 40)
    finally:
        stop.set()
        t.join()
        lsock.close()


def tcp_echo_server():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    stop = threading.Event()

    def conn(c):
        with c:
            while True:
                try:
                    d = c.recv(65536)
                except OSError:
                    return
                if not d:
                    return
                c.sendall(d)

    def serve():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except socket.timeout:
                continue
            threading.Thread(target=conn, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return lsock, stop


def test_load_tcp_echo():
    lsock, stop = tcp_echo_server()
    try:
        port = lsock.getsockname()[1]
        rc, rep = load(f"tcp://127.0.0.1:{port}", "-c", 2, "-m", 4, "--size", 3000, "-n", 400,
                       expect_rc=0)
        assert_clean(rep, 400)
        assert rep["protocol"] == "tcp-echo" and rep["body_bytes"] == 400 * 3000
    finally:
        stop.set()
        lsock.close()


def test_load_udp_echo():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.2)
    port = s.getsockname()[1]
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                d, a = s.recvfrom(65536)
            except socket.timeout:
                continue
            s.sendto(d, a)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rc, rep = load(f"udp://127.0.0.1:{port}", "-c", 2, "--size", 100, "-n", 300,
                       expect_rc=0)
        assert_clean(rep, 300)
    finally:
        stop.set()
        t.join()
        s.close()


def test_load_wrong_echo_is_counted():
    """An 'echo' server that flips a byte: every round trip is a body error."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    port = lsock.getsockname()[1]
    stop = threading.Event()

    def serve():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except socket.timeout:
                continue
            with c:
                try:
                    d = c.recv(65536)
                    if d:
                        c.sendall(bytes([d[0] ^ 1]) + d[1:])
                    c.recv(1)
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rc, rep = load(f"tcp://127.0.0.1:{port}", "-c", 1, "--size", 16, "-n", 3, timeout=30)
    finally:
        stop.set()
        t.join()
        lsock.close()
    assert rc == 1 and rep["errors_by_kind"]["body"] == 3 and rep["ok"] == 0


@pytest.mark.parametrize("args,msg", [
    (["h3://127.0.0.1:1/", "--rate", "10"], "--rate"),
    (["http://127.0.0.1:1/", "--bogus"], "--bogus"),
    (["http://127.0.0.1:1/", "-c", "zero"], "-c"),
    (["ftp://127.0.0.1/"], "scheme"),
    (["http://127.0.0.1:1/", "--h1", "--h2"], "--h2"),
])
def test_load_cli_errors_exit_2(args, msg):
    assert os.access(LOAD, os.X_OK), f"ferry-load binary missing: {LOAD}"
    p = subprocess.run([LOAD, *args], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and msg in p.stderr, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1


NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                  else None)


@pytest.fixture
def nginx_h2(tmp_path):
    """nginx with h2 over TLS and h2c (prior knowledge) on loopback; skipped without nginx
    (Ferry does not serve h2 yet)."""
    if not NGINX:
        pytest.skip("nginx is not installed")
    d = tmp_path / "nginx"
    d.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(d / "k.pem"), "-out",
                    str(d / "c.pem"), "-days", "2", "-subj", "/CN=localhost"], check=True,
                   capture_output=True)
    tls_port, h2c_port = free_port(), free_port()
    (d / "nginx.conf").write_text(f"""
worker_processes 1;
daemon off;
master_process off;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 100;
    server {{
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate {d}/c.pem;
        ssl_certificate_key {d}/k.pem;
        location / {{ return 200 "Hello, world!"; }}
    }}
    server {{
        listen 127.0.0.1:{h2c_port} http2;
        location / {{ return 200 "Hello, world!"; }}
    }}
}}
""")
    p = subprocess.Popen([NGINX, "-c", str(d / "nginx.conf"), "-p", str(d)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(tls_port)
        wait_port(h2c_port)
        yield tls_port, h2c_port
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_load_h2_against_nginx(nginx_h2):
    tls_port, h2c_port = nginx_h2
    # keepalive_requests 100: nginx sends GOAWAY every 100 streams; those reconnects are
    # not errors, and refused streams are sent again.
    rc, rep = load(f"https://127.0.0.1:{tls_port}/", "--h2", "--insecure", "-c", 4, "-m", 8,
                   "-n", 1000, "--expect-bytes", 13, expect_rc=0)
    assert_clean(rep, 1000)
    assert rep["protocol"] == "h2" and rep["tls"] is True and rep["connects"] >= 10
    rc, rep = load(f"h2c://127.0.0.1:{h2c_port}/", "-c", 2, "-m", 16, "-d", 1,
                   "--expect-bytes", 13, expect_rc=0)
    assert_clean(rep)
    rc, rep = load(f"http://127.0.0.1:{h2c_port}/", "--h2", "-c", 2, "-m", 4, "-n", 200,
                   "--method", "POST", "--body-size", 5000, expect_rc=0)
    assert_clean(rep, 200)
