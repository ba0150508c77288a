"""The WebTransport reverse proxy (`webtransport: {handler: proxy, upstream: NAME}`,
src/handler/wt_proxy.c over src/h3/h3_wt_client.c): client → ferry (proxy) → ferry (echo).
Exercised by ferry-load's wt:// client (echo verified byte for byte, session close and the
origin going away) and by headless Debian Chromium (1 MiB bidi hash, uni stream, datagrams,
stream reset code and session close code through both hops)."""
import json
import signal
import subprocess
import time

from conftest import free_port
from test_webtransport import CONF, LOAD, chromium, make_cert, wt_load

PROXY = """
data-dir: {{data}}
log: {{{{access: {{tmp}}/access.log, access-format: json,
       access-fields: [method, target, status, error]}}}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2, h3]
    tls: {{{{cert: {cert}, key: {key}}}}}
quic:
  webtransport-max-sessions: 8
  webtransport-max-streams: 100
upstreams:
  - name: wt-origin
    servers: [h3://127.0.0.1:{origin}]
    insecure: true
routes:
  - match: {{{{path-exact: /page}}}}
    respond: {{{{body: "<!doctype html><title>wt</title>", headers: {{{{content-type: text/html}}}}}}}}
  - match: {{{{path: /}}}}
    webtransport: {{{{handler: proxy, upstream: wt-origin}}}}
"""


def two_hops(server, tmp_path):
    """(origin echo, proxy in front of it, the certificate's SPKI pin)."""
    cert, key, spki = make_cert(tmp_path)
    origin = server(CONF.format(cert=cert, key=key, sessions=8, streams=100), start=False)
    origin.start(udp_ports=[])
    proxy = server(PROXY.format(cert=cert, key=key, origin=origin.port), start=False)
    proxy.start(udp_ports=[])
    return origin, proxy, spki


def test_wt_proxy_load_echo_streams_and_datagrams(server, tmp_path):
    # 2 sessions x 4 streams through the proxy: 64 streams of 1 MiB (4x the send buffer, so
    # both hops run into backpressure) echoed by the origin and verified byte for byte, and
    # datagrams both ways. Before connection-level credit was returned for bytes used after
    # QUIC closed their stream, this stalled after about 16 MiB per origin connection.
    origin, proxy, _ = two_hops(server, tmp_path)
    rep, dg = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "--sessions", 2, "-m", 4,
                      "--size", 1 << 20, "-n", 64, "-d", 50, "--datagram-rate", 200,
                      "--datagram-size", 200)
    assert rep["requests"] == 64 and rep["ok"] == 64 and rep["errors"] == 0, rep
    assert rep["body_bytes"] == 64 << 20
    assert rep["status"]["2xx"] == 2
    dg = dg["datagrams"]
    assert dg["sent"] > 0 and dg["echoed"] > 0 and dg["bad"] == 0, dg
    proxy.finish()
    origin.finish()
    # the origin saw the proxy's sessions, and echoed the datagrams it got
    assert origin.log().count("WebTransport session ends") == 2, origin.log()[-2000:]


def test_wt_proxy_load_uni_streams(server, tmp_path):
    # --wt-uni through the proxy: the client's uni streams become the proxy's uni streams to
    # the origin, whose answers on its own uni streams come back the same way, verified
    origin, proxy, _ = two_hops(server, tmp_path)
    # (5 streams: the uni stream credit ferry-load's QUIC client gives, test_webtransport)
    rep, _ = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "--sessions", 1, "-m", 3,
                     "--size", 1 << 20, "-n", 5, "-d", 50, "--wt-uni")
    assert rep["requests"] == 5 and rep["ok"] == 5 and rep["errors"] == 0, rep
    assert rep["body_bytes"] == 5 << 20


WT7 = 0x52e4a40fa8db + 7 + 7 // 0x1e  # WebTransport error code 7 as an HTTP/3 code


