"""Reverse proxy (src/handler/proxy.c, src/upstream/), black box: what reaches the origin and
what comes back — nginx files over every client protocol, https origins, request bodies,
forwarded and hop-by-hop headers, retries, ejection, balancing, pools, h2load through the proxy.
Shared origins and clients are in proxy_kit.py; test_proxy_relay.py has the relay edge cases.

Nothing asserts on durations, only on outcomes (status, bytes, hashes, counts, exit codes,
log lines).
"""
import hashlib
import json
import os
import re
import socket
import subprocess
import threading
import time
import uuid

import pytest

from conftest import bound, http_request
from proxy_kit import (BIG_SIZE, client, CLIENTS, curl, dead_url, DIE_LENGTH, h1_get_many, H2,
                       h2_get_many, nginx, origin_headers, origins, proxy_config, SOCK_TIMEOUT,
                       start, TINY)  # noqa: F401 (fixtures)


def test_nginx_tiny_get(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/tiny.txt")
    assert r.rc == 0 and r.status == 200, r
    assert r.version == CLIENTS[client][3], r
    assert r.body == TINY
    assert r.get("content-length") in (None, str(len(TINY)))


def test_nginx_256k_get(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and r.status == 200, r
    assert len(r.body) == BIG_SIZE
    assert hashlib.sha256(r.body).hexdigest() == nginx.big_sha


def test_nginx_head(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/big.bin", "-I")
    assert r.rc == 0 and r.status == 200, r
    assert r.get("content-length") == str(BIG_SIZE), r
    # with -I curl writes the head as the output: nothing may follow it
    assert r.body.startswith(b"HTTP/") and r.body.endswith(b"\r\n\r\n"), r.body[-200:]
    assert r.body.count(b"\r\n\r\n") == 1 and len(r.body) < 4096
    # and the connection is still good for a GET afterwards (h1 framing of a HEAD response)
    r2 = curl(srv, client, "/tiny.txt")
    assert r2.status == 200 and r2.body == TINY, r2


def test_nginx_404_relayed(server, nginx, client):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    r = curl(srv, client, "/no-such-file")
    assert r.rc == 0 and r.status == 404, r
    assert b"404" in r.body


def test_nginx_many_on_one_client_connection(server, nginx, client):
    """Several URLs on one client connection: small and big responses interleaved (h1:
    sequential keep-alive; h2: all streams at once, multiplexed)."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    idx, scheme, flags, _ = CLIENTS[client]
    if client in H2:
        # python3-h2, not curl: curl 7.88.1 cannot reuse a prior-knowledge h2c connection
        # (error 16 on the second URL against nginx too)
        paths = [("/big.bin" if i % 2 else "/tiny.txt") + f"?i={i}" for i in range(12)]
        res = h2_get_many(srv.ports[idx], client == "h2", paths)
        for i, (st, body) in enumerate(res):
            assert st == 200, (i, st)
            if i % 2:
                assert hashlib.sha256(body).hexdigest() == nginx.big_sha, i
            else:
                assert body == TINY, i
        return
    base = f"{scheme}://127.0.0.1:{srv.ports[idx]}"
    out = srv.tmp / "many"
    out.mkdir()
    args = []
    for i in range(6):
        name = "big.bin" if i % 2 else "tiny.txt"
        args += [f"{base}/{name}?i={i}", "-o", str(out / f"{i}")]
    p = subprocess.run(["curl", "-sS", "--max-time", "20", *flags, *args], capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    for i in range(6):
        data = (out / f"{i}").read_bytes()
        if i % 2:
            assert hashlib.sha256(data).hexdigest() == nginx.big_sha, i
        else:
            assert data == TINY, i


# =============================================================================================
# 2. https:// nginx origin
# =============================================================================================


def test_https_origin_verified_with_ca(server, nginx, certs, client):
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"], upstream={"ca": str(certs["ca"])})
    r = curl(srv, client, "/tiny.txt")
    assert r.rc == 0 and r.status == 200 and r.body == TINY, r
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and r.status == 200, r
    assert hashlib.sha256(r.body).hexdigest() == nginx.big_sha


def test_https_origin_by_name_and_sni(server, nginx, certs):
    """URL by name (localhost), and URL by IP with `sni: localhost`: both verified."""
    srv = start(server, [f"https://localhost:{nginx.tls_port}"], upstream={"ca": str(certs["ca"])})
    r = curl(srv, "h1", "/tiny.txt")
    assert r.status == 200 and r.body == TINY, (r, srv.log())
    srv2 = start(server, [f"https://127.0.0.1:{nginx.tls_port}"],
                 upstream={"ca": str(certs["ca"]), "sni": "localhost"})
    r = curl(srv2, "h2c", "/tiny.txt")
    assert r.status == 200 and r.body == TINY, (r, srv2.log())


def test_https_origin_untrusted_is_502(server, nginx):
    """No `ca`, not insecure: the system store does not know our CA → 502, and the log says
    the TLS handshake failed."""
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"])
    for c in ("h1", "h2c"):
        r = curl(srv, c, "/tiny.txt")
        assert r.rc == 0 and r.status == 502, r
        assert r.body != TINY
    log = srv.log()
    assert re.search(r"upstream up: 127\.0\.0\.1:%d: .*TLS handshake failed" % nginx.tls_port,
                     log), log


def test_https_origin_wrong_name_is_502(server, nginx, certs):
    """Trusted CA but the certificate does not name the SNI we verify → 502."""
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"],
                upstream={"ca": str(certs["ca"]), "sni": "wrong.example"})
    r = curl(srv, "h1", "/tiny.txt")
    assert r.rc == 0 and r.status == 502, r
    assert "TLS handshake failed" in srv.log()


def test_https_origin_insecure(server, nginx, client):
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"], upstream={"insecure": True})
    r = curl(srv, client, "/big.bin")
    assert r.rc == 0 and r.status == 200, r
    assert hashlib.sha256(r.body).hexdigest() == nginx.big_sha


# =============================================================================================
# 3. request bodies
# =============================================================================================


@pytest.mark.parametrize("size", [64 * 1024, 1 << 20], ids=["64k", "1m"])
def test_post_echo(server, origins, client, size):
    o = origins(name="echo")
    srv = start(server, [o.url])
    data = os.urandom(size)
    f = srv.tmp / "post.bin"
    f.write_bytes(data)
    r = curl(srv, client, "/echo", "--data-binary", f"@{f}",
             "-H", "Content-Type: application/octet-stream")
    assert r.rc == 0 and r.status == 200, r
    want = hashlib.sha256(data).hexdigest()
    assert r.get("x-sha256") == want, r  # what the origin received
    assert len(r.body) == size
    assert hashlib.sha256(r.body).hexdigest() == want  # and what came back
    assert o.last()["method"] == "POST" and o.last()["body_len"] == size


def test_post_chunked_from_h1_client(server, origins):
    o = origins(name="echo")
    srv = start(server, [o.url])
    data = os.urandom(64 * 1024 + 7)
    f = srv.tmp / "post.bin"
    f.write_bytes(data)
    r = curl(srv, "h1", "/echo", "-H", "Transfer-Encoding: chunked", "--data-binary", f"@{f}")
    assert r.rc == 0 and r.status == 200, r
    assert r.get("x-sha256") == hashlib.sha256(data).hexdigest(), r
    assert r.body == data
    assert r.get("x-was-chunked") == "yes"  # unknown length stays chunked to the origin
    assert o.last()["body_len"] == len(data)


@pytest.mark.parametrize("client", ["h1", "h1tls", "h2c", "h2"])
def test_post_streamed_without_length(server, origins, client):
    """curl -T - (stdin, unknown length): chunked over h1, DATA frames without content-length
    over h2; the origin receives the whole body."""
    o = origins(name="echo")
    srv = start(server, [o.url])
    data = os.urandom(200 * 1024 + 3)
    r = curl(srv, client, "/echo", "-T", "-", "-X", "POST", input=data)
    assert r.rc == 0 and r.status == 200, r
    assert r.get("x-sha256") == hashlib.sha256(data).hexdigest(), r
    assert r.body == data


def test_put_and_delete_methods(server, origins):
    o = origins(name="m")
    srv = start(server, [o.url])
    r = curl(srv, "h2c", "/echo/put", "-X", "PUT", "--data-binary", "abc")
    assert r.status == 200 and r.body == b"abc", r
    assert o.last()["method"] == "PUT"
    r = curl(srv, "h1", "/thing", "-X", "DELETE")
    assert r.status == 200, r
    assert json.loads(r.body)["method"] == "DELETE"


# =============================================================================================
# 4. headers
# =============================================================================================


def test_forwarded_headers_and_host(server, origins, client):
    o = origins(name="hdr")
    srv = start(server, [o.url])
    idx, scheme, _, _ = CLIENTS[client]
    authority = f"127.0.0.1:{srv.ports[idx]}"
    r = curl(srv, client, "/headers", "-H", "X-Forwarded-For: 10.1.2.3",
             "-H", "X-Forwarded-Proto: gopher", "-H", "X-Forwarded-Host: evil.example")
    assert r.status == 200, r
    h = origin_headers(r)
    assert h["host"] == [authority], h
    assert h["x-forwarded-for"] == ["10.1.2.3, 127.0.0.1"], h
    assert h["x-forwarded-proto"] == [scheme], h
    assert h["x-forwarded-host"] == [authority], h


def test_preserve_host_false(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url], proxy={"preserve-host": False})
    for c in ("h1", "h2"):
        r = curl(srv, c, "/headers", "-H", "Host: client.example")
        assert r.status == 200, r
        h = origin_headers(r)
        assert h["host"] == [f"127.0.0.1:{o.port}"], (c, h)


def test_preserve_host_custom_host(server, origins):
    """preserve-host (default): the client's own Host (any name) reaches the origin."""
    o = origins(name="hdr")
    srv = start(server, [o.url])
    r = curl(srv, "h1", "/headers", "-H", "Host: client.example:8080")
    h = origin_headers(r)
    assert h["host"] == ["client.example:8080"], h
    assert h["x-forwarded-host"] == ["client.example:8080"], h


def test_forwarded_off(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url], proxy={"forwarded": False})
    r = curl(srv, "h1", "/headers")
    h = origin_headers(r)
    assert "x-forwarded-for" not in h and "x-forwarded-proto" not in h, h
    assert "x-forwarded-host" not in h, h


def test_hop_by_hop_request_headers_removed(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url])
    st, _, body = http_request(srv.port, "/headers", headers={
        "Connection": "close, X-Secret",
        "X-Secret": "1",
        "Keep-Alive": "timeout=5",
        "Proxy-Connection": "keep-alive",
        "TE": "trailers",
        "Proxy-Authorization": "Basic Zm9vOmJhcg==",
        "X-Normal": "kept",
    })
    assert st == 200
    h = {k.lower(): v for k, v in json.loads(body)["headers"]}
    for gone in ("x-secret", "keep-alive", "proxy-connection", "te", "proxy-authorization"):
        assert gone not in h, (gone, h)
    assert h.get("connection", "keep-alive").lower() != "close, x-secret", h
    assert "x-secret" not in h.get("connection", "").lower(), h
    assert h["x-normal"] == "kept"


@pytest.mark.parametrize("client", ["h1", "h2c", "h2"])
def test_hop_by_hop_response_headers_removed(server, origins, client):
    """The origin sends Connection: close, X-Origin-Secret / Keep-Alive / Proxy-Connection /
    X-Origin-Secret: none reaches the client (over h2 any of them is a protocol error)."""
    o = origins(name="hop")
    srv = start(server, [o.url])
    r = curl(srv, client, "/hop")
    assert r.rc == 0 and r.status == 200 and r.body == b"hop\n", r
    names = r.names()
    for gone in ("keep-alive", "x-origin-secret", "proxy-connection"):
        assert gone not in names, (gone, r)
    if client in H2:
        assert "connection" not in names, r
    assert r.get("x-kept") == "yes"
    # the origin closed its connection: the next request still works (fresh connection)
    r = curl(srv, client, "/hop")
    assert r.status == 200 and r.body == b"hop\n", r


def test_set_and_remove_headers_both_ways(server, origins):
    o = origins(name="hdr")
    srv = start(server, [o.url], proxy={
        "set-headers": {"X-Set": "by-ferry", "X-Replace": "new"},
        "remove-headers": ["X-Drop"],
        "response-set-headers": {"X-Replace-Me": "ferry", "X-Added": "yes"},
        "response-remove-headers": ["X-Remove-Me"],
        "via": True,
    })
    for c in ("h1", "h2"):
        r = curl(srv, c, "/headers", "-H", "X-Replace: old", "-H", "X-Drop: 1",
                 "-H", "X-Keep: 1")
        assert r.status == 200, r
        h = origin_headers(r)
        assert h["x-set"] == ["by-ferry"], h
        assert h["x-replace"] == ["new"], h
        assert "x-drop" not in h, h
        assert h["x-keep"] == ["1"], h
        assert h["via"] == ["1.1 ferry"], h
        assert r.all("x-replace-me") == ["ferry"], r
        assert r.get("x-added") == "yes", r
        assert "x-remove-me" not in r.names(), r
        assert r.get("x-origin") == "hdr", r
        assert r.get("via") == "1.1 ferry", r


def test_strip_and_add_prefix(server, origins):
    o = origins(name="pfx")
    routes = [
        {"match": {"path": "/api"},
         "proxy": {"upstream": "up", "strip-prefix": "/api", "add-prefix": "/v1"}},
        {"match": {"path": "/static"}, "proxy": {"upstream": "up", "strip-prefix": "/static/"}},
        {"match": {"path": "/"}, "proxy": {"upstream": "up", "add-prefix": "/root/"}},
    ]
    srv = server(proxy_config([o.url], routes=routes))
    cases = [
        ("/api/users?x=1", "/v1/users?x=1"),
        ("/api/a/b/c", "/v1/a/b/c"),
        ("/static/css/site.css", "/css/site.css"),
        ("/static", "/"),
        ("/other/page?q=2", "/root/other/page?q=2"),
    ]
    for c in ("h1", "h2c"):
        for sent, want in cases:
            r = curl(srv, c, sent)
            assert r.status == 200, (sent, r)
            assert json.loads(r.body)["path"] == want, (c, sent, r.body)


def test_proxy_shorthand_route(server, origins):
    o = origins(name="short")
    routes = [{"match": {"path": "/"}, "proxy": "up"}]
    srv = server(proxy_config([o.url], routes=routes))
    r = curl(srv, "h1", "/x")
    assert r.status == 200 and json.loads(r.body)["origin"] == "short", r


# =============================================================================================
# 5. resilience
# =============================================================================================


def test_retry_to_the_healthy_server(server, origins):
    o = origins(name="ok")
    srv = start(server, [dead_url(), o.url])
    for c in ("h1", "h2c"):
        for i in range(10):
            r = curl(srv, c, f"/r{i}")
            assert r.rc == 0 and r.status == 200, (c, i, r, srv.log()[-2000:])
            assert json.loads(r.body)["origin"] == "ok"
    assert o.count() == 20
    assert "refused" in srv.log()


def test_retry_on_one_keepalive_connection(server, origins):
    o = origins(name="ok")
    srv = start(server, [dead_url(), o.url])
    res = h1_get_many(srv.port, [f"/k{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20


def test_single_dead_server_is_502(server):
    url = dead_url()
    srv = start(server, [url])
    for c in ("h1", "h2c", "h2"):
        r = curl(srv, c, "/x")
        assert r.rc == 0 and r.status == 502, (c, r)
    port = url.rsplit(":", 1)[1]
    assert re.search(r"upstream up: 127\.0\.0\.1:%s: .*refused" % port, srv.log()), srv.log()


def test_never_answering_origin_is_504(server, origins):
    o = origins(kind="silent")
    srv = start(server, [o.url], upstream={"first-byte-timeout": "1s", "retries": 0})
    for c in ("h1", "h2c"):
        r = curl(srv, c, "/x")
        assert r.rc == 0 and r.status == 504, (c, r)
    assert "first-byte timeout" in srv.log(), srv.log()


def test_never_answering_origin_post_is_504(server, origins):
    o = origins(kind="silent")
    srv = start(server, [o.url], upstream={"first-byte-timeout": "1s"})
    r = curl(srv, "h2c", "/x", "--data-binary", "hello")
    assert r.rc == 0 and r.status == 504, r


def test_origin_dies_mid_response(server, origins, client):
    """Content-Length: 100000, 10 bytes, close: the client must see an aborted response
    (h1: curl 18, connection closed short; h2: RST_STREAM, curl 92/16), never a complete 200."""
    o = origins(name="die")
    srv = start(server, [o.url])
    r = curl(srv, client, "/die")
    assert r.rc != 0, r
    assert len(r.body) < DIE_LENGTH, r
    if client in H2:
        assert r.rc in (16, 92), r
    else:
        assert r.rc == 18, r
    assert "mid-response" in srv.log()
    # the proxy is fine afterwards
    r = curl(srv, client, "/ok")
    assert r.rc == 0 and r.status == 200, r


def test_origin_dies_mid_response_raw_h1(server, origins):
    """Byte level: the announced length is passed on and the connection is closed short."""
    o = origins(name="die")
    srv = start(server, [o.url])
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SOCK_TIMEOUT) as s:
        s.sendall(b"GET /die HTTP/1.1\r\nHost: a\r\n\r\n")
        data = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        except ConnectionResetError:
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), data[:300]
    m = re.search(rb"(?i)content-length: *(\d+)", head)
    if m:
        assert int(m.group(1)) == DIE_LENGTH
        assert len(body) < DIE_LENGTH
    else:  # chunked: must not carry the terminating 0-chunk
        assert b"\r\n0\r\n\r\n" not in body, data


def test_ejection_and_recovery(server, origins):
    bad = origins(name="bad", status=500)
    good = origins(name="good")
    srv = start(server, [bad.url, good.url],
                upstream={"max-fails": 2, "fail-timeout": "5s"})
    # (5 s: the bad server must stay out for the rest of these 20 on a loaded machine)
    res = h1_get_many(srv.port, [f"/e{i}" for i in range(20)])
    statuses = [s for s, _, _ in res]
    # 5xx is relayed (never retried), but after max-fails the bad server sits out
    assert statuses.count(500) == bad.count()
    assert bad.count() <= 3, (bad.count(), good.count())
    assert good.count() >= 17
    assert "ejected" in srv.log(), srv.log()
    # recovery: the server is healthy again and comes back after fail-timeout
    bad.status = 200
    before = bad.count()
    deadline = time.time() + bound(30)  # until fail-timeout is over and it is picked again
    while bad.count() == before and time.time() < deadline:
        assert [s for s, _, _ in h1_get_many(srv.port, ["/g"])] == [200]
        time.sleep(0.1)
    assert bad.count() > before, "the ejected server never came back"
    before = bad.count()
    res = h1_get_many(srv.port, [f"/f{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20
    assert bad.count() - before >= 5, (bad.count() - before)


def test_ejection_of_refusing_server(server, origins):
    """Connect errors count too: with one dead server out of two and retries 0, the dead one is
    ejected after max-fails and later requests all succeed."""
    good = origins(name="good")
    srv = start(server, [dead_url(), good.url],
                upstream={"max-fails": 2, "fail-timeout": "10s", "retries": 0})
    res = h1_get_many(srv.port, [f"/d{i}" for i in range(20)])
    statuses = [s for s, _, _ in res]
    assert statuses.count(502) <= 2, statuses
    assert statuses[-10:] == [200] * 10, statuses


# =============================================================================================
# 6. balancing
# =============================================================================================


def test_round_robin_even_split(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url])
    res = h1_get_many(srv.port, [f"/rr{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20
    assert (a.count(), b.count()) == (10, 10)


def test_round_robin_even_split_h2(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url])
    for i in range(20):
        assert curl(srv, "h2", f"/rr{i}").status == 200
    assert (a.count(), b.count()) == (10, 10)


def test_weighted_round_robin(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [(a.url, 3), (b.url, 1)])
    res = h1_get_many(srv.port, [f"/w{i}" for i in range(20)])
    assert [s for s, _, _ in res] == [200] * 20
    assert (a.count(), b.count()) == (15, 5)


def test_random_balance_uses_both(server, origins):
    a, b = origins(name="a"), origins(name="b")
    srv = start(server, [a.url, b.url], upstream={"balance": "random"})
    res = h1_get_many(srv.port, [f"/rnd{i}" for i in range(60)])
    assert [s for s, _, _ in res] == [200] * 60
    assert a.count() + b.count() == 60
    assert a.count() >= 10 and b.count() >= 10, (a.count(), b.count())


def test_least_requests_prefers_idle_server(server, origins):
    slow = origins(name="slow", delay=1.0)
    fast = origins(name="fast")
    srv = start(server, [slow.url, fast.url], upstream={"balance": "least-requests"})
    results, errors = [], []

    def worker(k):
        try:
            results.extend(s for s, _, _ in h1_get_many(srv.port, [f"/slow{k}-{i}"
                                                                   for i in range(5)]))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, (errors, srv.log()[-4000:])
    assert results == [200] * 20
    # round robin would send 10 to each; least-requests sends the slow one only what arrives
    # while both are idle
    assert slow.count() + fast.count() == 20
    assert slow.count() <= 5, (slow.count(), fast.count())


# =============================================================================================
# 7. pooling
# =============================================================================================


def test_pool_reuse_h1(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    marker = uuid.uuid4().hex
    res = h1_get_many(srv.port, [f"/tiny.txt?pool={marker}&i={i}" for i in range(200)])
    assert all(s == 200 and b == TINY for s, _, b in res)
    lines = nginx.access_lines(marker, expect=200)
    assert len(lines) == 200
    conns = {c for c, _ in lines}
    assert len(conns) <= 3, (len(conns), sorted(conns))


def test_pool_reuse_from_separate_client_connections(server, nginx):
    """Each client request on its own connection (h2c curl process): the origin connection
    outlives the client connections."""
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    marker = uuid.uuid4().hex
    for i in range(20):
        r = curl(srv, "h2c" if i % 2 else "h1", f"/tiny.txt?pool={marker}&i={i}")
        assert r.status == 200 and r.body == TINY, r
    lines = nginx.access_lines(marker, expect=20)
    assert len(lines) == 20
    conns = {c for c, _ in lines}
    assert len(conns) <= 2, conns


def test_pool_reuse_https_origin(server, nginx, certs):
    srv = start(server, [f"https://127.0.0.1:{nginx.tls_port}"], upstream={"ca": str(certs["ca"])})
    marker = uuid.uuid4().hex
    res = h1_get_many(srv.port, [f"/tiny.txt?pool={marker}&i={i}" for i in range(50)])
    assert all(s == 200 and b == TINY for s, _, b in res)
    conns = {c for c, _ in nginx.access_lines(marker, expect=50)}
    assert len(conns) <= 2, conns


def test_keepalive_zero_disables_pool(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"], upstream={"keepalive": 0})
    marker = uuid.uuid4().hex
    res = h1_get_many(srv.port, [f"/tiny.txt?pool={marker}&i={i}" for i in range(10)])
    assert all(s == 200 for s, _, _ in res)
    conns = {c for c, _ in nginx.access_lines(marker, expect=10)}
    assert len(conns) == 10, conns


def test_pooled_connection_closed_by_origin_is_not_fatal(server, origins):
    """The Python origin closes kept-alive connections after /hop (Connection: close); and
    a restarted origin invalidates every pooled connection: requests still succeed."""
    o = origins(name="p")
    srv = start(server, [o.url])
    assert curl(srv, "h1", "/a").status == 200
    assert curl(srv, "h1", "/hop").status == 200
    assert curl(srv, "h1", "/b").status == 200
    # restart the origin on the same port: the pooled connection is dead
    port = o.port
    o.stop()
    origins(name="p2", port=port)
    for i in range(3):
        r = curl(srv, "h1", f"/after{i}")
        assert r.rc == 0 and r.status == 200, (r, srv.log()[-2000:])
        assert json.loads(r.body)["origin"] == "p2", r


# =============================================================================================
# 8. load
# =============================================================================================


def _h2load(args, timeout=60):
    p = subprocess.run(["h2load", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("mode", ["h2c", "h1"])
def test_h2load_through_proxy(server, nginx, mode):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    args = ["-n", "2000", "-c", "8"]
    args += ["-m", "8"] if mode == "h2c" else ["--h1"]
    rc, out = _h2load(args + [srv.url("/tiny.txt")])
    assert rc == 0, out
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored", out)
    assert m, out
    assert int(m.group(4)) == 2000 and int(m.group(5)) == 0 and int(m.group(6)) == 0, out
    assert re.search(r"status codes: 2000 2xx", out), out


def test_h2load_big_bodies_through_proxy(server, nginx):
    srv = start(server, [f"http://127.0.0.1:{nginx.port}"])
    rc, out = _h2load(["-n", "200", "-c", "4", "-m", "4", srv.url("/big.bin")])
    assert rc == 0, out
    assert re.search(r"200 succeeded, 0 failed, 0 errored", out), out
    assert re.search(r"status codes: 200 2xx", out), out


# =============================================================================================
# 9. more response shapes and failure modes
# =============================================================================================
