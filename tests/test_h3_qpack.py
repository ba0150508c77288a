"""QPACK blocked streams (src/h3/h3_server.c): SETTINGS_QPACK_BLOCKED_STREAMS is a limit the
server enforces. build/qpackblock (tests/h3/qpackblock.c, on our QUIC layer) sends request
streams whose field sections reference a dynamic-table entry not inserted yet, then inserts it.
Up to the limit the streams wait and are answered once the entry arrives; one more is the
connection error QPACK_DECOMPRESSION_FAILED (0x200, RFC 9204 §2.1.2)."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import FERRY

QPACKBLOCK = os.environ.get("FERRY_QPACKBLOCK", str(Path(FERRY).parent / "qpackblock"))


def config(blocked):
    return f"""
workers: 1
data-dir: {{data}}
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h3]
    tls: self-signed
quic: {{{{qpack-blocked-streams: {blocked}}}}}
routes:
  - respond: {{{{status: 200, body: "ok\\n"}}}}
"""


def run(port, n):
    if not os.path.exists(QPACKBLOCK):
        pytest.fail(f"{QPACKBLOCK} not built (cmake --build build)")
    p = subprocess.run([QPACKBLOCK, "127.0.0.1", str(port), str(n)], capture_output=True,
                       text=True, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


@pytest.mark.parametrize("limit", [1, 3])
def test_h3_qpack_blocked_streams_up_to_the_limit_wait(server, limit):
    srv = server(config(limit))
    assert run(srv.port, limit) == f"ANSWERED {limit}"
    assert "h3 connection error" not in srv.log()


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_h3_qpack_blocked_streams_one_more_is_decompression_failed(server, limit):
    srv = server(config(limit) + "log: {{level: info}}\n")
    assert run(srv.port, limit + 1) == "CLOSED APP 0x200"
    assert "h3 connection error 0x200: more streams blocked on the QPACK encoder stream" \
        in srv.log()