def test_wt_proxy_reset_stream_relayed_as_reset_with_its_code(server, tmp_path):
    # the client's RESET_STREAM (WebTransport code 7) after half a stream reaches the origin
    # as RESET_STREAM with code 7 (not as STOP_SENDING: the proxy relays the direction that
    # was reset); the origin's echo resets back with 7, which the proxy relays to the client
    origin, proxy, _ = two_hops(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 2, "--size",
                         200000, "-n", 2, "-d", 30, "--wt-fault", "reset-stream")
    assert rep["requests"] == 2 and rep["ok"] == 0 and rep["errors_by_kind"]["reset"] == 2, rep
    assert extra["first_reset_code"] == WT7, extra
    proxy.finish()
    origin.finish()
    log = origin.log()
    assert log.count("reset by the peer (RESET_STREAM), code 7") == 2, log[-2000:]
    assert "STOP_SENDING" not in log, log[-2000:]


def test_wt_proxy_stop_sending_relayed_as_stop_sending(server, tmp_path):
    # the client's STOP_SENDING once 64 KiB of a 4 MiB echo came back: the proxy sends
    # STOP_SENDING toward the origin (it used to reset the origin's stream both ways), and
    # the client gets its code 7 back in the RESET_STREAM its STOP_SENDING asked for
    origin, proxy, _ = two_hops(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 1, "--size",
                         4 << 20, "-n", 1, "-d", 30, "--wt-fault", "stop-sending")
    assert rep["requests"] == 1 and rep["ok"] == 0 and rep["errors_by_kind"]["reset"] == 1, rep
    assert extra["first_reset_code"] == WT7, extra
    proxy.finish()
    origin.finish()
    log = origin.log()
    assert log.count("the peer asked to stop sending (STOP_SENDING)") == 1, log[-2000:]
    assert "(RESET_STREAM)" not in log, log[-2000:]


def test_wt_proxy_client_close_reaches_origin(server, tmp_path):
    # the client closes its session (42 "mid") with streams in flight: the proxy closes the
    # origin's session with the same code and reason, and the client's streams are reset
    origin, proxy, _ = two_hops(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 2, "--size",
                         1000000, "-n", 2, "-d", 30, "--wt-fault", "close-mid-stream")
    assert rep["requests"] == 2 and rep["ok"] == 0 and rep["errors_by_kind"]["reset"] == 2, rep
    assert extra["first_reset_code"] in (0x170d7b68, 0x3994bd84), extra
    proxy.finish()
    origin.finish()
    assert 'session closed by the client: code 42, reason "mid"' in origin.log(), \
        origin.log()[-2000:]


def test_wt_proxy_origin_refusal_status_reaches_client(server, tmp_path):
    # the origin has no WebTransport route at /nowhere (404): the proxy answers the client's
    # CONNECT with that status instead of accepting the session
    origin, proxy, _ = two_hops(server, tmp_path)
    rep, _ = wt_load(f"wt://127.0.0.1:{proxy.port}/nowhere", "-c", 1, "-m", 1, "--size", 100,
                     "-n", 1, "-d", 5)
    assert rep["status"]["4xx"] == 1 and rep["status"]["2xx"] == 0, rep
    proxy.finish()
    lines = [json.loads(l) for l in (proxy.tmp / "access.log").read_text().splitlines()]
    assert [(l["target"], l["status"]) for l in lines if l["method"] == "CONNECT"] == \
        [("/nowhere", 404)], lines


