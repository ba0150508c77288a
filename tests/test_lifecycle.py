"""Listener and process lifecycle: accepting when descriptors run out, ports another process
holds, the stop (SIGTERM) with long-lived connections, tunnel idle timeouts, and the access
log's order at stop.

Every wait is bounded (conftest.wait_for); nothing asserts on durations.
"""
import asyncio
import calendar
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import BAD_LOG, FERRY, bound, free_port, http_request, owns_port, wait_for


class Proc:
    """ferry run -c, started here rather than by the `server` fixture when the test needs
    what the fixture does not give: a low RLIMIT_NOFILE, or stdout and stderr in one file
    (so that the order of access-log lines and error-log lines can be read)."""

    def __init__(self, tmp, text, nofile=None, name="p"):
        self.dir = Path(tmp) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "ferry.yaml"
        cfg.write_text(text)
        self.logfile = self.dir / "ferry.log"
        self.fh = open(self.logfile, "w")
        env = dict(os.environ, HOME=str(self.dir), ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")

        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen([FERRY, "run", "-c", str(cfg)], stdout=self.fh,
                                     stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=limit if nofile else None)

    def log(self):
        return self.logfile.read_text(errors="replace")

    def wait_listening(self, port, kind="tcp"):
        wait_for(lambda: owns_port(self.proc.pid, port, kind), 15,
                 f"ferry to listen on {kind} {port}", self.proc)

    def stop(self):
        """SIGTERM; the exit status must be 0 and the log free of alerts."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=bound(30))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.fh.close()
        log = self.log()
        bad = [l for l in log.splitlines() if any(b in l for b in BAD_LOG)]
        assert not bad, log[-4000:]
        assert rc == 0, f"ferry exited {rc}\n{log[-4000:]}"
        return log

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.fh.close()


# ---- 1. accept when descriptors run out ----

def test_accept_pauses_when_out_of_file_descriptors(tmp_path):
    """Under RLIMIT_NOFILE 32, forty clients exhaust Ferry's descriptors. accept4 then fails
    with EMFILE while the connection stays queued (the socket stays readable): Ferry pauses
    the listener and logs one line per second with a count, instead of a busy loop logging
    ~150k lines a second. Once the clients close, new connections are served again. At start,
    Ferry warns that limits.connections does not fit under the limit."""
    port = free_port()
    p = Proc(tmp_path, f"""
workers: 1
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
""", nofile=32)
    clients = []
    try:
        p.wait_listening(port)
        for _ in range(40):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))

        def accept_lines():
            return [l for l in p.log().splitlines() if "accept" in l and "[error]" in l]

        # two reports (more than a second of exhaustion), or the old flood
        wait_for(lambda: len([l for l in accept_lines() if "paused" in l]) >= 2
                 or len(accept_lines()) > 50, 20, "accept failures to be reported", p.proc)
        lines = accept_lines()
        assert len(lines) < 50, f"{len(lines)} accept error lines:\n" + "\n".join(lines[:10])
        assert re.search(r"out of file descriptors \(EMFILE\); paused 100 ms, [0-9]+ refused",
                         lines[0]), lines[0]
        for c in clients:
            c.close()
        clients = []
        status, _, body = http_request(port, "/after")
        assert (status, body) == (200, b"ok\n")
        assert "RLIMIT_NOFILE is 32" in p.log(), p.log()[:2000]
    finally:
        for c in clients:
            c.close()
    p.stop()


# ---- 2. a port held by another process ----

def _wait_exit(p):
    try:
        return p.proc.wait(timeout=bound(15))
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("the second ferry started on a port another one holds:\n" + p.log())


def _http_conf(port, listener_extra=""):
    return f"""
workers: 2
listeners:
  - address: 127.0.0.1:{port}
{listener_extra}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
"""


def test_second_ferry_on_a_held_tcp_port_exits_naming_it(tmp_path):
    port = free_port()
    a = Proc(tmp_path, _http_conf(port), name="a")
    try:
        a.wait_listening(port)
        b = Proc(tmp_path, _http_conf(port), name="b")
        rc = _wait_exit(b)
        b.fh.close()
        log = b.log()
        assert rc == 1, log
        assert f"listen on 127.0.0.1:{port} (tcp): Address already in use" in log, log
        assert "share: true" in log
        # the first one is untouched
        assert http_request(port, "/")[0] == 200
    finally:
        a.stop()


def test_share_true_lets_two_ferries_split_a_port(tmp_path):
    port = free_port()
    conf = _http_conf(port, listener_extra="    share: true")
    a = Proc(tmp_path, conf, name="a")
    try:
        a.wait_listening(port)
        b = Proc(tmp_path, conf, name="b")
        try:
            b.wait_listening(port)
            assert a.proc.poll() is None
        finally:
            b.stop()
    finally:
        a.stop()


def test_same_address_twice_in_one_config_is_refused(tmp_path):
    port = free_port()
    p = Proc(tmp_path, f"""
listeners:
  - address: 127.0.0.1:{port}
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 204}}
""")
    rc = _wait_exit(p)
    p.fh.close()
    assert rc != 0 and "Address already in use" in p.log(), p.log()


@pytest.mark.parametrize("mode", ["tcp", "udp"])
def test_second_ferry_on_a_held_l4_port_exits_naming_it(tmp_path, mode):
    port, origin = free_port(), free_port()
    text = f"""
