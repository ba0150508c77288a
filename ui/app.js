// Ferry inspector UI: a virtualised flow list fed by server-sent events, the filter language
// (evaluated by the server), a detail view, export, replay and edit-and-resend. Plain
// JavaScript, no build step; everything it loads comes from this Ferry (/api/...).
'use strict';
(() => {
  const ROW = 22, OVERSCAN = 20, PAGE = 5000;
  const $ = (id) => document.getElementById(id);
  const token = new URLSearchParams(location.search).get('token');
  const api = (path, params) => {
    const q = new URLSearchParams(params || {});
    if (token) q.set('token', token);
    const s = q.toString();
    return path + (s ? '?' + s : '');
  };
  let flows = [];            // summaries, oldest first
  let byId = new Map();
  let filter = '';
  let es = null, paused = false, follow = true, current = null, gen = 0;
  const selected = new Set();
  const list = $('list'), spacer = $('spacer');
  let rows = [];             // pooled row elements

  const fmtSize = (n) => n < 1024 ? n + ' B' : n < 1048576 ? (n / 1024).toFixed(1) + ' KiB'
                                                           : (n / 1048576).toFixed(1) + ' MiB';
  const text = (el, s) => { el.textContent = s; return el; };
  const mk = (tag, cls) => { const e = document.createElement(tag); if (cls) e.className = cls; return e; };

  function rowEl() {
    const r = mk('div', 'row');
    for (const c of ['c-id', 'c-m', 'c-h', 'c-p', 'c-s', 'c-t', 'c-z', 'c-d']) r.appendChild(mk('span', c));
    r.addEventListener('click', (ev) => {
      const id = +r.dataset.id;
      if (ev.ctrlKey || ev.metaKey || ev.shiftKey) {
        if (selected.has(id)) selected.delete(id); else selected.add(id);
        render();
      } else {
        open(id);
      }
    });
    spacer.appendChild(r);
    return r;
  }

  let pending = false;
  function render() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      spacer.style.height = flows.length * ROW + 'px';
      if (follow && !paused) list.scrollTop = list.scrollHeight;
      const first = Math.max(0, Math.floor(list.scrollTop / ROW) - OVERSCAN);
      const last = Math.min(flows.length, Math.ceil((list.scrollTop + list.clientHeight) / ROW) + OVERSCAN);
      const need = last - first;
      while (rows.length < need) rows.push(rowEl());
      for (let i = 0; i < rows.length; i++) {
        const r = rows[i], f = flows[first + i];
        if (i >= need || !f) { r.style.display = 'none'; continue; }
        r.style.display = '';
        r.style.top = (first + i) * ROW + 'px';
        if (r.dataset.id !== String(f.id)) {
          r.dataset.id = f.id;
          const c = r.children;
          text(c[0], f.id); text(c[1], f.method); text(c[2], f.host); text(c[3], f.path);
          text(c[4], f.status); c[4].className = 'c-s s' + String(f.status)[0];
          text(c[5], f.type); text(c[6], fmtSize(f.size)); text(c[7], f.duration + ' ms');
          r.title = f.method + ' ' + f.host + f.path;
        }
        r.classList.toggle('sel', selected.has(f.id));
        r.classList.toggle('cur', current === f.id);
      }
      $('count').textContent = flows.length + ' flows' + (selected.size ? ', ' + selected.size + ' selected' : '');
    });
  }

  list.addEventListener('scroll', () => {
    follow = list.scrollTop + list.clientHeight >= list.scrollHeight - ROW;
    render();
  });

  function add(f) {
    if (byId.has(f.id)) return;
    byId.set(f.id, f);
    flows.push(f);
  }

  function connect(after) {
    if (es) es.close();
    const params = { after: String(after) };
    if (filter) params.filter = filter;
    const g = gen;
    es = new EventSource(api('/api/events', params));
    es.onmessage = (ev) => {
      if (g !== gen) return;
      add(JSON.parse(ev.data));
      render();
    };
  }

  async function reload() {
    const g = ++gen;
    const params = { limit: String(PAGE) };
    if (filter) params.filter = filter;
    const r = await fetch(api('/api/flows', params));
    const j = await r.json();
    if (g !== gen) return;
    const input = $('filter');
    if (!r.ok) {
      input.classList.add('bad');
      $('filter-error').textContent = j.error + (j.at !== undefined ? ' (at ' + j.at + ')' : '');
      return;
    }
    input.classList.remove('bad');
    $('filter-error').textContent = '';
    flows = []; byId = new Map();
    for (const f of j.flows.reverse()) add(f);
    follow = true;
    render();
    connect(j.last);
  }

  let debounce = null;
  $('filter').addEventListener('input', (ev) => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { filter = ev.target.value.trim(); reload(); }, 200);
  });

  $('pause').addEventListener('click', () => {
    paused = !paused;
    $('pause').textContent = paused ? 'Follow' : 'Pause';
    if (!paused) { follow = true; render(); }
  });
  $('clear-sel').addEventListener('click', () => { selected.clear(); render(); });
  $('export-har').addEventListener('click', () => {
    const params = selected.size ? { ids: [...selected].sort((a, b) => a - b).join(',') }
                                 : (filter ? { filter } : {});
    location.href = api('/api/export.har', params);
  });

  // ---- compare against another upstream ----

  $('compare').addEventListener('click', () => { $('cmp').hidden = !$('cmp').hidden; });
  $('cmp-run').addEventListener('click', async () => {
    const p = { upstream: $('cmp-upstream').value.trim(), ignore: $('cmp-ignore').value.trim() };
    if (selected.size) p.ids = [...selected].sort((a, b) => a - b).join(',');
    else if (filter) p.filter = filter;
    $('cmp-summary').textContent = 'sending…';
    const r = await fetch(api('/api/compare'), { method: 'POST', body: new URLSearchParams(p),
      headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    const j = await r.json();
    const tb = $('cmp-results');
    tb.textContent = '';
    if (j.error) { $('cmp-summary').textContent = j.error; return; }
    $('cmp-summary').textContent = j.compared + ' compared, ' + j.differ + ' differ' +
      (selected.size ? ' (the selection)' : filter ? ' (the filter)' : ' (every flow)');
    for (const x of j.results) {
      const tr = mk('tr');
      tr.className = x.differs ? 'differs' : 'same';
      tr.dataset.id = x.id;
      const h = x.headers || { added: [], removed: [], changed: [] };
      const hd = [...h.added.map(([n]) => '+' + n), ...h.removed.map(([n]) => '-' + n),
                  ...h.changed.map(([n]) => '~' + n)].join(' ');
      const body = !x.body ? '' : x.body.same === null ? 'not comparable (cut)' : x.body.same ? 'same' : 'differs';
      for (const t of [x.method + ' ' + x.path,
                       x.status[0] + ' → ' + (x.status[1] === null ? '-' : x.status[1]),
                       x.error || hd || 'same headers', body,
                       x.latency_ms ? x.latency_ms[0] + ' → ' + x.latency_ms[1].toFixed(1) + ' ms' : ''])
        tr.appendChild(text(mk('td'), t));
      tr.addEventListener('click', () => open(x.id));
      tb.appendChild(tr);
    }
  });

  // ---- detail ----

  function headers(table, hs) {
    table.textContent = '';
    for (const [n, v] of hs) {
      const tr = mk('tr');
      tr.dataset.name = n.toLowerCase();
      tr.appendChild(text(mk('td'), n));
      tr.appendChild(text(mk('td'), v));
      table.appendChild(tr);
    }
  }

  function b64bytes(s) {
    const bin = atob(s), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function hexdump(bytes) {
    const lines = [], n = Math.min(bytes.length, 65536);
    for (let o = 0; o < n; o += 16) {
      let hex = '', asc = '';
      for (let i = o; i < o + 16; i++) {
        if (i < n) {
          hex += bytes[i].toString(16).padStart(2, '0') + ' ';
          asc += bytes[i] >= 32 && bytes[i] < 127 ? String.fromCharCode(bytes[i]) : '.';
        } else hex += '   ';
      }
      lines.push(o.toString(16).padStart(8, '0') + '  ' + hex + ' ' + asc);
    }
    if (bytes.length > n) lines.push('… ' + (bytes.length - n) + ' more bytes');
    return lines.join('\n');
  }

  function body(el, part, id, which) {
    el.textContent = '';
    const type = (part.type || '').toLowerCase();
    if (!part.kept && !part.size) { el.appendChild(text(mk('div', 'note'), 'no body')); return; }
    if (!part.kept) { el.appendChild(text(mk('div', 'note'), part.size + ' bytes, not kept')); return; }
    if (type.startsWith('image/')) {
      const img = mk('img');
      img.src = api('/api/flows/' + id + '/' + which + '/body');
      img.alt = type;
      el.appendChild(img);
    } else {
      const pre = mk('pre');
      pre.className = 'body-text';
      if (part.text !== undefined) {
        let s = part.text;
        if (type.includes('json') || /^\s*[{[]/.test(s)) {
          try { s = JSON.stringify(JSON.parse(s), null, 2); } catch (e) { /* as text */ }
        }
        pre.textContent = s;
      } else {
        pre.textContent = hexdump(b64bytes(part.base64));
        pre.classList.add('hex');
      }
      el.appendChild(pre);
    }
    if (part.truncated) el.appendChild(text(mk('div', 'note'), 'cut at ' + part.kept + ' of ' + part.size + ' bytes (inspector.body-cap)'));
  }

  let detail = null;
  async function open(id) {
    current = id;
    render();
    const r = await fetch(api('/api/flows/' + id));
    if (!r.ok || current !== id) return;
    const f = await r.json();
    detail = f;
    $('detail').hidden = false;
    $('editor').hidden = true;
    $('curl-out').hidden = true;
    $('replay-result').textContent = '';
    $('d-title').textContent = f.method + ' ' + f.scheme + '://' + f.host + f.path;
    $('d-status').textContent = f.status + (f.error ? ' (' + f.error + ')' : '');
    headers($('req-headers'), f.request.headers);
    headers($('res-headers'), f.response.headers);
    body($('req-body'), f.request, id, 'request');
    body($('res-body'), f.response, id, 'response');
    $('har-one').href = api('/api/export.har', { ids: String(id) });
    $('har-one').setAttribute('download', 'flow-' + id + '.har');
    const t = f.timings || {};
    const ms = (v) => v === null || v === undefined ? 'not measured' : v < 0 ? '- (none: reused or not needed)' : v + ' ms';
    headers($('timing'), [
      ['started', new Date(f.time).toISOString()],
      ['DNS', ms(t.dns)], ['connect', ms(t.connect)], ['TLS', ms(t.tls)],
      ['origin wait', ms(t.wait)],
      ['first byte', f.ttfb + ' ms'], ['total', f.duration + ' ms'],
      ['protocol', f.protocol + (f.stream ? ' stream ' + f.stream : '')],
      ['request body', f.request.size + ' bytes'], ['response body', f.response.size + ' bytes'],
      ['flags', f.flags.join(', ') || '-']]);
    const ws = f.ws || [];
    $('ws-pane').hidden = ws.length === 0;
    if (ws.length) { // a tunnel: its bytes are the messages, not bodies
      $('req-body').textContent = f.request.size + ' bytes of WebSocket frames (messages below)';
      $('res-body').textContent = f.response.size + ' bytes of WebSocket frames (messages below)';
    }
    const OPS = { 0: 'cont', 1: 'text', 2: 'binary', 8: 'close', 9: 'ping', 10: 'pong' };
    const wl = $('ws-list');
    wl.textContent = '';
    for (const m of ws) {
      const tr = mk('tr');
      tr.className = 'ws-' + m.from;
      tr.appendChild(text(mk('td'), m.from === 'client' ? '→' : '←'));
      tr.appendChild(text(mk('td'), OPS[m.opcode] || String(m.opcode)));
      tr.appendChild(text(mk('td'), fmtSize(m.size) + (m.cut ? ' (cut)' : '') + (m.compressed ? ' deflate' : '')));
      const td = mk('td');
      const shown = m.text !== undefined ? m.text : hexdump(b64bytes(m.base64 || ''));
      td.textContent = shown.length > 2000 ? shown.slice(0, 2000) + '…' : shown;
      tr.appendChild(td);
      wl.appendChild(tr);
    }
    $('ws-count').textContent = ws.length + ' messages' + (f.ws_dropped ? ', ' + f.ws_dropped + ' more not kept' : '');
    const tls = Object.entries(f.tls || {});
    $('tls-pane').hidden = tls.length === 0;
    headers($('tls'), tls);
  }

  $('close').addEventListener('click', () => { $('detail').hidden = true; current = null; render(); });

  async function replay(form) {
    const out = $('replay-result');
    out.textContent = 'sending…';
    const r = await fetch(api('/api/flows/' + detail.id + '/replay'), {
      method: 'POST', body: form || new URLSearchParams(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    const j = await r.json();
    out.textContent = j.error ? 'replay failed: ' + j.error : 'replayed: ' + j.status;
    out.dataset.status = j.status || '';
  }
  $('replay').addEventListener('click', () => replay());
  $('edit').addEventListener('click', () => {
    const f = detail;
    $('editor').hidden = false;
    $('edit-method').value = f.method;
    $('edit-url').value = f.scheme + '://' + f.host + f.path;
    $('edit-headers').value = f.request.headers.filter(([n]) => !n.startsWith(':'))
                                .map(([n, v]) => n + ': ' + v).join('\n');
    $('edit-body').value = f.request.text || '';
  });
  $('edit-send').addEventListener('click', () => {
    const p = new URLSearchParams();
    p.set('method', $('edit-method').value);
    p.set('url', $('edit-url').value);
    p.set('headers', $('edit-headers').value);
    p.set('body', $('edit-body').value);
    replay(p);
  });
  $('curl').addEventListener('click', async () => {
    const r = await fetch(api('/api/flows/' + detail.id + '/curl'));
    const s = await r.text();
    const pre = $('curl-out');
    pre.textContent = s;
    pre.hidden = false;
    try { await navigator.clipboard.writeText(s); } catch (e) { /* shown instead */ }
  });

  $('python').addEventListener('click', async () => {
    const r = await fetch(api('/api/flows/' + detail.id + '/python'));
    const s = await r.text();
    const pre = $('curl-out');
    pre.textContent = s;
    pre.hidden = false;
    try { await navigator.clipboard.writeText(s); } catch (e) { /* shown instead */ }
  });

  list.addEventListener('keydown', (ev) => {
    if (!flows.length) return;
    let i = flows.findIndex((f) => f.id === current);
    if (ev.key === 'ArrowDown') i = Math.min(flows.length - 1, i + 1);
    else if (ev.key === 'ArrowUp') i = Math.max(0, i - 1);
    else return;
    ev.preventDefault();
    open(flows[i].id);
    const top = i * ROW;
    if (top < list.scrollTop) list.scrollTop = top;
    else if (top + ROW > list.scrollTop + list.clientHeight) list.scrollTop = top + ROW - list.clientHeight;
  });

  // ---- breakpoints ----

  let bpTimer = null;
  const heldShown = new Map(); // id -> element (kept while the request is held: edits survive)
  async function post(path, params) {
    const r = await fetch(api(path), { method: 'POST', body: new URLSearchParams(params),
      headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    return { ok: r.ok, j: await r.json() };
  }
  function heldItem(h) {
    const d = mk('div', 'held-item');
    d.dataset.id = h.id;
    d.dataset.phase = h.phase;
    const resp = h.phase === 'response';
    d.appendChild(text(mk('div', 'what'), (resp ? 'response ' + h.status + ' to ' : 'request ') +
                                         h.method + ' ' + h.scheme + '://' + h.host + h.path));
    let st = null, bd = null;
    if (resp) {
      st = mk('input', 'status');
      st.size = 4;
      st.value = h.status;
      st.title = 'status';
      d.appendChild(st);
    }
    const ta = mk('textarea', 'headers');
    ta.rows = Math.min(10, h.headers.length + 1);
    ta.value = h.headers.map(([n, v]) => n + ': ' + v).join('\n');
    d.appendChild(ta);
    if (resp) {
      bd = mk('textarea', 'body');
      bd.rows = 3;
      bd.placeholder = 'new body (empty: the origin\'s)';
      d.appendChild(bd);
    }
    const rel = text(mk('button', 'release'), 'Release');
    rel.addEventListener('click', () => {
      const p = { headers: ta.value };
      if (st && st.value !== String(h.status)) p.status = st.value;
      if (bd && bd.value) p.body = bd.value;
      post('/api/held/' + h.id + '/release', p).then(pollHeld);
    });
    const drop = text(mk('button', 'drop'), 'Drop');
    drop.addEventListener('click', () => post('/api/held/' + h.id + '/drop', {}).then(pollHeld));
    d.appendChild(rel); d.appendChild(drop);
    return d;
  }
  async function pollHeld() {
    const r = await fetch(api('/api/breakpoint'));
    const j = await r.json();
    const ids = new Set(j.held.map((h) => h.id));
    for (const [id, el] of heldShown) if (!ids.has(id)) { el.remove(); heldShown.delete(id); }
    for (const h of j.held) if (!heldShown.has(h.id)) {
      const el = heldItem(h);
      heldShown.set(h.id, el);
      $('held-list').appendChild(el);
    }
    $('held').hidden = heldShown.size === 0;
    $('bp-shown').textContent = [j.filter && 'requests: ' + j.filter, j.response && 'responses: ' + j.response]
                                  .filter(Boolean).join(', ');
    clearTimeout(bpTimer);
    if (j.filter || j.response || heldShown.size) bpTimer = setTimeout(pollHeld, 500);
  }
  for (const [input, key, what] of [['bp', 'filter', 'requests'], ['bp-res', 'response', 'responses']]) {
    $(input + '-set').addEventListener('click', async () => {
      const v = $(input).value.trim();
      const { ok, j } = await post('/api/breakpoint', { [key]: v });
      $(input).classList.toggle('bad', !ok);
      $(input).classList.toggle('on', ok && !!v);
      $(input).title = ok ? (v ? 'holding ' + what + ' matching ' + v : 'no breakpoint') : j.error;
      pollHeld();
    });
  }

  window.__inspector = { flows: () => flows.length, ready: false };
  reload().then(() => { window.__inspector.ready = true; });
})();
