"""Headless Chromium (Debian's /usr/bin/chromium, driven by npm playwright-core) browsing a
local HTTPS page through `ferry mitm`-style interception: Ferry's CA is trusted through an NSS
db made with certutil in a temporary HOME; the page's script reads a header that an
intercept rule added, and its image must load. The test installs playwright-core with npm
into build/test-node when it is not there (the npm registry must be reachable)."""
import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from test_mitm import mitm, nginx  # noqa: F401  (fixtures)

NODE_DIR = Path(os.environ.get("FERRY_NODE_DIR", ROOT / "build" / "test-node"))
PNG = base64.b64decode(  # 1x1 transparent PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

PAGE = """<!doctype html><html><head><title>ferry mitm test</title>
<script src="/app.js"></script></head><body><img id="img" src="/pixel.png"></body></html>
"""
APP = """window.__done = false;
window.addEventListener('load', async () => {
  const r = await fetch('/data.json');
  const img = document.getElementById('img');
  window.__result = {rule: r.headers.get('x-ferry-rule'), data: await r.json(),
                     img: img.complete && img.naturalWidth === 1};
  window.__done = true;
});
"""


def playwright():
    if not (NODE_DIR / "node_modules" / "playwright-core").exists():
        if not shutil.which("npm"):
            pytest.fail("npm is missing (Makefile TEST_PKGS installs nodejs and npm)")
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "install", "--prefix", str(NODE_DIR), "playwright-core@1.65.1",
                            "--no-audit", "--no-fund"], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, "npm install playwright-core failed:\n" + r.stderr
    return NODE_DIR / "node_modules"


def test_mitm_chromium_page_through_proxy(server, certs, nginx, tmp_path):  # noqa: F811
    if not Path("/usr/bin/chromium").exists():
        pytest.fail("Debian chromium is not installed (Makefile TEST_PKGS lists it)")
    modules = playwright()
    www = Path(nginx.d) / "www"
    (www / "page.html").write_text(PAGE)
    (www / "app.js").write_text(APP)
    (www / "pixel.png").write_bytes(PNG)
    (www / "data.json").write_text('{"from": "nginx"}')
    srv = mitm(server, certs, extra="  rules:\n    - match: {{host: [localhost]}}\n"
                                    "      response-headers: {{set: {{x-ferry-rule: added}}}}\n")
    home = tmp_path / "home"
    nss = home / ".pki" / "nssdb"
    nss.mkdir(parents=True)
    subprocess.run(["certutil", "-d", f"sql:{nss}", "-N", "--empty-password"], check=True,
                   capture_output=True)
    subprocess.run(["certutil", "-d", f"sql:{nss}", "-A", "-t", "C,,", "-n", "ferry-test-ca",
                    "-i", str(srv.ca)], check=True, capture_output=True)
    env = dict(os.environ, HOME=str(home), NODE_PATH=str(modules))
    r = subprocess.run(["node", str(ROOT / "tests" / "mitm_chromium.js"),
                        f"https://localhost:{nginx.tls_port}/page.html", srv.proxy,
                        str(tmp_path / "profile")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"], out
    assert out["status"] == 200
    assert out["docHeader"] == "added"
    assert "Ferry interception CA" in (out["securityIssuer"] or "")
    assert out["page"] == {"rule": "added", "data": {"from": "nginx"}, "img": True}
    log = srv.log()
    assert "forged a certificate for localhost" in log
