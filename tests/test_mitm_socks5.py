"""SOCKS5 listener (kind: socks5) feeding the interception path, with curl --socks5-hostname
and --socks5, and raw sockets for the protocol's refusals."""
import socket
import struct

from test_mitm import curl, nginx  # noqa: F401  (fixtures)


def socks(server, certs, extra=""):  # noqa: F811
    cfg = "workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    kind: socks5\n" \
          f"intercept:\n  ca-dir: {{data}}/ca\n  upstream-ca: {certs['ca']}\n" + extra
    srv = server(cfg)
    srv.ca = srv.data / "ca" / "ferry-ca.pem"
    return srv


def test_mitm_socks5_hostname_intercepted(server, certs, nginx):  # noqa: F811
    srv = socks(server, certs)
    for http in ("--http1.1", "--http2"):
        r = curl("-v", http, "--socks5-hostname", f"127.0.0.1:{srv.port}", "--cacert",
                 str(srv.ca), f"https://localhost:{nginx.tls_port}/index.html")
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout == b"hello from nginx\n"
        assert "Ferry interception CA" in r.stderr.decode()


def test_mitm_socks5_ipv4_plain_relay(server, certs, nginx):  # noqa: F811
    srv = socks(server, certs)
    r = curl("--socks5", f"127.0.0.1:{srv.port}", f"http://127.0.0.1:{nginx.port}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from nginx\n"


def test_mitm_socks5_username_password(server, certs, nginx):  # noqa: F811
    srv = socks(server, certs, "  auth: \"bob:pw1\"\n")
    r = curl("-x", f"socks5h://bob:pw1@127.0.0.1:{srv.port}", "--cacert", str(srv.ca),
             f"https://localhost:{nginx.tls_port}/index.html")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"hello from nginx\n"
    r = curl("-x", f"socks5h://bob:nope@127.0.0.1:{srv.port}",
             f"http://localhost:{nginx.port}/index.html")
    assert r.returncode != 0 and r.stdout == b""
    r = curl("-x", f"socks5h://127.0.0.1:{srv.port}", f"http://localhost:{nginx.port}/")
    assert r.returncode != 0  # no-auth refused when auth is configured


def _exchange(port, *msgs):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    out = []
    for m in msgs:
        s.sendall(m)
        try:
            out.append(s.recv(64))
        except (ConnectionResetError, socket.timeout):
            out.append(b"<closed>")
    s.close()
    return out


def test_mitm_socks5_refusals(server, certs, nginx):  # noqa: F811
    srv = socks(server, certs)
    bind = b"\x05\x02\x00\x01\x7f\x00\x00\x01" + struct.pack(">H", nginx.port)
    assert _exchange(srv.port, b"\x05\x01\x00", bind) == [b"\x05\x00", b"\x05\x07" + b"\x00\x01" +
                                                          b"\x00" * 6]
    bad_atyp = b"\x05\x01\x00\x09\x00\x00"
    assert _exchange(srv.port, b"\x05\x01\x00", bad_atyp)[1][:2] == b"\x05\x08"
    # only username/password offered, none configured: no acceptable method
    assert _exchange(srv.port, b"\x05\x01\x02") == [b"\x05\xff"]
    # wrong version: closed without an answer
    assert _exchange(srv.port, b"\x04\x01\x00")[0] in (b"", b"<closed>")
    assert "malformed greeting" in srv.log()


def test_mitm_socks5_allow(server, certs, nginx):  # noqa: F811
    srv = socks(server, certs, "  allow: [192.0.2.0/24]\n")
    r = curl("--socks5-hostname", f"127.0.0.1:{srv.port}", f"http://localhost:{nginx.port}/")
    assert r.returncode != 0
    assert "not in intercept.allow" in srv.log()
