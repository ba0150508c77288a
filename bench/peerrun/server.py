"""bench/run.py's server: starting, pinning, watching and stopping one server process tree."""
import os
import signal
import socket
import subprocess
import time
from .common import SERVER_CPU, log


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid, depth=0):
    if depth > 8:
        return [pid]
    out = [pid]
    for c in children(pid):
        out += tree(c, depth + 1)
    return out


def cpu_busy(cpu):
    """(busy, total) jiffies of one CPU from /proc/stat (busy excludes idle and iowait)."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return sum(v) - v[3] - v[4], sum(v)
    return 0, 0


def cpu_ticks(pid):
    """utime+stime (clock ticks) of pid and its descendants (all threads included)."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # stat fields 14, 15
        except (OSError, IndexError, ValueError):
            pass
    return total


def proc_alive(pid):
    """True while pid exists and is not a zombie (an orphan nobody reaps stays a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Server:
    """A server process pinned to CPU 0, optionally wrapped (valgrind, strace)."""

    def __init__(self, name, argv, ports, logpath, wrap=(), ready_timeout=15.0, stop_timeout=15.0,
                 cpu=SERVER_CPU):
        self.name, self.argv, self.ports, self.logpath = name, argv, ports, logpath
        self.cpu = cpu
        self.wrap = list(wrap)
        self.ready_timeout, self.stop_timeout = ready_timeout, stop_timeout
        self.proc = None

    def start(self):
        self.logf = open(self.logpath, "ab")
        cmd = ["taskset", "-c", self.cpu] + self.wrap + self.argv
        self.logf.write(("$ " + " ".join(cmd) + "\n").encode())
        self.logf.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout
        pending = list(self.ports)
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with status {self.proc.returncode} before listening: {self.log_tail()}"
            try:
                with socket.create_connection(("127.0.0.1", pending[0]), timeout=1):
                    pending.pop(0)
            except OSError:
                time.sleep(0.05)
        if pending:
            self.stop()
            return f"not listening on {pending} after {self.ready_timeout:.0f}s: {self.log_tail()}"
        return None

    def target_pid(self):
        """The server itself: taskset and valgrind exec in place; strace forks it."""
        if self.wrap and self.wrap[0] == "strace":
            for _ in range(100):
                kids = children(self.proc.pid)
                if kids:
                    return kids[0]
                time.sleep(0.02)
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return None
        kids = []
        if self.proc.poll() is None:
            kids = [p for p in tree(self.proc.pid) if p != self.proc.pid]
            try:
                os.kill(self.target_pid(), signal.SIGTERM)
            except ProcessLookupError:
                pass
            # Under valgrind a signal does not interrupt an idle epoll_wait, and nginx
            # only acts on SIGTERM when it wakes: poke the listeners with empty TCP
            # connections until it exits (the same pokes for every K: they cancel out).
            deadline = time.monotonic() + self.stop_timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    self.proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                for port in self.ports:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    except OSError:
                        pass
            try:
                self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                log(f"{self.name}: no exit after SIGTERM, killing its process group")
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        # helpers the server forked (h2o: its key-signing process and a crash-log
        # filter) write their callgrind/strace output when they exit: wait for them
        deadline = time.monotonic() + 20
        while kids and time.monotonic() < deadline:
            kids = [p for p in kids if proc_alive(p)]
            if kids:
                time.sleep(0.1)
        for p in kids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.logf.close()
        return self.proc.returncode

    def log_tail(self, n=400):
        try:
            if not self.logf.closed:
                self.logf.flush()
            with open(self.logpath, "rb") as f:
                data = f.read()[-n:]
            return data.decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return ""


# --------------------------------------------------------------------------- checks and load
