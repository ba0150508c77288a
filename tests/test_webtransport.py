"""WebTransport over HTTP/3 (draft-ietf-webtrans-http3): `webtransport: echo` routes on an h3
listener, exercised by headless Debian Chromium (playwright-core, as in test_mitm_chromium)
and by ferry-load's wt:// client."""
import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from test_mitm_chromium import playwright

CONF = """
data-dir: {{data}}
log: {{{{access: {{tmp}}/access.log, access-format: json,
       access-fields: [method, target, status, error]}}}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: {{{{cert: {cert}, key: {key}}}}}
quic:
  webtransport-max-sessions: {sessions}
  webtransport-max-streams: {streams}
routes:
  - match: {{{{path: /echo}}}}
    webtransport: echo
  - match: {{{{path-exact: /page}}}}
    respond: {{{{body: "<!doctype html><title>wt</title>", headers: {{{{content-type: text/html}}}}}}}}
  - match: {{{{path: /plain}}}}
    respond: {{{{body: "not webtransport"}}}}
"""


def spki_of(cert):
    pub = subprocess.run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"],
                         check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub,
                         check=True, capture_output=True).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def make_cert(d):
    d = Path(d)
    key, cert = d / "wt.key", d / "wt.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "10", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:wt.test"], check=True, capture_output=True)
    return cert, key, spki_of(cert)


def start(server, tmp_path, sessions=4, streams=100):
    cert, key, spki = make_cert(tmp_path)
    srv = server(CONF.format(cert=cert, key=key, sessions=sessions, streams=streams),
                 start=False)
    srv.start(udp_ports=[])
    return srv, spki


