// Headless Debian Chromium opening WebTransport sessions to Ferry (driven by playwright-core).
// Usage: node wt_chromium.js ORIGIN SPKI_HASH USER_DATA_DIR SCRIPT_JSON [EXTRA_ARGS_JSON]
// ORIGIN is https://127.0.0.1:PORT (forced onto QUIC); SCRIPT_JSON names the checks to run.
// Prints one JSON line with what the page saw.
const { chromium } = require('playwright-core');

(async () => {
  const [origin, spki, profile, what, extra] = process.argv.slice(2);
  const hostport = origin.replace('https://', '');
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    env: { ...process.env },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           '--enable-quic', `--origin-to-force-quic-on=${hostport}`,
           `--ignore-certificate-errors-spki-list=${spki}`, ...JSON.parse(extra || '[]')],
  });
  const out = { ok: false };
  try {
    const page = await ctx.newPage();
    await page.goto(origin + (what.includes('"page"') ? JSON.parse(what).page : '/page'), { timeout: 20000 });
    out.result = await page.evaluate(async ([origin, what]) => {
      const cfg = JSON.parse(what);
      const enc = new TextEncoder(), dec = new TextDecoder();
      const readAll = async (readable) => {
        const r = readable.getReader();
        const parts = [];
        for (;;) {
          const { value, done } = await r.read();
          if (done) break;
          parts.push(value);
        }
        let n = 0;
        for (const p of parts) n += p.length;
        const all = new Uint8Array(n);
        let o = 0;
        for (const p of parts) { all.set(p, o); o += p.length; }
        return all;
      };
      const digest = async (u8) =>
        Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', u8)))
          .map((b) => b.toString(16).padStart(2, '0')).join('');
      const res = {};
      const withTimeout = (p, ms, what) => Promise.race([p, new Promise((_, rej) =>
        setTimeout(() => rej(new Error('timeout: ' + what)), ms))]);
      if (cfg.refused) {
        const wt = new WebTransport(origin + cfg.refused);
        try { await withTimeout(wt.ready, 10000, 'ready'); res.refused = false; }
        catch (e) { res.refused = true; res.error = String(e); }
        return res;
      }
      const wt = new WebTransport(origin + cfg.path);
      await withTimeout(wt.ready, 10000, 'ready');
      res.ready = true;
      // many streams held open (write side not closed): the server's per-session limit
      if (cfg.streams) {
        let okN = 0, failN = 0;
        const ps = [];
        for (let i = 0; i < cfg.streams; i++) {
          ps.push((async () => {
            try {
              const s = await wt.createBidirectionalStream();
              const ww = s.writable.getWriter();
              await ww.write(enc.encode('x'));
              const r = s.readable.getReader();
              const v = await withTimeout(r.read(), 5000, 'stream ' + i);
              if (v.value && v.value.length) okN++; else failN++;
            } catch (e) { failN++; }
          })());
        }
        await Promise.all(ps);
        res.streamsOk = okN;
        res.streamsFailed = failN;
        return res;
      }
      const big = new Uint8Array(cfg.bytes);
      for (let i = 0; i < big.length; i++) big[i] = (i * 7 + 3) & 0xff;
      res.sentHash = await digest(big);
      // bidi
      const bs = await wt.createBidirectionalStream();
      const w = bs.writable.getWriter();
      const readP = readAll(bs.readable);
      await w.write(big);
      await w.close();
      const back = await withTimeout(readP, 20000, 'bidi echo');
      res.bidiLen = back.length;
      res.bidiHash = await digest(back);
      // uni: the answer comes on a stream the server opens
      const incoming = wt.incomingUnidirectionalStreams.getReader();
      const us = await wt.createUnidirectionalStream();
      const uw = us.getWriter();
      await uw.write(enc.encode('uni hello'));
      await uw.close();
      const { value: rs } = await withTimeout(incoming.read(), 10000, 'incoming uni');
      res.uni = dec.decode(await withTimeout(readAll(rs), 10000, 'uni echo'));
      // datagrams (may be lost: send until one comes back, bounded)
      const dw = wt.datagrams.writable.getWriter();
      const dr = wt.datagrams.readable.getReader();
      let got = null;
      for (let i = 0; i < 20 && got === null; i++) {
        await dw.write(enc.encode('dgram ' + i));
        got = await Promise.race([dr.read().then((x) => dec.decode(x.value)),
                                  new Promise((r) => setTimeout(() => r(null), 250))]);
      }
      res.datagram = got;
      // a stream the page aborts with WebTransport error 5: the echo resets its side with 5
      if (cfg.abort) {
        const s = await wt.createBidirectionalStream();
        const w2 = s.writable.getWriter();
        const r2 = s.readable.getReader();
        await w2.write(enc.encode('before abort'));
        const first = await withTimeout(r2.read(), 10000, 'echo before abort');
        res.beforeAbort = dec.decode(first.value);
        await w2.abort(new WebTransportError({ message: 'abort', streamErrorCode: 5 }));
        try {
          for (;;) {
            const x = await withTimeout(r2.read(), 10000, 'reset after abort');
            if (x.done) { res.abortCode = 'fin'; break; }
          }
        } catch (e) {
          res.abortCode = e.streamErrorCode === undefined ? String(e) : e.streamErrorCode;
        }
      }
      // a burst of datagrams: count the echoes (loss allowed), each checked
      if (cfg.burst) {
        let seen = 0, bad = 0;
        const want = new Set();
        for (let i = 0; i < cfg.burst; i++) want.add('burst ' + i);
        const reading = (async () => {
          for (;;) {
            const r = await Promise.race([dr.read(), new Promise((ok) =>
              setTimeout(() => ok(null), 2000))]);  // 2 s without a datagram: the rest is lost
            if (r === null || r.done) return;
            const t = dec.decode(r.value);
            if (want.delete(t)) seen++; else if (!t.startsWith('dgram ')) bad++;
            if (seen === cfg.burst) return;
          }
        })();
        for (let i = 0; i < cfg.burst; i++) await dw.write(enc.encode('burst ' + i));
        await reading;
        res.burstEchoed = seen;
        res.burstBad = bad;
      }
      wt.close({ closeCode: 7, reason: 'bye' });
      await withTimeout(wt.closed, 10000, 'closed');
      res.closed = true;
      return res;
    }, [origin, what]);
    out.ok = true;
  } catch (e) {
    out.error = String(e);
  } finally {
    await ctx.close();
  }
  console.log(JSON.stringify(out));
})();
