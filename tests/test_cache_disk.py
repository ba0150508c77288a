"""The cache's disk tier (src/policy/cache_disk.c) and the admin API's cache endpoints
(src/ops/admin_cache.c), black box: Ferry as a caching reverse proxy with `disk-path` in front
of the counting Python origin of test_cache.py, restarted on the same directory (requests name one authority, `disk.test`, as each process
listens on a new port). Writes happen
in a thread: tests wait (bounded) for the admin API's `GET /cache` to show the files, never
sleep. A corrupted or truncated file is never served; a directory that cannot be written costs
only its counted errors."""
import json
import os
import shutil
import subprocess
from pathlib import Path

from conftest import http_request, wait_for
from test_cache import Origin, origin  # noqa: F401  (the fixture)
from test_admin import admin

CURL = shutil.which("curl")


def config(origin_port, disk, cache_extra=""):
    return f"""
workers: 2
listeners:
  - address: 127.0.0.1:{{port}}
    protocols: [h1, h2c]
upstreams:
  - name: o
    servers: [http://127.0.0.1:{origin_port}]
routes:
  - proxy: o
    cache: {{{{zone: dz, disk-path: "{disk}"{cache_extra}}}}}
admin:
  address: 127.0.0.1:{{port2}}
"""


def stats(srv):
    st, _, b = admin(srv.ports[1], path="/cache")
    assert st == 200, b
    zones = json.loads(b)["zones"]
    return next(z for z in zones if z["name"] == "dz")


def disk_stats(srv):
    return stats(srv)["disk"]


def get(srv, path, headers=None):
    # one authority across restarts (each process listens on a new port)
    return http_request(srv.port, path, headers={"Host": "disk.test", **(headers or {})})


def cs(h):
    return h.get("cache-status", "")


def files(d):
    return sorted(p.name for p in Path(d).iterdir() if not p.name.startswith("."))


def test_cache_disk_survives_restart(server, origin, tmp_path):  # noqa: F811
    disk = tmp_path / "disk"
    cfg = config(origin.port, disk)
    srv = server(cfg)
    for p in ("/d1", "/d2"):
        s, h, b = get(srv, p)
        assert s == 200 and cs(h) == "ferry; fwd=uri-miss; stored"
    wait_for(lambda: disk_stats(srv)["files"] == 2, 10, "two files written")
    assert len(files(disk)) == 2
    srv.finish()

    srv2 = server(cfg)  # a new process: memory empty, the index rebuilt from the directory
    d = disk_stats(srv2)
    assert d["files"] == 2 and stats(srv2)["objects"] == 0
    s, h, b = get(srv2, "/d1")
    assert (s, b) == (200, b"hit 1 /d1\n")
    assert cs(h).startswith("ferry; hit; detail=disk; ttl="), cs(h)
    assert h["age"].isdigit()
    s, h, b = get(srv2, "/d1")  # now from memory
    assert (s, b) == (200, b"hit 1 /d1\n") and cs(h).startswith("ferry; hit; ttl=")
    s, h, b = get(srv2, "/d2", headers={"Range": "bytes=0-2"})  # a range of a disk object
    assert (s, b) == (206, b"hit") and "detail=disk" in cs(h)
    assert origin.hits["/d1"] == 1 and origin.hits["/d2"] == 1
    assert disk_stats(srv2)["reads"] >= 1
    assert disk_stats(srv2)["writes"] == 0  # what came from disk is not written again
    srv2.finish()

    srv3 = server(cfg)  # h2c finds the object h1 stored (one key for every protocol)
    out = subprocess.run([CURL, "-s", "--http2-prior-knowledge", "-D", "-", "-H",
                          "Host: disk.test", srv3.url("/d1")], capture_output=True, text=True,
                         timeout=20).stdout
    assert out.startswith("HTTP/2 200") and out.endswith("hit 1 /d1\n")
    assert "cache-status: ferry; hit; detail=disk" in out.lower()
    assert origin.hits["/d1"] == 1


