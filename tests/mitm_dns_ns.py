"""Helper for test_mitm_h2.py's DNS timeout test, run as root of a fresh user+mount+network
namespace (`unshare -rmn`): /etc/resolv.conf points at a loopback "DNS server" that never
answers, so every lookup hangs; Ferry must keep serving and give a 502 naming the name after
resolve-timeout. Prints one JSON object with what it saw. argv: FERRY TMPDIR"""
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time

ferry, tmp = sys.argv[1], sys.argv[2]
with open(os.path.join(tmp, "resolv.conf"), "w") as f:
    f.write("nameserver 127.0.0.1\noptions timeout:30 attempts:1\n")
subprocess.run(["mount", "--bind", os.path.join(tmp, "resolv.conf"), "/etc/resolv.conf"],
               check=True)
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("127.0.0.1", 53))  # reads nothing, answers nothing: lookups hang

s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
cfg = os.path.join(tmp, "ferry.yaml")
with open(cfg, "w") as f:
    f.write(f"workers: 1\nlisteners:\n  - address: 127.0.0.1:{port}\n    kind: intercept\n"
            f"intercept:\n  ca-dir: {tmp}/ca\n  resolve-timeout: 2s\n  resolver-threads: 1\n")
env = dict(os.environ, HOME=tmp, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
log = open(os.path.join(tmp, "ferry.log"), "w")
proc = subprocess.Popen([ferry, "run", "-c", cfg], stdout=subprocess.DEVNULL, stderr=log, env=env)
out = {}
deadline = time.monotonic() + 60  # bounded: ferry (maybe under ASan) is listening
while time.monotonic() < deadline and proc.poll() is None:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
proxy = f"http://127.0.0.1:{port}"


def curl(*args):
    p = subprocess.run(["curl", "-sS", "--max-time", "20", *args], capture_output=True,
                       timeout=30)
    return {"rc": p.returncode, "out": p.stdout.decode(errors="replace"),
            "err": p.stderr.decode(errors="replace")}


res = {}
t = threading.Thread(target=lambda: res.update(
    slow=curl("-x", proxy, "-w", "\n%{http_code}", "http://hangs.example/")))
t.start()
# the slow lookup is under way once its query reaches the silent DNS socket (left unread);
# a fixed pause could end before a loaded machine got that far
out["lookup_seen"] = bool(select.select([dns], [], [], 30)[0])
# the worker is not blocked: the proxy's own page answers while the lookup hangs
out["info"] = curl("-w", "\n%{http_code}", proxy + "/")
out["slow_done_before_info"] = "slow" in res
t.join(40)
out["slow"] = res.get("slow")
out["connect"] = curl("-x", proxy, "-k", "-w", "\n%{http_connect}", "https://hangs2.example/")
# more lookups than resolver threads (1): the others queue, and each still gets its 502
res2 = {}
ts = [threading.Thread(target=lambda i=i: res2.update({i: curl(
    "-x", proxy, "-w", "\n%{http_code}", f"http://queued{i}.example/")})) for i in range(3)]
for x in ts:
    x.start()
for x in ts:
    x.join(60)
out["queued"] = [res2.get(i) for i in range(3)]
proc.terminate()
try:
    proc.wait(timeout=20)
    out["exit"] = proc.returncode
except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    out["exit"] = "hung"
log.close()
out["log"] = open(os.path.join(tmp, "ferry.log")).read()[-4000:]
print(json.dumps(out))
