"""Intercepting proxy ⇄ HTTP/2 origins (issue 7 follow-ups): protocol mirroring end to end
(the origin's ALPN learned by the probe decides the protocol Ferry speaks to it, whatever the
client speaks to Ferry), name resolution off the worker thread (unknown names give a 502 that
names them; /etc/hosts names still work). Real clients: curl through `--proxy`, Debian nginx."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY
from test_mitm import curl, mitm, nginx  # noqa: F401  (fixtures and helpers)


def log_lines(n, tag, want=1):
    """nginx access-log lines of requests carrying `tag` (bounded wait: the log is written
    when the response is done, which may trail curl's exit by a moment)."""
    for _ in range(100):
        lines = [ln for ln in (n.d / "access.log").read_text().splitlines() if tag in ln]
        if len(lines) >= want:
            return lines
        time.sleep(0.05)
    return lines


@pytest.mark.parametrize("client", ["--http1.1", "--http2"])
def test_mitm_h2_origin_gets_h2(server, certs, nginx, client):
    srv = mitm(server, certs)
    tag = f"h2origin{client[2:]}"
    for i in range(3):
        r = curl(client, "-x", srv.proxy, "--cacert", str(srv.ca),
                 f"https://localhost:{nginx.tls_port}/index.html?{tag}={i}")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"hello from nginx\n"
    lines = log_lines(nginx, tag, 3)
    assert len(lines) == 3, lines
    assert all('HTTP/2.0"' in ln for ln in lines), lines


@pytest.mark.parametrize("client", ["--http1.1", "--http2"])
def test_mitm_h1_origin_stays_h1(server, certs, nginx, client):
    srv = mitm(server, certs)
    tag = f"h1origin{client[2:]}"
    r = curl(client, "-w", "%{http_version}", "-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://localhost:{nginx.h1_port}/index.html?{tag}")
    assert r.returncode == 0, r.stderr
    # the client is offered only what the origin speaks
    assert r.stdout == b"hello from nginx\n1.1"
    lines = log_lines(nginx, tag)
    assert len(lines) == 1 and 'HTTP/1.1"' in lines[0], lines


def test_mitm_h2_origin_big_body_and_post(server, certs, nginx):
    srv = mitm(server, certs)
    r = curl("--http2", "-x", srv.proxy, "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/big.bin?h2big")
    assert r.returncode == 0, r.stderr
    assert r.stdout == nginx.big
    # a request with a body over h2 to the origin (nginx answers 405 for POST to a file)
    r = curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "-x", srv.proxy,
             "--cacert", str(srv.ca), "--data-binary", "x" * 70000,
             f"https://localhost:{nginx.tls_port}/index.html?h2post")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"405"
    lines = log_lines(nginx, "h2post")
    assert len(lines) == 1 and '"POST /index.html?h2post HTTP/2.0" 405' in lines[0], lines


def test_mitm_absolute_form_http_stays_h1(server, certs, nginx):
    srv = mitm(server, certs)
    for client in ("--http1.1", "--http2"):
        tag = f"abs{client[2:]}"
        r = curl(client, "-x", srv.proxy, f"http://127.0.0.1:{nginx.port}/index.html?{tag}")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"hello from nginx\n"
        lines = log_lines(nginx, tag)
        assert len(lines) == 1 and 'HTTP/1.1"' in lines[0], lines


# ---- name resolution off the worker thread ----

def test_mitm_unknown_host_502_names_it(server, certs):
    srv = mitm(server, certs)
    r = curl("-x", srv.proxy, "-w", "\n%{http_code}", "http://nosuch-host.invalid/x")
    body, _, code = r.stdout.decode().rpartition("\n")
    assert code == "502", r
    assert "cannot resolve nosuch-host.invalid" in body
    # CONNECT: the origin is connected before the 200, so the CONNECT gets the 502 naming it
    r = curl("-x", srv.proxy, "--cacert", str(srv.ca), "-w", "\n%{http_connect}",
             "https://nosuch-host2.invalid/")
    assert r.stdout.decode().endswith("\n502"), r
    assert "cannot resolve nosuch-host2.invalid" in srv.log()
    # plain bytes inside CONNECT (relay): the tunnel is refused
    r = curl("-p", "-x", srv.proxy, "http://nosuch-host3.invalid/")
    assert r.returncode != 0
    assert "cannot resolve nosuch-host3.invalid" in srv.log()


def test_mitm_hosts_file_names_resolve(server, certs, nginx):
    srv = mitm(server, certs, extra="  resolve-cache: 0\n")  # every request asks the threads
    for i in range(3):
        r = curl("-x", srv.proxy, f"http://localhost:{nginx.port}/index.html")
        assert r.stdout == b"hello from nginx\n", r.stderr
        r = curl("--http2", "-x", srv.proxy, "--cacert", str(srv.ca),
                 f"https://localhost:{nginx.tls_port}/index.html")
        assert r.stdout == b"hello from nginx\n", r.stderr