def chromium(srv, spki, tmp_path, origin=None, extra=(), **what):
    if not Path("/usr/bin/chromium").exists():
        pytest.fail("Debian chromium is not installed (Makefile TEST_PKGS lists it)")
    modules = playwright()
    env = dict(os.environ, HOME=str(tmp_path), NODE_PATH=str(modules))
    r = subprocess.run(["node", str(ROOT / "tests" / "wt_chromium.js"),
                        origin or f"https://127.0.0.1:{srv.port}", spki,
                        str(tmp_path / "profile"), json.dumps(what), json.dumps(list(extra))],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"], (out, srv.log()[-3000:])
    return out["result"]


def test_webtransport_chromium_echo(server, tmp_path):
    srv, spki = start(server, tmp_path)
    res = chromium(srv, spki, tmp_path, path="/echo", bytes=1 << 20, burst=1000, abort=True)
    assert res["ready"]
    # 1,000 datagrams in one burst: loss is allowed on the way (datagrams are unreliable), but
    # Ferry's own send queue absorbs the burst and refuses none of the echoes
    print("datagram burst: %d of 1000 echoed" % res["burstEchoed"])
    assert 0 < res["burstEchoed"] <= 1000 and res["burstBad"] == 0, res
    srv.finish()
    assert "dropped 0 (send queue full)" in srv.log(), srv.log()[-2000:]
    assert res["bidiLen"] == 1 << 20
    assert res["bidiHash"] == res["sentHash"]
    assert res["uni"] == "uni hello"
    # RESET_STREAM with WebTransport code 5 (mapped onto the H3 code range) comes back as 5
    assert res["beforeAbort"] == "before abort" and res["abortCode"] == 5, res
    assert res["datagram"] is not None and res["datagram"].startswith("dgram ")
    assert res["closed"]
    # the page's close({closeCode: 7, reason: 'bye'}) reached us as a CLOSE capsule
    assert 'session closed by the client: code 7, reason "bye"' in srv.log(), srv.log()[-2000:]


def test_webtransport_chromium_route_without_webtransport_refused(server, tmp_path):
    srv, spki = start(server, tmp_path)
    res = chromium(srv, spki, tmp_path, refused="/plain")
    assert res["refused"], res
    res = chromium(srv, spki, tmp_path, refused="/nowhere")
    assert res["refused"], res
    srv.finish()
    lines = [json.loads(l) for l in (srv.tmp / "access.log").read_text().splitlines()]
    connects = [(l["target"], l["status"]) for l in lines
                if l.get("method") == "CONNECT"]
    assert ("/plain", 501) in connects, lines
    assert ("/nowhere", 404) in connects, lines


def test_webtransport_chromium_stream_limit(server, tmp_path):
    # quic.webtransport-max-streams: 2 -> of 5 streams held open, 2 echo, 3 are refused
    srv, spki = start(server, tmp_path, streams=2)
    res = chromium(srv, spki, tmp_path, path="/echo", streams=5)
    assert res["streamsOk"] == 2 and res["streamsFailed"] == 3, res
    assert srv.log().count("quic.webtransport-max-streams (2) streams open: refused") == 3


def test_webtransport_example_runs_as_written(server, tmp_path):
    """examples/webtransport.yaml, unchanged: an echo at https://127.0.0.1:8443/echo with a
    self-signed certificate (made in the data dir under HOME) on h1, h2 and h3."""
    example = ROOT / "examples" / "webtransport.yaml"
    srv = server(args=["run", "-c", str(example)], start=False)
    srv.start(wait_ports=[8443], udp_ports=[8443])
    certs = list(Path(srv.tmp).rglob("selfsigned.crt"))
    assert len(certs) == 1, certs
    r = subprocess.run(["curl", "-sk", "--http2", "https://127.0.0.1:8443/"],
                       capture_output=True, text=True, timeout=30)
    assert "WebTransport echo at /echo" in r.stdout
    srv.port = 8443
    res = chromium(srv, spki_of(certs[0]), tmp_path, page="/", path="/echo", bytes=65536)
    assert res["bidiHash"] == res["sentHash"] and res["uni"] == "uni hello"


LOAD = os.environ.get("FERRY_LOAD_BIN", str(ROOT / "build" / "ferry-load"))


def wt_load(*args):
    """ferry-load wt:// --json: (report, its second line: datagram counts, close codes)."""
    assert os.access(LOAD, os.X_OK), f"ferry-load binary missing: {LOAD}"
    p = subprocess.run([LOAD, *map(str, args), "--insecure", "--json"], capture_output=True,
                       text=True, timeout=60)
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 2, (p.returncode, p.stdout, p.stderr)
    return json.loads(lines[0]), json.loads(lines[1])


def test_webtransport_load_streams_and_datagrams(server, tmp_path):
    # 2 sessions x 4 streams, 200 streams of 64 KiB echoed and verified byte for byte
    srv, _ = start(server, tmp_path)
    rep, dg = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 2, "-m", 4, "--size", 65536,
                      "-n", 200, "-d", 30, "--datagram-rate", 1000, "--datagram-size", 200)
    assert rep["protocol"] == "webtransport"
    assert rep["requests"] == 200 and rep["ok"] == 200 and rep["errors"] == 0, rep
    assert rep["body_bytes"] == 200 * 65536
    assert rep["status"]["2xx"] == 2  # the two sessions
    dg = dg["datagrams"]
    assert dg["sent"] > 0 and dg["echoed"] > 0 and dg["bad"] == 0, dg


def test_webtransport_load_uni_streams(server, tmp_path):
    # --wt-uni: unidirectional streams of 100 kB, 3 at a time; each is echoed on a uni stream
    # the server opens, matched to its stream and verified byte for byte. 5 per connection:
    # ferry-load's QUIC client allows the server 8 uni streams, 3 of them HTTP/3's own, and
    # gives no more credit as they end (quic_client: to be looked at)
    srv, _ = start(server, tmp_path)
    rep, _ = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "--sessions", 1, "-m", 3,
                     "--size", 100000, "-n", 5, "-d", 30, "--wt-uni")
    assert rep["requests"] == 5 and rep["ok"] == 5 and rep["errors"] == 0, rep
    assert rep["body_bytes"] == 5 * 100000


def test_webtransport_session_limit(server, tmp_path):
    # quic.webtransport-max-sessions: 2 -> the third session on one connection gets 429
    srv, _ = start(server, tmp_path, sessions=2)
    rep, _ = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 1, "--size", 1000,
                     "--sessions", 3, "-n", 20, "-d", 30)
    assert rep["status"]["2xx"] == 2 and rep["status"]["4xx"] == 1, rep
    assert rep["errors_by_kind"]["status"] == 1
    assert rep["ok"] == 20
    srv.finish()
    lines = [json.loads(l) for l in (srv.tmp / "access.log").read_text().splitlines()]
    assert [l["status"] for l in lines if l["method"] == "CONNECT"].count(429) == 1, lines


