// termlink console: plain JavaScript, no build step, no libraries.
// Talks to termserver's JSON API on this origin with the admin token from
// sessionStorage as "Authorization: Bearer"; reads the live stream
// (Server-Sent Events) with fetch() so the header can be sent.
'use strict';

(() => {
  const TOKEN_KEY = 'termlink.console.token';
  const CHANNEL_KEY = 'termlink.console.channel';
  const MAX_EVENTS = 200; // events kept in the live list
  const MAX_ROWS = 500; // fleet rows drawn at once (filter to see others)
  const STALL_MS = 45000; // no byte (not even a keepalive) this long: reconnect
  const PEERS_PAGE = 1000; // peers per GET .../peers page (the server's maximum)
  const NOTICE_MAX = 1000; // characters in a notice: the API refuses longer text
  const PEER_EVENTS = 50; // events listed on a device's page
  const GLYPHS = window.TERMLINK_GLYPHS || {}; // glyphs.js: the HD44780 ROMs

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  const state = {
    token: null, // null: logged out; '' : no token (loopback server without admin tokens)
    channels: [],
    channel: '',
    peers: new Map(), // peer_id -> Peer of the current channel
    live: false, // the live stream is up (setStreamState)
    stream: null, // AbortController of the running stream
    route: { view: 'fleet' },
    detail: null, // the open device's GET .../peers/{id} answer
    detailTimer: 0,
    drawPending: false,
    seqs: new Set(), // seq of the events listed
    peerSeqs: new Set(), // seq of the events listed on the device's page
    loggingIn: false,
    hello: 0, // hellos received: a newer one stops paging the older one's peers
    loaded: false, // the stream's hello has come: the fleet is known
    role: 'operator', // GET /api/whoami: "viewer" sees read-only pages
    login: false, // a token was needed (so "Log out" means something)
    settingsVersion: 0, // the channel's pushed settings version (GET .../settings)
    settingsTimer: 0,
  };

  const canWrite = () => state.role === 'operator';

  // ---- small DOM helper: text only, never innerHTML ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  // ---- errors, shown as they are ----
  function showError(msg) {
    $('error-text').textContent = msg;
    $('error').hidden = false;
  }
  function clearError() {
    $('error').hidden = true;
    $('error-text').textContent = '';
  }

  // ---- API ----
  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function headers(extra) {
    const h = Object.assign({ Accept: 'application/json' }, extra || {});
    if (state.token) h.Authorization = 'Bearer ' + state.token;
    return h;
  }

  // errorText is the API's {"error": ...} message, or the body, or the status text.
  async function errorText(resp) {
    const text = await resp.text().catch(() => '');
    try {
      const j = JSON.parse(text);
      if (j && typeof j.error === 'string') return j.error;
    } catch (_) { /* not JSON */ }
    return text.trim().slice(0, 300) || resp.statusText || 'no message';
  }

  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store' };
    // Every write says JSON, with a body or not: the server refuses any
    // other type (a page of another origin can send text/plain, never JSON).
    if (method !== 'GET' && method !== 'HEAD') init.headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, `The server did not answer (${e.message}).`);
    }
    if (!resp.ok) {
      const msg = await errorText(resp);
      if (resp.status === 401 && state.token !== null && !state.loggingIn) {
        logout(`The server refused the token: ${msg}`);
      }
      throw new APIError(resp.status, msg); // the API's own words
    }
    if (resp.status === 204) return null;
    // A device's log comes as text/plain; everything else is JSON.
    if ((resp.headers.get('Content-Type') || '').startsWith('text/plain')) return resp.text();
    return resp.json();
  }

  // ---- login ----
  async function login(token) {
    state.token = token;
    state.loggingIn = true;
    try {
      const data = await api('GET', '/api/channels');
      state.channels = (data && data.channels) || [];
      // Who am I: the role decides which controls are shown; "login"
      // false means the server asked for no token (loopback, no tokens).
      try {
        const me = await api('GET', '/api/whoami');
        state.role = (me && me.role) || 'viewer';
        state.login = !!(me && me.login);
      } catch (e) {
        if (e.status !== 404) throw e;
        state.role = 'operator'; // a server without whoami: it refuses what a viewer may not do
        state.login = token !== '';
      }
    } catch (e) {
      state.token = null;
      throw e;
    } finally {
      state.loggingIn = false;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    document.body.dataset.role = state.role;
    $('logout').hidden = !state.login;
    $('whoami').textContent = state.role === 'operator' ? '' : `${state.role}: read only`;
    $('whoami').hidden = state.role === 'operator';
    for (const e of document.querySelectorAll('[data-write]')) e.hidden = !canWrite();
    for (const e of document.querySelectorAll('[data-readonly]')) e.hidden = canWrite();
    const saved = sessionStorage.getItem(CHANNEL_KEY);
    const ids = state.channels.map((c) => c.channel_id);
    const first = state.channels.find((c) => c.enabled) || state.channels[0];
    state.channel = ids.includes(saved) ? saved : (first ? first.channel_id : '');
    const sel = $('channel');
    sel.replaceChildren(...state.channels.map((c) => el('option', { value: c.channel_id, text: named(c.display_name, c.channel_id) })));
    sel.value = state.channel;
    $('login-view').hidden = true;
    $('session').hidden = false;
    $('events-view').hidden = false;
    $('events-note').textContent = 'Loading the events…';
    $('events-note').hidden = false;
    startStream();
    route();
  }

  // named is "name (id)", or the id alone when the name is the id or none.
  function named(name, id) {
    return name && name !== id ? `${name} (${id})` : id;
  }

  function logout(message) {
    stopStream();
    state.token = null;
    state.loaded = false;
    state.peers.clear();
    state.detail = null;
    sessionStorage.removeItem(TOKEN_KEY);
    for (const id of ['session', 'fleet-view', 'peer-view', 'events-view']) $(id).hidden = true;
    $('events').replaceChildren();
    state.seqs.clear();
    $('login-view').hidden = false;
    $('login-error').textContent = message || '';
    $('token').value = '';
    $('token').focus();
  }

  // ---- live stream (SSE over fetch) ----
  function setStreamState(text, cls) {
    state.live = cls === 'live'; // the "peer" events keep state.peers current
    const s = $('stream-state');
    s.textContent = text;
    s.className = 'stream-state' + (cls ? ' ' + cls : '');
  }

  function stopStream() {
    if (state.stream) state.stream.abort();
    state.stream = null;
  }

  function startStream() {
    stopStream();
    if (!state.channel) { setStreamState('no channel'); return; }
    const ctl = new AbortController();
    state.stream = ctl;
    runStream(state.channel, ctl.signal);
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  async function runStream(channel, signal) {
    let delay = 1000;
    while (!signal.aborted) {
      setStreamState('connecting…');
      let why = 'the stream ended';
      const conn = new AbortController();
      const onAbort = () => conn.abort();
      signal.addEventListener('abort', onAbort, { once: true });
      let stall = 0;
      const alive = () => {
        clearTimeout(stall);
        stall = setTimeout(() => { why = 'no data for 45 s'; conn.abort(); }, STALL_MS);
      };
      try {
        alive();
        const resp = await fetch(`/api/channels/${enc(channel)}/events/stream`, {
          headers: headers({ Accept: 'text/event-stream' }), cache: 'no-store', signal: conn.signal,
        });
        if (resp.status === 401) {
          logout(`The server refused the token: ${await errorText(resp)}`);
          return;
        }
        if (!resp.ok) throw new Error(`${resp.status} ${await errorText(resp)}`);
        setStreamState('connected, loading…');
        delay = 1000;
        await readSSE(resp.body, alive, onStreamEvent);
      } catch (e) {
        if (signal.aborted) return;
        if (e.name !== 'AbortError') why = e.message;
      } finally {
        clearTimeout(stall);
        signal.removeEventListener('abort', onAbort);
      }
      if (signal.aborted) return;
      setStreamState(`reconnecting in ${delay / 1000} s (${why})`, 'down');
      await sleep(delay, signal);
      delay = Math.min(delay * 2, 15000);
    }
  }

  // readSSE parses a text/event-stream body, calling onEvent(name, data)
  // per event and alive() per chunk received (keepalives included).
  async function readSSE(body, alive, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let name = '';
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      alive();
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) onEvent(name || 'message', data.join('\n'));
          name = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue; // comment (keepalive)
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') name = val;
        else if (field === 'data') data.push(val);
      }
    }
  }

  function onStreamEvent(name, raw) {
    let obj;
    try { obj = JSON.parse(raw); } catch (e) {
      showError(`The live stream sent an event "${name}" that is not JSON: ${raw.slice(0, 120)}`);
      return;
    }
    if (name === 'hello') {
      // hello holds the first page of peers; the rest are paged in behind
      // (GET .../peers?cursor=), while "peer" events keep them current.
      state.peers = new Map((obj.peers || []).map((p) => [p.peer_id, p]));
      state.hello += 1;
      state.loaded = true;
      setStreamState('live', 'live');
      if (obj.next_cursor) loadRestOfPeers(state.channel, obj.next_cursor, state.hello);
      scheduleDraw();
      loadRecentEvents(state.channel);
      loadChannelSettings(state.channel);
      if (state.route.view === 'peer') {
        const p = state.peers.get(state.route.peer);
        if (p) drawPeerLive(p);
      }
      return;
    }
    if (name === 'peer') {
      const old = state.peers.get(obj.peer_id);
      state.peers.set(obj.peer_id, obj);
      scheduleDraw();
      if (state.route.view === 'peer' && state.route.peer === obj.peer_id) {
        drawPeerLive(obj);
        if (!old || old.settings_version !== obj.settings_version || old.settings_error !== obj.settings_error) loadPeerSettingsSoon();
        if (!old || old.notices_pending !== obj.notices_pending || old.online !== obj.online) refreshDetailSoon();
      }
      return;
    }
    addEvent(name, obj);
    if (name.startsWith('rollout_') && state.route.view === 'fleet') loadRolloutsSoon();
    if (name === 'settings_changed') loadChannelSettings(state.channel);
    if (name.startsWith('settings_') && state.route.view === 'peer' && (name === 'settings_changed' || obj.peer_id === state.route.peer)) loadPeerSettingsSoon();
    if (state.route.view === 'peer' && obj.peer_id === state.route.peer) {
      addPeerEvent(name, obj);
      refreshDetailSoon();
    }
  }

  // loadRestOfPeers follows next_cursor from cursor until the last page,
  // adding the peers a "peer" event has not brought already (an event is
  // at least as new as the page). It stops when another hello came (the
  // stream reconnected) or the channel changed.
  async function loadRestOfPeers(channel, cursor, hello) {
    while (cursor && hello === state.hello && channel === state.channel) {
      let page;
      try {
        page = await api('GET', `/api/channels/${enc(channel)}/peers?limit=${PEERS_PAGE}&cursor=${enc(cursor)}`);
      } catch (e) {
        if (hello === state.hello) showError(`Listing the devices: ${e.message}`);
        return;
      }
      if (hello !== state.hello || channel !== state.channel) return;
      for (const p of (page && page.peers) || []) {
        if (!state.peers.has(p.peer_id)) state.peers.set(p.peer_id, p);
      }
      scheduleDraw();
      cursor = page && page.next_cursor;
    }
  }

  // ---- events list ----
  function fmtTime(t) {
    if (!t) return '—';
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toLocaleString();
  }
  function ago(t) {
    if (!t) return 'never';
    const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
    if (!isFinite(s)) return String(t);
    if (s < 5) return 'just now';
    if (s < 90) return `${s} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 129600) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  function eventItem(name, e) {
    const at = e.at ? new Date(e.at) : new Date();
    const id = e.message_id && (e.message_id.startsWith('n-') ? `notice ${e.message_id}` : `msg ${e.message_id}`);
    const parts = [e.peer_id && `peer ${e.peer_id}`, id, e.preview && `“${e.preview}”`, e.detail];
    const li = el('li', { 'data-testid': 'event', 'data-event': name },
      el('time', { datetime: at.toISOString(), text: at.toLocaleTimeString() }), ' ',
      el('span', { class: 'name', text: name }), ' ', parts.filter(Boolean).join(' · '));
    li.seq = typeof e.seq === 'number' ? e.seq : null;
    return li;
  }

  // addEvent puts an event at the top of the list, once per seq (the
  // recent events loaded on connect and the stream may overlap).
  function addEvent(name, e) {
    const list = $('events');
    if (typeof e.seq === 'number') {
      if (state.seqs.has(e.seq)) return;
      state.seqs.add(e.seq);
    }
    list.prepend(eventItem(name, e));
    trimEvents(list);
    $('events-note').hidden = true;
  }

  // addPeerEvent lists a stream event on the open device's page.
  function addPeerEvent(name, e) {
    const list = $('peer-events');
    if (typeof e.seq === 'number') {
      if (state.peerSeqs.has(e.seq)) return;
      state.peerSeqs.add(e.seq);
    }
    list.prepend(eventItem(name, e));
    while (list.childElementCount > PEER_EVENTS) list.lastElementChild.remove();
    $('peer-events-note').hidden = true;
  }

  // loadPeerEvents lists the open device's recent events (GET
  // .../events?peer_id=), merged by seq with what the stream sent.
  async function loadPeerEvents(channel, peer) {
    let data;
    try {
      data = await api('GET', `/api/channels/${enc(channel)}/events?peer_id=${enc(peer)}&limit=${PEER_EVENTS}`);
    } catch (e) {
      $('peer-events-note').textContent = `Listing this device's events: ${e.message}`;
      return;
    }
    if (state.route.view !== 'peer' || state.route.peer !== peer || state.route.channel !== channel) return;
    const list = $('peer-events');
    const items = [...list.children];
    for (const e of (data && data.events) || []) {
      if (e.peer_id !== peer) continue; // (a server without the peer_id filter sends all)
      if (typeof e.seq === 'number' && state.peerSeqs.has(e.seq)) continue;
      if (typeof e.seq === 'number') state.peerSeqs.add(e.seq);
      items.push(eventItem(e.event, e));
    }
    items.sort((a, b) => (b.seq ?? Infinity) - (a.seq ?? Infinity));
    list.replaceChildren(...items.slice(0, PEER_EVENTS));
    $('peer-events-note').textContent = 'No event of this device is in the recent ones.';
    $('peer-events-note').hidden = items.length > 0;
  }

  function trimEvents(list) {
    while (list.childElementCount > MAX_EVENTS) {
      const gone = list.lastElementChild;
      if (gone.seq !== null) state.seqs.delete(gone.seq);
      gone.remove();
    }
  }

  // loadRecentEvents fills the list with what happened before the stream
  // was opened (GET .../events), merged by seq with what the stream sent.
  async function loadRecentEvents(channel) {
    let data;
    try {
      data = await api('GET', `/api/channels/${enc(channel)}/events?limit=${MAX_EVENTS}`);
    } catch (e) {
      showError(e.message);
      return;
    }
    if (channel !== state.channel) return;
    const list = $('events');
    const items = [...list.children];
    for (const e of (data && data.events) || []) {
      if (typeof e.seq === 'number' && state.seqs.has(e.seq)) continue;
      if (typeof e.seq === 'number') state.seqs.add(e.seq);
      items.push(eventItem(e.event, e));
    }
    items.sort((a, b) => (b.seq ?? Infinity) - (a.seq ?? Infinity));
    list.replaceChildren(...items);
    trimEvents(list);
    $('events-note').textContent = 'No events yet.';
    $('events-note').hidden = items.length > 0;
  }

  // ---- fleet ----
  function parseTags(text) {
    // "site:lobby, floor=2" -> {site: "lobby", floor: "2"}
    const tags = {};
    for (const part of text.split(',').map((s) => s.trim()).filter(Boolean)) {
      const m = /^([^:=\s]+)\s*[:=]\s*(.+)$/.exec(part);
      if (!m) throw new Error(`tag "${part}" is not key:value (e.g. site:lobby)`);
      tags[m[1]] = m[2].trim();
    }
    return tags;
  }

  function matches(p, f) {
    if (f.online !== '' && String(!!p.online) !== f.online) return false;
    for (const [k, v] of Object.entries(f.tags)) if (!p.tags || p.tags[k] !== v) return false;
    if (f.text) {
      const hay = [p.peer_id, p.device_name, p.board, p.version, p.remote_addr, p.edge,
        ...Object.entries(p.tags || {}).map(([k, v]) => `${k}:${v}`)].join(' ').toLowerCase();
      if (!hay.includes(f.text)) return false;
    }
    return true;
  }

  // scheduleDraw redraws the fleet soon, at most about 6 times a second
  // however many peer events arrive (a large fleet sends many).
  function scheduleDraw() {
    if (state.drawPending) return;
    state.drawPending = true;
    setTimeout(() => requestAnimationFrame(() => { state.drawPending = false; drawFleet(); }), 150);
  }

  function drawFleet() {
    const f = { text: $('filter-text').value.trim().toLowerCase(), online: $('filter-online').value, tags: {} };
    let tagErr = '';
    try { f.tags = parseTags($('filter-tag').value); } catch (e) { tagErr = e.message; }
    const all = [...state.peers.values()].sort((a, b) => (a.peer_id < b.peer_id ? -1 : 1));
    const shown = all.filter((p) => matches(p, f));
    const online = all.filter((p) => p.online).length;
    $('fleet-count').textContent = state.loaded ? `${online} of ${all.length} online` : 'loading…';
    const rows = shown.slice(0, MAX_ROWS).map((p) => fleetRow(p));
    // Rows are kept while their device is unchanged: a link being
    // clicked or a focused tag survives the many redraws of a live fleet.
    const body = $('fleet-body');
    if (rows.length !== body.children.length || rows.some((tr, i) => body.children[i] !== tr)) body.replaceChildren(...rows);
    const keep = new Set(rows);
    for (const [id, c] of fleetRows) if (!keep.has(c.tr)) fleetRows.delete(id);
    const empty = $('fleet-empty');
    empty.hidden = state.loaded && !tagErr && shown.length > 0 && shown.length <= MAX_ROWS;
    empty.textContent = !state.loaded ? 'Loading the devices…' : tagErr || (shown.length > MAX_ROWS ? `Showing ${MAX_ROWS} of ${shown.length}: filter to narrow.`
      : all.length ? 'No device matches the filter.' : 'No device has connected to this channel yet.');
    drawPeerSelect(all);
  }

  // fleetRow is a device's row, rebuilt only when what it shows changed.
  const fleetRows = new Map(); // peer_id -> {key, tr}
  function fleetRow(p) {
    // Of the health report only what the row shows: a report a minute
    // does not rebuild every row.
    const key = JSON.stringify([{ ...p, screen: undefined, health: healthMarks(p) }, state.channel, state.settingsVersion, p.online ? '' : ago(p.last_seen)]);
    const c = fleetRows.get(p.peer_id);
    if (c && c.key === key) return c.tr;
    const tr = el('tr', { 'data-testid': 'peer-row', 'data-peer-id': p.peer_id, 'data-online': String(!!p.online) },
      el('td', { 'data-label': 'Device' }, el('a', { href: `#/peer/${enc(state.channel)}/${enc(p.peer_id)}`, text: p.peer_id }),
        p.device_name && p.device_name !== p.peer_id ? el('div', { class: 'sub', text: p.device_name }) : null),
      el('td', { 'data-testid': 'peer-state', 'data-label': 'State' }, el('span', { class: 'badge' + (p.online ? ' on' : ''), text: p.online ? 'online' : 'offline' }),
        p.edge ? el('div', { class: 'sub', 'data-testid': 'peer-edge', title: 'the cluster node that holds (or last held) its connection', text: p.edge }) : null,
        ...[[updateMark(p), 'mark-update'], [settingsMark(p), 'mark-settings']].filter(([m]) => m).map(([m, id]) =>
          el('div', { class: 'mark', 'data-testid': id }, el('span', { class: 'badge alert', text: m.text }), el('span', { class: 'sub', text: ` ${m.why}` }))),
        ...healthMarks(p).map(m => el('div', { class: 'mark', 'data-testid': 'mark-health', 'data-condition': m.cond },
          el('span', { class: 'badge alert', text: m.text }), el('span', { class: 'sub', text: ` ${m.why}` })))),
      el('td', { 'data-label': 'Tags' }, ...Object.entries(p.tags || {}).map(([k, v]) => el('button', {
        type: 'button', class: 'tag', title: `Show devices with ${k}:${v}`, text: `${k}:${v}`,
        onclick: () => { $('filter-tag').value = `${k}:${v}`; drawFleet(); },
      }))),
      el('td', { 'data-label': 'Board' }, p.board || '—'),
      el('td', { 'data-label': 'Version', 'data-testid': 'peer-version-col' }, p.version || '—',
        p.update && !FAILED_STATES.includes(p.update.state) && p.update.state !== 'installed' ? el('div', { class: 'sub', text: `${human(p.update.state)} ${p.update.version}` }) : null),
      el('td', { 'data-label': 'Last seen' }, el('time', { datetime: p.last_seen || '', title: fmtTime(p.last_seen), text: p.online ? 'now' : ago(p.last_seen) })),
      el('td', { 'data-label': 'Notices' }, String(p.notices_pending || 0)));
    fleetRows.set(p.peer_id, { key, tr });
    return tr;
  }

  function drawPeerSelect(all) {
    const sel = $('notice-peer');
    const keep = sel.value;
    const ids = all.map((p) => p.peer_id);
    const same = sel.options.length === ids.length && ids.every((id, i) => sel.options[i].value === id);
    if (!same) sel.replaceChildren(...ids.map((id) => el('option', { value: id, text: id })));
    if (ids.includes(keep)) sel.value = keep;
  }

  // ---- notices ----
  function noticeBody(form) {
    const fd = new FormData(form);
    const body = { text: String(fd.get('text') || '').trim(), priority: String(fd.get('priority') || 'info') };
    if (!body.text) throw new Error('the notice has no text');
    const secs = Number(fd.get('display_seconds'));
    if (fd.get('display_seconds') && secs > 0) body.display_seconds = Math.round(secs);
    const ttl = Number(fd.get('ttl_seconds'));
    if (fd.get('ttl_seconds') && ttl > 0) body.ttl_seconds = Math.round(ttl);
    return body;
  }

  function describeSent(r) {
    const ids = (r.notice_ids || []).join(', ');
    let s = `Notice ${ids} queued for ${r.targets} device${r.targets === 1 ? '' : 's'} (${r.online} online).`;
    if (r.skipped && r.skipped.length) s += ` Skipped (mailbox full): ${r.skipped.join(', ')}.`;
    return s;
  }

  // noticeCount shows how much of the API's limit the text uses.
  function noticeCount(form) {
    const area = form.querySelector('textarea');
    const n = Array.from(area.value).length; // characters, as the API counts them
    const out = form.querySelector('.chars');
    out.textContent = `${n} of ${NOTICE_MAX} characters`;
    out.classList.toggle('bad', n > NOTICE_MAX);
  }

  async function submitNotice(form, pathAndBody) {
    const out = form.querySelector('.result');
    out.className = 'result';
    out.textContent = 'Sending…';
    try {
      const [path, body] = pathAndBody();
      const r = await api('POST', path, body);
      out.textContent = describeSent(r || {});
      form.querySelector('textarea').value = '';
      noticeCount(form);
      if (state.route.view === 'peer') refreshDetailSoon();
    } catch (e) {
      out.className = 'result bad';
      out.textContent = e.message;
    }
  }

  function onNoticeForm(ev) {
    ev.preventDefault();
    const form = ev.currentTarget;
    submitNotice(form, () => {
      const body = noticeBody(form);
      const target = new FormData(form).get('target');
      const base = `/api/channels/${enc(state.channel)}`;
      if (target === 'peer') {
        const peer = $('notice-peer').value;
        if (!peer) throw new Error('choose a device (none has connected yet)');
        return [`${base}/peers/${enc(peer)}/notices`, body];
      }
      if (target === 'tag') {
        const tags = parseTags($('notice-tag').value);
        if (!Object.keys(tags).length) throw new Error('give a tag as key:value, e.g. site:lobby');
        body.tags = tags;
      }
      return [`${base}/notices`, body];
    });
  }

  function onPeerNoticeForm(ev) {
    ev.preventDefault();
    const form = ev.currentTarget;
    const { channel, peer } = state.route;
    submitNotice(form, () => [`/api/channels/${enc(channel)}/peers/${enc(peer)}/notices`, noticeBody(form)]);
  }

  // ---- one device ----
  // The LCD mirror draws the glass as the HD44780 does: each cell a 5x8
  // dot matrix with the ROM's pattern for its character (glyphs.js), at
  // the device's own rows x columns. A device whose screen has no ROM (a
  // console, an unknown font) has its rows shown as plain text.
  const DOT = 4; // canvas pixels from one dot to the next (a dot is DOT-1 wide)
  const PAD = 3 * DOT; // the glass around the cells
  const LCD_COLORS = {
    on: { bg: '#9fc93c', off: '#93bb35', lit: '#1c2a0b' },
    dim: { bg: '#667f2a', off: '#5f7727', lit: '#121a06' },
    off: { bg: '#3b4628', off: '#37412a', lit: '#151b0e' },
  };

  function backlightOf(s) {
    // backlight: true/false, or "dim" / a level 0..1 should a device report one.
    const bl = s.backlight;
    if (bl === false || bl === 'off' || bl === 0) return 'off';
    if (bl === 'dim' || s.dim === true || (typeof bl === 'number' && bl < 1)) return 'dim';
    return 'on';
  }

  // cellPattern is the 8 rows of 5 dots the ROM draws for ch, or null.
  function cellPattern(rom, ch) {
    const code = rom.codes[ch];
    const hex = code === undefined ? undefined : rom.glyphs[code];
    if (hex === undefined) return null;
    const rows = [];
    for (let i = 0; i < 8; i++) rows.push(parseInt(hex.slice(2 * i, 2 * i + 2), 16));
    return rows;
  }

  function drawGlass(canvas, s, rom, rows, cols, light) {
    const cw = 6 * DOT; const ch = 9 * DOT;
    canvas.width = 2 * PAD + cols * cw - DOT;
    canvas.height = 2 * PAD + rows.length * ch - DOT;
    const g = canvas.getContext('2d');
    const c = LCD_COLORS[light];
    g.fillStyle = c.bg;
    g.fillRect(0, 0, canvas.width, canvas.height);
    rows.forEach((chars, r) => {
      for (let col = 0; col < cols; col++) {
        const chr = chars[col] === undefined ? ' ' : chars[col];
        const x0 = PAD + col * cw; const y0 = PAD + r * ch;
        let pat = cellPattern(rom, chr);
        const custom = !pat && (chr < ' ' || (chr >= '\uE000' && chr <= '\uF8FF'));
        if (custom) pat = [31, 17, 17, 17, 17, 17, 31, 0]; // a custom (CGRAM) glyph: its pattern is not reported
        if (s.cursor_on && r === s.cursor_row && col === s.cursor_col) pat = (pat || [0, 0, 0, 0, 0, 0, 0, 0]).slice(0, 7).concat([31]);
        for (let y = 0; y < 8; y++) {
          for (let x = 0; x < 5; x++) {
            const lit = pat && (pat[y] >> (4 - x)) & 1;
            g.fillStyle = lit ? c.lit : c.off;
            g.fillRect(x0 + x * DOT, y0 + y * DOT, DOT - 1, DOT - 1);
          }
        }
        if (!pat && chr !== ' ') {
          // A character the tables have no pattern for: the browser draws it.
          g.fillStyle = c.lit;
          g.font = `${7 * DOT}px sans-serif`;
          g.textAlign = 'center';
          g.textBaseline = 'alphabetic';
          g.fillText(chr, x0 + 2.5 * DOT, y0 + 6.5 * DOT, 5 * DOT);
        }
      }
    });
  }

  function drawLCD(p) {
    const box = $('lcd');
    const s = p && p.screen;
    box.replaceChildren();
    delete box.dataset.backlight;
    if (!s || !Array.isArray(s.rows)) {
      box.className = 'lcd blank';
      box.setAttribute('aria-label', 'Screen mirror: no screen reported');
      box.append(el('span', { text: 'no screen reported by this device' }));
      $('lcd-caption').textContent = '';
      return;
    }
    const light = backlightOf(s);
    box.dataset.backlight = light;
    const rows = s.rows.map((r) => Array.from(String(r)));
    const cols = Math.max(1, ...rows.map((r) => r.length));
    const rom = s.rom && GLYPHS[s.rom];
    const stale = p.online ? '' : ' — device offline, last known screen';
    const text = s.rows.map((r) => String(r).trimEnd()).join(' / ');
    // The rows as text (for screen readers, and to copy): shown as such
    // for a text display, hidden behind the glass of an LCD.
    const lines = el('div', { class: rom ? 'lcd-text sr-only' : 'lcd-text' }, ...s.rows.map((r, i) =>
      el('div', { class: 'lcd-row', 'data-testid': 'lcd-row', 'data-row': i, text: String(r) })));
    if (!rom) {
      box.className = `screen-text${p.online ? '' : ' stale'}`;
      box.dataset.kind = 'text';
      box.setAttribute('aria-label', `Screen mirror (text): ${text}`);
      box.append(lines);
      $('lcd-caption').textContent = `text display, ${rows.length} row${rows.length === 1 ? '' : 's'}` +
        (s.updated_at ? `, updated ${fmtTime(s.updated_at)}` : '') + stale;
      return;
    }
    box.className = `lcd ${light}${p.online ? '' : ' stale'}`;
    box.dataset.kind = 'lcd';
    const canvas = el('canvas', { 'data-testid': 'lcd-glass', 'data-rows': rows.length, 'data-cols': cols,
      'data-rom': s.rom, 'data-dot': DOT, 'data-pad': PAD, 'aria-hidden': 'true' });
    drawGlass(canvas, s, rom, rows, cols, light);
    box.setAttribute('aria-label', `LCD mirror, ${rows.length}×${cols}, backlight ${light}: ${text}`);
    box.append(canvas, lines);
    $('lcd-caption').textContent = `${rows.length}×${cols} HD44780 (ROM ${s.rom}), backlight ${light}` +
      (s.updated_at ? `, updated ${fmtTime(s.updated_at)}` : '') + stale;
  }

  function drawInfo(p) {
    const tags = Object.entries(p.tags || {}).map(([k, v]) => `${k}:${v}`).join(', ');
    const items = [
      ['State', el('span', { class: 'badge' + (p.online ? ' on' : ''), 'data-testid': 'peer-online', text: p.online ? 'online' : 'offline' })],
      ['Name', p.device_name || '—'],
      ['Board', p.board || '—'],
      ['Version', p.version || '—'],
      ['Platform', p.platform || '—'],
      ['Update', updateText(p)],
      ...(p.busy ? [['In use', el('span', { 'data-testid': 'peer-busy', text: p.busy.busy ? `yes (${BUSY_WHY[p.busy.why] || p.busy.why}) since ${fmtTime(p.busy.since)}: updates wait` : 'no' })]] : []),
      ['Settings', p.settings_error ? el('span', { class: 'error-inline', text: `refused: ${p.settings_error}` })
        : p.settings_version ? `version ${p.settings_version} applied` : '—'],
      ['Tags', tags || '—'],
      ...(p.edge ? [['Edge', p.edge]] : []),
      ['Connected since', p.online ? fmtTime(p.connected_since) : '—'],
      ['Last seen', `${fmtTime(p.last_seen)} (${ago(p.last_seen)})`],
      ['Last message', fmtTime(p.last_message_at)],
      ['Address', p.remote_addr || '—'],
      ['Reconnects (1 h)', String(p.reconnects_last_hour ?? '—')],
      ['Health', healthText(p)],
      ['Session', p.session_id || '—'],
      ['Capabilities', (p.capabilities || []).join(', ') || '—'],
      ['Notices pending', String(p.notices_pending || 0)],
    ];
    $('peer-info').replaceChildren(...items.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
  }

  // BUSY_WHY says why a device is in use (its busy frame, issue 42).
  const BUSY_WHY = { run: 'a message is running', question: 'a question is open', keys: 'keys pressed a moment ago' };

  // updateText is the device's last update as it reported it.
  function updateText(p) {
    const u = p.update;
    if (!u) return '—';
    const bad = FAILED_STATES.includes(u.state);
    return el('span', { class: bad ? 'error-inline' : null, 'data-testid': 'peer-update', 'data-state': u.state },
      `${bad ? '✗ ' : ''}${u.version} ${human(u.state)}${u.reason ? ': ' + u.reason : ''} (${fmtTime(u.at)})`);
  }

  function drawPeerLive(p) {
    $('peer-title').textContent = p.device_name && p.device_name !== p.peer_id ? `${p.peer_id} — ${p.device_name}` : p.peer_id;
    drawLCD(p);
    drawInfo(p);
  }

  function drawDetail(d) {
    // While the live stream runs, its "peer" events are the newest word on
    // the device (a GET answered before the last of them would draw an
    // older screen over a newer one, and nothing would redraw it).
    const live = state.live && state.peers.get(d.peer_id);
    drawPeerLive(live || d);
    const { channel, peer } = state.route;
    const base = `/api/channels/${enc(channel)}/peers/${enc(peer)}`;
    const running = d.running || [];
    $('running').replaceChildren(...(running.length ? running.map((id) => el('li', { 'data-testid': 'run', 'data-message-id': id },
      el('code', { text: id }),
      canWrite() && el('button', {
        type: 'button', text: 'Cancel', 'aria-label': `Cancel run ${id}`,
        onclick: (ev) => act(ev.currentTarget, 'POST', `${base}/cancel`, { message_id: id }),
      }))) : [el('li', { class: 'hint', text: 'Nothing running.' })]));
    // Open questions: read-only (the person at the device answers).
    const questions = d.questions || [];
    $('peer-questions').replaceChildren(...(questions.length ? questions.map((q) => el('li', { 'data-testid': 'peer-question', 'data-question-id': q.question_id },
      el('span', { text: q.text }),
      el('ol', { class: 'options' }, ...(q.options || []).map((o) => el('li', { 'data-option-id': o.id, text: o.label }))),
      el('span', { class: 'sub', text: `asked by run of ${q.message_id} · ${q.seconds_left} s left · answered on the device` }))) :
      [el('li', { class: 'hint', text: 'No question open.' })]));
    const notices = d.notices || [];
    $('peer-notices').replaceChildren(...(notices.length ? notices.map((n) => el('li', { 'data-testid': 'peer-notice', 'data-notice-id': n.notice_id, 'data-state': n.state },
      el('span', { class: `badge ${n.priority === 'alert' ? 'alert' : 'info'}`, text: n.priority || 'info' }),
      el('span', { text: n.text }),
      el('span', { class: 'sub', text: [n.state, n.sent_at && `sent ${fmtTime(n.sent_at)}`, `expires ${fmtTime(n.expires_at)}`].filter(Boolean).join(' · ') }),
      canWrite() && (n.state === 'pending' || n.state === 'sent') ? el('button', {
        type: 'button', text: 'Withdraw', 'aria-label': `Withdraw notice ${n.notice_id}`,
        onclick: (ev) => act(ev.currentTarget, 'DELETE', `${base}/notices/${enc(n.notice_id)}`),
      }) : null)) : [el('li', { class: 'hint', text: 'No pending notices.' })]));
    const conv = d.conversation || [];
    $('conversation').replaceChildren(...(conv.length ? conv.map((m) => el('li', { 'data-testid': 'message', 'data-role': m.role },
      el('span', { class: 'role', text: m.role === 'user' ? 'device' : 'agent' }),
      el('time', { class: 'sub', datetime: m.timestamp || '', text: fmtTime(m.timestamp) }),
      m.finish_reason && m.finish_reason !== 'stop' ? el('span', { class: 'sub', text: ` (${m.finish_reason})` }) : null,
      '\n', m.text)) : [el('li', { class: 'hint', text: 'No messages yet.' })]));
  }

  // ---- diagnostics: the device's log and its self-test, over its session ----
  async function runDiag(kind) {
    const { channel, peer } = state.route;
    const base = `/api/channels/${enc(channel)}/peers/${enc(peer)}`;
    const status = $('diag-status');
    const out = $('diag-output');
    const buttons = [$('diag-logs'), $('diag-selftest')];
    for (const b of buttons) b.disabled = true;
    status.className = 'result';
    status.textContent = kind === 'logs' ? 'Asking the device for its log…' : 'The device runs its self-test…';
    try {
      let text;
      if (kind === 'logs') {
        text = await api('GET', `${base}/logs?bytes=${enc($('diag-bytes').value || '16384')}`);
        if (state.route.peer !== peer) return;
        status.textContent = `The last ${new TextEncoder().encode(text).length} bytes of ${peer}'s log.`;
      } else {
        const r = await api('POST', `${base}/selftest`);
        if (state.route.peer !== peer) return;
        text = r.text;
        status.className = `result ${r.ok ? 'good' : 'bad'}`;
        status.textContent = `Self-test ${r.ok ? 'passed' : 'failed'} (took ${r.took}).`;
      }
      out.textContent = text || '(empty)';
      out.dataset.kind = kind;
      out.hidden = false;
      if (kind === 'logs') out.scrollTop = out.scrollHeight; // the newest lines
    } catch (e) {
      if (state.route.peer !== peer) return;
      status.className = 'result bad';
      status.textContent = e.message; // the API's own words: not connected, an older termd, no answer
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  }

  function clearDiag() {
    $('diag-status').className = 'result';
    $('diag-status').textContent = '';
    $('diag-output').textContent = '';
    $('diag-output').hidden = true;
  }

  // ---- pairing requests (enrollment by code): listed, approved here ----
  const pairingItems = new Map(); // code -> <li>, kept while pending so typing survives a refresh

  function pairingItem(p) {
    if (!canWrite()) {
      return el('li', { 'data-testid': 'pairing-request', 'data-code': p.code },
        el('strong', { class: 'code', text: p.code }),
        el('span', { class: 'sub', text: ` from ${p.remote}, expires ${fmtTime(p.expires_at)}; an operator approves it` }));
    }
    const peer = el('input', { type: 'text', value: p.peer_id || '', required: true, 'aria-label': `Peer id for ${p.code}`, 'data-testid': 'pair-peer' });
    const name = el('input', { type: 'text', value: p.device_name || '', 'aria-label': `Name for ${p.code}`, 'data-testid': 'pair-name' });
    const tags = el('input', { type: 'text', placeholder: 'site:lobby, floor:2', 'aria-label': `Tags for ${p.code}`, 'data-testid': 'pair-tags' });
    const result = el('span', { class: 'result', role: 'status', 'data-testid': 'pair-result' });
    const button = el('button', { type: 'submit', text: 'Approve', 'data-testid': 'pair-approve' });
    const form = el('form', {
      class: 'row',
      onsubmit: async (ev) => {
        ev.preventDefault();
        const body = { peer_id: peer.value.trim(), name: name.value.trim() };
        try {
          const t = parseTags(tags.value);
          if (Object.keys(t).length) body.tags = t;
        } catch (e) {
          result.textContent = e.message;
          return;
        }
        button.disabled = true;
        try {
          await api('POST', `/api/enrollments/${enc(p.code)}/approve`, body);
          result.textContent = `Approved as ${body.peer_id}: the device collects its token and connects.`;
          clearError();
        } catch (e) {
          result.textContent = e.message;
          button.disabled = false;
        }
      },
    }, el('label', {}, 'Peer id ', peer), el('label', {}, 'Name ', name), el('label', {}, 'Tags ', tags), button);
    return el('li', { 'data-testid': 'pairing-request', 'data-code': p.code },
      el('strong', { class: 'code', text: p.code }),
      el('span', { class: 'sub', text: ` from ${p.remote}, expires ${fmtTime(p.expires_at)}` }),
      form, result);
  }

  async function loadPairing() {
    if (state.token === null || state.route.view !== 'fleet' || !state.channel) return;
    let list;
    try {
      list = ((await api('GET', '/api/enrollments')) || {}).enrollments || [];
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      return;
    }
    // A code stays listed while the server has it: pending, or approved
    // and not yet collected by its device (its result line says so).
    const listed = new Set();
    for (const p of list) {
      if (p.channel_id !== state.channel) continue;
      listed.add(p.code);
      if (!p.approved && !pairingItems.has(p.code)) pairingItems.set(p.code, pairingItem(p));
    }
    for (const code of [...pairingItems.keys()]) {
      if (!listed.has(code)) pairingItems.delete(code);
    }
    $('pairing').replaceChildren(...pairingItems.values());
    $('pairing-empty').hidden = pairingItems.size > 0;
  }

  // ---- pushed settings: the channel's version (the fleet marks a device
  // behind it), a device's effective settings and its own document ----
  const SETTINGS_FIELDS = ['idle_text', 'idle_seconds', 'backlight_off_after', 'notice_seconds', 'log_level', 'tags'];
  const SETTINGS_NAMES = { idle_text: 'Idle text', idle_seconds: 'Idle after', backlight_off_after: 'Backlight off after',
    notice_seconds: 'Notice shown for', log_level: 'Log level', tags: 'Tags' };

  async function loadChannelSettings(channel) {
    try {
      const d = await api('GET', `/api/channels/${enc(channel)}/settings`);
      if (channel !== state.channel) return;
      state.settingsVersion = (d && d.version) || 0;
      scheduleDraw();
    } catch (e) {
      if (e.status !== 401 && e.status !== 404) showError(`Reading the channel's settings: ${e.message}`);
    }
  }

  // settingsMark: the device refused its pushed settings, or takes them
  // and has not applied the channel's version (offline, not acked yet).
  function settingsMark(p) {
    if (p.settings_error) return { text: 'settings refused', why: p.settings_error };
    const listens = (p.capabilities || []).includes('settings');
    if (listens && state.settingsVersion > 0 && (p.settings_version || 0) < state.settingsVersion) {
      return { text: 'settings not applied', why: `applied version ${p.settings_version || 0} of ${state.settingsVersion}` };
    }
    return null;
  }

  // healthMarks are the conditions the device's last health report marks
  // (issue 43; the server computes them: disk_low, hot, throttled,
  // crash_looping, power_loss), each a badge on its fleet row.
  const HEALTH_MARKS = {
    disk_low: h => ({ text: 'disk low', why: `${h.disk_free_percent}% free (${fmtBytes(h.disk_free)})` }),
    hot: h => ({ text: 'hot', why: `${fmtTemp(h.temp_mc)}` }),
    throttled: h => ({ text: 'throttled', why: (h.throttled || []).filter(w => !w.endsWith('_occurred')).map(human).join(', ') }),
    crash_looping: h => ({ text: 'crash looping', why: `${h.restarts_last_hour} restarts in the last hour; ${h.last_stop_detail || 'crash'}` }),
    power_loss: () => ({ text: 'restarted by power loss', why: 'no clean stop before its last start' }),
  };
  function healthMarks(p) {
    const h = p.health;
    if (!h) return [];
    return (h.conditions || []).filter(c => HEALTH_MARKS[c]).map(c => ({ cond: c, ...HEALTH_MARKS[c](h) }));
  }

  // healthText is the device's last health report on its page.
  function healthText(p) {
    const h = p.health;
    if (!h) return (p.capabilities || []).includes('health') ? 'no report yet' : '—';
    const stop = h.last_stop === 'crash' ? `crash: ${h.last_stop_detail || '?'}` : human(h.last_stop);
    const lines = [
      `up ${fmtDuration(h.uptime_seconds)}, load ${h.load1}, ${fmtBytes(h.mem_available)} memory available`,
      `state dir: ${fmtBytes(h.disk_free)} free (${h.disk_free_percent}%)`,
      ...(h.temp_mc != null ? [`CPU ${fmtTemp(h.temp_mc)}`] : []),
      ...((h.throttled || []).length ? [`throttling: ${h.throttled.map(human).join(', ')}`] : []),
      `last stop: ${stop}; ${h.restarts_last_hour} restarts in the last hour`,
      `link: ${h.reconnects} reconnects since its start${h.heartbeat_rtt_ms ? `, heartbeat ${h.heartbeat_rtt_ms} ms` : ''}`,
      `reported ${fmtTime(h.at)}`,
    ];
    return el('div', { 'data-testid': 'peer-health', 'data-conditions': (h.conditions || []).join(' ') },
      ...healthMarks(p).flatMap(m => [el('span', { class: 'badge alert', text: m.text }), ' ']),
      ...lines.map(t => el('div', { class: 'sub', text: t })));
  }

  function fmtBytes(n) {
    if (n == null) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${i ? n.toFixed(1) : n} ${units[i]}`;
  }
  function fmtTemp(mc) { return mc == null ? '—' : `${(mc / 1000).toFixed(1)} °C`; }
  function fmtDuration(s) {
    if (s < 120) return `${s} s`;
    if (s < 7200) return `${Math.floor(s / 60)} min`;
    if (s < 172800) return `${Math.floor(s / 3600)} h`;
    return `${Math.floor(s / 86400)} days`;
  }

  function updateMark(p) {
    const u = p.update;
    if (!u || !FAILED_STATES.includes(u.state)) return null;
    return { text: `update ${human(u.state)}`, why: `${u.version}${u.reason ? ': ' + u.reason : ''}` };
  }

  function fmtSetting(k, v) {
    if (v === undefined || v === null || v === '') return null;
    if (k === 'tags') return Object.entries(v).map(([a, b]) => `${a}=${b}`).join(', ') || null;
    if (k.endsWith('seconds') || k === 'backlight_off_after') return v === 0 ? '0 (never)' : `${v} s`;
    return String(v);
  }

  function loadPeerSettingsSoon() {
    clearTimeout(state.settingsTimer);
    state.settingsTimer = setTimeout(loadPeerSettings, 250);
  }

  // loadPeerSettings draws the open device's settings (and, for an
  // operator, fills its document's editor unless it is being edited).
  async function loadPeerSettings(fill) {
    if (state.route.view !== 'peer') return;
    const { channel, peer } = state.route;
    let v;
    let docs = null;
    try {
      v = await api('GET', `/api/channels/${enc(channel)}/peers/${enc(peer)}/settings`);
      if (canWrite()) docs = await api('GET', `/api/channels/${enc(channel)}/settings`);
    } catch (e) {
      if (state.route.peer !== peer) return;
      $('settings-status').className = 'result bad';
      $('settings-status').textContent = e.message; // the API's words (404: no such device nor document)
      $('settings-info').replaceChildren();
      return;
    }
    if (state.route.view !== 'peer' || state.route.peer !== peer || state.route.channel !== channel) return;
    const st = $('settings-status');
    let text;
    let cls = 'result';
    if (!v.listens) {
      text = 'This device does not take pushed settings (its termd does not list "settings").';
    } else if (v.error) {
      text = `The device refused version ${v.version}: ${v.error}`;
      cls = 'result bad';
    } else if (v.version === 0) {
      text = 'No settings are pushed on this channel.';
    } else if (v.current) {
      text = `Applied: the device runs settings version ${v.applied_version}.`;
      cls = 'result good';
    } else {
      text = `Not applied yet: the device has version ${v.applied_version || 0} of ${v.version}${v.online ? '' : ' (offline: it gets them when it connects)'}.`;
      cls = 'result bad';
    }
    st.className = cls;
    st.textContent = text;
    st.dataset.applied = String(v.applied_version || 0);
    st.dataset.version = String(v.version || 0);
    st.dataset.current = String(!!v.current);
    const rows = [
      ['version', 'Channel version', String(v.version || 0)],
      ['applied_version', 'Applied version', String(v.applied_version || 0)],
      ...(v.error ? [['error', 'Refused', v.error]] : []),
      ['sources', 'From', (v.sources || []).join(', ') || 'no document: the device\'s own'],
    ];
    for (const k of SETTINGS_FIELDS) {
      const f = fmtSetting(k, v.settings && v.settings[k]);
      if (f !== null) rows.push([k, SETTINGS_NAMES[k], f]);
    }
    $('settings-info').replaceChildren(...rows.flatMap(([key, name, val]) => [el('dt', { text: name }), el('dd', { 'data-key': key, text: val })]));
    if (docs) {
      const doc = ((docs && docs.peers) || []).find((d) => d.peer_id === peer) || null;
      $('settings-delete').hidden = !doc;
      $('settings-doc').textContent = doc ? `Its document: version ${doc.version}, changed ${fmtTime(doc.updated_at)}${doc.updated_by ? ` by ${doc.updated_by}` : ''}.`
        : 'It has no document of its own.';
      if (fill || !$('settings-form').dataset.dirty) fillSettingsForm(doc);
    }
  }

  function fillSettingsForm(doc) {
    const form = $('settings-form');
    for (const k of SETTINGS_FIELDS) {
      const input = form.elements[k];
      const val = doc ? doc[k] : undefined;
      input.value = val === undefined || val === null ? '' : k === 'tags' ? Object.entries(val).map(([a, b]) => `${a}=${b}`).join(', ') : String(val);
    }
    delete form.dataset.dirty;
  }

  function clearFieldErrors() {
    for (const k of SETTINGS_FIELDS) {
      const input = $('settings-form').elements[k];
      input.removeAttribute('aria-invalid');
      $(`set-${k}-err`).textContent = '';
    }
  }

  // showFieldError marks the field the API named ("idle_seconds: is ...")
  // with the API's words; the result line says them too.
  function showFieldError(msg) {
    const m = /^([a-z_]+): /.exec(msg);
    if (!m || !SETTINGS_FIELDS.includes(m[1])) return;
    const input = $('settings-form').elements[m[1]];
    input.setAttribute('aria-invalid', 'true');
    $(`set-${m[1]}-err`).textContent = msg.slice(m[0].length);
    input.focus();
  }

  function settingsBody(form) {
    const body = {};
    const text = form.elements.idle_text.value;
    if (text !== '') body.idle_text = text;
    for (const k of ['idle_seconds', 'backlight_off_after', 'notice_seconds']) {
      const v = form.elements[k].value.trim();
      if (v === '') continue;
      const n = Number(v);
      if (!Number.isInteger(n)) throw Object.assign(new Error(`${k}: must be a whole number of seconds`), { field: k });
      body[k] = n;
    }
    if (form.elements.log_level.value) body.log_level = form.elements.log_level.value;
    const tags = form.elements.tags.value.trim();
    if (tags) {
      try { body.tags = parseTags(tags); } catch (e) { throw Object.assign(new Error(`tags: ${e.message}`), { field: 'tags' }); }
    }
    return body;
  }

  async function onSettingsForm(ev, method) {
    if (ev) ev.preventDefault();
    const form = $('settings-form');
    const out = $('settings-result');
    const { channel, peer } = state.route;
    clearFieldErrors();
    out.className = 'result';
    let body;
    if (method === 'PUT') {
      try {
        body = settingsBody(form);
      } catch (e) {
        out.className = 'result bad';
        out.textContent = e.message;
        showFieldError(e.message);
        return;
      }
    }
    out.textContent = method === 'PUT' ? 'Saving…' : 'Deleting…';
    for (const b of [$('settings-save'), $('settings-delete')]) b.disabled = true;
    try {
      const r = await api(method, `/api/channels/${enc(channel)}/settings/peers/${enc(peer)}`, body);
      if (state.route.peer !== peer) return;
      out.textContent = `${method === 'PUT' ? 'Saved' : 'Deleted'}: settings version ${r.version}, pushed to ${r.pushed} device${r.pushed === 1 ? '' : 's'}.`;
      delete form.dataset.dirty;
      loadPeerSettings(true);
    } catch (e) {
      if (state.route.peer !== peer) return;
      out.className = 'result bad';
      out.textContent = e.message; // the API's own words, naming the field
      showFieldError(e.message);
    } finally {
      for (const b of [$('settings-save'), $('settings-delete')]) b.disabled = false;
    }
  }

  function clearSettings() {
    $('settings-status').className = 'result';
    $('settings-status').textContent = 'Loading the settings…';
    $('settings-info').replaceChildren();
    $('settings-result').textContent = '';
    $('settings-doc').textContent = '';
    $('settings-delete').hidden = true;
    fillSettingsForm(null);
    clearFieldErrors();
  }

  // ---- rollouts of signed releases: listed, started, paused, resumed,
  // aborted here; an expanded one lists its devices, polled with the list
  // (every 2 s, and at once on the stream's rollout_* events) while it is
  // running or paused, once more when it ends ----
  const ROLLOUT_STATES = ['installed', 'pending', 'sent', 'waiting', 'downloading', 'restarting', 'offline', 'failed', 'rolled_back', 'refused', 'skipped'];
  const FAILED_STATES = ['failed', 'rolled_back', 'refused'];
  const rollouts = new Map(); // rollout id -> {key, li, open, detail, table, ended}
  let rolloutsTimer = 0;
  const human = (s) => String(s || '').replace(/_/g, ' ');

  function pausedWhy(r) {
    if (!r.paused) return '';
    return r.paused.peer_id ? `${r.paused.peer_id} ${human(r.paused.state)}: ${r.paused.reason}` : r.paused.reason;
  }

  function rolloutItem(r, entry) {
    const counts = ROLLOUT_STATES.filter((k) => r.counts && r.counts[k]).map((k) => `${r.counts[k]} ${human(k)}`).join(', ');
    const why = r.paused ? ` (${pausedWhy(r)})` : '';
    const status = el('span', { class: 'result', role: 'status', 'data-testid': 'rollout-result' });
    const buttons = [];
    if (canWrite()) {
      const action = (name, label) => {
        const b = el('button', { type: 'button', text: label, 'data-testid': `rollout-${name}`, 'aria-label': `${label} rollout ${r.id}` });
        b.addEventListener('click', async () => {
          b.disabled = true;
          try {
            await api('POST', `/api/channels/${enc(r.channel_id)}/rollouts/${enc(r.id)}/${name}`);
            clearError();
            loadRollouts();
          } catch (e) {
            status.textContent = e.message;
            b.disabled = false;
          }
        });
        return b;
      };
      if (r.state === 'running') buttons.push(action('pause', 'Pause'));
      if (r.state === 'paused') buttons.push(action('resume', 'Resume'));
      if (r.state === 'running' || r.state === 'paused') buttons.push(action('abort', 'Abort'));
    }
    const regionID = `rollout-devices-${r.id}`;
    const label = el('span', { text: entry.open ? 'Hide devices' : 'Devices' });
    const toggle = el('button', {
      type: 'button', class: 'disclose', 'data-testid': 'rollout-toggle', 'aria-expanded': String(entry.open), 'aria-controls': regionID,
      onclick: () => {
        entry.open = !entry.open;
        toggle.setAttribute('aria-expanded', String(entry.open));
        label.textContent = entry.open ? 'Hide devices' : 'Devices';
        region.hidden = !entry.open;
        if (entry.open) loadRolloutDevices(r.channel_id, r.id);
      },
    }, label, el('span', { class: 'sr-only', text: ` of rollout ${r.id}` }));
    const target = r.target ? (r.target.all ? 'all devices' : r.target.tag ? `tag ${r.target.tag}` : `peers ${(r.target.peers || []).join(', ')}`) : '';
    const region = el('div', { id: regionID, class: 'rollout-devices', 'data-testid': 'rollout-devices', role: 'region', 'aria-label': `Devices of rollout ${r.id}`, hidden: !entry.open });
    if (entry.table) region.append(entry.table);
    return el('li', { 'data-testid': 'rollout', 'data-id': r.id, 'data-state': r.state },
      el('strong', { text: `${r.version} ` }),
      el('span', { class: `rollout-state ${r.state}`, 'data-testid': 'rollout-state', text: r.state + why }),
      el('span', { class: 'sub', text: ` · ${r.id} · ${target}${r.canary ? `, ${r.canary} canar${r.canary === 1 ? 'y' : 'ies'}` : ''} · ${counts || 'no devices'}` }),
      r.window || r.force ? el('span', { class: 'sub', 'data-testid': 'rollout-window', text: ` · ${r.window ? `window ${r.window} ${r.zone === 'device' ? "(each device's zone)" : 'UTC'}` : ''}${r.window && r.force ? ', ' : ''}${r.force ? 'forced' : ''}` }) : null,
      el('span', { class: 'row' }, toggle, ...buttons), status, region);
  }

  // rolloutDevices is the table of a rollout's devices: a failed one is
  // marked (not by colour alone), the one that paused it says so.
  function rolloutDevices(r) {
    const devices = r.devices || [];
    if (!devices.length) return el('p', { class: 'hint', text: 'No device is targeted.' });
    const pausedBy = r.paused && r.paused.peer_id;
    const rows = devices.map((d) => {
      const failed = FAILED_STATES.includes(d.state);
      const culprit = pausedBy === d.peer_id;
      return el('tr', { 'data-testid': 'rollout-device', 'data-peer-id': d.peer_id, 'data-state': d.state, class: failed ? 'failed' : null },
        el('td', { 'data-label': 'Device' }, el('a', { href: `#/peer/${enc(r.channel_id)}/${enc(d.peer_id)}`, text: d.peer_id }),
          d.online === false ? el('span', { class: 'sub', text: ' (offline)' }) : null),
        el('td', { 'data-label': 'Wave' }, d.wave === 0 ? 'canary' : d.wave < 0 ? '—' : String(d.wave)),
        el('td', { 'data-label': 'State', 'data-testid': 'rollout-device-state' },
          el('span', { class: `dev-state ${d.state}` }, failed ? '✗ ' : d.state === 'installed' ? '✓ ' : '', human(d.state) + (d.state === 'waiting' && d.reason ? `: ${d.reason}` : '')),
          culprit ? el('div', { class: 'paused-by', 'data-testid': 'paused-by', text: 'paused the rollout' }) : null),
        el('td', { 'data-label': 'Running' }, d.running || '—'),
        el('td', { 'data-label': 'Reason', class: 'reason' }, d.reason || (d.was ? `was ${human(d.was)}` : '—')),
        el('td', { 'data-label': 'Since' }, el('time', { datetime: d.since || '', title: fmtTime(d.since), text: ago(d.since) })));
    });
    return el('div', { class: 'table-wrap' }, el('table', { class: 'fleet devices', 'data-testid': 'rollout-device-table' },
      el('caption', { class: 'sr-only', text: `Devices of rollout ${r.id} (${r.version})` }),
      el('thead', {}, el('tr', {}, ...['Device', 'Wave', 'State', 'Running', 'Reason', 'Since'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows)));
  }

  async function loadRolloutDevices(channel, id) {
    let r;
    try {
      r = await api('GET', `/api/channels/${enc(channel)}/rollouts/${enc(id)}`);
    } catch (e) {
      const entry = rollouts.get(id);
      if (entry) {
        entry.table = el('p', { class: 'result bad', text: `Listing its devices: ${e.message}` });
        const region = entry.li && entry.li.querySelector('[data-testid=rollout-devices]');
        if (region) region.replaceChildren(entry.table);
      }
      return;
    }
    const entry = rollouts.get(id);
    if (!entry || channel !== state.channel) return;
    entry.table = rolloutDevices(r);
    entry.ended = r.state !== 'running' && r.state !== 'paused';
    const region = entry.li && entry.li.querySelector('[data-testid=rollout-devices]');
    if (region) region.replaceChildren(entry.table);
  }

  function loadRolloutsSoon() {
    clearTimeout(rolloutsTimer);
    rolloutsTimer = setTimeout(loadRollouts, 200);
  }

  async function loadRollouts() {
    if (state.token === null || state.route.view !== 'fleet' || !state.channel) return;
    const channel = state.channel;
    let list;
    try {
      list = ((await api('GET', `/api/channels/${enc(channel)}/rollouts`)) || {}).rollouts || [];
    } catch (e) {
      if (e.status !== 401 && e.status !== 404) showError(e.message);
      return;
    }
    if (channel !== state.channel) return;
    const shown = list.slice(0, 5);
    const keep = new Set(shown.map((r) => r.id));
    for (const id of [...rollouts.keys()]) if (!keep.has(id)) rollouts.delete(id);
    // An item is rebuilt only when its rollout changed: focus and an
    // open device list survive the poll.
    const items = shown.map((r) => {
      let entry = rollouts.get(r.id);
      if (!entry) { entry = { open: false }; rollouts.set(r.id, entry); }
      const key = JSON.stringify(r);
      if (entry.key !== key || !entry.li) {
        entry.key = key;
        entry.li = rolloutItem(r, entry);
      }
      const active = r.state === 'running' || r.state === 'paused';
      if (entry.open && (active || !entry.ended)) loadRolloutDevices(channel, r.id);
      return entry.li;
    });
    const ul = $('rollouts');
    if (items.length !== ul.children.length || items.some((li, i) => ul.children[i] !== li)) ul.replaceChildren(...items);
    $('rollouts-empty').hidden = list.length > 0;
  }

  // ---- starting a rollout: the stored releases as choices ----
  let releasesAt = 0;
  async function loadReleases() {
    const sel = $('rollout-version');
    if (!canWrite() || document.activeElement === sel) return;
    let data;
    try {
      data = await api('GET', '/api/releases');
    } catch (e) {
      if (e.status !== 401) $('rollout-result').textContent = `Listing the releases: ${e.message}`;
      return;
    }
    releasesAt = Date.now();
    const byVersion = new Map();
    for (const r of (data && data.releases) || []) {
      if (!byVersion.has(r.version)) byVersion.set(r.version, []);
      byVersion.get(r.version).push(r.platform);
    }
    // Newest first, and the newest chosen unless the operator chose
    // another (the API lists them by name: v1.10.0 before v1.9.0, and the
    // first was chosen, a downgrade).
    const keep = sel.dataset.chosen === '1' ? sel.value : '';
    const versions = [...byVersion.keys()].sort((a, b) => compareVersions(b, a));
    const opts = versions.map((v) => el('option', { value: v, text: `${v} (${byVersion.get(v).sort().join(', ')})` }));
    if (!opts.length) opts.push(el('option', { value: '', text: 'no release is stored (termrig release upload)' }));
    sel.replaceChildren(...opts);
    if (byVersion.has(keep)) sel.value = keep;
    else {
      delete sel.dataset.chosen;
      sel.selectedIndex = 0;
    }
  }

  // compareVersions orders two release versions as termd does
  // (device/update.CompareVersions): -1 when a is older than b, 0 the
  // same, 1 newer. A leading "v" and build metadata after "+" are
  // ignored; the core's dot-separated numbers compare number by number (a
  // missing one is 0); a pre-release ("-rc.1") is older than its release,
  // its identifiers compared numbers numerically and below words, words
  // by bytes, fewer older. A version that does not order ("devel", a
  // commit) is older than any that does; those compare by name.
  function parseVersion(s) {
    let v = s.startsWith('v') ? s.slice(1) : s;
    v = v.split('+')[0];
    const dash = v.indexOf('-');
    const core = (dash < 0 ? v : v.slice(0, dash)).split('.');
    if (core.length > 8 || core.some((n) => !/^[0-9]+$/.test(n))) return null;
    const pre = dash < 0 ? null : v.slice(dash + 1).split('.');
    if (pre && pre.some((id) => id === '')) return null;
    return { core: core.map((n) => n.replace(/^0+(?=.)/, '')), pre };
  }
  function compareNum(a, b) { // decimal strings without leading zeros, of any length
    if (a.length !== b.length) return a.length < b.length ? -1 : 1;
    return a === b ? 0 : a < b ? -1 : 1;
  }
  function compareBytes(a, b) {
    const x = new TextEncoder().encode(a);
    const y = new TextEncoder().encode(b);
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return x.length === y.length ? 0 : x.length < y.length ? -1 : 1;
  }
  function compareVersions(a, b) {
    const pa = parseVersion(a);
    const pb = parseVersion(b);
    if (!pa || !pb) return pa ? 1 : pb ? -1 : compareBytes(a, b);
    for (let i = 0; i < Math.max(pa.core.length, pb.core.length); i++) {
      const c = compareNum(pa.core[i] || '0', pb.core[i] || '0');
      if (c) return c;
    }
    if (!pa.pre || !pb.pre) return pa.pre ? -1 : pb.pre ? 1 : 0;
    for (let i = 0; i < Math.min(pa.pre.length, pb.pre.length); i++) {
      const x = pa.pre[i];
      const y = pb.pre[i];
      const nx = /^[0-9]+$/.test(x);
      const ny = /^[0-9]+$/.test(y);
      const c = nx && ny ? compareNum(x.replace(/^0+(?=.)/, ''), y.replace(/^0+(?=.)/, '')) : nx ? -1 : ny ? 1 : compareBytes(x, y);
      if (c) return c;
    }
    return pa.pre.length === pb.pre.length ? 0 : pa.pre.length < pb.pre.length ? -1 : 1;
  }

  function rolloutBody(form) {
    const fd = new FormData(form);
    const body = { version: String(fd.get('version') || '') };
    if (!body.version) throw new Error('choose a release (upload one with termrig release upload)');
    const target = fd.get('rtarget');
    if (target === 'tag') {
      const tag = String(fd.get('tag') || '').trim().replace(/^([^:=\s]+)\s*:\s*/, '$1=');
      if (!tag) throw new Error('give the tag as key=value, e.g. site=lobby');
      body.tag = tag;
    } else if (target === 'peers') {
      body.peers = String(fd.get('peers') || '').split(',').map((x) => x.trim()).filter(Boolean);
      if (!body.peers.length) throw new Error('give the peer ids, comma-separated');
    } else {
      body.all = true;
    }
    for (const k of ['canary', 'percent', 'gate_seconds']) {
      const v = String(fd.get(k) || '').trim();
      if (v !== '') body[k] = Number(v);
    }
    if (fd.get('allow_downgrade')) body.allow_downgrade = true;
    const win = String(fd.get('window') || '').trim();
    if (win) {
      body.window = win;
      if (fd.get('zone') === 'device') body.zone = 'device';
    }
    if (fd.get('force')) body.force = true;
    return body;
  }

  async function onRolloutForm(ev) {
    ev.preventDefault();
    const form = ev.currentTarget;
    const out = $('rollout-result');
    const button = $('rollout-start');
    out.className = 'result';
    let body;
    try {
      body = rolloutBody(form);
    } catch (e) {
      out.className = 'result bad';
      out.textContent = e.message;
      return;
    }
    out.textContent = 'Starting…';
    button.disabled = true;
    try {
      const r = await api('POST', `/api/channels/${enc(state.channel)}/rollouts`, body);
      const n = (r.devices || []).length;
      out.textContent = `Rollout ${r.id} of ${r.version} started: ${n} device${n === 1 ? '' : 's'}.`;
      rollouts.set(r.id, { open: true }); // its devices shown at once
      clearError();
      loadRollouts();
    } catch (e) {
      out.className = 'result bad';
      out.textContent = e.message; // the API's own words (409: another rollout is active)
      if (e.status === 404) loadReleases();
    } finally {
      button.disabled = false;
    }
  }

  async function act(button, method, path, body) {
    button.disabled = true;
    try {
      await api(method, path, body);
      clearError();
    } catch (e) {
      showError(e.message);
    } finally {
      button.disabled = false;
      refreshDetailSoon(0);
    }
  }

  async function loadDetail() {
    const { channel, peer } = state.route;
    try {
      const d = await api('GET', `/api/channels/${enc(channel)}/peers/${enc(peer)}`);
      if (state.route.view !== 'peer' || state.route.peer !== peer) return;
      state.detail = d;
      drawDetail(d);
    } catch (e) {
      showError(e.message);
    }
  }

  function refreshDetailSoon(ms) {
    clearTimeout(state.detailTimer);
    state.detailTimer = setTimeout(loadDetail, ms === undefined ? 300 : ms);
  }

  // ---- routing: #/ (fleet) and #/peer/{channel}/{peer_id} ----
  function route() {
    if (state.token === null) return;
    const m = /^#\/peer\/([^/]+)\/(.+)$/.exec(location.hash);
    if (m) {
      const channel = decodeURIComponent(m[1]);
      state.route = { view: 'peer', channel, peer: decodeURIComponent(m[2]) };
      if (channel !== state.channel && state.channels.some((c) => c.channel_id === channel)) selectChannel(channel);
      $('fleet-view').hidden = true;
      $('peer-view').hidden = false;
      const p = state.peers.get(state.route.peer);
      if (p) drawPeerLive(p); else { $('peer-title').textContent = state.route.peer; drawLCD(null); }
      $('running').replaceChildren();
      $('peer-questions').replaceChildren();
      $('peer-notices').replaceChildren();
      $('conversation').replaceChildren();
      $('peer-events').replaceChildren();
      clearDiag();
      clearSettings();
      loadPeerSettings(true);
      state.peerSeqs.clear();
      $('peer-events-note').textContent = 'Loading this device\'s events…';
      $('peer-events-note').hidden = false;
      $('events-view').hidden = true; // the page lists this device's events only
      loadDetail();
      loadPeerEvents(channel, state.route.peer);
    } else {
      state.route = { view: 'fleet' };
      state.detail = null;
      $('peer-view').hidden = true;
      $('fleet-view').hidden = false;
      $('events-view').hidden = false;
      drawFleet();
      loadPairing();
      loadRollouts();
      loadReleases();
    }
  }

  function selectChannel(id) {
    state.channel = id;
    $('channel').value = id;
    sessionStorage.setItem(CHANNEL_KEY, id);
    state.peers.clear();
    state.loaded = false;
    $('events').replaceChildren();
    $('events-note').textContent = 'Loading the events…';
    $('events-note').hidden = false;
    state.seqs.clear();
    startStream();
    drawFleet();
  }

  // ---- wiring ----
  document.addEventListener('DOMContentLoaded', () => {
    // Both notice forms share their options (priority, how long, expiry).
    for (const slot of document.querySelectorAll('[data-slot=notice-options]')) {
      slot.append($('notice-options').content.cloneNode(true));
    }
    $('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      $('login-error').textContent = '';
      $('login-button').disabled = true;
      try {
        await login($('token').value.trim());
        clearError();
      } catch (e) {
        $('login-error').textContent = e.status === 401 ? `That token was refused: ${e.message}` : e.message;
      } finally {
        $('login-button').disabled = false;
      }
    });
    $('logout').addEventListener('click', () => logout('Logged out.'));
    $('error-close').addEventListener('click', clearError);
    $('channel').addEventListener('change', (ev) => {
      selectChannel(ev.target.value);
      if (state.route.view === 'peer') location.hash = '#/';
    });
    for (const id of ['filter-text', 'filter-tag', 'filter-online']) $(id).addEventListener('input', scheduleDraw);
    $('filter').addEventListener('submit', (ev) => ev.preventDefault());
    $('filter-clear').addEventListener('click', () => {
      $('filter-text').value = '';
      $('filter-tag').value = '';
      $('filter-online').value = '';
      drawFleet();
    });
    $('notice-form').addEventListener('submit', onNoticeForm);
    $('notice-tag').addEventListener('focus', () => { $('notice-form').querySelector('[value=tag]').checked = true; });
    $('notice-peer').addEventListener('focus', () => { $('notice-form').querySelector('[value=peer]').checked = true; });
    $('peer-notice-form').addEventListener('submit', onPeerNoticeForm);
    $('diag-logs').addEventListener('click', () => runDiag('logs'));
    $('rollout-form').addEventListener('submit', onRolloutForm);
    $('rollout-version').addEventListener('change', (ev) => { ev.target.dataset.chosen = '1'; });
    $('rollout-tag').addEventListener('focus', () => { $('rollout-form').querySelector('[value=tag]').checked = true; });
    $('rollout-peers').addEventListener('focus', () => { $('rollout-form').querySelector('[value=peers]').checked = true; });
    $('settings-form').addEventListener('submit', (ev) => onSettingsForm(ev, 'PUT'));
    $('settings-form').addEventListener('input', () => { $('settings-form').dataset.dirty = '1'; });
    $('settings-delete').addEventListener('click', () => onSettingsForm(null, 'DELETE'));
    $('diag-selftest').addEventListener('click', () => runDiag('selftest'));
    for (const form of [$('notice-form'), $('peer-notice-form')]) {
      form.querySelector('textarea').maxLength = NOTICE_MAX;
      form.querySelector('textarea').addEventListener('input', () => noticeCount(form));
      noticeCount(form);
    }
    window.addEventListener('hashchange', route);
    // "last seen" ages as time passes.
    setInterval(() => { if (state.token !== null && state.route.view === 'fleet') scheduleDraw(); }, 15000);
    // Pairing requests have no stream event of their own: poll them.
    setInterval(loadPairing, 3000);
    // Rollouts too (their events are in the stream, their state is not).
    setInterval(loadRollouts, 2000);
    // The stored releases, for the rollout form (not while it is in use).
    setInterval(() => { if (state.token !== null && state.route.view === 'fleet' && Date.now() - releasesAt > 30000) loadReleases(); }, 5000);

    // A token from earlier in this tab, or none: a server without admin
    // tokens answers its own machine without one, and then no login is
    // asked for (as termrig demo --kiosk runs it).
    const saved = sessionStorage.getItem(TOKEN_KEY);
    login(saved || '').catch((e) => logout(saved === null ? '' : e.message));
  });
})();
