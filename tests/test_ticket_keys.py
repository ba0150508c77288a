"""TLS session ticket keys shared by a fleet (issue 14): two Ferry instances reading the same
`tls: {ticket-keys: FILE}` resume each other's sessions (openssl s_client -sess_out on one,
-sess_in on the other); a rotated file (new key first, old one kept) is read on reload and
old tickets still resume; once the old key is gone from the file they do not; a bad file is
a config error naming it."""
import os
import shutil
import signal
import subprocess

import pytest

from conftest import FERRY, wait_for

CFG = """workers: 2
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1]
    tls: {{cert: {tmp}/../cert.pem, key: {tmp}/../key.pem, ticket-keys: {tmp}/../keys.bin%s}}
routes:
  - match: {{path: /}}
    respond: {{status: 200, body: "ok"}}
"""


@pytest.fixture
def pki(tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem"), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True,
                   timeout=30)
    return tmp_path


def s_client(port, tmp, sess_out=None, sess_in=None, version="-tls1_3"):
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", version, "-ign_eof"]
    if sess_out:
        args += ["-sess_out", str(sess_out)]
    if sess_in:
        args += ["-sess_in", str(sess_in)]
    # a request and its response: a TLS 1.3 ticket arrives after the handshake, before them
    p = subprocess.run(args, input=b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                       capture_output=True, timeout=30)
    out = p.stdout.decode(errors="replace")
    assert "HTTP/1.1 200" in out, out[-2000:] + p.stderr.decode(errors="replace")
    return out


def reused(out):
    return "Reused, TLS" in out


def start_pair(server, pki, extra=""):
    a = server(CFG % extra)
    b = server(CFG % extra)
    return a, b


@pytest.mark.parametrize("version", ["-tls1_3", "-tls1_2"])
def test_tls_ticket_keys_shared_between_instances(server, pki, version):
    (pki / "keys.bin").write_bytes(os.urandom(80))
    a, b = start_pair(server, pki)
    sess = pki / f"sess{version}.pem"
    first = s_client(a.port, pki, sess_out=sess, version=version)
    assert not reused(first)
    assert sess.exists() and sess.stat().st_size > 0
    # the other instance decrypts the ticket the first one issued
    again = s_client(b.port, pki, sess_in=sess, version=version)
    assert reused(again), again[-1500:]


def test_tls_ticket_keys_differ_no_resumption(server, pki, tmp_path):
    """Control: without a shared file each instance has its own random keys."""
    text = CFG.replace(", ticket-keys: {tmp}/../keys.bin%s", "")
    a = server(text)
    b = server(text)
    sess = pki / "sess.pem"
    s_client(a.port, pki, sess_out=sess)
    assert reused(s_client(a.port, pki, sess_in=sess))  # same instance: resumes
    assert not reused(s_client(b.port, pki, sess_in=sess))  # other keys: full handshake


def test_tls_ticket_keys_rotation_on_reload(server, pki):
    old, new = os.urandom(80), os.urandom(80)
    keys = pki / "keys.bin"
    keys.write_bytes(old)
    f = server(CFG % "")
    sess_old = pki / "old.pem"
    s_client(f.port, pki, sess_out=sess_old)
    gen = 1

    def reload():
        nonlocal gen
        gen += 1
        f.proc.send_signal(signal.SIGHUP)
        line = f"reload: generation {gen} active on all workers"
        wait_for(lambda: line in f.log(), 30, line, f.proc)

    # rotate: the new key first (encrypts), the old one still listed (decrypts)
    keys.write_bytes(new + old)
    reload()
    assert reused(s_client(f.port, pki, sess_in=sess_old))
    # a new session is under the new key: it survives dropping the old one
    sess_new = pki / "new.pem"
    s_client(f.port, pki, sess_out=sess_new)
    keys.write_bytes(new)
    reload()
    assert not reused(s_client(f.port, pki, sess_in=sess_old))
    assert reused(s_client(f.port, pki, sess_in=sess_new))


