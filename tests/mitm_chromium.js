// Headless Debian Chromium through Ferry's intercepting proxy (driven by playwright-core):
// loads PAGE_URL (an HTTPS page with a script and an image), waits for the page's script to
// report, and prints one JSON line: what the page saw. Usage:
//   node mitm_chromium.js PAGE_URL PROXY USER_DATA_DIR
// HOME must hold the NSS db (.pki/nssdb) in which the test trusted Ferry's CA.
const { chromium } = require('playwright-core');

(async () => {
  const [url, proxy, profile] = process.argv.slice(2);
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    env: { ...process.env },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           `--proxy-server=${proxy}`, '--proxy-bypass-list=<-loopback>'],
  });
  const out = { ok: false };
  try {
    const page = await ctx.newPage();
    const resp = await page.goto(url, { timeout: 20000 });
    out.status = resp.status();
    out.docHeader = resp.headers()['x-ferry-rule'] || null;
    out.securityIssuer = (await resp.securityDetails())?.issuer || null;
    await page.waitForFunction(() => window.__done === true, null, { timeout: 20000 });
    out.page = await page.evaluate(() => window.__result);
    out.ok = true;
  } catch (e) {
    out.error = String(e);
  } finally {
    await ctx.close();
  }
  console.log(JSON.stringify(out));
})();