def test_cache_disk_vary_variants(server, origin, tmp_path):  # noqa: F811
    """Each variant is its own file; after a restart each client gets its own."""
    origin.routes["/v"] = lambda h, n: (200, [("Cache-Control", "max-age=60"),
                                              ("Vary", "Accept-Language")],
                                        f"lang {h.headers.get('Accept-Language')} {n}\n")
    disk = tmp_path / "disk"
    cfg = config(origin.port, disk)
    srv = server(cfg)
    assert get(srv, "/v", {"Accept-Language": "en"})[2] == b"lang en 1\n"
    assert get(srv, "/v", {"Accept-Language": "fr"})[2] == b"lang fr 2\n"
    wait_for(lambda: disk_stats(srv)["files"] == 2, 10, "two variants written")
    srv.finish()
    srv2 = server(cfg)
    s, h, b = get(srv2, "/v", {"Accept-Language": "fr"})
    assert b == b"lang fr 2\n" and "detail=disk" in cs(h)
    s, h, b = get(srv2, "/v", {"Accept-Language": "en"})
    assert b == b"lang en 1\n" and "detail=disk" in cs(h)
    s, h, b = get(srv2, "/v", {"Accept-Language": "de"})
    assert b == b"lang de 3\n" and "fwd=uri-miss" in cs(h)


def test_cache_disk_size_bound_evicts(server, origin, tmp_path):  # noqa: F811
    body = "x" * 3000
    origin.routes["/big"] = (200, [("Cache-Control", "max-age=60")], body)
    disk = tmp_path / "disk"
    srv = server(config(origin.port, disk, ", disk-size: 8k"))
    for i in range(8):
        s, h, b = get(srv, f"/big?i={i}")
        assert s == 200 and len(b) == 3000
        wait_for(lambda: disk_stats(srv)["writes"] == i + 1, 10, f"write {i}")
    d = disk_stats(srv)
    assert d["bytes"] <= 8192 and d["max-bytes"] == 8192
    assert d["files"] == 2 and d["evictions"] == 6
    assert len(files(disk)) == 2
    # every object is still served (memory), the origin asked once each
    for i in range(8):
        assert get(srv, f"/big?i={i}")[0] == 200
    assert sum(n for p, n in origin.hits.items() if p.startswith("/big")) == 8


def test_cache_disk_corrupt_and_truncated_files_never_served(server, origin, tmp_path):  # noqa: F811,E501
    disk = tmp_path / "disk"
    cfg = config(origin.port, disk)
    srv = server(cfg)
    get(srv, "/flip")
    wait_for(lambda: disk_stats(srv)["files"] == 1, 10, "first file")
    first = set(files(disk))
    get(srv, "/cut")
    wait_for(lambda: disk_stats(srv)["files"] == 2, 10, "second file")
    (cut,) = set(files(disk)) - first
    (flip,) = first
    srv.finish()
    p = disk / flip
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x20  # one body byte: the checksum catches it
    p.write_bytes(bytes(data))
    (disk / cut).write_bytes((disk / cut).read_bytes()[:50])
    (disk / "notes.txt").write_text("not a cache file\n")

    srv2 = server(cfg, check_log=True)
    d = disk_stats(srv2)
    assert d["files"] == 1 and d["corrupt"] == 1  # the scan removed the truncated one
    assert not (disk / cut).exists()
    assert (disk / "notes.txt").exists()  # files not named like ours are left alone
    s, h, b = get(srv2, "/flip")
    assert (s, b) == (200, b"hit 2 /flip\n")  # from the origin, not the bad file
    assert cs(h) == "ferry; fwd=uri-miss; stored"  # and stored again
    assert disk_stats(srv2)["corrupt"] == 2  # removed (then written anew, same name)
    s, h, b = get(srv2, "/cut")
    assert (s, b) == (200, b"hit 2 /cut\n")
    assert get(srv2, "/flip")[2] == b"hit 2 /flip\n"
    assert origin.hits["/flip"] == 2 and origin.hits["/cut"] == 2
    wait_for(lambda: disk_stats(srv2)["files"] == 2, 10, "both written again")
    assert disk_stats(srv2)["corrupt"] == 2
    assert "is corrupted: removed" in srv2.log()


