"""HTTP/3 hardening (issue 12): inputs that used to reach an assertion inside libngtcp2 0.12.1,
and malformed requests that were answered.

- A ClientHello without quic_transport_parameters: sent by tests/h3/rawquic.py (QUIC Initial
  protection in Python with python3-cryptography); the server must close with CRYPTO_ERROR
  0x16d (missing_extension) in an Initial packet and go on serving.
- TLS KeyUpdate in CRYPTO frames (1-RTT, and in the Handshake space after Finished): sent by
  build/h3bad (tests/h3/h3bad.c, on our QUIC layer); the server must close with CRYPTO_ERROR
  0x10a (unexpected_message) and go on serving.
- Malformed request field sections (RFC 9114 §4.3.1, §4.1.2): sent by build/h3bad as raw
  QPACK; each must be the stream error H3_MESSAGE_ERROR (0x10e), never a response.

After each bad input a real client (Debian's gtlsclient) must still get a 200.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FERRY

sys.path.insert(0, str(Path(__file__).resolve().parent / "h3"))
import rawquic  # noqa: E402

GTLS = shutil.which("gtlsclient")
H3BAD = os.environ.get("FERRY_H3BAD", str(Path(FERRY).parent / "h3bad"))

CONFIG = """
workers: 1
data-dir: {data}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
log: {{level: info}}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
"""


def still_serves(srv):
    """The process is alive and a real HTTP/3 client gets its 200."""
    assert srv.proc.poll() is None, "ferry died:\n" + srv.log()[-3000:]
    if GTLS is None:
        return
    p = subprocess.run([GTLS, "--exit-on-all-streams-close", "--no-quic-dump", "--no-http-dump",
                        "--timeout=20s", "127.0.0.1", str(srv.port),
                        f"https://127.0.0.1:{srv.port}/after"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert re.search(r"http: stream 0x0 \[:status: 200\]", out), out[-3000:]


def test_h3_client_hello_with_transport_parameters_gets_server_hello(server):
    """The control case: the same hand-made Initial with the extension is answered with the
    server's ServerHello (so the missing-extension test below tests the extension alone)."""
    srv = server(CONFIG)
    got, _ = rawquic.send_initial(srv.port, transport_params=True)
    crypto = [d for k, (o, d) in ((k, v) for k, v in got if k == "CRYPTO")]
    assert crypto and crypto[0][0] == 2, got  # handshake type 2: ServerHello
    assert not [v for k, v in got if k == "CLOSE"], got
    still_serves(srv)


def test_h3_client_hello_without_transport_parameters_is_missing_extension(server):
    """Before the fix: ferry aborted in conn_write_pkt (Assertion conn->negotiated_version)."""
    srv = server(CONFIG)
    for _ in range(2):  # twice: the process survives the first and answers the second alike
        got, _ = rawquic.send_initial(srv.port, transport_params=False)
        closes = [v for k, v in got if k == "CLOSE"]
        assert closes, f"no CONNECTION_CLOSE in the server's Initial: {got}\n{srv.log()[-2000:]}"
        assert closes[0][0] == 0x100 + 109, hex(closes[0][0])  # CRYPTO_ERROR missing_extension
        assert not [v for k, v in got if k == "CRYPTO"], "the server went on with ServerHello"
    assert "ClientHello without quic_transport_parameters" in srv.log()
    assert "quic: ERR_CRYPTO: closing with TLS alert 109" in srv.log()
    still_serves(srv)


def test_h3_empty_datagram_is_ignored(server):
    """Found by fuzz/fuzz_quic_packets.c: before the fix one empty UDP datagram aborted ferry in
    ngtcp2_pkt_decode_version_cid (Assertion 'datalen')."""
    srv = server(CONFIG)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"", ("127.0.0.1", srv.port))
        s.sendto(b"", ("127.0.0.1", srv.port))
    got, _ = rawquic.send_initial(srv.port, transport_params=True)
    assert [k for k, _ in got][:1] == ["CRYPTO"], got
    still_serves(srv)


