// The inspector's web UI in headless Debian Chromium (driven by playwright-core): opens the UI
// in one page, browses PAGE_URL through the intercepting proxy in another (its own context,
// loopback not bypassed), and checks in the UI that the flows appear, that a filter narrows the
// list, that the detail view shows a header and the JSON body, and that replay adds a flow.
// Prints one JSON line. Usage: node inspector_ui.js UI_URL PAGE_URL PROXY SCREENSHOT_DIR HDR_URL
// HDR_URL answers with the X-Test request header it got (nginx): a breakpoint edits it.
const { chromium } = require('playwright-core');

(async () => {
  const [uiUrl, pageUrl, proxy, shots, hdrUrl] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const out = { ok: false };
  const visible = (page) => page.evaluate(() => [...document.querySelectorAll('#list .row')]
    .filter((r) => r.style.display !== 'none')
    .map((r) => ({ id: +r.dataset.id, path: r.children[3].textContent, status: r.children[4].textContent })));
  try {
    const uiCtx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const ui = await uiCtx.newPage();
    await ui.goto(uiUrl, { timeout: 20000 });
    await ui.waitForFunction(() => window.__inspector && window.__inspector.ready, null, { timeout: 20000 });
    out.initialFlows = await ui.evaluate(() => window.__inspector.flows());
    out.initialRows = await ui.evaluate(() => document.querySelectorAll('#list .row').length);

    const webCtx = await browser.newContext({ proxy: { server: proxy, bypass: '<-loopback>' } });
    const web = await webCtx.newPage();
    const resp = await web.goto(pageUrl, { timeout: 20000 });
    out.pageStatus = resp.status();
    await web.waitForFunction(() => window.__done === true, null, { timeout: 20000 });
    out.page = await web.evaluate(() => window.__result);

    // the browsed flows appear in the UI (live, through the event stream)
    await ui.waitForFunction(() => {
      const paths = [...document.querySelectorAll('#list .row')].filter((r) => r.style.display !== 'none')
        .map((r) => r.children[3].textContent);
      return ['/page.html', '/app.js', '/data.json', '/pixel.png'].every((p) => paths.includes(p));
    }, null, { timeout: 20000 });
    out.live = true;
    await ui.fill('#filter', '~d 127.0.0.1');
    await ui.waitForFunction(() => [...document.querySelectorAll('#list .row')]
      .filter((r) => r.style.display !== 'none').length >= 4, null, { timeout: 20000 });
    await ui.evaluate(() => [...document.querySelectorAll('#list .row')]
      .find((r) => r.style.display !== 'none' && r.children[3].textContent === '/data.json').click());
    await ui.waitForSelector('#res-body pre', { timeout: 20000 });
    await ui.fill('#filter', '');
    await ui.waitForFunction(() => window.__inspector.flows() >= 3004, null, { timeout: 20000 });
    await ui.screenshot({ path: shots + '/inspector-list.png' });

    // filter
    await ui.fill('#filter', '~t json & ~m GET');
    await ui.waitForFunction(() => {
      const rows = [...document.querySelectorAll('#list .row')].filter((r) => r.style.display !== 'none');
      return rows.length === 1 && rows[0].children[3].textContent === '/data.json';
    }, null, { timeout: 20000 });
    out.filtered = await visible(ui);
    await ui.fill('#filter', '~c (');
    await ui.waitForFunction(() => document.getElementById('filter').classList.contains('bad'), null, { timeout: 20000 });
    out.filterError = await ui.textContent('#filter-error');
    await ui.fill('#filter', '~u data.json');
    await ui.waitForFunction(() => !document.getElementById('filter').classList.contains('bad') &&
      [...document.querySelectorAll('#list .row')].filter((r) => r.style.display !== 'none').length === 1,
      null, { timeout: 20000 });

    // detail view: a header and the JSON body
    await ui.click('#list .row >> nth=0');
    await ui.waitForSelector('#res-body pre', { timeout: 20000 });
    out.title = await ui.textContent('#d-title');
    out.resType = await ui.textContent('#res-headers tr[data-name="content-type"] td:nth-child(2)');
    out.reqUA = await ui.textContent('#req-headers tr[data-name="user-agent"] td:nth-child(2)');
    out.resBody = JSON.parse(await ui.textContent('#res-body pre'));
    out.pretty = (await ui.textContent('#res-body pre')).includes('\n  ');
    out.timingRows = await ui.evaluate(() => [...document.querySelectorAll('#timing tr')]
      .map((r) => r.children[0].textContent));
    await ui.screenshot({ path: shots + '/inspector-detail.png' });
    // Copy as Python: the snippet is shown (the clipboard may be denied headless)
    await ui.click('#python');
    await ui.waitForFunction(() => !document.getElementById('curl-out').hidden, null, { timeout: 20000 });
    out.python = await ui.textContent('#curl-out');

    // replay: the UI says so and the new flow shows up in the (filtered) list
    await ui.click('#replay');
    await ui.waitForFunction(() => document.getElementById('replay-result').textContent.startsWith('replayed'),
      null, { timeout: 20000 });
    out.replay = await ui.textContent('#replay-result');
    await ui.waitForFunction(() => [...document.querySelectorAll('#list .row')]
      .filter((r) => r.style.display !== 'none').length === 2, null, { timeout: 20000 });
    out.afterReplay = await visible(ui);

    // the image flow shows as an image
    await ui.fill('#filter', '~u pixel.png');
    await ui.waitForFunction(() => [...document.querySelectorAll('#list .row')]
      .filter((r) => r.style.display !== 'none').length === 1, null, { timeout: 20000 });
    await ui.click('#list .row >> nth=0');
    await ui.waitForFunction(() => {
      const img = document.querySelector('#res-body img');
      return img && img.complete && img.naturalWidth === 1;
    }, null, { timeout: 20000 });
    out.image = true;

    // compare the filtered flows (the /data.json ones) against another upstream (nginx: 404)
    await ui.fill('#filter', '~u /data.json');
    await ui.waitForFunction(() => [...document.querySelectorAll('#list .row')]
      .some((r) => r.style.display !== 'none' && r.children[3].textContent === '/data.json'), null, { timeout: 20000 });
    await ui.click('#compare');
    await ui.fill('#cmp-upstream', hdrUrl.replace('/hdr', ''));
    await ui.click('#cmp-run');
    await ui.waitForFunction(() => /compared/.test(document.getElementById('cmp-summary').textContent), null, { timeout: 30000 });
    out.cmpSummary = await ui.textContent('#cmp-summary');
    out.cmpRows = await ui.evaluate(() => [...document.querySelectorAll('#cmp-results tr')]
      .map((r) => [r.className, r.children[0].textContent, r.children[1].textContent]));
    await ui.screenshot({ path: shots + '/inspector-compare.png' });
    await ui.click('#compare');

    // a WebSocket flow: its messages are listed, both directions
    await ui.fill('#filter', '~u /ws/chat');
    await ui.waitForFunction(() => [...document.querySelectorAll('#list .row')]
      .some((r) => r.style.display !== 'none' && r.children[3].textContent === '/ws/chat'),
      null, { timeout: 20000 });
    await ui.evaluate(() => [...document.querySelectorAll('#list .row')]
      .find((r) => r.style.display !== 'none' && r.children[3].textContent === '/ws/chat').click());
    await ui.waitForSelector('#ws-list tr', { timeout: 20000 });
    out.wsRows = await ui.evaluate(() => [...document.querySelectorAll('#ws-list tr')]
      .map((r) => [r.children[0].textContent, r.children[1].textContent, r.children[3].textContent.trim()])
      .filter((r) => r[1] === 'text' || r[1] === 'binary'));
    await ui.evaluate(() => document.getElementById('ws-pane').scrollIntoView());
    await ui.screenshot({ path: shots + '/inspector-websocket.png' });

    // breakpoint: hold the request, edit its header in the UI, release; the origin sees it
    await ui.fill('#filter', '');
    await ui.fill('#bp', '~u /hdr');
    await ui.click('#bp-set');
    await ui.waitForFunction(() => document.getElementById('bp').classList.contains('on'), null, { timeout: 20000 });
    const held = await webCtx.newPage();
    await held.setExtraHTTPHeaders({ 'X-Test': 'orig' });
    // the origin answers application/octet-stream: the browser downloads it
    const dl = held.waitForEvent('download', { timeout: 30000 });
    held.goto(hdrUrl, { timeout: 30000 }).catch(() => {});
    await ui.waitForSelector('.held-item textarea', { timeout: 20000 });
    out.heldWhat = await ui.textContent('.held-item .what');
    await ui.evaluate(() => {
      const ta = document.querySelector('.held-item textarea');
      ta.value = ta.value.replace(/^x-test: orig$/im, 'X-Test: edited');
    });
    await ui.screenshot({ path: shots + '/inspector-breakpoint.png' });
    await ui.click('.held-item button.release');
    const file = await (await dl).path();
    out.heldBody = require('fs').readFileSync(file, 'utf8');
    await ui.waitForFunction(() => document.getElementById('held').hidden, null, { timeout: 20000 });

    // response breakpoint: hold the origin's JSON, replace its body in the UI, release
    await ui.fill('#bp', '');
    await ui.click('#bp-set');
    await ui.fill('#bp-res', '~u /data.json & ~c 200');
    await ui.click('#bp-res-set');
    await ui.waitForFunction(() => document.getElementById('bp-res').classList.contains('on'), null, { timeout: 20000 });
    const rpage = await webCtx.newPage();
    const rdone = rpage.goto(pageUrl.replace('page.html', 'data.json?held=1'), { timeout: 30000 });
    await ui.waitForSelector('.held-item[data-phase=response] textarea.body', { timeout: 20000 });
    out.heldResWhat = await ui.textContent('.held-item .what');
    await ui.fill('.held-item textarea.body', '{"edited": "in the UI"}');
    await ui.screenshot({ path: shots + '/inspector-response-breakpoint.png' });
    await ui.click('.held-item button.release');
    const rresp = await rdone;
    out.heldResStatus = rresp.status();
    out.heldResBody = await rresp.text();
    await ui.waitForFunction(() => document.getElementById('held').hidden, null, { timeout: 20000 });
    out.ok = true;
  } catch (e) {
    out.error = String(e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})();
