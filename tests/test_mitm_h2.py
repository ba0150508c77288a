"""Intercepting proxy ⇄ HTTP/2 origins (issue 7 follow-ups): protocol mirroring end to end
(the origin's ALPN learned by the probe decides the protocol Ferry speaks to it, whatever the
client speaks to Ferry), name resolution off the worker thread (unknown names give a 502 that
names them; /etc/hosts names still work). Real clients: curl through `--proxy`, Debian nginx."""
import time

import pytest

from test_mitm import certs, curl, mitm, nginx  # noqa: F401  (fixtures and helpers)


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