def h3bad(port, *args):
    if not os.path.exists(H3BAD):
        pytest.fail(f"{H3BAD} not built (cmake --build build)")
    p = subprocess.run([H3BAD, "127.0.0.1", str(port)] + list(args), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip().splitlines()


@pytest.mark.parametrize("space,log", [
    ("1rtt", "TLS KeyUpdate in 1-RTT CRYPTO data"),
    ("handshake", "TLS KeyUpdate in Handshake CRYPTO data"),
])
def test_h3_tls_key_update_is_unexpected_message(server, space, log):
    """Before the fix: 1-RTT aborted ferry in ngtcp2_conn_install_rx_key (Assertion
    '!pktns->crypto.rx.hp_ctx.native_handle'); in the Handshake space the connection hung with
    no answer (h3bad printed TIMEOUT)."""
    srv = server(CONFIG)
    for _ in range(2):
        assert h3bad(srv.port, f"keyupdate-{space}") == ["CLOSED TRANSPORT 0x10a"], srv.log()
    assert log in srv.log()
    still_serves(srv)



@pytest.mark.parametrize("space,hexmsg,log", [
    # before the fix these two were left unanswered until the idle timeout (h3bad: TIMEOUT)
    ("1rtt", "0d00000500000200", "TLS post-handshake message in 1-RTT CRYPTO data"),
    ("1rtt", "14000020" + "00" * 32, "TLS post-handshake message in 1-RTT CRYPTO data"),
    ("1rtt", "04000000", "TLS post-handshake message in 1-RTT CRYPTO data"),
    ("handshake", "04000000", "TLS message after Finished in Handshake CRYPTO data"),
    ("handshake", "0b000000", "TLS message after Finished in Handshake CRYPTO data"),
])
def test_h3_tls_post_handshake_messages_are_unexpected_message(server, space, hexmsg, log):
    """A client has no TLS message to send after its Finished (no post-handshake auth here):
    CertificateRequest, a second Finished, NewSessionTicket in 1-RTT, or anything after
    Finished in the Handshake space all get CRYPTO_ERROR 0x10a."""
    srv = server(CONFIG)
    assert h3bad(srv.port, f"crypto-{space}", hexmsg) == ["CLOSED TRANSPORT 0x10a"], srv.log()
    assert log in srv.log()
    assert "quic: ERR_CRYPTO: closing with TLS alert 10\n" in srv.log()
    still_serves(srv)


MALFORMED = {
    "dup-method": "duplicated pseudo-header field",
    "dup-path": "duplicated pseudo-header field",
    "unknown-pseudo": "unknown or response pseudo-header field",
    "response-pseudo": "unknown or response pseudo-header field",
    "pseudo-after-regular": "pseudo-header field after a regular field",
    "no-authority": "neither :authority nor Host",
    "no-method": "no :method",
    "no-scheme": "no :scheme",
    "no-path": "no :path",
    "empty-authority": "empty :authority",
    "authority-host-differ": ":authority and Host differ",
    "connect-no-authority": "CONNECT without :authority",
    "connect-host-only": "CONNECT without :authority",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_h3_malformed_request_is_message_error(server, case):
    """RFC 9114 §4.1.2/§4.3.1: a stream error H3_MESSAGE_ERROR (0x10e), no response. The bad
    request goes between two good ones on the same connection (one with :authority, one with
    Host only), which are answered. Before the fix: 400 for most, 200 for no-authority."""
    srv = server(CONFIG)
    lines = h3bad(srv.port, "req", "ok", case, "ok-host")
    assert sorted(lines) == sorted([f"{case} RESET 0x10e", "ok ANSWERED", "ok-host ANSWERED"]), \
        lines
    assert f"malformed request ({MALFORMED[case]}): H3_MESSAGE_ERROR" in srv.log()
    still_serves(srv)