def test_mitm_resolve_limits_are_checked(tmp_path):
    for bad in ("resolve-cache: -1", "resolver-threads: 0", "resolver-threads: 65",
                "resolve-timeout: soon"):
        cfg = tmp_path / "f.yaml"
        cfg.write_text("listeners:\n  - address: 127.0.0.1:1\n    kind: intercept\n"
                       f"intercept:\n  ca-dir: {tmp_path}/ca\n  {bad}\n")
        p = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode != 0, bad
        assert f"{cfg}:6:" in p.stderr and bad.split(":")[0] in p.stderr, p.stderr


def test_mitm_dns_timeout_does_not_block_worker(tmp_path):
    probe = subprocess.run(["unshare", "-rmn", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("cannot create a user+mount+network namespace here (unshare -rmn: "
                    f"{probe.stderr.decode().strip()}); the DNS timeout needs a resolver "
                    "that never answers")
    p = subprocess.run(["unshare", "-rmn", "/usr/bin/python3",
                        str(Path(__file__).with_name("mitm_dns_ns.py")), FERRY, str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    info_body, _, info_code = out["info"]["out"].rpartition("\n")
    assert info_code == "200" and "Ferry intercepting proxy" in info_body, out
    assert out["lookup_seen"], out
    assert not out["slow_done_before_info"], out  # served while the lookup was hanging
    body, _, code = out["slow"]["out"].rpartition("\n")
    assert code == "502", out
    assert "cannot resolve hangs.example: timed out after 2000 ms" in body, out
    body, _, code = out["connect"]["out"].rpartition("\n")  # the CONNECT's own status
    assert code == "502" and "cannot resolve hangs2.example: timed out" in out["log"], out
    for i, q in enumerate(out["queued"]):  # resolver-threads: 1, three lookups at once
        body, _, code = q["out"].rpartition("\n")
        assert code == "502" and f"cannot resolve queued{i}.example: timed out" in body, out
    assert out["exit"] == 0, out  # no join on a resolver thread stuck in getaddrinfo
    if os.environ.get("FERRY_SANITIZED"):
        assert "Sanitizer" not in out["log"], out["log"]


# ---- CONNECT over HTTP/2 to the proxy ----
# curl 7.88 (Debian 12) has no --proxy-http2 (added in curl 8.1), so the client is Debian's
# python3-h2 speaking h2c (prior knowledge) to the intercept listener, with TLS (the forged
# certificate, verified against Ferry's CA) over the CONNECT stream through memory BIOs.

def h2_connect_get(proxy_port, host, port, cafile, path, alpn="http/1.1"):
    import socket
    import ssl
    h2conn = pytest.importorskip("h2.connection", reason="python3-h2 (Debian) is needed")
    import h2.config
    import h2.events
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    c = h2conn.H2Connection(config=h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False))  # h2 4.1 wants :path even on CONNECT
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "CONNECT"), (":authority", f"{host}:{port}")])
    sock.sendall(c.data_to_send())
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.set_alpn_protocols([alpn])
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, outg, server_hostname=host)
    state = {"status": None, "ended": False, "plain": b"", "hs": False, "sent": False}

    def flush_tls():
        data = outg.read()
        if data:
            c.send_data(sid, data)
        sock.sendall(c.data_to_send())

    for _ in range(2000):
        if state["status"] == "200" and not state["hs"]:
            try:
                tls.do_handshake()
                state["hs"] = True
            except ssl.SSLWantReadError:
                pass
            flush_tls()
        if state["hs"] and not state["sent"]:
            tls.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                      "Connection: close\r\n\r\n".encode())
            state["sent"] = True
            flush_tls()
        if state["hs"]:
            try:
                while True:
                    chunk = tls.read(65536)
                    if not chunk:
                        return state["status"], state["plain"], tls.getpeercert()
                    state["plain"] += chunk
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return state["status"], state["plain"], tls.getpeercert()
        if state["ended"]:
            return state["status"], state["plain"], tls.getpeercert() if state["hs"] else None
        data = sock.recv(65536)
        if not data:
            state["ended"] = True
            continue
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                state["status"] = dict(ev.headers)[b":status"].decode()
                if state["status"] != "200":
                    state["ended"] = True
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, sid)
                inc.write(ev.data)
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                inc.write_eof()
                state["ended"] = True
        sock.sendall(c.data_to_send())
    raise AssertionError("CONNECT over h2: no answer within the loop bound")


def test_mitm_connect_over_h2_intercepted(server, certs, nginx):
    srv = mitm(server, certs)
    status, plain, cert = h2_connect_get(srv.port, "localhost", nginx.tls_port, srv.ca,
                                         "/index.html?h2connect")
    assert status == "200"
    assert plain.startswith(b"HTTP/1.1 200"), plain[:200]
    assert plain.endswith(b"hello from nginx\n")
    issuer = dict(x[0] for x in cert["issuer"])
    assert "Ferry" in issuer.get("commonName", ""), cert
    # the decrypted request went to the h2 origin over h2 (mirroring)
    lines = log_lines(nginx, "h2connect")
    assert len(lines) == 1 and 'HTTP/2.0"' in lines[0], lines
    # a large download through the h2 stream (many DATA frames, flow control both ways)
    status, plain, _ = h2_connect_get(srv.port, "localhost", nginx.tls_port, srv.ca, "/big.bin")
    assert status == "200" and plain.endswith(nginx.big), len(plain)


