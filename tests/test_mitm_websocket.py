"""A WebSocket inside an intercepted HTTPS tunnel: the client's Upgrade on the decrypted
stream goes through the proxy handler to a TLS websockets origin (python3-websockets) and
frames flow both ways."""
import asyncio
import os
import socket
import ssl
import threading

import pytest

from test_mitm import mitm  # noqa: F401  (fixtures)

websockets = pytest.importorskip("websockets", reason="python3-websockets is in TEST_PKGS")


@pytest.fixture
def ws_origin(certs):  # noqa: F811
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certs["cert"]), str(certs["key"]))
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box = {}

    async def echo(ws, path=None):
        async for msg in ws:
            await ws.send("echo:" + msg)

    async def main():
        srv = await websockets.serve(echo, "127.0.0.1", 0, ssl=ctx)
        box["port"] = srv.sockets[0].getsockname()[1]
        box["srv"] = srv
        ready.set()
        await srv.wait_closed()

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    assert ready.wait(10)
    yield box["port"]
    loop.call_soon_threadsafe(box["srv"].close)
    t.join(10)


def frame(text, opcode=0x1):
    payload = text.encode() if isinstance(text, str) else text
    mask = os.urandom(4)
    assert len(payload) < 126
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + bytes(
        b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(s):
    h = s.recv(2)
    n = h[1] & 0x7F
    data = b""
    while len(data) < n:
        data += s.recv(n - len(data))
    return data.decode()


def test_mitm_websocket_in_intercepted_tunnel(server, certs, ws_origin):  # noqa: F811
    srv = mitm(server, certs)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"CONNECT localhost:{ws_origin} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        assert b, f"closed before the response head: {head!r}"
        head += b
    assert head.startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context(cafile=str(srv.ca))
    ctx.set_alpn_protocols(["http/1.1"])
    t = ctx.wrap_socket(s, server_hostname="localhost")
    t.sendall(f"GET /chat HTTP/1.1\r\nHost: localhost:{ws_origin}\r\nUpgrade: websocket\r\n"
              "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              "Sec-WebSocket-Version: 13\r\n\r\n".encode())
    resp = b""
    while b"\r\n\r\n" not in resp:
        resp += t.recv(1)
    assert resp.startswith(b"HTTP/1.1 101"), resp
    assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in resp  # the origin's accept for our key
    for msg in ("hello", "again"):
        t.sendall(frame(msg))
        assert read_frame(t) == "echo:" + msg
    t.sendall(frame(b"\x03\xe8", opcode=0x8))  # close 1000: the origin answers and closes
    h = t.recv(2)
    assert h[0] & 0x0F == 0x8
    t.close()
