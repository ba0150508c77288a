"""The Debian package, the systemd unit, `make install` and the man pages (issue 14, "systemd
and packaging").

The package is built once per module by packaging/mkdeb.sh (what `make deb` runs) from the
tree of FERRY_BIN. Its contents are checked with `dpkg-deb -c`, the unit with
`systemd-analyze verify`, and the extracted binary serves the packaged configuration (on a
free port) and sends READY=1 / STOPPING=1 to a NOTIFY_SOCKET made here, as systemd would for
Type=notify. A real `dpkg -i` + purge runs only with CI=true as root (a throwaway machine).
"""
import gzip
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import FERRY, ROOT, bound, free_port, http_request

BUILD = Path(FERRY).resolve().parent
MKDEB = ROOT / "packaging" / "mkdeb.sh"
INSTALL = ROOT / "packaging" / "install.sh"

EXPECTED_FILES = {
    "etc/ferry/ferry.yaml",
    "lib/systemd/system/ferry.service",
    "usr/bin/ferry",
    "usr/bin/ferry-load",
    "usr/share/doc/ferry/changelog.Debian.gz",
    "usr/share/doc/ferry/copyright",
    "usr/share/ferry/www/index.html",
    "usr/share/man/man1/ferry.1.gz",
    "usr/share/man/man1/ferry-load.1.gz",
    "usr/share/man/man5/ferry.yaml.5.gz",
}


