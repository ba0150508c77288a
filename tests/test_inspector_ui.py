"""The inspector's web UI in headless Chromium (Debian's /usr/bin/chromium driven by npm
playwright-core, installed as tests/test_mitm_chromium.py does): browse a page through the
intercepting proxy while the UI is open in a second page and see the flows appear; filter
(and a filter error); open a detail view and read a header and the JSON body; replay; an
image body shown as an image; the detail's timings and Copy as Python; a breakpoint holds a
request, its header is edited in the UI and the origin gets the edit; a response breakpoint
holds the origin's answer and the browser gets the body typed in the UI; a WebSocket flow's
messages are listed; the filtered flows compared against another upstream. The list is virtualised: with 3,000 stored flows the page
holds a few dozen row elements. With FERRY_UPDATE_SCREENSHOTS=1 the screenshots go to docs/img/inspector-*.png
(docs/INSPECTOR.md shows them)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from test_inspector import WS_CFG, api, wait_handled
from test_mitm import nginx  # noqa: F401  (fixtures)
from test_mitm_chromium import APP, PAGE, PNG, playwright


def har(n):
    entries = [{"startedDateTime": "2026-12-01T10:00:00.000Z", "time": i % 500,
                "request": {"method": "GET", "url": f"https://bulk.example/item/{i}",
                            "httpVersion": "HTTP/2.0", "headers": []},
                "response": {"status": 200 if i % 7 else 500, "headers": [
                    {"name": "content-type", "value": "text/plain"}],
                    "content": {"size": 2, "mimeType": "text/plain", "text": "ok"}}}
               for i in range(n)]
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def test_inspector_ui_in_chromium(server, nginx, tmp_path, request):  # noqa: F811
    if not Path("/usr/bin/chromium").exists():
        pytest.fail("Debian chromium is not installed (Makefile TEST_PKGS lists it)")
    modules = playwright()
    import asyncio
    import websockets
    from proxy_kit import WsEchoOrigin
    wso = WsEchoOrigin()
    request.addfinalizer(wso.stop)
    srv = server(WS_CFG.replace("{ws}", wso.url))
    (srv.docroot / "page.html").write_text(PAGE)
    (srv.docroot / "app.js").write_text(APP)
    (srv.docroot / "pixel.png").write_bytes(PNG)
    (srv.docroot / "data.json").write_text('{"from": "ferry", "items": [1, 2]}')
    st, _, out = api(srv, "/api/import", "POST", body=har(3000))
    assert st == 200 and json.loads(out) == {"imported": 3000}
    wait_handled(srv, 3000)

    async def chat():  # one WebSocket flow through a `capture:` route, for the message list
        async with websockets.connect(f"ws://127.0.0.1:{srv.ports[2]}/ws/chat", open_timeout=5,
                                      close_timeout=5, compression=None) as ws:
            for m in ['{"hello": "ws"}', b"\x01\x02"]:
                await ws.send(m)
                assert await asyncio.wait_for(ws.recv(), 5) == m
    asyncio.run(chat())
    wait_handled(srv, 3001)
    # FERRY_UPDATE_SCREENSHOTS=1 refreshes the committed ones; otherwise they go to tmp_path
    shots = ROOT / "docs" / "img" if os.environ.get("FERRY_UPDATE_SCREENSHOTS") else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HOME=str(tmp_path), NODE_PATH=str(modules))
    r = subprocess.run(["node", str(ROOT / "tests" / "inspector_ui.js"),
                        f"http://127.0.0.1:{srv.ports[1]}/",
                        f"http://127.0.0.1:{srv.ports[2]}/page.html",
                        f"http://127.0.0.1:{srv.port}", str(shots),
                        f"http://127.0.0.1:{nginx.port}/hdr"],
                       capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"], out.get("error")
    assert out["initialFlows"] == 3001
    assert out["initialRows"] < 120  # virtualised: rows for the viewport, not per flow
    assert out["pageStatus"] == 200
    assert out["page"]["data"] == {"from": "ferry", "items": [1, 2]} and out["page"]["img"]
    assert out["live"]
    assert [f["path"] for f in out["filtered"]] == ["/data.json"]
    assert "value is missing" in out["filterError"] or "expected" in out["filterError"]
    assert out["title"].startswith("GET http://127.0.0.1:") and out["title"].endswith("/data.json")
    assert out["resType"] == "application/json"
    assert "Chrome" in out["reqUA"]
    assert out["resBody"] == {"from": "ferry", "items": [1, 2]} and out["pretty"]
    assert out["replay"] == "replayed: 200"
    assert [f["path"] for f in out["afterReplay"]] == ["/data.json", "/data.json"]
    assert out["image"]
    assert out["heldWhat"] == f"request GET http://127.0.0.1:{nginx.port}/hdr"
    assert "x=edited" in out["heldBody"], out["heldBody"]
    assert {"DNS", "connect", "TLS", "origin wait", "first byte", "total"} <= set(out["timingRows"])
    assert "urllib.request.Request(" in out["python"] and "/data.json" in out["python"]
    assert out["heldResWhat"].startswith("response 200 to GET http://127.0.0.1:")
    assert out["heldResStatus"] == 200 and json.loads(out["heldResBody"]) == {"edited": "in the UI"}
    # /data.json was fetched by the page and replayed: both go to nginx, which has no such file
    assert out["cmpSummary"].startswith("2 compared, 2 differ"), out["cmpSummary"]
    assert out["cmpRows"] == [["differs", "GET /data.json", "200 → 404"]] * 2
    rows = out["wsRows"]
    assert [r[:2] for r in rows] == [["→", "text"], ["←", "text"], ["→", "binary"], ["←", "binary"]]
    assert rows[0][2] == rows[1][2] == '{"hello": "ws"}'
    assert all(r[2].startswith("00000000  01 02 ") for r in rows[2:]), rows  # a hex dump
    for name in ("inspector-compare.png", "inspector-websocket.png", "inspector-list.png", "inspector-detail.png", "inspector-breakpoint.png",
                 "inspector-response-breakpoint.png"):
        assert (shots / name).stat().st_size > 10000