def test_mitm_connect_over_h2_passthrough_without_socketpair(server, certs, nginx):
    """A passed-through host's h2 CONNECT stream is the tunnel's own transport (issue 13):
    the origin's certificate reaches the client, and a large download crosses the stream
    (many DATA frames, the h2 windows as backpressure)."""
    srv = mitm(server, certs, extra="  passthrough: [localhost]\n")
    status, plain, cert = h2_connect_get(srv.port, "localhost", nginx.tls_port, certs["ca"],
                                         "/index.html?h2pass")
    assert status == "200"
    assert plain.startswith(b"HTTP/1.1 200") and plain.endswith(b"hello from nginx\n"), plain
    issuer = dict(x[0] for x in cert["issuer"])
    assert "Origin Test CA" in issuer.get("commonName", ""), cert
    status, plain, _ = h2_connect_get(srv.port, "localhost", nginx.tls_port, certs["ca"],
                                      "/big.bin")
    assert status == "200" and plain.endswith(nginx.big), len(plain)


def test_mitm_connect_over_h2_unknown_host(server, certs):
    srv = mitm(server, certs)
    status, plain, _ = h2_connect_get(srv.port, "nosuch-h2.invalid", 443, srv.ca, "/")
    assert status == "502"  # the origin is connected before the 200 (issue 12)
    assert "cannot resolve nosuch-h2.invalid" in srv.log()


def test_mitm_connect_over_h2_plain_bytes_relayed(server, certs, nginx):
    """Non-TLS bytes inside an h2 CONNECT stream are relayed as they are (plain tunnel)."""
    import socket
    import h2.config
    import h2.connection
    import h2.events
    srv = mitm(server, certs)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False))
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "CONNECT"), (":authority", f"127.0.0.1:{nginx.port}")])
    c.send_data(sid, f"GET /index.html?h2plain HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n".encode())
    sock.sendall(c.data_to_send())
    status, got, ended = None, b"", False
    for _ in range(1000):
        if ended:
            break
        data = sock.recv(65536)
        if not data:
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                status = dict(ev.headers)[b":status"]
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, sid)
                got += ev.data
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                ended = True
        sock.sendall(c.data_to_send())
    sock.close()
    assert status == b"200"
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"hello from nginx\n"), got[:300]
    assert ended


def test_mitm_connect_over_h2_reset_stream_then_reuse(server, certs, nginx):
    """A client that resets a relayed CONNECT stream mid-request (issue 13: the stream is the
    tunnel's transport) leaves the connection usable: a second CONNECT on it is relayed."""
    import socket
    import h2.config
    import h2.connection
    import h2.events
    srv = mitm(server, certs)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False))
    c.initiate_connection()
    first = c.get_next_available_stream_id()
    c.send_headers(first, [(":method", "CONNECT"), (":authority", f"127.0.0.1:{nginx.port}")])
    c.send_data(first, b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no end of head
    sock.sendall(c.data_to_send())
    got_200 = False
    while not got_200:
        data = sock.recv(65536)
        assert data, "proxy closed"
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == first:
                got_200 = dict(ev.headers)[b":status"] == b"200"
        sock.sendall(c.data_to_send())
    c.reset_stream(first)
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "CONNECT"), (":authority", f"127.0.0.1:{nginx.port}")])
    c.send_data(sid, b"GET /index.html?h2again HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Connection: close\r\n\r\n")
    sock.sendall(c.data_to_send())
    got, ended = b"", False
    for _ in range(1000):
        if ended:
            break
        data = sock.recv(65536)
        if not data:
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                c.acknowledge_received_data(ev.flow_controlled_length, sid)
                got += ev.data
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)) and \
                    ev.stream_id == sid:
                ended = True
        sock.sendall(c.data_to_send())
    sock.close()
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"hello from nginx\n"), got[:300]
    assert len(log_lines(nginx, "h2again")) == 1


def test_mitm_extended_connect_to_proxy_is_501(server, certs):
    import socket
    import h2.config
    import h2.connection
    import h2.events
    srv = mitm(server, certs)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False))
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"),
                         (":scheme", "http"), (":path", "/"),
                         (":authority", "127.0.0.1:9")])
    sock.sendall(c.data_to_send())
    status = None
    for _ in range(200):
        data = sock.recv(65536)
        if not data:
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                status = dict(ev.headers)[b":status"]
            elif isinstance(ev, h2.events.StreamReset):
                status = status or b"reset"
        sock.sendall(c.data_to_send())
        if status:
            break
    sock.close()
    assert status == b"501"
