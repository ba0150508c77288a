"""Large proxied bodies over HTTP/2 (src/h2/h2_server.c). Responses: DATA payloads are
written from the proxy's buffers by reference (send_data), and what the transport does not
take is queued; a client that stops reading, then reads slowly in small pieces, must still
get every byte in order on every stream (hash-checked). Requests: DATA the proxy waits for
are handed over where they lie in the read buffer; interleaved uploads must arrive intact.
Over h2c and h2 over TLS.

Origins: Debian's nginx from test_proxy (HTTP/1.1, 4 MiB /huge.bin) and its python echo
origin. Nothing asserts on durations; every socket has a timeout.
"""
import hashlib
import os
import socket
import time

import h2.events
import h2.settings
import pytest

from proxy_kit import SOCK_TIMEOUT, _h2_connect, nginx, origins, start  # noqa: F401


def _slow_get_many(port, tls, paths, pause=1.0):
    """GET `paths` as concurrent streams with a generous window and a small receive buffer;
    read nothing for `pause` seconds (Ferry's writes block), then read in small pieces with
    short stalls. Returns [(path, status, sha256 hex, length)] in request order."""
    s, c = _h2_connect(port, tls)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 8 << 20})
    c.increment_flow_control_window(64 << 20)
    sids = {}
    for p in paths:
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "GET"), (":path", p),
                             (":scheme", "https" if tls else "http"),
                             (":authority", f"127.0.0.1:{port}")], end_stream=True)
        sids[sid] = p
    s.sendall(c.data_to_send())
    time.sleep(pause)
    status = {}
    sha = {sid: hashlib.sha256() for sid in sids}
    n = {sid: 0 for sid in sids}
    done = set()
    reads = 0
    try:
        while len(done) < len(sids):
            data = s.recv(4096)
            assert data, f"closed after {n}"
            reads += 1
            if reads % 200 == 0:
                time.sleep(0.01)
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status[ev.stream_id] = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    sha[ev.stream_id].update(ev.data)
                    n[ev.stream_id] += len(ev.data)
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    done.add(ev.stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    raise AssertionError(f"stream {ev.stream_id} reset: {ev.error_code}")
            out = c.data_to_send()
            if out:
                s.sendall(out)
    finally:
        s.close()
    return [(sids[i], status.get(i), sha[i].hexdigest(), n[i]) for i in sids]


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_h2_client_slow_reader_large_proxied_bodies(server, nginx, tls):  # noqa: F811
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    port = srv.ports[1 if tls else 0]
    got = _slow_get_many(port, tls, ["/huge.bin", "/huge.bin?b", "/big.bin", "/tiny.txt"])
    huge = (200, nginx.huge_sha, len(nginx.huge))
    assert got[0][1:] == huge and got[1][1:] == huge
    assert got[2][1:] == (200, nginx.big_sha, len(nginx.big))
    assert got[3][1] == 200 and got[3][3] > 0


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_h2_client_many_sequential_proxied_bodies(server, nginx, tls):  # noqa: F811
    """Many bodies one after another on one connection, read at full speed: the queue of
    frames written by reference and copied frames stays in order."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    port = srv.ports[1 if tls else 0]
    for _ in range(3):
        got = _slow_get_many(port, tls, ["/big.bin"] * 6 + ["/tiny.txt"] * 4, pause=0)
        for path, st, sha, n in got:
            if path == "/big.bin":
                assert (st, sha, n) == (200, nginx.big_sha, len(nginx.big))
            else:
                assert st == 200 and n > 0


def _h2_post_many(port, tls, bodies, timeout=SOCK_TIMEOUT):
    """POST each of `bodies` on its own stream of one connection, their DATA frames interleaved
    (round robin, as flow control allows), reading all the while. Returns
    [(status, x-sha256 header, sha256 hex of the response body)] in order."""
    s, c = _h2_connect(port, tls)
    c.increment_flow_control_window(64 << 20)
    sids = []
    for b in bodies:
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "POST"), (":path", "/echo"),
                             (":scheme", "https" if tls else "http"),
                             (":authority", f"127.0.0.1:{port}"),
                             ("content-length", str(len(b)))])
        sids.append(sid)
    s.sendall(c.data_to_send())
    sent = {sid: 0 for sid in sids}
    body = dict(zip(sids, bodies))
    hdrs, sha, done = {}, {sid: hashlib.sha256() for sid in sids}, set()
    s.settimeout(0.05)
    deadline = time.time() + timeout
    try:
        while len(done) < len(sids):
            assert time.time() < deadline, f"timed out: sent {sent}, done {done}"
            for sid in sids:
                left = len(body[sid]) - sent[sid]
                if left <= 0 or not c.streams.get(sid) or not c.streams[sid].open:
                    continue
                w = min(c.local_flow_control_window(sid), c.max_outbound_frame_size, left, 5000)
                if w > 0:
                    c.send_data(sid, body[sid][sent[sid]:sent[sid] + w],
                                end_stream=sent[sid] + w == len(body[sid]))
                    sent[sid] += w
            out = c.data_to_send()
            if out:
                s.sendall(out)
            try:
                data = s.recv(1 << 16)
            except (socket.timeout, TimeoutError):
                continue
            assert data, "closed"
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    hdrs[ev.stream_id] = {k.decode(): v.decode() for k, v in ev.headers}
                elif isinstance(ev, h2.events.DataReceived):
                    sha[ev.stream_id].update(ev.data)
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    done.add(ev.stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    raise AssertionError(f"stream {ev.stream_id} reset: {ev.error_code}")
            out = c.data_to_send()
            if out:
                s.sendall(out)
    finally:
        s.close()
    return [(int(hdrs[i][":status"]), hdrs[i].get("x-sha256"), sha[i].hexdigest()) for i in sids]


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_h2_client_interleaved_uploads_relayed(server, origins, tls):  # noqa: F811
    """Request DATA the proxy waits for are handed over from the read buffer (no copy into
    the stream's buffer); uploads interleaved on one connection, several streams' frames in
    one read, must each reach the origin intact and in order."""
    o = origins(name="echo")
    srv = start(server, [o.url])
    port = srv.ports[1 if tls else 0]
    bodies = [os.urandom(n) for n in (300 * 1024, 200 * 1024 + 7, 64 * 1024, 1, 150 * 1024)]
    got = _h2_post_many(port, tls, bodies)
    for b, (st, origin_sha, back_sha) in zip(bodies, got):
        want = hashlib.sha256(b).hexdigest()
        assert st == 200 and origin_sha == want and back_sha == want