def test_wt_proxy_origin_going_away_closes_client_session(server, tmp_path):
    # the origin stops mid-session (SIGTERM: GOAWAY and DRAIN, then at the end of its 10 s
    # drain its connections close): the proxy ends the client's session, whose open streams
    # are reset with WT_SESSION_GONE. The client keeps 2 streams of 16 MiB busy for up to 25 s.
    origin, proxy, _ = two_hops(server, tmp_path)
    args = [LOAD, f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 2, "--size", 1 << 24,
            "-n", 100000, "-d", 25, "--insecure", "--json"]
    p = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # let the session start; it lasts until the origin's connection ends
    origin.proc.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=60)[0]
    lines = out.strip().splitlines()
    rep, extra = json.loads(lines[0]), json.loads(lines[1])
    assert rep["status"]["2xx"] == 1, rep
    assert rep["errors_by_kind"]["reset"] >= 1, rep
    # WT_SESSION_GONE from the proxy's close, or WebTransport code 0: the origin reset its
    # streams (with H3 codes, which are no WebTransport code) as it went
    assert extra["first_reset_code"] in (0x170d7b68, 0x52e4a40fa8db), extra
    # the origin's DRAIN_WEBTRANSPORT_SESSION (sent with its GOAWAY) was relayed to the client
    assert extra["drains"] == 1, extra
    proxy.finish()
    assert 'upstream wt-origin ended the session: code 0, reason "gone"' in proxy.log(), \
        proxy.log()[-2000:]
    assert proxy.log().count("upstream wt-origin drains the session") == 1, proxy.log()[-2000:]


def test_wt_proxy_client_drain_reaches_origin(server, tmp_path):
    # the client's DRAIN_WEBTRANSPORT_SESSION is relayed to the origin; the session goes on
    origin, proxy, _ = two_hops(server, tmp_path)
    rep, extra = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 2, "--size",
                         100000, "-n", 20, "-d", 30, "--wt-fault", "drain")
    assert rep["requests"] == 20 and rep["ok"] == 20 and rep["errors"] == 0, rep
    assert extra["drains"] == 0, extra
    proxy.finish()
    origin.finish()
    assert origin.log().count("the client drains the session (DRAIN_WEBTRANSPORT_SESSION)") == 1, \
        origin.log()[-2000:]


def test_wt_proxy_chromium(server, tmp_path):
    """Chromium → ferry (proxy) → ferry (echo): 1 MiB bidi echo with a hash, a uni stream
    answered on the origin's uni stream, a stream reset with code 5 that comes back as 5, a
    datagram burst, and the page's close (7, "bye") reaching the origin."""
    origin, proxy, spki = two_hops(server, tmp_path)
    res = chromium(proxy, spki, tmp_path, path="/echo", bytes=1 << 20, burst=200, abort=True)
    assert res["ready"]
    assert res["bidiLen"] == 1 << 20 and res["bidiHash"] == res["sentHash"], res
    assert res["uni"] == "uni hello"
    assert res["beforeAbort"] == "before abort" and res["abortCode"] == 5, res
    assert res["datagram"] is not None and res["datagram"].startswith("dgram ")
    assert 0 < res["burstEchoed"] <= 200 and res["burstBad"] == 0, res
    assert res["closed"]
    proxy.finish()
    origin.finish()
    assert 'session closed by the client: code 7, reason "bye"' in origin.log(), \
        origin.log()[-2000:]


def test_wt_proxy_examples_run_as_written(server, tmp_path):
    """examples/webtransport.yaml (echo at 8443) and examples/webtransport-proxy.yaml (proxy at
    8444 in front of it), unchanged: 16 streams of 1 MiB echoed through the proxy."""
    from conftest import ROOT
    echo = server(args=["run", "-c", str(ROOT / "examples" / "webtransport.yaml")], start=False)
    echo.start(wait_ports=[8443], udp_ports=[8443])
    proxy = server(args=["run", "-c", str(ROOT / "examples" / "webtransport-proxy.yaml")],
                   start=False)
    proxy.start(wait_ports=[], udp_ports=[8444])
    rep, _ = wt_load("wt://127.0.0.1:8444/echo", "-c", 1, "--sessions", 2, "-m", 4, "--size",
                     1 << 20, "-n", 16, "-d", 30)
    assert rep["requests"] == 16 and rep["ok"] == 16 and rep["errors"] == 0, rep