def test_tls_ticket_keys_bad_file_is_config_error(server, pki):
    (pki / "keys.bin").write_bytes(b"x" * 50)
    cfg = pki / "bad.yaml"
    (pki / "s").mkdir()
    cfg.write_text((CFG % "").format(port=1, tmp=str(pki / "s")))
    r = subprocess.run([FERRY, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert "ticket-keys" in r.stderr and "48 or 80 bytes per key, got 50 bytes" in r.stderr, \
        r.stderr
    assert "bad.yaml:5:" in r.stderr, r.stderr


# ---- HTTP/3: GnuTLS's ticket key derived from the same file ----

GTLS = shutil.which("gtlsclient")

H3_CFG = """workers: 2
listeners:
  - address: 127.0.0.1:{port}
    protocols: [h1, h3]
    tls: {{cert: {tmp}/../cert.pem, key: {tmp}/../key.pem%s}}
routes:
  - match: {{path: /}}
    respond: {{status: 200, body: "ok"}}
admin:
  address: 127.0.0.1:{admin}
"""


def h3_get(port, tmp, sess):
    """One h3 GET with gtlsclient, reading and writing its TLS session and transport parameters
    in `sess`*: the first run stores a ticket, later runs offer it."""
    dl = tmp / f"dl-{os.urandom(4).hex()}"
    dl.mkdir()
    p = subprocess.run([GTLS, "--exit-on-all-streams-close", f"--download={dl}", "--no-quic-dump",
                        "--no-http-dump", "--timeout=20s", "--disable-early-data",
                        f"--session-file={sess}.pem", f"--tp-file={sess}.tp", "127.0.0.1",
                        str(port), f"https://127.0.0.1:{port}/"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0 and (dl / "index.html").read_bytes() == b"ok", out[-2000:]
    return out


def quic_handshakes(f):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{f.admin_port}/metrics", timeout=10).read()
    got = {}
    for line in text.decode().splitlines():
        if line.startswith("ferry_quic_handshakes_total{"):
            got[line.split('"')[1]] = int(float(line.split()[-1]))
    return got.get("full", 0), got.get("resumed", 0)


def h3_server(server, extra):
    from conftest import free_port
    admin = free_port()
    f = server((H3_CFG % extra).replace("{admin}", str(admin)))
    f.admin_port = admin
    return f


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (ngtcp2-client) missing")
def test_h3_ticket_keys_shared_between_instances(server, pki):
    """A ticket one instance issued over QUIC resumes on the other instance, which read the
    same file; a third with its own random key makes a full handshake."""
    (pki / "keys.bin").write_bytes(os.urandom(80))
    a = h3_server(server, ", ticket-keys: {tmp}/../keys.bin")
    b = h3_server(server, ", ticket-keys: {tmp}/../keys.bin")
    c = h3_server(server, "")
    sess = pki / "h3sess"
    h3_get(a.port, pki, sess)
    assert quic_handshakes(a) == (1, 0)
    h3_get(b.port, pki, sess)
    assert quic_handshakes(b) == (0, 1)
    h3_get(c.port, pki, sess)
    assert quic_handshakes(c) == (1, 0)
    # without a file the random key is the process's: its workers resume each other's tickets
    sess_c = pki / "h3sess-c"
    h3_get(c.port, pki, sess_c)
    for _ in range(3):
        h3_get(c.port, pki, sess_c)
    assert quic_handshakes(c) == (2, 3)


@pytest.mark.skipif(GTLS is None, reason="gtlsclient (ngtcp2-client) missing")
def test_h3_ticket_keys_rotated_on_reload_and_off(server, pki):
    """A new first key in the file is read on reload: tickets under the old one make full
    handshakes (GnuTLS keeps one key: unlike TCP, the old records do not decrypt over QUIC);
    `session-tickets: false` sends none."""
    keys = pki / "keys.bin"
    old, new = os.urandom(80), os.urandom(80)
    keys.write_bytes(old)
    f = h3_server(server, ", ticket-keys: {tmp}/../keys.bin")
    sess = pki / "h3rot"
    h3_get(f.port, pki, sess)
    h3_get(f.port, pki, sess)
    assert quic_handshakes(f) == (1, 1)
    keys.write_bytes(new + old)
    f.proc.send_signal(signal.SIGHUP)
    line = "reload: generation 2 active on all workers"
    wait_for(lambda: line in f.log(), 30, line, f.proc)
    h3_get(f.port, pki, pki / "h3rot-x")  # a fresh session under the new key
    h3_get(f.port, pki, sess)  # the old ticket is no longer accepted
    assert quic_handshakes(f) == (3, 1)
    off = h3_server(server, ", session-tickets: false")
    sess_off = pki / "h3off"
    h3_get(off.port, pki, sess_off)
    h3_get(off.port, pki, sess_off)
    assert quic_handshakes(off) == (2, 0)
