"""The test harness itself (conftest.py): ports and readiness, the defences against flaky runs
on a shared machine."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import Ferry, free_port, owns_port, wait_for, wait_udp


def test_free_port_is_outside_the_ephemeral_range_and_claimed():
    lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20  # never twice in a run
    for p in ports:
        assert p < lo, (p, lo)
        claim = conftest._CLAIMS / str(p)
        assert claim.read_text() == str(os.getpid())


def test_a_claim_of_a_live_process_is_respected_a_dead_ones_taken_over():
    p = free_port()
    claim = conftest._CLAIMS / str(p)
    claim.write_text("1")  # init: alive, not us
    assert not conftest._claim(p)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claim.write_text(str(dead.pid))
    assert conftest._claim(p)
    assert claim.read_text() == str(os.getpid())


def test_ready_means_ferry_itself_listens(server):
    f = server("listeners:\n  - address: 127.0.0.1:{port}\nroutes:\n  - respond: {{status: 204}}\n")
    assert owns_port(f.proc.pid, f.port)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not owns_port(other.pid, f.port)
    finally:
        other.kill()
        other.wait()


def test_a_port_shared_with_another_run_is_detected(tmp_path):
    """A process outside this run (setsid -f: not our descendant) holding the port with
    SO_REUSEPORT, as a Ferry of another worktree's run would: Ferry refuses the port itself
    (no `share: true`), and start() fails at once instead of letting the kernel split the
    test's connections between the two."""
    port = free_port()
    pidfile = tmp_path / "holder.pid"
    code = ("import os, socket, sys, time\n"
            "s = socket.socket()\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
            f"s.bind(('127.0.0.1', {port}))\n"
            "s.listen(8)\n"
            f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
            "time.sleep(60)\n")
    subprocess.run(["setsid", "-f", sys.executable, "-c", code], check=True, timeout=30)
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 15, "the foreign holder")
    holder = int(pidfile.read_text())
    try:
        f = Ferry(tmp_path / "f", f"listeners:\n  - address: 127.0.0.1:{port}\n"
                  "routes:\n  - respond: {{status: 204}}\n")
        f.tmp.mkdir(parents=True, exist_ok=True)
        with pytest.raises(AssertionError, match="another test run|did not start"):
            f.start(wait_ports=[port])
        assert f.port_clash or "Address already in use" in f.log()
        assert f.proc.poll() is not None  # stopped, not left running
        f.log_fh.close()
    finally:
        os.kill(holder, signal.SIGKILL)


def test_wait_udp_sees_the_bound_socket():
    port = free_port()
    p = subprocess.Popen([sys.executable, "-c",
                          "import socket, time\n"
                          "time.sleep(0.5)\n"
                          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                          f"s.bind(('127.0.0.1', {port}))\n"
                          "time.sleep(30)\n"])
    try:
        wait_udp(port, p)
        assert owns_port(p.pid, port, "udp")
    finally:
        p.kill()
        p.wait()
    with pytest.raises(AssertionError, match="exited"):
        wait_udp(port, p)  # a dead process: fails at once instead of waiting out the bound