def test_wt_proxy_config_errors(tmp_path):
    """`webtransport: {handler: proxy}` needs an upstream that exists and has h3:// servers."""
    from conftest import FERRY
    base = """listeners:
  - {address: 127.0.0.1:18443, protocols: [h3], tls: self-signed}
upstreams:
  - {name: web, servers: ["http://127.0.0.1:9000"]}
  - {name: quic, servers: ["h3://127.0.0.1:9001"]}
routes:
  - webtransport: %s
"""
    cases = [("{handler: proxy}", "proxy needs `upstream`"),
             ("{handler: proxy, upstream: nope}", "no such upstream"),
             ("{handler: proxy, upstream: web}", "proxies only to h3:// servers"),
             ("{handler: proxy, upstream: quic}", None)]
    for i, (wt, err) in enumerate(cases):
        conf = tmp_path / f"c{i}.yaml"
        conf.write_text(base % wt)
        r = subprocess.run([FERRY, "check", "-c", str(conf)], capture_output=True, text=True,
                           timeout=30, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        if err is None:
            assert r.returncode == 0, r.stderr
        else:
            assert r.returncode == 1 and err in r.stderr, (wt, r.returncode, r.stderr)
            assert "webtransport.upstream" in r.stderr, r.stderr


def test_wt_proxy_origin_unreachable_is_502(server, tmp_path):
    # nothing answers QUIC at the upstream's address: after its connect-timeout (the QUIC
    # handshake timeout, 1 s here) the client's CONNECT gets 502
    cert, key, _ = make_cert(tmp_path)
    dead = free_port()
    conf = PROXY.format(cert=cert, key=key, origin=dead).replace(
        "    insecure: true\n", "    insecure: true\n    connect-timeout: 1s\n")
    proxy = server(conf, start=False)
    proxy.start(udp_ports=[])
    # the client runs 5 s: the 502 must come within them (the default handshake timeout is 10 s)
    rep, _ = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 1, "--size", 100,
                     "-n", 1, "-d", 5)
    assert rep["status"]["5xx"] == 1 and rep["ok"] == 0, rep
    proxy.finish()
    lines = [json.loads(l) for l in (proxy.tmp / "access.log").read_text().splitlines()]
    assert [l["status"] for l in lines if l["method"] == "CONNECT"] == [502], lines
    assert "webtransport proxy: upstream wt-origin: origin unreachable" in proxy.log()


def test_wt_proxy_unreachable_server_retried_on_the_next(server, tmp_path):
    # an upstream of a dead server and the echo: two sessions one after the other (round
    # robin), so one of them is first sent to the dead one; after its connect-timeout it is
    # retried on the echo, and both sessions work
    cert, key, _ = make_cert(tmp_path)
    origin = server(CONF.format(cert=cert, key=key, sessions=8, streams=100), start=False)
    origin.start(udp_ports=[])
    dead = free_port()
    conf = PROXY.format(cert=cert, key=key, origin=origin.port).replace(
        f"servers: [h3://127.0.0.1:{origin.port}]",
        f"servers: [h3://127.0.0.1:{dead}, h3://127.0.0.1:{origin.port}]").replace(
        "    insecure: true\n", "    insecure: true\n    connect-timeout: 1s\n")
    proxy = server(conf, start=False)
    proxy.start(udp_ports=[])
    for _ in range(2):
        rep, _ = wt_load(f"wt://127.0.0.1:{proxy.port}/echo", "-c", 1, "-m", 2, "--size",
                         65536, "-n", 4, "-d", 20)
        assert rep["status"]["2xx"] == 1 and rep["ok"] == 4, rep
    proxy.finish()
    assert f"client 127.0.0.1:{dead}: quic: ERR_HANDSHAKE_TIMEOUT" in proxy.log(), \
        proxy.log()[-2000:]