def test_webtransport_errors_stream_for_unknown_session(server, tmp_path):
    # streams naming a session that does not exist are refused (reset), none is echoed
    srv, _ = start(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 2, "--size", 1000,
                         "-n", 4, "-d", 30, "--wt-fault", "unknown-session")
    assert rep["requests"] == 4 and rep["ok"] == 0, rep
    assert rep["errors_by_kind"]["reset"] == 4, rep
    assert srv.log().count("WebTransport stream for unknown session 4000: refused") == 4
    assert extra["first_reset_code"] == 0x3994bd84, extra  # WT_BUFFERED_STREAM_REJECTED


def test_webtransport_errors_session_closed_mid_stream(server, tmp_path):
    # the client closes its session (CLOSE_WEBTRANSPORT_SESSION 42 "mid") while two 1 MB
    # streams are in flight: the server resets both and tells the handler the code and reason
    srv, _ = start(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 2, "--size",
                         1000000, "-n", 2, "-d", 30, "--wt-fault", "close-mid-stream")
    assert rep["requests"] == 2 and rep["ok"] == 0, rep
    # WT_SESSION_GONE, or WT_BUFFERED_STREAM_REJECTED for a stream whose first bytes came
    # after the CLOSE capsule
    assert extra["first_reset_code"] in (0x170d7b68, 0x3994bd84), extra
    assert rep["errors_by_kind"]["reset"] == 2, rep
    assert 'session closed by the client: code 42, reason "mid"' in srv.log()


def test_webtransport_drain_on_shutdown(server, tmp_path):
    # ferry stops (SIGTERM) with a session open: with its GOAWAY goes one
    # DRAIN_WEBTRANSPORT_SESSION on the session, which the client counts
    import signal
    import time
    srv, _ = start(server, tmp_path)
    args = [LOAD, f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 1, "--size", 1 << 24,
            "-n", 100000, "-d", 4, "--insecure", "--json"]
    p = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # the session is up (it lasts until the client's -d ends)
    srv.proc.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=60)[0]
    lines = out.strip().splitlines()
    rep, extra = json.loads(lines[0]), json.loads(lines[1])
    assert rep["status"]["2xx"] == 1, rep
    assert extra["drains"] == 1, extra


def test_webtransport_client_drain_reaches_handler(server, tmp_path):
    srv, _ = start(server, tmp_path)
    rep, _ = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 2, "--size", 5000,
                     "-n", 10, "-d", 30, "--wt-fault", "drain")
    assert rep["requests"] == 10 and rep["ok"] == 10, rep
    srv.finish()
    assert srv.log().count("the client drains the session (DRAIN_WEBTRANSPORT_SESSION)") == 1


WT7 = 0x52e4a40fa8db + 7 + 7 // 0x1e  # WebTransport error code 7 as an HTTP/3 code


def test_webtransport_stream_reset_code_reaches_handler(server, tmp_path):
    # the client sends half a stream, then RESET_STREAM with WebTransport code 7: the echo
    # handler is told RESET_STREAM with code 7 and resets its answer with the same code
    srv, _ = start(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 2, "--size",
                         200000, "-n", 2, "-d", 30, "--wt-fault", "reset-stream")
    assert rep["requests"] == 2 and rep["ok"] == 0 and rep["errors_by_kind"]["reset"] == 2, rep
    assert extra["first_reset_code"] == WT7, extra
    srv.finish()
    assert srv.log().count("reset by the peer (RESET_STREAM), code 7") == 2, srv.log()[-2000:]
    assert "STOP_SENDING" not in srv.log()


def test_webtransport_stop_sending_reaches_handler_as_stop(server, tmp_path):
    # the client's STOP_SENDING (code 7) once 64 KiB of a 4 MiB echo came back: the handler
    # is told STOP_SENDING, not a reset, and QUIC answers the client with RESET_STREAM 7
    srv, _ = start(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 1, "--size",
                         4 << 20, "-n", 1, "-d", 30, "--wt-fault", "stop-sending")
    assert rep["requests"] == 1 and rep["ok"] == 0 and rep["errors_by_kind"]["reset"] == 1, rep
    assert extra["first_reset_code"] == WT7, extra
    srv.finish()
    assert srv.log().count("the peer asked to stop sending (STOP_SENDING)") == 1, \
        srv.log()[-2000:]
    assert "(RESET_STREAM)" not in srv.log()