def run(*cmd, check=True, timeout=60, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       **kw)
    if check:
        assert p.returncode == 0, (cmd, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    for tool in ("dpkg-deb", "systemd-analyze", "groff", "man"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (make deps installs DEB_PKGS)")
    out = tmp_path_factory.mktemp("deb")
    p = run(MKDEB, BUILD, out, timeout=120)
    path = Path(p.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.parent == out, p.stdout
    return path


@pytest.fixture(scope="module")
def extracted(deb, tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    run("dpkg-deb", "-x", deb, root)
    return root


def packaged_config(root, port):
    """The packaged /etc/ferry/ferry.yaml pointed at the extracted tree and a free port."""
    text = (root / "etc/ferry/ferry.yaml").read_text()
    assert "address: 127.0.0.1:8080" in text and "root: /usr/share/ferry/www" in text
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    text = text.replace("/usr/share/ferry/", f"{root}/usr/share/ferry/")
    text = text.replace("/var/lib/ferry", str(root / "var-lib-ferry"))
    return text


def test_deb_contents_and_control(deb):
    p = run("dpkg-deb", "-c", deb)
    files, modes = set(), {}
    for line in p.stdout.splitlines():
        f = line.split()
        name = f[-1].removeprefix("./")
        assert f[1] == "root/root", line
        if not f[0].startswith("d"):
            files.add(name)
            modes[name] = f[0]
    assert files == EXPECTED_FILES, files ^ EXPECTED_FILES
    assert modes["usr/bin/ferry"] == "-rwxr-xr-x" and modes["etc/ferry/ferry.yaml"] == "-rw-r--r--"

    ctl = run("dpkg-deb", "-f", deb).stdout
    assert re.search(r"^Package: ferry$", ctl, re.M), ctl
    assert re.search(r"^Version: \d+\.\d+\.\d+-1$", ctl, re.M), ctl
    depends = re.search(r"^Depends: (.*)$", ctl, re.M).group(1)
    for need in ("adduser", "libc6", "libssl3", "libsystemd0", "libngtcp2"):
        assert need in depends, depends

    info = run("dpkg-deb", "-I", deb, "conffiles").stdout
    assert info.split() == ["/etc/ferry/ferry.yaml"], info
    postinst = run("dpkg-deb", "-I", deb, "postinst").stdout
    assert "adduser --system" in postinst and "[ -d /run/systemd/system ]" in postinst
    for script in ("postinst", "prerm", "postrm"):
        body = run("dpkg-deb", "-I", deb, script).stdout
        assert body.startswith("#!/bin/sh\n"), script
        run("sh", "-n", "-c", body)  # parses


def test_unit_verifies_and_is_hardened(extracted, tmp_path):
    unit = (extracted / "lib/systemd/system/ferry.service").read_text()
    want = ["Type=notify", "User=ferry", "ExecStartPre=/usr/bin/ferry check -c /etc/ferry/ferry.yaml",
            "ExecStart=/usr/bin/ferry run -c /etc/ferry/ferry.yaml",
            "ExecReload=/bin/kill -HUP $MAINPID", "ProtectSystem=strict", "ProtectHome=yes",
            "PrivateTmp=yes", "NoNewPrivileges=yes",
            "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
            "AmbientCapabilities=CAP_NET_BIND_SERVICE", "StateDirectory=ferry",
            "LogsDirectory=ferry", "RuntimeDirectory=ferry"]
    lines = unit.splitlines()
    for w in want:
        assert w in lines, w
    assert any(l.startswith("LimitNOFILE=") for l in lines)
    # verify needs the commands and the documented man pages: point both at the extracted tree
    local = tmp_path / "ferry.service"
    local.write_text(unit.replace("/usr/bin/ferry", f"{extracted}/usr/bin/ferry"))
    env = dict(os.environ, MANPATH=str(extracted / "usr/share/man"))
    p = run("systemd-analyze", "verify", local, check=False, env=env, cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    # and verify does catch a broken unit (the check above can fail)
    bad = tmp_path / "ferry-bad.service"
    bad.write_text(local.read_text().replace("Type=notify", "Type=notifyy"))
    p = run("systemd-analyze", "verify", bad, check=False, env=env, cwd=tmp_path)
    assert "notifyy" in p.stderr, p.stderr


def notify_socket(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    s.bind(str(path))
    s.settimeout(bound(15))
    return s, path


def test_extracted_binary_serves_packaged_config_and_notifies(extracted, tmp_path):
    port = free_port()
    cfg = tmp_path / "ferry.yaml"
    cfg.write_text(packaged_config(extracted, port))
    (extracted / "var-lib-ferry").mkdir(exist_ok=True)
    ferry = extracted / "usr/bin/ferry"
    run(ferry, "check", "-c", cfg)

    sock, path = notify_socket(tmp_path)
    env = dict(os.environ, NOTIFY_SOCKET=str(path), HOME=str(tmp_path))
    log = open(tmp_path / "ferry.log", "w")
    proc = subprocess.Popen([str(ferry), "run", "-c", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=log, env=env)
    try:
        msg = sock.recv(4096).decode()
        assert msg.split("\n")[0] == "READY=1", msg
        # READY=1 means bound: the first request needs no waiting
        st, hdrs, body = http_request(port, "/")
        assert st == 200, (st, body)
        assert body == (extracted / "usr/share/ferry/www/index.html").read_bytes()
        st, _, body = http_request(port, "/health")
        assert (st, body) == (200, b"ok\n")
        proc.send_signal(signal.SIGTERM)
        msg = sock.recv(4096).decode()
        assert msg.split("\n")[0] == "STOPPING=1", msg
        assert proc.wait(timeout=bound(30)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        sock.close()
    text = (tmp_path / "ferry.log").read_text()
    assert "[alert]" not in text and "[emerg]" not in text and "Sanitizer" not in text, text


def test_no_notify_socket_no_message(extracted, tmp_path):
    """Without NOTIFY_SOCKET (not under systemd) ferry runs as before; a NOTIFY_SOCKET that
    nothing listens on does not stop it either."""
    port = free_port()
    cfg = tmp_path / "ferry.yaml"
    cfg.write_text(packaged_config(extracted, port))
    (extracted / "var-lib-ferry").mkdir(exist_ok=True)
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "nobody.sock"), HOME=str(tmp_path))
    proc = subprocess.Popen([str(extracted / "usr/bin/ferry"), "run", "-c", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        # the URL line is printed after every listener is bound
        assert proc.stdout.readline().strip() == f"ferry: serving http://127.0.0.1:{port}/"
        st, _, body = http_request(port, "/health")
        assert (st, body) == (200, b"ok\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=bound(30)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def man_render(path):
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0")
    m = run("man", "-l", path, check=False, env=env)
    g = run("groff", "-man", "-Tutf8", "-ww", "-z", path, check=False)
    return m, g


def test_man_pages_render_without_warnings(extracted, tmp_path):
    pages = sorted((extracted / "usr/share/man").rglob("*.gz"))
    assert len(pages) == 3, pages
    texts = {}
    for gz in pages:
        plain = tmp_path / gz.name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress(gz.read_bytes()))
        m, g = man_render(plain)
        assert m.returncode == 0 and m.stderr == "", (plain.name, m.stderr)
        assert g.returncode == 0 and g.stderr == "", (plain.name, g.stderr)
        texts[plain.name] = (plain.read_text(), m.stdout)
    # ferry.yaml(5) comes from the same table walk as docs/CONFIG.md: every key and section
    # of `ferry doc-config` is in it, in the same order
    md = run(FERRY, "doc-config").stdout
    roff, shown = texts["ferry.yaml.5"]
    md_keys = re.findall(r"^\| `([^`]+)` \|", md, re.M)
    man_keys = re.findall(r"^\.B (\S+)$", roff.split(".SH KEYS", 1)[1].split(".SH FILES")[0],
                          re.M)
    assert md_keys == man_keys and len(md_keys) > 100
    md_sections = re.findall(r"^#+ `?([^`\n]+)`?$", md, re.M)
    assert md_sections == re.findall(r'^\.SS "([^"]+)"$', roff, re.M)
    assert "FERRY.YAML(5)" in shown
    # ferry(1): every command of `ferry --help`
    roff1, shown1 = texts["ferry.1"]
    cmds = re.findall(r"^  ferry ([a-z][-a-z0-9]*)", run(FERRY, "--help").stdout, re.M)
    assert {"run", "check", "doc-config", "help", "version"} <= set(cmds)
    for c in cmds:
        assert f'.SS "ferry {c}"' in roff1, c
    assert "NOTIFY_SOCKET" in roff1 and "SIGHUP" in roff1 and "FERRY(1)" in shown1


def test_man_rejects_what_it_should():
    """The renderer check can fail: a page with a bad request warns under -ww."""
    bad = "\n".join([".TH X 1", ".SH NAME", "x \\- y", ".nosuchmacro", ""])
    p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=bad,
                       capture_output=True, text=True, timeout=30)
    assert "nosuchmacro" in p.stderr, p.stderr


def test_install_destdir_keeps_existing_config(tmp_path):
    dest = tmp_path / "stage"
    env = dict(os.environ, DESTDIR=str(dest), PREFIX="/opt/fy", UNITDIR="/opt/fy/lib/systemd/system")
    run(INSTALL, BUILD, env=env, timeout=120)
    for f in ("opt/fy/bin/ferry", "opt/fy/bin/ferry-load", "opt/fy/share/man/man1/ferry.1",
              "opt/fy/share/man/man1/ferry-load.1", "opt/fy/share/man/man5/ferry.yaml.5",
              "opt/fy/share/ferry/www/index.html", "etc/ferry/ferry.yaml"):
        assert (dest / f).is_file(), f
    assert os.access(dest / "opt/fy/bin/ferry", os.X_OK)
    unit = (dest / "opt/fy/lib/systemd/system/ferry.service").read_text()
    assert "ExecStart=/opt/fy/bin/ferry run -c /etc/ferry/ferry.yaml" in unit
    assert "@BINDIR@" not in unit
    conf = dest / "etc/ferry/ferry.yaml"
    assert "root: /opt/fy/share/ferry/www" in conf.read_text()
    conf.write_text("# mine\n")
    p = run(INSTALL, BUILD, env=env, timeout=120)
    assert conf.read_text() == "# mine\n"
    assert "keeping the existing" in p.stdout


@pytest.mark.skipif(os.environ.get("CI") != "true" or os.geteuid() != 0,
                    reason="installs the package system-wide: only with CI=true as root")
def test_dpkg_install_and_purge(deb, tmp_path):
    def purge():
        if run("dpkg", "-s", "ferry", check=False).returncode == 0:
            run("dpkg", "--purge", "ferry", timeout=120)

    purge()  # a previous run stopped half-way
    cleanup = []
    try:
        run("dpkg", "-i", deb, timeout=120, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        assert run("getent", "passwd", "ferry").stdout.startswith("ferry:")
        for d in ("/var/lib/ferry", "/var/log/ferry"):
            assert Path(d).is_dir(), d
        run("runuser", "-u", "ferry", "--", "/usr/bin/ferry", "check", "-c",
            "/etc/ferry/ferry.yaml")
        p = run("systemd-analyze", "verify", "/lib/systemd/system/ferry.service", check=False)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        assert run("man", "-w", "ferry.yaml").stdout.strip().endswith("ferry.yaml.5.gz")
        if Path("/run/systemd/system").is_dir():
            assert run("systemctl", "is-active", "ferry").stdout.strip() == "active"
            assert run("systemctl", "is-enabled", "ferry").stdout.strip() == "enabled"
            st, _, body = http_request(8080, "/health")
            assert (st, body) == (200, b"ok\n")
            run("systemctl", "reload", "ferry")
            assert run("systemctl", "is-active", "ferry").stdout.strip() == "active"
        else:
            # no systemd: run the installed binary as the service user on the packaged config
            port = free_port()
            pub = Path(tempfile.mkdtemp(prefix="ferry-pkg-", dir="/tmp"))  # readable by ferry
            cleanup.append(pub)
            os.chmod(pub, 0o755)
            cfg = pub / "ferry.yaml"
            cfg.write_text(Path("/etc/ferry/ferry.yaml").read_text()
                           .replace("127.0.0.1:8080", f"127.0.0.1:{port}"))
            os.chmod(cfg, 0o644)
            proc = subprocess.Popen(["runuser", "-u", "ferry", "--", "/usr/bin/ferry", "run",
                                     "-c", str(cfg)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd="/")
            try:
                assert proc.stdout.readline().strip() == f"ferry: serving http://127.0.0.1:{port}/"
                st, _, body = http_request(port, "/")
                assert st == 200 and b"Ferry is running" in body
            finally:
                pids = run("pgrep", "-u", "ferry", "-x", "ferry", check=False).stdout.split()
                for pid in pids:
                    os.kill(int(pid), signal.SIGTERM)
                proc.wait(timeout=bound(30))
            assert proc.returncode == 0, proc.stderr.read()
    finally:
        for d in cleanup:
            shutil.rmtree(d, ignore_errors=True)
        purge()
    for p in ("/usr/bin/ferry", "/etc/ferry", "/var/lib/ferry", "/var/log/ferry",
              "/lib/systemd/system/ferry.service"):
        assert not Path(p).exists(), p