workers: 2
l4:
  - listen: 127.0.0.1:{port}
    mode: {mode}
    target: 127.0.0.1:{origin}
"""
    a = Proc(tmp_path, text, name="a")
    try:
        a.wait_listening(port, mode)
        b = Proc(tmp_path, text, name="b")
        rc = _wait_exit(b)
        b.fh.close()
        assert rc == 1, b.log()
        assert f"({mode}): Address already in use" in b.log(), b.log()
        # shared on purpose: both run
        c = Proc(tmp_path, text.replace("    mode:", "    share: true\n    mode:"), name="c")
        try:
            c.wait_listening(port, mode)
        finally:
            c.stop()
    finally:
        a.stop()


def test_second_ferry_on_a_held_h3_udp_port_exits(tmp_path):
    """h3 listens on UDP too: a process holding only the UDP port is refused as well."""
    port = free_port()
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as another Ferry's
    holder.bind(("127.0.0.1", port))
    try:
        p = Proc(tmp_path, f"""
data-dir: {tmp_path / "d"}
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: self-signed
routes:
  - respond: {{status: 204}}
""")
        rc = _wait_exit(p)
        p.fh.close()
        assert rc == 1 and f"127.0.0.1:{port} (udp): Address already in use" in p.log(), p.log()
    finally:
        holder.close()


# ---- 5. the access log at stop ----

def test_access_log_precedes_the_drain_notice_and_is_in_time_order(tmp_path):
    """Two workers, the access log and the error log in one file (stdout and stderr of the
    process). Requests over three wall-clock seconds, then SIGTERM: every access-log line
    is written before the "draining" notice (workers flush first, then the notice is
    logged), and the lines are in time order across workers within a second."""
    port = free_port()
    p = Proc(tmp_path, f"""
workers: 2
log: {{access: stdout, access-format: json}}
listeners:
  - address: 127.0.0.1:{port}
routes:
  - respond: {{status: 200, body: "ok\\n"}}
""")
    p.wait_listening(port)
    dates, n = set(), 0
    deadline = time.monotonic() + bound(20)
    while len(dates) < 3 and time.monotonic() < deadline:  # two second boundaries crossed
        status, h, _ = http_request(port, f"/r{n}")
        assert status == 200
        dates.add(h["date"])
        n += 1
    assert len(dates) == 3, dates
    log = p.stop()
    lines = log.splitlines()
    drain = [i for i, l in enumerate(lines) if "draining connections" in l]
    assert len(drain) == 1, log[-3000:]
    access = [(i, json.loads(l)) for i, l in enumerate(lines) if l.startswith("{")]
    assert len(access) == n, f"{len(access)} access lines for {n} requests"
    late = [i for i, _ in access if i > drain[0]]
    assert not late, f"{len(late)} access lines after the drain notice:\n" + log[-3000:]
    # workers buffer their lines; each writes them out before its first line of a new second
    # and just after each second, so no line is more than a second behind one before it
    stamps = [calendar.timegm(time.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ")) for _, e in access]
    newest, behind = stamps[0], []
    for i, t in enumerate(stamps):
        if t < newest - 1:
            behind.append((i, t, newest))
        newest = max(newest, t)
    assert not behind, f"lines more than 1 s out of time order: {behind[:5]}"
