// outbox admin dashboard: plain JavaScript, no build step, no dependencies.
// Every value from the API is put into the page as text (textContent), never
// as HTML.
(() => {
  'use strict';

  const TOKEN_KEY = 'outbox-admin-token';
  const TENANT_KEY = 'outbox-admin-tenant';
  const HOUR = 3600 * 1000;
  const state = { gen: 0, timers: [], info: null, token: sessionStorage.getItem(TOKEN_KEY) || '',
    tenant: sessionStorage.getItem(TENANT_KEY) || '' };
  const $ = (sel, root) => (root || document).querySelector(sel);

  // h builds an element: h('a', {href: '#/', class: 'x', onclick: fn}, 'text', child…).
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    append(el, children);
    return el;
  }
  function append(el, children) {
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const svgNS = 'http://www.w3.org/2000/svg';
  function s(tag, attrs) {
    const el = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }

  // Numbers whose JSON text a JavaScript number cannot hold exactly (IDs
  // above 2^53, 1.10) keep their source text where the browser provides it.
  class RawNum { constructor(src) { this.src = src; } toString() { return this.src; } }
  function parseJSON(text) {
    return JSON.parse(text, (k, v, ctx) => {
      if (typeof v === 'number' && ctx && typeof ctx.source === 'string' && ctx.source !== String(v)) return new RawNum(ctx.source);
      return v;
    });
  }

  class AuthError extends Error {}

  async function api(path, opts) {
    opts = opts || {};
    const headers = { Accept: 'application/json' };
    if (state.token) headers.Authorization = 'Bearer ' + state.token;
    const init = { method: opts.method || 'GET', headers, credentials: 'same-origin', cache: 'no-store' };
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(opts.body);
    }
    // Serving tenants, every endpoint but info and tenants works on the
    // selected tenant's schema.
    if (state.info && state.info.tenants && !/^(info|tenants)(\?|$)/.test(path)) {
      path += (path.includes('?') ? '&' : '?') + 'tenant=' + encodeURIComponent(state.tenant);
    }
    const res = await fetch('api/' + path, init);
    let data = null;
    try { data = parseJSON(await res.text()); } catch (e) { data = null; }
    if (res.status === 401) {
      if (state.token) { state.token = ''; sessionStorage.removeItem(TOKEN_KEY); state.rejected = true; }
      state.info = null;
      showLogin();
      throw new AuthError('authentication required');
    }
    if (!res.ok) throw new Error((data && data.error) || (res.status + ' ' + res.statusText));
    return data;
  }

  // ---- formatting ----
  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(iso) {
    if (!iso) return '–';
    const d = new Date(iso);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  const fmtClock = (ms, seconds) => {
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}` + (seconds ? `:${pad(d.getSeconds())}` : '');
  };
  const fmtInt = (n) => Number(n).toLocaleString('en-US');
  function fmtDuration(sec) {
    sec = Math.abs(sec);
    if (sec === 0) return '0s';
    if (sec < 1) return Math.round(sec * 1000) + 'ms';
    if (sec < 10) return (Math.round(sec * 10) / 10) + 's';
    if (sec < 60) return Math.round(sec) + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm ' + Math.round(sec % 60) + 's';
    if (sec < 86400) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
    return Math.floor(sec / 86400) + 'd ' + Math.floor((sec % 86400) / 3600) + 'h';
  }
  function fmtRelative(iso) {
    const sec = (new Date(iso).getTime() - Date.now()) / 1000;
    return sec >= 0 ? 'in ' + fmtDuration(sec) : fmtDuration(sec) + ' ago';
  }
  function fmtRate(v) {
    if (v === undefined || v === null) return '–';
    return v >= 100 ? fmtInt(Math.round(v)) : String(Math.round(v * 10) / 10);
  }
  function aggregate(e) {
    if (!e.aggregate_type && !e.aggregate_id) return '–';
    return [e.aggregate_type, e.aggregate_id].filter(Boolean).join('/');
  }
  function short(text, n) {
    text = (text || '').replace(/\s+/g, ' ').trim();
    return text.length > n ? text.slice(0, n - 1) + '…' : text;
  }
  const pill = (status) => h('span', { class: 'pill ' + status }, status);
  const plural = (n, word) => `${fmtInt(n)} ${word}${Number(n) === 1 ? '' : 's'}`;

  // ---- shell: toast, dialog, login, router ----
  let toastTimer = 0;
  function toast(msg, isError) {
    const t = $('#toast');
    t.textContent = msg;
    t.className = isError ? 'error' : '';
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 4000);
  }

  // ask shows a modal dialog; it resolves to null on cancel, to the trimmed
  // input when it has one, else to true.
  function ask(opts) {
    const d = $('#dialog');
    $('#dialog-title').textContent = opts.title;
    $('#dialog-text').textContent = opts.text || '';
    const label = $('#dialog-label'), input = $('#dialog-input'), ok = $('#dialog-ok');
    label.hidden = !opts.input;
    $('#dialog-label-text').textContent = opts.input || '';
    input.value = '';
    ok.textContent = opts.ok || 'OK';
    ok.className = opts.danger ? 'danger' : '';
    return new Promise((resolve) => {
      const done = (v) => {
        ok.onclick = null; $('#dialog-cancel').onclick = null; d.oncancel = null;
        if (d.open) d.close();
        resolve(v);
      };
      ok.onclick = (ev) => {
        ev.preventDefault();
        if (opts.input && !input.value.trim()) { input.focus(); return; }
        done(opts.input ? input.value.trim() : true);
      };
      $('#dialog-cancel').onclick = () => done(null);
      d.oncancel = () => done(null);
      d.showModal();
      if (opts.input) input.focus(); else ok.focus();
    });
  }

  function showLogin() {
    clearTimers();
    state.gen++;
    state.redraw = null;
    const rejected = state.rejected;
    state.rejected = false;
    const input = h('input', { type: 'password', id: 'token', autocomplete: 'current-password', required: true, 'aria-label': 'Admin token' });
    const form = h('form', {
      onsubmit: (ev) => {
        ev.preventDefault();
        state.token = input.value.trim();
        sessionStorage.setItem(TOKEN_KEY, state.token);
        state.info = null;
        route();
      },
    }, h('label', { class: 'field' }, 'Admin token', input), h('button', { type: 'submit' }, 'Sign in'));
    $('#main').replaceChildren(h('div', { class: 'panel login' },
      h('h1', {}, 'Sign in'),
      h('p', { class: 'muted' }, 'This dashboard needs the admin token (outbox admin --admin-token, or $OUTBOX_ADMIN_TOKEN). It is kept for this browser tab only.'),
      rejected ? h('p', { class: 'error' }, 'That token was not accepted.') : null,
      form));
    input.focus();
  }

  function clearTimers() {
    for (const t of state.timers) clearInterval(t);
    state.timers = [];
  }
  function every(ms, fn) { state.timers.push(setInterval(fn, ms)); }

  async function loadInfo() {
    if (state.info) return state.info;
    state.info = await api('info');
    const who = $('#who');
    who.replaceChildren(state.info.principal !== 'anonymous' ? state.info.principal : '',
      state.info.read_only ? ' · read-only' : '');
    if (state.token) {
      who.append(' ', h('button', { class: 'secondary small', onclick: () => {
        state.token = ''; sessionStorage.removeItem(TOKEN_KEY); state.info = null; showLogin();
      } }, 'Sign out'));
    }
    if (state.info.tenants) await loadTenants();
    return state.info;
  }

  // loadTenants fills the header's tenant selector (GET /api/tenants) and
  // keeps the selected tenant, or selects the most lagging one.
  async function loadTenants() {
    const res = await api('tenants');
    const names = res.tenants.map((t) => t.schema);
    if (!names.includes(state.tenant)) setTenant(names.length ? names[0] : '');
    fillTenantSelect(res.tenants);
    return res.tenants;
  }
  // fillTenantSelect lists the tenants in the header's selector, by name.
  function fillTenantSelect(tenants) {
    const names = tenants.map((t) => t.schema);
    const sel = h('select', { id: 'tenant', 'aria-label': 'Tenant', onchange: (ev) => { setTenant(ev.target.value); route(); } },
      [...names].sort().map((n) => h('option', { value: n, selected: n === state.tenant }, n)));
    const box = $('#tenant-box');
    box.replaceChildren(h('label', {}, 'Tenant ', sel));
    box.hidden = false;
  }
  function setTenant(name) {
    state.tenant = name;
    sessionStorage.setItem(TENANT_KEY, name);
    const sel = $('#tenant');
    if (sel) sel.value = name;
  }

  async function refreshBadge() {
    try {
      const st = await api('stats');
      setBadge(st.failed);
    } catch (e) { /* the page shows errors */ }
  }
  function setBadge(n) {
    const b = $('#failed-badge');
    b.textContent = n > 0 ? fmtInt(n) : '';
    b.hidden = !(n > 0);
  }

  async function route() {
    clearTimers();
    state.redraw = null;
    const gen = ++state.gen;
    const hash = location.hash.replace(/^#/, '') || '/';
    const [path, query] = hash.split('?');
    const params = new URLSearchParams(query || '');
    const page = path === '/' ? 'overview' : path.split('/')[1];
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
    const main = $('#main');
    try {
      await loadInfo();
      if (gen !== state.gen) return;
      if (state.info.tenants && !state.tenant) {
        main.replaceChildren(h('div', { class: 'panel' }, h('h1', {}, 'No tenants'),
          h('p', {}, 'No tenant schema with an outbox matches the discovery: create and migrate one (outbox migrate --tenant-schemas), then reload.')));
        return;
      }
      const m = path.match(/^\/events\/(\d+)$/);
      if (path === '/') await overview(gen, main);
      else if (path === '/failed') await failedPage(gen, main, params);
      else if (path === '/events') await eventsPage(gen, main, params);
      else if (m) await detailPage(gen, main, m[1]);
      else if (path === '/relays') await relaysPage(gen, main);
      else main.replaceChildren(h('div', { class: 'panel' }, h('h1', {}, 'Not found'), h('a', { href: '#/' }, 'Back to the overview')));
      if (path !== '/') refreshBadge();
    } catch (e) {
      if (e instanceof AuthError || gen !== state.gen) return;
      main.replaceChildren(h('div', { class: 'panel' }, h('h1', {}, 'Error'), h('p', { class: 'error' }, e.message)));
    }
  }
  const stale = (gen) => gen !== state.gen;

  // ---- overview ----
  async function overview(gen, main) {
    const cards = h('div', { class: 'cards', id: 'cards' });
    const charts = {
      throughput: h('div', { class: 'chart', id: 'chart-throughput' }),
      lag: h('div', { class: 'chart', id: 'chart-lag' }),
      counts: h('div', { class: 'chart', id: 'chart-counts' }),
    };
    const relaysBox = h('div', { id: 'overview-relays' });
    const tablesBox = h('div', { id: 'overview-tables' });
    const consumersPanel = h('section', { class: 'panel', id: 'overview-consumers', hidden: true });
    const capturePanel = h('section', { class: 'panel', id: 'overview-capture', hidden: true });
    const tenantsBox = h('div', { id: 'overview-tenants' });
    const tenants = state.info.tenants;
    main.replaceChildren(
      h('h1', {}, 'Overview', tenants ? ' · ' + state.tenant : ''),
      tenants ? h('section', { class: 'panel' }, h('h2', {}, 'Tenants, most lagging first'), tenantsBox) : '',
      cards,
      h('div', { class: 'charts' },
        h('section', { class: 'panel' }, h('h2', {}, 'Throughput (events/s)'), charts.throughput),
        h('section', { class: 'panel' }, h('h2', {}, 'Publisher lag'), charts.lag),
        h('section', { class: 'panel' }, h('h2', {}, 'Waiting and failed events'), charts.counts)),
      h('section', { class: 'panel' }, h('h2', {}, 'Relays'), relaysBox),
      capturePanel,
      consumersPanel,
      h('section', { class: 'panel' }, h('h2', {}, 'Tables'), tablesBox));

    let points = [];
    let since = 0;
    let last = null;
    const draw = () => {
      if (!last) return;
      // The last hour, or less while the samples cover less (at least
      // 20 samples' worth), so a new server's first minutes are readable.
      const to = new Date(last.at).getTime();
      const first = points.length ? points[0].t : to;
      const minSpan = 20 * 1000 * ((state.info && state.info.sample_interval_seconds) || 5);
      const from = Math.max(to - HOUR, Math.min(first, to - minSpan));
      lineChart(charts.throughput, points, from, to, [
        { key: 'written_per_second', cls: 'written', label: 'written', fmt: fmtRate, dashed: true },
        { key: 'published_per_second', cls: 'published', label: 'published', fmt: fmtRate },
      ], fmtRate);
      lineChart(charts.lag, points, from, to, [
        { key: 'lag_seconds', cls: 'lag', label: 'oldest due pending event', fmt: fmtDuration },
      ], fmtDuration);
      lineChart(charts.counts, points, from, to, [
        { key: 'pending', cls: 'pending', label: 'pending', fmt: fmtInt },
        { key: 'processing', cls: 'processing', label: 'processing', fmt: fmtInt },
        { key: 'failed', cls: 'failed', label: 'failed', fmt: fmtInt },
      ], fmtInt);
    };
    const refresh = async () => {
      const [st, rel, health, cons, cap, ten] = await Promise.all([api('stats' + (since ? '?since=' + since : '')), api('relays'), api('health'), api('consumers'),
        api('capture'), tenants ? api('tenants') : null]);
      if (stale(gen)) return;
      if (ten) {
        tenantsBox.replaceChildren(tenantsTable(ten.tenants));
        fillTenantSelect(ten.tenants);
      }
      last = st;
      points = points.concat(st.series);
      const cutoff = new Date(st.at).getTime() - HOUR;
      points = points.filter((p) => p.t >= cutoff);
      if (points.length) since = points[points.length - 1].t;
      renderCards(cards, st);
      setBadge(st.failed);
      draw();
      relaysBox.replaceChildren(relaysTable(rel.relays));
      tablesBox.replaceChildren(...healthView(health));
      // The capture slots (relay --capture logical) show only where one is
      // recorded, or where the role may not read them.
      capturePanel.hidden = !(cap.slots.length || cap.denied);
      if (!capturePanel.hidden) capturePanel.replaceChildren(h('h2', {}, 'Capture slots (relay --capture logical)'), captureView(cap));
      consumersPanel.hidden = !cons.available;
      if (cons.available) consumersPanel.replaceChildren(h('h2', {}, 'Consumers (inbox)'), consumersTable(cons.consumers));
    };
    await refresh();
    const interval = Math.max(2, (state.info && state.info.sample_interval_seconds) || 5) * 1000;
    every(interval, () => refresh().catch((e) => { if (!(e instanceof AuthError)) toast(e.message, true); }));
    state.redraw = draw;
  }

  function renderCards(el, st) {
    const card = (cls, label, value, href, title) => h(href ? 'a' : 'div',
      { class: 'card ' + cls, href, title, dataset: { card: cls } },
      h('div', { class: 'label' }, label), h('div', { class: 'value' }, value));
    const failed = card('failed' + (st.failed > 0 ? ' alert' : ''), 'Failed', fmtInt(st.failed), '#/failed');
    if (st.dead_letter_retry_waiting > 0) {
      // The relay's dead-letter slow retry (--dead-letter-retry).
      failed.append(h('div', { class: 'sub', dataset: { dlqRetry: '' } },
        `${fmtInt(st.dead_letter_retry_waiting)} to retry, next ${fmtTime(st.dead_letter_retry_next_due)}`));
    }
    el.replaceChildren(
      card('pending', 'Pending', fmtInt(st.pending), '#/events?status=pending'),
      card('processing', 'Processing', fmtInt(st.processing), '#/relays'),
      card('processed', 'Processed', '≈' + fmtInt(st.processed), '#/events?status=processed',
        'PostgreSQL\'s estimate: an exact count would read the whole history'),
      failed,
      card('lag', 'Lag', fmtDuration(st.oldest_pending_age_seconds), null,
        'How long the oldest due pending event has waited'));
  }

  // lineChart draws series of points over [from, to] into el as SVG.
  function lineChart(el, points, from, to, series, fmtAxis) {
    const width = Math.max(el.clientWidth || 300, 200), height = 180;
    const m = { l: 48, r: 8, t: 8, b: 22 };
    const w = width - m.l - m.r, hgt = height - m.t - m.b;
    let maxV = 0;
    for (const p of points) for (const sr of series) { const v = p[sr.key]; if (typeof v === 'number' && v > maxV) maxV = v; }
    const top = niceCeil(maxV);
    const x = (t) => m.l + ((t - from) / (to - from)) * w;
    const y = (v) => m.t + hgt - (v / top) * hgt;
    const svg = s('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' });
    for (const f of [0, 0.5, 1]) {
      const v = top * f, yy = y(v);
      svg.append(s('line', { class: 'grid', x1: m.l, x2: width - m.r, y1: yy, y2: yy }));
      const label = s('text', { class: 'axis', x: m.l - 6, y: yy + 4, 'text-anchor': 'end' });
      label.textContent = fmtAxis(v);
      svg.append(label);
    }
    for (const [t, anchor] of [[from, 'start'], [from + (to - from) / 2, 'middle'], [to, 'end']]) {
      const label = s('text', { class: 'axis', x: x(t), y: height - 4, 'text-anchor': anchor });
      label.textContent = fmtClock(t, to - from < 10 * 60 * 1000);
      svg.append(label);
    }
    for (const sr of series) {
      let seg = [];
      const flush = () => {
        if (seg.length > 1) svg.append(s('polyline', { class: 'line c-' + sr.cls + (sr.dashed ? ' dashed' : ''), points: seg.join(' ') }));
        else if (seg.length === 1) {
          const [cx, cy] = seg[0].split(',');
          svg.append(s('circle', { class: 'c-' + sr.cls, cx, cy, r: 2.5, fill: 'currentColor' }));
        }
        seg = [];
      };
      for (const p of points) {
        const v = p[sr.key];
        if (typeof v !== 'number' || p.t < from) { flush(); continue; }
        seg.push(x(p.t).toFixed(1) + ',' + y(v).toFixed(1));
      }
      flush();
    }
    if (!points.length) {
      const t = s('text', { class: 'empty', x: m.l + w / 2, y: m.t + hgt / 2, 'text-anchor': 'middle' });
      t.textContent = 'Collecting samples…';
      svg.append(t);
    }
    const latest = points.length ? points[points.length - 1] : {};
    const legend = h('div', { class: 'legend' }, series.map((sr) =>
      h('span', { dataset: { series: sr.key } }, h('i', { class: 'c-' + sr.cls }), sr.label + ' ', h('b', {}, sr.fmt(latest[sr.key])))));
    el.replaceChildren(svg, legend);
  }
  function niceCeil(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 2.5, 5, 10]) if (v <= f * p) return f * p;
    return 10 * p;
  }

  // relaysTable lists the relays (GET /api/relays): every running relay
  // from its heartbeat, idle ones included, and its leases. A stale relay
  // missed three heartbeats: killed, hung, or cut off from the database.
  function relaysTable(relays) {
    const when = (iso) => (iso ? h('span', { title: fmtTime(iso) }, fmtRelative(iso)) : '–');
    return table(['Relay', 'Status', 'Sink', 'Delivery', 'Version', 'Started', 'Last seen', 'Last claim', 'Events', 'First lease ends'], relays, (r) => [
      td('Relay', h('span', { title: r.host ? `${r.host}, pid ${r.pid}` : '' }, r.relay_id || '(unknown)'), 'mono'),
      td('Status', !r.heartbeat ? h('span', { class: 'muted', title: 'No heartbeat row: an older relay, or a schema before migration 006' }, 'leases only')
        : r.stale ? h('span', { class: 'error', title: 'No heartbeat for three intervals: killed, hung or cut off from the database' }, 'stale')
          : (r.events > 0 ? 'publishing' : 'idle')),
      td('Sink', h('span', { class: 'mono' }, (r.sink || '–') + (r.event_types && r.event_types.length ? ' (' + r.event_types.join(', ') + ')' : ''))),
      td('Delivery', r.ordering ? h('span', { title: 'How the relay delivers: every relay of a schema must deliver the same way' },
        'ordering ' + r.ordering + (r.ordered_failure ? ' (' + r.ordered_failure + ')' : '') + ', leases ' + r.leases) : '–'),
      td('Version', r.version || '–', 'mono'),
      td('Started', when(r.started_at)),
      td('Last seen', when(r.last_seen)),
      td('Last claim', r.heartbeat ? (r.last_claim_at ? when(r.last_claim_at) : 'never') : '–'),
      td('Events', fmtInt(r.events), 'num'),
      td('First lease ends', r.first_lease_end ? h('span', { title: fmtTime(r.first_lease_end), class: r.expired ? 'error' : '' },
        r.expired ? 'expired ' + fmtRelative(r.first_lease_end) : fmtRelative(r.first_lease_end)) : '–'),
    ], 'No relay is running: a running relay shows here within a heartbeat of its start.', (r) => ({ relay: r.relay_id, state: !r.heartbeat ? 'leases' : r.stale ? 'stale' : (r.events > 0 ? 'publishing' : 'idle') }));
  }

  // tenantsTable lists every tenant's counts (GET /api/tenants), the most
  // lagging first; a tenant's name selects it.
  function tenantsTable(tenants) {
    return table(['Tenant', 'Pending', 'Processing', 'Failed', 'Oldest pending'], tenants, (t) => [
      td('Tenant', h('a', { href: '#/', class: 'mono', onclick: (ev) => { ev.preventDefault(); setTenant(t.schema); route(); } }, t.schema)),
      td('Pending', fmtInt(t.pending), 'num'),
      td('Processing', fmtInt(t.processing), 'num'),
      td('Failed', fmtInt(t.failed), 'num'),
      td('Oldest pending', fmtDuration(t.oldest_pending_age_seconds), 'num'),
    ], 'No tenant schema matches.', (t) => ({ tenant: t.schema }));
  }

  // consumersTable lists the consumer side's backlog (GET /api/consumers):
  // each consumer with unprocessed messages in its inbox, and the oldest
  // one's age, the consumer lag; and the broker's own pending count its
  // receiver last recorded, marked stale when the receiver stopped
  // reporting (older than three of its poll intervals).
  function consumersTable(consumers) {
    const broker = (c) => {
      if (c.broker_pending === undefined || c.broker_pending === null) return h('span', { class: 'muted', title: 'No broker report: a webhook, Redis, RabbitMQ or MQTT receiver, or an inbox before migration 002' }, '–');
      const when = 'reported ' + fmtDuration(c.broker_reported_age_seconds) + ' ago';
      if (c.broker_pending_stale) return h('span', { class: 'error', title: `${c.broker}: ${when}; the receiver stopped reporting, so this is not the broker's current count` }, fmtInt(c.broker_pending) + ' (stale)');
      return h('span', { title: `${c.broker}: ${when}` }, fmtInt(c.broker_pending));
    };
    return table(['Consumer', 'Unprocessed', 'Oldest unprocessed', 'Broker pending'], consumers, (c) => [
      td('Consumer', c.consumer, 'mono'),
      td('Unprocessed', fmtInt(c.unprocessed), 'num'),
      td('Oldest unprocessed', fmtDuration(c.oldest_unprocessed_age_seconds), 'num'),
      td('Broker pending', broker(c), 'num'),
    ], 'Every consumer has processed every message it received.', (c) => ({ consumer: c.consumer, state: c.broker_pending_stale ? 'stale' : '' }));
  }

  // captureView lists the logical replication slots of relay --capture
  // logical (GET /api/capture): whether a relay streams from each, and the
  // WAL it keeps on the server's disk; '–' is a figure the server does not
  // report.
  function captureView(cap) {
    if (cap.denied) return h('p', { class: 'muted', id: 'capture-denied' }, 'Unknown: ' + cap.denied);
    const n = (v) => (v === null || v === undefined ? '–' : fmtBytes(v));
    const status = (c) => {
      if (!c.exists) return 'missing on the server';
      if (c.active) return 'active' + (c.active_pid ? ' (pid ' + c.active_pid + ')' : '');
      return h('span', { class: 'error', title: 'No relay streams from it: it keeps WAL until one does or it is dropped (outbox migrate --drop-logical)' }, 'inactive');
    };
    const holder = (c) => (!c.holder ? '–' : c.holder_expired ? c.holder + ' (lease expired)' : c.holder);
    return table(['Slot', 'Status', 'Holder', 'Retained WAL', 'Unconfirmed', 'Confirmed LSN', 'WAL status', 'Safe WAL size'], cap.slots, (c) => [
      td('Slot', c.slot, 'mono'),
      td('Status', status(c)),
      td('Holder', holder(c), 'mono'),
      td('Retained WAL', n(c.retained_bytes), 'num'),
      td('Unconfirmed', n(c.unconfirmed_bytes), 'num'),
      td('Confirmed LSN', c.confirmed_flush_lsn || '–', 'mono'),
      td('WAL status', c.wal_status || '–'),
      td('Safe WAL size', n(c.safe_wal_size), 'num'),
    ], 'No capture slot.', (c) => ({ slot: c.slot, state: !c.exists ? 'missing' : c.active ? 'active' : 'inactive' }));
  }

  // healthView shows the outbox tables' size and garbage, and what holds
  // back their cleanup (GET /api/health); '–' is a figure the database does
  // not report.
  function healthView(hl) {
    const n = (v) => (v === null || v === undefined ? '–' : fmtInt(v));
    const vacuumed = (v) => {
      if (!v) return '–';
      const last = [v.last_vacuum, v.last_autovacuum].filter(Boolean).sort().pop();
      return last ? h('span', { title: last }, fmtRelative(last)) : 'never';
    };
    const out = [table(['Table', 'Live rows', 'Dead tuples', 'Size', 'Last vacuum'], hl.tables, (t) => [
      td('Table', t.table, 'mono'),
      td('Live rows', n(t.live_rows), 'num'),
      td('Dead tuples', n(t.dead_tuples), 'num'),
      td('Size', t.bytes === null ? '–' : fmtBytes(t.bytes) + (t.free_bytes ? ` (${fmtBytes(t.free_bytes)} free)` : ''), 'num'),
      td('Last vacuum', vacuumed(t.vacuum)),
    ], 'No outbox table found.', (t) => ({ table: t.table }))];
    const facts = [];
    const hz = hl.vacuum_horizon;
    if (hz) {
      const w = hz.holder;
      facts.push(['Vacuum horizon', w
        ? `${fmtDuration(hz.age_seconds)} old, held by ${w.kind} ${w.name || ''}${w.pid ? ' (pid ' + w.pid + ')' : ''}${w.state ? ', ' + w.state : ''}`
        : 'nothing holds it back']);
    }
    if (hl.innodb_history_length !== null) facts.push(['InnoDB history list length', fmtInt(hl.innodb_history_length)]);
    if (hl.sqlite_file) {
      const f = hl.sqlite_file;
      facts.push(['Database file', `${fmtBytes(f.bytes)}, ${fmtBytes(f.free_bytes)} free` + (f.wal_bytes !== null ? `, WAL ${fmtBytes(f.wal_bytes)}` : '')]);
    }
    if (facts.length) out.push(h('dl', { class: 'fields', id: 'table-health-facts' }, facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
    return out;
  }
  function fmtBytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? String(b) : b.toFixed(1)) + ' ' + units[i];
  }

  // table builds a responsive table: on a phone each row becomes a card
  // whose cells are labelled.
  function table(headers, rows, cells, emptyText, rowData) {
    const tbody = h('tbody');
    if (!rows.length) tbody.append(h('tr', { class: 'empty-row' }, h('td', { colspan: headers.length }, emptyText)));
    for (const r of rows) tbody.append(h('tr', { dataset: rowData ? rowData(r) : undefined }, cells(r)));
    return h('div', { class: 'table-wrap' }, h('table', { class: 'stack' },
      h('thead', {}, h('tr', {}, headers.map((t) => h('th', {}, t)))), tbody));
  }
  const td = (label, content, cls) => h('td', { 'data-label': label, class: cls }, content);

  // ---- failed queue ----
  // retryEvents and discardEvents are the failed queue's actions, shared by
  // its tabs; reload runs after a change.
  async function retryEvents(ids, reload) {
    try {
      const r = await api('events/retry', { method: 'POST', body: { ids } });
      toast(`Retried ${plural(r.count, 'event')}` + (r.unchanged ? ` (${r.unchanged.length} no longer failed)` : ''));
      reload();
    } catch (e) { if (!(e instanceof AuthError)) toast(e.message, true); }
  }
  async function discardEvents(ids, reload) {
    const reason = await ask({ title: `Discard ${plural(ids.length, 'event')}?`,
      text: 'Discarded events are failed and are not published unless retried; under ordered delivery they no longer hold back their aggregate\'s later events.', input: 'Reason (stored as the last error)', ok: 'Discard', danger: true });
    if (reason === null) return;
    try {
      const r = await api('events/discard', { method: 'POST', body: { ids, reason } });
      toast(`Discarded ${plural(r.count, 'event')}` + (r.unchanged ? ` (${r.unchanged.length} not pending or failed any more)` : ''));
      reload();
    } catch (e) { if (!(e instanceof AuthError)) toast(e.message, true); }
  }

  const failedTab = (label, href, active) => h('a', { href, class: active ? 'active' : '' }, label);
  const failedTabs = (which) => h('div', { class: 'tabs' },
    failedTab('Dead-lettered', '#/failed', which === 'failed'),
    failedTab('Retrying', '#/failed?tab=retrying', which === 'retrying'),
    failedTab('Blocked aggregates', '#/failed?tab=blocked', which === 'blocked'));

  // blockedTab lists the aggregates whose ordered delivery waits behind a
  // failed first event (GET /api/blocked-aggregates), with the head's
  // actions: retry it once the cause is fixed, or discard it to let the
  // aggregate go on without it.
  async function blockedTab(gen, main) {
    const res = await api('blocked-aggregates');
    if (stale(gen)) return;
    const ro = state.info.read_only;
    const reload = () => route();
    const headers = ['Aggregate', 'Head event', 'Head status', 'Waiting', ''];
    const rowCells = (b) => [
      td('Aggregate', aggregate(b)),
      td('Head event', h('a', { href: '#/events/' + b.head_id }, '#' + b.head_id), 'num'),
      td('Head status', b.head_status === 'failed' ? 'dead-lettered' : 'retrying'),
      td('Waiting', fmtInt(b.waiting), 'num'),
      h('td', { class: 'actions' }, ro ? null : [
        b.head_status === 'failed'
          ? h('button', { class: 'small', dataset: { action: 'retry', id: b.head_id }, onclick: () => retryEvents([b.head_id], reload) }, 'Retry')
          : null,
        h('button', { class: 'small danger', dataset: { action: 'discard', id: b.head_id }, onclick: () => discardEvents([b.head_id], reload) }, 'Discard'),
      ]),
    ];
    main.replaceChildren(
      h('div', { class: 'row spread' }, h('h1', {}, 'Failed events')),
      failedTabs('blocked'),
      h('p', { class: 'muted' }, res.supported
        ? `Aggregates whose ordered delivery (relay --ordering aggregate, --ordered-failure block) waits behind a failed first event: the later events stay pending, unsent. Retry the head once its cause is fixed, or discard it to let the aggregate go on without it. ${fmtInt(res.total)} in all` + (res.total > res.aggregates.length ? `, the first ${res.aggregates.length} shown.` : '.')
        : 'This database has no ordered delivery yet (PostgreSQL and SQLite only).'),
      h('section', { class: 'panel' }, table(headers, res.aggregates, rowCells,
        'No aggregate is blocked.', (b) => ({ id: b.head_id }))));
  }

  async function failedPage(gen, main, params) {
    if (params.get('tab') === 'blocked') return blockedTab(gen, main);
    const retrying = params.get('tab') === 'retrying';
    const q = new URLSearchParams(retrying ? { status: 'pending', min_attempts: '1' } : { status: 'failed' });
    q.set('limit', '50');
    if (params.get('before_id')) q.set('before_id', params.get('before_id'));
    const res = await api('events?' + q);
    if (stale(gen)) return;
    const ro = state.info.read_only;
    const selected = new Set();
    const selButton = h('button', { id: 'bulk-selected', disabled: true, class: retrying ? 'danger' : '' });
    const updateSel = () => {
      selButton.textContent = (retrying ? 'Discard' : 'Retry') + ` selected (${selected.size})`;
      selButton.disabled = selected.size === 0;
    };
    updateSel();
    const allBox = h('input', { type: 'checkbox', 'aria-label': 'Select all', onchange: () => {
      for (const box of main.querySelectorAll('input[data-select]')) { box.checked = allBox.checked; box.dispatchEvent(new Event('change')); }
    } });
    const headers = [ro ? '' : allBox, 'ID', 'Type', 'Aggregate', 'Attempts', 'Last error', retrying ? 'Next attempt' : 'Failed at', ''];
    const rowCells = (e) => [
      h('td', { class: 'check' }, ro ? null : h('input', { type: 'checkbox', 'aria-label': 'Select event ' + e.id, dataset: { select: e.id },
        onchange: (ev) => { if (ev.target.checked) selected.add(e.id); else selected.delete(e.id); updateSel(); } })),
      td('ID', h('a', { href: '#/events/' + e.id }, '#' + e.id), 'num'),
      td('Type', e.event_type),
      td('Aggregate', aggregate(e)),
      td('Attempts', e.attempts + (e.max_attempts ? ' / ' + e.max_attempts : ''), 'num'),
      td('Last error', h('span', { title: e.last_error }, short(e.last_error, 160)), 'err'),
      td(retrying ? 'Next attempt' : 'Failed at', h('span', { title: retrying ? e.available_at : e.updated_at },
        retrying ? fmtRelative(e.available_at) : fmtTime(e.updated_at))),
      h('td', { class: 'actions' }, ro ? null : retrying
        ? h('button', { class: 'small danger', dataset: { action: 'discard', id: e.id }, onclick: () => discard([e.id]) }, 'Discard')
        : h('button', { class: 'small', dataset: { action: 'retry', id: e.id }, onclick: () => retry([e.id]) }, 'Retry')),
    ];
    const reload = () => route();
    const retry = (ids) => retryEvents(ids, reload);
    const discard = (ids) => discardEvents(ids, reload);
    selButton.addEventListener('click', () => (retrying ? discard : retry)([...selected]));
    const retryAll = h('button', { class: 'secondary', id: 'retry-all', onclick: async () => {
      const st = await api('stats');
      const ok = await ask({ title: `Retry all ${plural(st.failed, 'failed event')}?`, text: 'Every failed event goes back to pending with its attempts reset; the relay publishes them again.', ok: 'Retry all' });
      if (!ok) return;
      try {
        const r = await api('events/retry', { method: 'POST', body: { filter: {} } });
        toast(`Retried ${plural(r.count, 'event')}`);
        reload();
      } catch (e) { if (!(e instanceof AuthError)) toast(e.message, true); }
    } }, 'Retry all failed…');

    main.replaceChildren(
      h('div', { class: 'row spread' }, h('h1', {}, 'Failed events'),
        ro ? null : h('div', { class: 'row' }, selButton, retrying ? null : retryAll)),
      failedTabs(retrying ? 'retrying' : 'failed'),
      h('p', { class: 'muted' }, retrying
        ? 'Pending events whose publish failed and that wait for their next attempt. Discard one to stop its retries.'
        : 'Events out of attempts or rejected by the sink as permanent. Fix the cause, then retry them.'),
      h('section', { class: 'panel' }, table(headers, res.events, rowCells,
        retrying ? 'No event is being retried.' : 'No failed events. 🎉', (e) => ({ id: e.id })),
      pager(res, params, retrying ? '#/failed?tab=retrying' : '#/failed')));
  }

  function pager(res, params, base) {
    const withBefore = (id) => {
      const p = new URLSearchParams(params);
      p.delete('before_id');
      if (id) p.set('before_id', id);
      const qs = p.toString();
      return base.split('?')[0] + (qs ? '?' + qs : '');
    };
    return h('div', { class: 'pager' },
      params.get('before_id') ? h('a', { class: 'button secondary', href: withBefore(null), id: 'page-newest' }, '« Newest') : null,
      res.next_before_id ? h('a', { class: 'button secondary', href: withBefore(res.next_before_id), id: 'page-older' }, 'Older »') : null);
  }

  // ---- event browser ----
  const FILTERS = [
    ['status', 'Status'], ['type', 'Event type'], ['aggregate_type', 'Aggregate type'], ['aggregate_id', 'Aggregate ID'],
    ['idempotency_key', 'Idempotency key'], ['created_after', 'Created after'], ['created_before', 'Created before'],
  ];
  function toLocalInput(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (isNaN(d)) return '';
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  async function eventsPage(gen, main, params) {
    const inputs = {};
    const fields = FILTERS.map(([key, label]) => {
      let input;
      if (key === 'status') {
        input = h('select', { name: key }, ['', 'pending', 'processing', 'processed', 'failed'].map((v) =>
          h('option', { value: v, selected: params.get(key) === v }, v || 'any')));
      } else if (key.startsWith('created_')) {
        input = h('input', { type: 'datetime-local', name: key, value: toLocalInput(params.get(key)) });
      } else {
        input = h('input', { type: 'search', name: key, value: params.get(key) || '', autocomplete: 'off', spellcheck: 'false' });
      }
      inputs[key] = input;
      return h('label', {}, label, input);
    });
    const form = h('form', { class: 'filters', id: 'filters', onsubmit: (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      for (const [key] of FILTERS) {
        let v = inputs[key].value.trim();
        if (v && key.startsWith('created_')) v = new Date(v).toISOString();
        if (v) p.set(key, v);
      }
      const qs = p.toString();
      const target = '#/events' + (qs ? '?' + qs : '');
      if (location.hash === target) route(); else location.hash = target;
    } }, fields, h('div', { class: 'row' }, h('button', { type: 'submit', id: 'search' }, 'Search'),
      h('a', { href: '#/events', class: 'button secondary' }, 'Clear')));

    const q = new URLSearchParams();
    for (const [key] of FILTERS) if (params.get(key)) q.set(key, params.get(key));
    if (params.get('before_id')) q.set('before_id', params.get('before_id'));
    q.set('limit', '50');
    const results = h('div', {}, h('p', { class: 'muted' }, 'Searching…'));
    // Replay to the sink the server was started with (never one named
    // here): the delivered events the filter selects, whatever its status
    // field, after a confirmation that shows their count.
    const replaySink = state.info.replay_sink;
    const replayButton = (!replaySink || state.info.read_only) ? null : h('button', { class: 'secondary', id: 'replay-to-sink', onclick: async () => {
      const filter = {};
      for (const key of ['type', 'aggregate_type', 'aggregate_id', 'idempotency_key', 'created_after', 'created_before']) {
        if (params.get(key)) filter[key] = params.get(key);
      }
      try {
        const c = await api('events/replay-to-sink', { method: 'POST', body: { filter, dry_run: true } });
        const ok = await ask({ title: `Replay ${plural(c.count, 'delivered event')} to ${c.sink}?`,
          text: 'The processed and archived events this filter selects are published to that sink, in ID order, for a new consumer. Their status does not change; the relays and other consumers see nothing of it.',
          ok: 'Replay' });
        if (!ok) return;
        const r = await api('events/replay-to-sink', { method: 'POST', body: { filter } });
        toast(`Published ${plural(r.published, 'event')} to ${r.sink}`);
      } catch (e) { if (!(e instanceof AuthError)) toast(e.message, true); }
    } }, 'Replay to sink…');
    main.replaceChildren(h('div', { class: 'row spread' }, h('h1', {}, 'Events'), replayButton),
      h('section', { class: 'panel' }, form), h('section', { class: 'panel' }, results));
    const res = await api('events?' + q);
    if (stale(gen)) return;
    results.replaceChildren(
      table(['ID', 'Status', 'Type', 'Aggregate', 'Attempts', 'Created', 'Last error'], res.events, (e) => [
        td('ID', h('a', { href: '#/events/' + e.id }, '#' + e.id), 'num'),
        td('Status', pill(e.status)),
        td('Type', e.event_type),
        td('Aggregate', aggregate(e)),
        td('Attempts', String(e.attempts), 'num'),
        td('Created', h('span', { title: e.created_at }, fmtTime(e.created_at))),
        td('Last error', short(e.last_error, 120) || '–', e.last_error ? 'err' : ''),
      ], 'No events match.', (e) => ({ id: e.id })),
      pager(res, params, '#/events'));
  }

  // ---- event detail ----
  async function detailPage(gen, main, id) {
    const e = await api('events/' + id);
    if (stale(gen)) return;
    const ro = state.info.read_only;
    const act = async (path, body, msg) => {
      try {
        const r = await api(path, { method: 'POST', body });
        if (r && r.count === 0) toast('Nothing changed: the event\'s status changed meanwhile', true);
        else toast(msg);
        route();
      } catch (err) { if (!(err instanceof AuthError)) toast(err.message, true); }
    };
    const buttons = [];
    if (!ro && e.status === 'failed') {
      buttons.push(h('button', { id: 'action-retry', onclick: () => act('events/retry', { ids: [e.id] }, `Event ${e.id} retried`) }, 'Retry'));
    }
    if (!ro && e.status === 'processed') {
      buttons.push(h('button', { id: 'action-replay', onclick: async () => {
        if (await ask({ title: `Replay event ${e.id}?`, text: 'The relay publishes it again; consumers see the same event ID a second time.', ok: 'Replay' })) {
          act('events/replay', { ids: [e.id] }, `Event ${e.id} replayed`);
        }
      } }, 'Replay'));
    }
    if (!ro && e.status === 'pending') {
      buttons.push(h('button', { id: 'action-discard', class: 'danger', onclick: async () => {
        const reason = await ask({ title: `Discard event ${e.id}?`, text: 'It moves to failed and is not published unless retried.', input: 'Reason (stored as the last error)', ok: 'Discard', danger: true });
        if (reason !== null) act('events/discard', { ids: [e.id], reason }, `Event ${e.id} discarded`);
      } }, 'Discard'));
    }
    const maxInput = h('input', { type: 'number', min: 0, max: 1000000, id: 'max-attempts', value: e.max_attempts || '', placeholder: 'relay default', 'aria-label': 'Max attempts' });
    const maxForm = ro ? null : h('form', { class: 'row', id: 'max-attempts-form', onsubmit: async (ev) => {
      ev.preventDefault();
      const n = maxInput.value === '' ? 0 : Number(maxInput.value);
      try {
        await api(`events/${e.id}/max-attempts`, { method: 'POST', body: { max_attempts: n } });
        toast(n ? `Max attempts set to ${n}` : 'Max attempts back to the relay\'s default');
        route();
      } catch (err) { if (!(err instanceof AuthError)) toast(err.message, true); }
    } }, maxInput, h('button', { type: 'submit', class: 'secondary' }, 'Set max attempts'));

    const field = (k, v) => [h('dt', {}, k), h('dd', {}, v)];
    const time = (iso) => iso ? h('span', { title: iso }, fmtTime(iso)) : '–';
    main.replaceChildren(
      h('div', { class: 'row spread' },
        h('h1', {}, `Event #${e.id} `, pill(e.status)),
        h('div', { class: 'row' }, buttons)),
      h('div', { class: 'detail-grid' },
        h('section', { class: 'panel' }, h('h2', {}, 'Fields'), h('dl', { class: 'fields', id: 'fields' },
          field('Type', e.event_type),
          field('Aggregate', aggregate(e)),
          field('Status', e.status),
          field('Attempts', `${e.attempts} of ${e.max_attempts || 'the relay\'s default'}` +
            (e.lease_expiries ? ` (${fmtInt(e.lease_expiries)} ended in a lease expiry: publishing it may crash or stall the relay)` : '')),
          field('Idempotency key', e.idempotency_key || '–'),
          field('Created', time(e.created_at)),
          field('Updated', time(e.updated_at)),
          field('Available at', time(e.available_at)),
          field('Processed at', time(e.processed_at)),
          field('Locked by', e.locked_by || '–'),
          field('Locked until', time(e.locked_until))),
        maxForm ? h('h2', {}, 'Max attempts') : null, maxForm),
        h('section', { class: 'panel' },
          h('h2', {}, 'Last error'), e.last_error ? h('pre', { class: 'error', id: 'last-error' }, e.last_error) : h('p', { class: 'muted' }, 'None.'),
          h('h2', {}, 'Headers'), h('pre', { class: 'json', id: 'headers' }, prettyJSON(e.headers)))),
      h('section', { class: 'panel' }, h('h2', {}, 'Payload'), h('pre', { class: 'json', id: 'payload' }, prettyJSON(e.payload))));
  }

  // prettyJSON renders a parsed JSON value indented, with its tokens in
  // colored spans.
  function prettyJSON(v) {
    const out = [];
    const span = (cls, text) => out.push(h('span', { class: cls }, text));
    const write = (val, depth) => {
      const ind = '  '.repeat(depth + 1), end = '  '.repeat(depth);
      if (val instanceof RawNum) span('j-num', val.src);
      else if (val === null || typeof val === 'boolean') span('j-lit', String(val));
      else if (typeof val === 'number') span('j-num', String(val));
      else if (typeof val === 'string') span('j-str', JSON.stringify(val));
      else if (Array.isArray(val)) {
        if (!val.length) { out.push('[]'); return; }
        out.push('[\n');
        val.forEach((x, i) => { out.push(ind); write(x, depth + 1); out.push(i < val.length - 1 ? ',\n' : '\n'); });
        out.push(end + ']');
      } else {
        const keys = Object.keys(val);
        if (!keys.length) { out.push('{}'); return; }
        out.push('{\n');
        keys.forEach((k, i) => {
          out.push(ind); span('j-key', JSON.stringify(k)); out.push(': ');
          write(val[k], depth + 1);
          out.push(i < keys.length - 1 ? ',\n' : '\n');
        });
        out.push(end + '}');
      }
    };
    write(v, 0);
    return out;
  }

  // ---- relays ----
  async function relaysPage(gen, main) {
    const box = h('div', {});
    main.replaceChildren(h('h1', {}, 'Relays'),
      h('p', { class: 'muted' }, 'Every running relay, from the heartbeat row it renews in outbox_relays, idle ones included, with its leases on processing events. A relay that stops gracefully removes its row; one that misses three heartbeats shows as stale, and its row goes an hour later. A lease that ended without its relay settling the events means the relay stopped; the lease rescue returns them to pending.'),
      h('section', { class: 'panel' }, box));
    const refresh = async () => {
      const rel = await api('relays');
      if (!stale(gen)) box.replaceChildren(relaysTable(rel.relays));
    };
    await refresh();
    every(5000, () => refresh().catch(() => {}));
  }

  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.redraw) state.redraw(); }, 150);
  });
  window.addEventListener('hashchange', route);
  route();
})();