def test_webtransport_errors_datagram_without_stream_id(server, tmp_path):
    # an HTTP Datagram too short for its quarter stream id: H3_DATAGRAM_ERROR (0x33)
    srv, _ = start(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 1, "--size", 1000000,
                         "-n", 1, "-d", 30, "--wt-fault", "bad-datagram")
    assert extra["peer_close_code"] == 0x33, extra
    assert "h3 connection error 0x33: HTTP Datagram without a quarter stream id" in srv.log()


def test_webtransport_session_waits_for_client_settings(server, tmp_path):
    # the client's CONNECT arrives 50 ms before its SETTINGS: the session is answered once
    # they come (it was 400 "no HTTP Datagrams negotiated" before), and its streams echo
    srv, _ = start(server, tmp_path)
    rep, _ = wt_load(f"wt://127.0.0.1:{srv.port}/echo", "-c", 1, "-m", 2, "--size", 5000,
                     "-n", 10, "-d", 30, "--wt-fault", "late-settings")
    assert rep["status"]["2xx"] == 1 and rep["status"]["4xx"] == 0, rep
    assert rep["requests"] == 10 and rep["ok"] == 10, rep


def test_webtransport_chromium_through_quic_passthrough(server, tmp_path):
    """A second ferry relays QUIC by SNI at layer 4 (mode quic-passthrough) to the WebTransport
    server: Chromium's session, its streams and datagrams go through it unchanged."""
    srv, spki = start(server, tmp_path)
    front = server(f"""
l4:
  - listen: 127.0.0.1:{{port}}
    mode: quic-passthrough
    sni:
      - server-name: wt.test
        target: 127.0.0.1:{srv.port}
""", start=False)
    front.start(wait_ports=[], udp_ports=[front.port])
    res = chromium(srv, spki, tmp_path, origin=f"https://wt.test:{front.port}",
                   extra=["--host-resolver-rules=MAP wt.test 127.0.0.1"], path="/echo",
                   bytes=1 << 20)
    assert res["bidiLen"] == 1 << 20 and res["bidiHash"] == res["sentHash"], res
    assert res["uni"] == "uni hello"
    assert res["datagram"] is not None and res["closed"]
    assert 'session closed by the client: code 7, reason "bye"' in srv.log()


def test_webtransport_embedded_app_echo(tmp_path):
    """The embedding API (include/ferry/webtransport.h) through examples/wt_echo_app.c: an
    application echo behind `webtransport: app`, with backpressure: 32 streams of 1 MiB over
    2 sessions x 4 streams verified byte for byte, datagrams echoed."""
    from conftest import BAD_LOG, FERRY, free_port
    example = Path(FERRY).parent / "examples" / "wt_echo_app"
    assert example.exists(), f"{example} was not built (cmake --build build)"
    port = free_port()
    log = open(tmp_path / "example.log", "w")
    p = subprocess.Popen([str(example), str(port)], stdout=subprocess.PIPE, stderr=log,
                         text=True, env=dict(os.environ, HOME=str(tmp_path)))
    try:
        assert "wt_echo_app: https://127.0.0.1:" in p.stdout.readline()  # listening
        rep, dg = wt_load(f"wt://127.0.0.1:{port}/echo", "-c", 1, "--sessions", 2, "-m", 4,
                          "--size", 1 << 20, "-n", 32, "-d", 30, "--datagram-rate", 100)
        assert rep["requests"] == 32 and rep["ok"] == 32 and rep["errors"] == 0, rep
        assert dg["datagrams"]["echoed"] > 0 and dg["datagrams"]["bad"] == 0, dg
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()
    text = (tmp_path / "example.log").read_text()
    assert p.returncode == 0, text
    assert not any(b in text for b in BAD_LOG), text
    assert text.count("wt_echo_app: session closed") == 2, text
