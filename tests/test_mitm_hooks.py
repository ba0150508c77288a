"""The C hooks API (include/ferry/mitm.h) through its example program, examples/mitm_hooks.c,
built by CMake to build/examples/mitm_hooks, driven with curl against Debian's nginx."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import FERRY, SANITIZED, BAD_LOG, free_port, wait_port
from test_mitm import curl, nginx, s_client_issuer  # noqa: F401  (fixtures)

EXAMPLE = Path(FERRY).parent / "examples" / "mitm_hooks"


@pytest.fixture
def hooks(tmp_path, certs):  # noqa: F811
    assert EXAMPLE.exists(), f"{EXAMPLE} was not built (cmake --build build)"
    port = free_port()
    log = open(tmp_path / "example.log", "w")
    p = subprocess.Popen([str(EXAMPLE), str(port), str(tmp_path / "ca"), str(certs["ca"])],
                         stdout=subprocess.PIPE, stderr=log,
                         env=dict(os.environ, HOME=str(tmp_path)))
    wait_port(port, proc=p)
    p.port = port
    p.proxy = f"http://127.0.0.1:{port}"
    p.ca = tmp_path / "ca" / "ferry-ca.pem"
    yield p
    p.terminate()
    p.wait(timeout=30)
    log.close()
    text = (tmp_path / "example.log").read_text()
    assert p.returncode == 0, text
    assert not any(b in text for b in BAD_LOG), text


@pytest.mark.parametrize("http", ["--http1.1", "--http2"])
def test_mitm_hooks_example(hooks, nginx, http, tmp_path):  # noqa: F811
    r = curl(http, "-D", str(tmp_path / "h"), "-x", hooks.proxy, "--cacert", str(hooks.ca),
             f"https://localhost:{nginx.tls_port}/missing")
    assert r.returncode == 0, r.stderr
    head = (tmp_path / "h").read_text().strip().split("\r\n\r\n")[-1].lower()
    assert re.match(r"http/\S+ 200", head)  # on_response turned nginx's 404 into 200
    assert "x-example-status: 404" in head
    body = r.stdout.decode()
    assert "NGINX" in body and "nginx" not in body  # body hook, in place
    assert body.endswith("-- seen by mitm_hooks\n")  # body hook, longer


def test_mitm_hooks_request_and_local(hooks, nginx):  # noqa: F811
    r = curl("-x", hooks.proxy, f"http://127.0.0.1:{nginx.port}/hook-local")
    assert r.stdout == b"answered by a hook\n"
    r = curl("-x", hooks.proxy, "--cacert", str(hooks.ca), "-H", "X-Test: t",
             f"https://localhost:{nginx.tls_port}/hdr")
    assert r.stdout.startswith(b"ua=curl/")
    assert r.stdout.endswith(b" x=t h=1\n-- seen by mitm_hooks\n")


def test_mitm_hooks_on_tunnel_pass(hooks, nginx):  # noqa: F811
    assert "Origin Test CA" in s_client_issuer(hooks.port, "127.0.0.1", nginx.tls_port)
    assert "Ferry interception CA" in s_client_issuer(hooks.port, "localhost", nginx.tls_port)
