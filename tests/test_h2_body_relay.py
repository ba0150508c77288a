"""Large proxied response bodies to HTTP/2 clients (src/h2/h2_server.c send_data): DATA
payloads are written from the proxy's buffers by reference, and what the transport does not
take is queued; a client that stops reading, then reads slowly in small pieces, must still
get every byte in order on every stream (hash-checked), over h2c and h2 over TLS.

Origin: Debian's nginx from test_proxy (HTTP/1.1, 4 MiB /huge.bin). Nothing asserts on
durations; every socket has a timeout.
"""
import hashlib
import socket
import time

import h2.events
import h2.settings
import pytest

from test_proxy import SOCK_TIMEOUT, _h2_connect, certs, nginx, start  # noqa: F401


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