def test_cache_disk_unwritable_directory_does_not_stall(server, origin, tmp_path):  # noqa: F811
    """The directory is gone after start (every write fails): responses are the same as
    memory-only, the errors are counted, nothing waits."""
    disk = tmp_path / "disk"
    srv = server(config(origin.port, disk))
    os.rmdir(disk)
    for i in range(20):
        s, h, b = get(srv, f"/w{i}")
        assert s == 200 and cs(h) == "ferry; fwd=uri-miss; stored"
    wait_for(lambda: disk_stats(srv)["write-errors"] == 20, 10, "write errors counted")
    for i in range(20):
        s, h, b = get(srv, f"/w{i}")
        assert s == 200 and cs(h).startswith("ferry; hit; ttl=")
    assert sum(origin.hits.values()) == 20
    d = disk_stats(srv)
    assert d["files"] == 0 and d["writes"] == 0
    assert "cannot write" in srv.log()


def test_admin_cache_purge_url_prefix_tag(server, origin, tmp_path):  # noqa: F811
    origin.routes["/t/1"] = (200, [("Cache-Control", "max-age=60"),
                                   ("Surrogate-Key", "blue red")], "t1\n")
    origin.routes["/t/2"] = (200, [("Cache-Control", "max-age=60"),
                                   ("Cache-Tag", "green,red")], "t2\n")
    disk = tmp_path / "disk"
    cfg = config(origin.port, disk)
    srv = server(cfg)
    paths = ["/p/a", "/p/b?x=1", "/q/c", "/t/1", "/t/2"]
    for p in paths:
        get(srv, p)
    wait_for(lambda: disk_stats(srv)["files"] == 5, 10, "five files")
    a = srv.ports[1]
    base = "http%3A%2F%2Fdisk.test"

    def purge(q):
        st, _, b = admin(a, "POST", "/cache/purge?" + q)
        return st, json.loads(b)

    st, j = purge(f"url={base}%2Fp%2Fa")
    assert st == 200 and j["purged"] == 1
    assert get(srv, "/p/a")[2] == b"hit 2 /p/a\n"
    assert get(srv, "/p/b?x=1")[2] == b"hit 1 /p/b?x=1\n"  # another key: untouched
    st, j = purge(f"prefix={base}%2Fp%2F")
    assert st == 200 and j["purged"] == 2
    assert get(srv, "/p/b?x=1")[2] == b"hit 2 /p/b?x=1\n"
    assert get(srv, "/q/c")[2] == b"hit 1 /q/c\n"
    st, j = purge("tag=red&zone=dz")
    assert st == 200 and j["purged"] == 2
    assert get(srv, "/t/1")[0] == 200 and get(srv, "/t/2")[0] == 200
    assert origin.hits["/t/1"] == 2 and origin.hits["/t/2"] == 2
    assert purge("tag=nothing")[1]["purged"] == 0
    assert purge("tag=red&zone=other")[1]["purged"] == 0  # another zone named: none here
    # errors
    assert purge("")[0] == 400
    assert purge("url=ftp%3A%2F%2Fx%2F")[0] == 400
    assert purge("url=%zz")[0] == 400
    assert purge(f"url={base}%2Fa&tag=x")[0] == 400
    assert admin(a, "GET", "/cache/purge?tag=x")[0] == 405
    assert admin(a, "POST", "/cache")[0] == 405
    # a purge reaches the disk: after a restart, the purged keys come from the origin
    st, j = purge(f"prefix={base}%2F")
    assert j["purged"] == 4  # /p/a went with the /p/ prefix and was not asked for again
    wait_for(lambda: disk_stats(srv)["files"] == 0, 10, "files removed")
    srv.finish()
    srv2 = server(cfg)
    assert disk_stats(srv2)["files"] == 0
    assert get(srv2, "/q/c")[2] == b"hit 2 /q/c\n"
