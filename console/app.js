// app.js — the buyer's web console: sign-in (one-time link or a pasted token, exchanged for an
// HttpOnly cookie), the service's session list, and a session page on the documented REST API
// (api/openapi.yaml) and the stock socket.io-client (api/events.md): state and controls, the
// live op feed (a windowed list), approvals with their diff, exec output, security alerts,
// the session contract, the change summary and the audit chain verified here (verify.js).
// Agent strings go through JBText (text.js) only.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const T = JBText;
  const HDR = { 'X-Jailbox-Console': '1' };
  const st = { job: null, role: null, socket: null, ops: new Map(), order: [], pending: new Map(),
    sel: 0, heads: [], session: null, out: new Map(), running: new Map(),
    drafts: new Map(), painted: new Map(), lost: new Map(), diffs: new Map(), feedSel: -1, changesets: new Map() }; // opId → {reason, similar} typed into a card, kept across re-renders
  window.__jb = st; // for tests and benchmarks: read-only use

  // ---------- REST ----------
  async function api(method, path, body) {
    const opt = { method, headers: { ...HDR }, credentials: 'same-origin' };
    if (body !== undefined) { opt.headers['Content-Type'] = 'application/json'; opt.body = JSON.stringify(body); }
    const r = await fetch(path, opt);
    const text = await r.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch { json = null; }
    if (r.status === 401 && !path.startsWith('/v1/console/session')) signedOut('The sign-in expired or was revoked: sign in again.');
    return { status: r.status, json, text };
  }
  const jobPath = (s = '') => '/v1/jailbox/' + encodeURIComponent(st.job) + s;
  const errText = (r) => (r.json && r.json.error ? r.json.error.message : 'HTTP ' + r.status);

  // ---------- sign-in ----------
  function show(id) { for (const s of ['signin', 'list', 'session']) $(s).hidden = s !== id; }
  function signedOut(msg) {
    if (st.socket) { st.socket.disconnect(); st.socket = null; }
    show('signin');
    $('signout').hidden = true;
    $('who').textContent = '';
    $('signin-error').textContent = msg || '';
  }

  async function exchange(headers) {
    const r = await fetch('/v1/console/session', { method: 'POST', credentials: 'same-origin', headers: { ...HDR, ...headers } });
    if (r.ok) return null;
    let m = 'sign-in refused (HTTP ' + r.status + ')';
    try { m = (await r.json()).error.message; } catch { /* keep */ }
    return m;
  }

  async function start() {
    const m = /^#code=([A-Za-z0-9_-]{1,80})$/.exec(location.hash);
    let err = null;
    if (m) {
      history.replaceState(null, '', location.pathname); // the code leaves the URL and history
      err = await exchange({ 'X-Jailbox-Console-Code': m[1] });
    }
    const who = await api('GET', '/v1/console/session');
    if (who.status !== 200) return signedOut(err || (who.status === 401 ? '' : errText(who)));
    st.role = who.json.role;
    st.socketPort = who.json.socketPort;
    $('signout').hidden = false;
    T.put($('who'), who.json.role + (who.json.jobId ? ' of ' + who.json.jobId : ''));
    if (st.role === 'service') return showList();
    openSession(who.json.jobId);
  }

  $('signin-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const tok = $('token').value.trim();
    $('token').value = '';
    if (!tok) return;
    $('signin-error').textContent = 'signing in…';
    const err = await exchange({ Authorization: 'Bearer ' + tok });
    if (err) { $('signin-error').textContent = err; return; }
    $('signin-error').textContent = '';
    start();
  });
  $('signout').addEventListener('click', async () => {
    await api('DELETE', '/v1/console/session');
    signedOut('Signed out.');
  });

  // ---------- the service's session list ----------
  async function showList() {
    show('list');
    const r = await api('GET', '/v1/console/sessions');
    const body = $('list-body');
    body.textContent = '';
    if (r.status !== 200) { body.appendChild(T.el('tr', errText(r))); return; }
    for (const s of r.json.sessions) {
      const tr = document.createElement('tr');
      const a = T.el('a', s.jobId);
      a.href = '#';
      a.addEventListener('click', (e) => { e.preventDefault(); openSession(s.jobId); });
      const td = document.createElement('td');
      td.appendChild(a);
      tr.appendChild(td);
      for (const k of ['agentId', 'state', 'mode', 'createdAt']) tr.appendChild(T.el('td', s[k]));
      body.appendChild(tr);
    }
  }

  // ---------- session ----------
  async function openSession(job) {
    st.job = job;
    show('session');
    T.put($('job'), job);
    await refreshSession();
    await loadOps();
    loadChanges();
    if (st.role === 'buyer') connectSocket();
    else { setConn('REST (service: no socket)'); setInterval(() => { refreshSession(); loadOps(); }, 2000); }
  }

  async function refreshSession() {
    const r = await api('GET', jobPath());
    if (r.status !== 200) { $('control-error').textContent = errText(r); return; }
    st.session = r.json;
    setState(r.json.state, r.json.mode);
    operatorNote(r.json.pausedBy === 'service' ? { state: 'paused', actor: 'service', reason: r.json.stateReason } : null);
    renderContract(r.json);
  }

  // a session in one of these states has ended: its buyer still reads it (ops, changes, audit)
  // for the server's read retention, and every control answers 409 invalid_state
  const OVER = ['accepted', 'aborted', 'failed'];
  const isOver = () => OVER.includes($('state').textContent);
  function setState(state, mode) {
    const was = isOver();
    if (state) { $('state').textContent = state; $('state').className = 'pill' + (OVER.includes(state) ? ' over' : ''); }
    if (mode) $('mode').textContent = mode;
    const s = $('state').textContent, over = isOver();
    $('pause').disabled = s !== 'active';
    $('resume').disabled = s !== 'paused';
    $('accept').disabled = s !== 'done';
    $('abort').disabled = over;
    $('switch-mode').disabled = over;
    const ro = $('readonly');
    ro.hidden = !over;
    if (over) ro.textContent = `This session has ended (${s}): read-only. Its ops, changes and audit chain stay readable; nothing can be changed.`;
    if (over !== was) { if (over) { st.pending.clear(); st.running.clear(); } renderApprovals(); scheduleSync(); }
  }

  // the message for a refused control: an ended session's 409 invalid_state said plainly
  function refusal(what, r) {
    const e = r.json && r.json.error;
    if (r.status === 409 && e && e.code === 'invalid_state' && e.state) {
      setState(e.state);
      if (OVER.includes(e.state)) return `${what}: refused, the session has ended (${e.state}) and is read-only`;
      return `${what}: not possible while the session is ${e.state}`;
    }
    return what + ': ' + errText(r);
  }

  // what the operator (the service token) did to the session, and why: shown until the next
  // state change by someone else
  function operatorNote(ev) {
    const p = $('operator');
    p.hidden = !(ev && ev.actor === 'service');
    if (p.hidden) return;
    const did = { paused: 'paused', active: 'resumed', aborted: 'aborted' }[ev.state] || 'changed';
    p.textContent = `The operator ${did} this session: ${ev.reason || '(no reason given)'}`;
  }

  function setConn(text, on) { const c = $('conn'); c.textContent = text; c.className = 'pill ' + (on ? 'on' : 'off'); }

  // the operator's pause, resume and abort (a service sign-in) give their reason, which the
  // buyer sees and the audit chain keeps; the server refuses them without one (400)
  async function control(what) {
    $('control-error').textContent = '';
    let body = {};
    if (st.role === 'service' && ['pause', 'resume', 'abort'].includes(what)) {
      const reason = window.prompt(`Why ${what} this session? (the buyer sees it; it goes in the audit chain)`);
      if (!reason) { $('control-error').textContent = `${what}: the operator gives a reason`; return; }
      body = { reason };
    }
    const r = await api('POST', jobPath('/' + what), body);
    if (r.status >= 300) $('control-error').textContent = refusal(what, r);
    else if (r.json && r.json.state) setState(r.json.state);
  }
  for (const c of ['pause', 'resume', 'abort', 'accept']) $(c).addEventListener('click', () => control(c));
  $('switch-mode').addEventListener('click', async () => {
    const to = $('mode').textContent === 'supervised' ? 'unsupervised' : 'supervised';
    const r = await api('PATCH', jobPath(), { mode: to });
    if (r.status !== 200) $('control-error').textContent = refusal('mode', r);
    else setState(r.json.state, r.json.mode);
  });

  // ---------- socket ----------
  function connectSocket() {
    if (st.socket) return;
    const url = st.socketPort ? location.protocol + '//' + location.hostname + ':' + st.socketPort : location.origin;
    const s = io(url, { transports: ['websocket'], withCredentials: true, reconnectionDelayMax: 10000 });
    st.socket = s;
    s.on('connect', () => setConn('live', true));
    s.on('disconnect', () => setConn(isOver() ? 'ended: no live events' : 'reconnecting…', false));
    s.on('connect_error', (e) => {
      // the server refused the sign-in (no retry: socket.io does not retry a refused CONNECT)
      if (!s.active) signedOut('The live connection was refused: ' + e.message);
      else setConn('reconnecting…', false);
    });
    s.on('jailbox:state', (ev) => {
      setState(ev.state, ev.mode);
      if (!ev.snapshot) operatorNote(ev);
      if (ev.auditHead) noteHead(ev.auditHead);
      if (ev.snapshot) { st.pending.clear(); renderApprovals(); scheduleSync(); } // resync from the oldest op not ended
    });
    s.on('jailbox:mode', (ev) => setState(null, ev.mode));
    s.on('jailbox:op', (ev) => {
      upsertOp(ev);
      if (ev.decidedBy === undefined && ev.state !== 'pending') refreshOp(ev.opId);
      if (ev.state === 'pending') return;
      const p = st.pending.get(ev.opId);
      if (p) { st.pending.delete(ev.opId); if (p.tool === 'exec' && ['approved', 'running'].includes(ev.state)) st.running.set(ev.opId, p); }
      if (['done', 'failed', 'rejected'].includes(ev.state)) st.running.delete(ev.opId);
      renderApprovals();
    });
    s.on('jailbox:approval_request', (ev) => {
      const got = performance.timeOrigin + performance.now();
      st.pending.set(ev.opId, ev);
      upsertOp({ ...ev, state: 'pending' });
      renderApprovals();
      // painted: after the next frame (rAF runs before the paint, the task after it after)
      requestAnimationFrame(() => setTimeout(() => {
        performance.mark('jb-diff-painted-' + ev.opId);
        st.painted.set(ev.opId, { got, painted: performance.timeOrigin + performance.now() });
      }, 0));
    });
    s.on('jailbox:exec_output', (ev) => {
      const o = st.out.get(ev.opId) || [];
      o.push(ev);
      st.out.set(ev.opId, o);
      const box = document.querySelector(`[data-out="${Number(ev.opId)}"]`);
      if (box) box.appendChild(T.el('span', ev.data, ev.stream === 'stderr' ? 'stderr' : '', true));
    });
    s.on('jailbox:security_alert', (ev) => alert(ev));
    s.on('jailbox:abort', (ev) => setState('aborted'));
    s.on('jailbox:audit_head', (ev) => { noteHead(ev); scheduleSync(); });
  }

  function noteHead(h) {
    if (!h || typeof h.seq !== 'number' || typeof h.hash !== 'string') return;
    if (!st.heads.some((x) => x.seq === h.seq)) st.heads.push({ seq: h.seq, hash: h.hash });
    $('heads').textContent = `${st.heads.length} audit heads received live; newest seq ${Math.max(...st.heads.map((x) => x.seq))}`;
  }

  function alert(ev) {
    const box = $('alerts');
    box.hidden = false;
    const d = T.el('div', `⚠ security alert: ${ev.kind || 'alert'} `);
    T.put(d, ev.path || ev.detail || '');
    if (ev.rules) T.put(d, ' (' + ev.rules.join(', ') + ')');
    box.appendChild(d);
  }

  // ---------- ops feed (a windowed list: only the rows in view are in the DOM) ----------
  const ROW = 20;
  function upsertOp(op) {
    if (typeof op.opId !== 'number') return;
    const had = st.ops.get(op.opId);
    st.ops.set(op.opId, { ...(had || {}), ...op });
    if (!had) st.order.push(op.opId);
    scheduleFeed();
    if (st.lost.has(op.opId)) scheduleApprovals(); // its card shows the op's state now
  }
  let approvalsQueued = false;
  function scheduleApprovals() {
    if (!approvalsQueued) { approvalsQueued = true; requestAnimationFrame(() => { approvalsQueued = false; renderApprovals(); }); }
  }
  let feedQueued = false;
  function scheduleFeed() { if (!feedQueued) { feedQueued = true; requestAnimationFrame(renderFeed); } }
  function renderFeed() {
    feedQueued = false;
    const feed = $('feed');
    st.order.sort((a, b) => b - a);
    $('feed-spacer').style.height = st.order.length * ROW + 'px';
    for (const r of feed.querySelectorAll('.feed-row')) r.remove();
    const first = Math.floor(feed.scrollTop / ROW), n = Math.ceil(feed.clientHeight / ROW) + 2;
    for (let i = first; i < Math.min(st.order.length, first + n); i++) {
      const op = st.ops.get(st.order[i]);
      const row = document.createElement('div');
      row.className = 'feed-row ' + (op.state || '') + (op.opId === st.feedSel ? ' sel' : '');
      row.style.top = i * ROW + 'px';
      row.dataset.op = op.opId;
      const what = op.tool === 'exec' ? (op.command || (op.argv || (op.args && op.args.argv) || []).join(' ')) : op.path;
      const res = op.result || {};
      const size = op.size ?? res.size ?? res.bytes ?? (res.stdoutBytes !== undefined ? res.stdoutBytes + res.stderrBytes : '');
      const ms = res.durationMs ?? (op.completedAt && op.createdAt ? Date.parse(op.completedAt) - Date.parse(op.createdAt) : '');
      for (const v of [op.opId, op.tool, what, op.state, op.decision, op.decidedBy, ms, size]) {
        const c = T.el('span', v ?? '');
        c.title = T.visible(v ?? '');
        row.appendChild(c);
      }
      feed.appendChild(row);
    }
  }
  $('feed').addEventListener('scroll', scheduleFeed);
  // the feed has the focus (click or Tab): j/k move the selected row down/up, Home/End jump
  function feedKey(e) {
    const feed = $('feed'), n = st.order.length;
    if (!n) return;
    let i = st.order.indexOf(st.feedSel);
    if (e.key === 'j') i = i < 0 ? 0 : Math.min(i + 1, n - 1);
    else if (e.key === 'k') i = i < 0 ? 0 : Math.max(i - 1, 0);
    else if (e.key === 'Home') i = 0;
    else if (e.key === 'End') i = n - 1;
    else return;
    e.preventDefault();
    st.feedSel = st.order[i];
    if (i * ROW < feed.scrollTop) feed.scrollTop = i * ROW;
    else if ((i + 1) * ROW > feed.scrollTop + feed.clientHeight) feed.scrollTop = (i + 1) * ROW - feed.clientHeight;
    scheduleFeed();
  }
  $('feed').addEventListener('click', (e) => {
    const row = e.target.closest('.feed-row');
    if (row) { st.feedSel = Number(row.dataset.op); scheduleFeed(); }
  });

  // The ops move on without an event of their own for every step (a write that a rule or the
  // mode lets run is seen as an audit head): each head, and each op event that lacks who
  // decided, reads the ops from the oldest one not yet ended onward again (batched, 250 ms).
  const ENDED = ['done', 'failed', 'rejected'];
  let syncTimer = null;
  function scheduleSync() {
    if (!syncTimer) syncTimer = setTimeout(syncOps, 250);
  }
  async function syncOps() {
    let from = 0;
    for (const id of [...st.ops.keys()].sort((x, y) => x - y)) {
      if (!ENDED.includes(st.ops.get(id).state)) break;
      from = id;
    }
    await loadOps(from);
    loadChanges();
    syncTimer = null;
  }
  const refreshOp = scheduleSync;

  async function loadOps(after = 0) {
    for (let page = 0; page < 40; page++) { // at most 20,000 ops
      const r = await api('GET', jobPath('/ops?limit=500&after=' + after));
      if (r.status !== 200) return;
      const before = [...st.pending.keys(), '|', ...st.running.keys()].join();
      for (const op of r.json.ops) {
        upsertOp(op);
        if (op.state === 'pending' && !st.pending.has(op.opId)) st.pending.set(op.opId, { ...op, ...(op.args || {}) });
        if (op.state !== 'pending' && st.pending.has(op.opId)) {
          const p = st.pending.get(op.opId);
          st.pending.delete(op.opId);
          if (p.tool === 'exec' && !ENDED.includes(op.state)) st.running.set(op.opId, p);
        }
        if (ENDED.includes(op.state)) st.running.delete(op.opId);
      }
      if ([...st.pending.keys(), '|', ...st.running.keys()].join() !== before) renderApprovals();
      if (r.json.next === null || r.json.next === undefined) return;
      after = r.json.next;
    }
  }

  // ---------- approvals ----------
  // A diff is drawn inline or side by side (st.sbs, the toggle above the approvals); one of more
  // than DIFF_ALL lines is a windowed list like the feed (only the lines in view are in the DOM),
  // its rows computed once per op and text (st.diffs) and its scroll kept across re-renders.
  const DROW = 16, DIFF_ALL = 300, DIFF_VIEW = 40; // px a line (app.css), lines drawn at once
  st.sbs = localStorage.getItem('jb-diff-sbs') === '1';
  const lineCls = (l) => (l.startsWith('@@') ? 'hunk' : l.startsWith('+++') || l.startsWith('---') ? 'meta'
    : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : '');
  // rows of cells [text, class]: one cell a row inline; side by side, the removed lines of a
  // change on the left next to the added ones on the right, context on both, headers across
  function diffRows(lines, sbs) {
    if (!sbs) return lines.map((l) => [[l, lineCls(l)]]);
    const rows = [];
    let dels = [], adds = [];
    const flush = () => {
      for (let i = 0; i < Math.max(dels.length, adds.length); i++)
        rows.push([i < dels.length ? [dels[i], 'del'] : ['', 'none'], i < adds.length ? [adds[i], 'add'] : ['', 'none']]);
      dels = []; adds = [];
    };
    for (const l of lines) {
      const c = lineCls(l);
      if (c === 'del') { if (adds.length) flush(); dels.push(l); }
      else if (c === 'add') adds.push(l);
      else { flush(); rows.push(c ? [[l, c]] : [[l, 'ctx'], [l, 'ctx']]); }
    }
    flush();
    return rows;
  }
  function diffRow(r) {
    if (r.length === 1) return T.el('div', r[0][0], 'dl ' + r[0][1], true);
    const row = document.createElement('div');
    row.className = 'dl sbs';
    for (const [t, c] of r) row.appendChild(T.el('div', t, c, true));
    return row;
  }
  function diffOf(opId, text) {
    let d = opId !== undefined ? st.diffs.get(opId) : null;
    if (!d || d.text !== text) {
      d = { text, lines: text.split('\n'), bytes: new TextEncoder().encode(text).length, top: 0 };
      if (opId !== undefined) st.diffs.set(opId, d);
    }
    if (d.sbs !== st.sbs) { d.sbs = st.sbs; d.rows = diffRows(d.lines, st.sbs); }
    return d;
  }
  function renderDiff(box, diff, opId) {
    const d = diffOf(opId, String(diff.text || ''));
    const view = document.createElement('div');
    view.className = 'diff' + (st.sbs ? ' side' : '');
    if (d.rows.length <= DIFF_ALL) {
      for (const r of d.rows) view.appendChild(diffRow(r));
    } else {
      view.classList.add('windowed');
      const spacer = document.createElement('div');
      spacer.style.height = d.rows.length * DROW + 'px';
      view.appendChild(spacer);
      const draw = () => {
        for (const x of view.querySelectorAll('.dl')) x.remove();
        const first = Math.floor(view.scrollTop / DROW);
        for (let i = first; i < Math.min(d.rows.length, first + DIFF_VIEW); i++) {
          const row = diffRow(d.rows[i]);
          row.style.top = i * DROW + 'px';
          view.appendChild(row);
        }
      };
      let queued = false;
      view.addEventListener('scroll', () => {
        d.top = view.scrollTop;
        if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; draw(); }); }
      });
      draw();
      if (d.top) requestAnimationFrame(() => { view.scrollTop = d.top; });
    }
    box.appendChild(view);
    const p = T.el('p', `${d.lines.length} lines, ${d.bytes} bytes`, 'muted diff-size');
    const ev = opId !== undefined && st.pending.get(opId);
    if (diff.truncated) {
      T.put(p, ` — cut: the whole diff is ${diff.bytes} bytes. `);
      if (ev && !ev.wholeDiff) { // made again from the file and the op's kept content (GET …/ops/:opId/diff)
        const more = T.el('button', `show the whole diff (${diff.bytes} bytes)`);
        more.className = 'more';
        more.addEventListener('click', async () => {
          more.disabled = true;
          more.textContent = 'loading…';
          const r = await api('GET', jobPath(`/ops/${opId}/diff`));
          const whole = r.status === 200 && r.json.diff;
          if (whole && st.pending.has(opId)) {
            st.pending.set(opId, { ...st.pending.get(opId), diff: whole, wholeDiff: true, changed: r.json.changed });
            renderApprovals();
            performance.mark('jb-diff-loaded-' + opId);
          } else {
            more.textContent = 'the whole diff could not be made: ' + (r.status === 200 ? r.json.reason || 'no diff' : errText(r));
          }
        });
        p.appendChild(more);
      } else if (ev) {
        T.put(p, 'The whole diff is cut at 16 MiB; the whole content lands in the workspace if approved.');
      }
    }
    if (ev && ev.wholeDiff) {
      T.put(p, ' — the whole diff, of the file as it is now.');
      if (ev.changed) T.put(p, ' The file changed since the agent asked: approved, the write fails (changed).');
    }
    box.appendChild(p);
  }
  $('diff-mode').addEventListener('click', () => {
    st.sbs = !st.sbs;
    localStorage.setItem('jb-diff-sbs', st.sbs ? '1' : '0');
    $('diff-mode').textContent = st.sbs ? 'inline diffs' : 'side-by-side diffs';
    renderApprovals();
  });
  $('diff-mode').textContent = st.sbs ? 'inline diffs' : 'side-by-side diffs';

  function renderApprovals() {
    const box = $('approvals');
    const focused = document.activeElement && document.activeElement.closest('.card') ? document.activeElement : null;
    const refocus = focused && focused.classList.contains('reason') ? Number(focused.closest('.card').dataset.op) : null;
    box.textContent = '';
    const ids = [...st.pending.keys()].sort((a, b) => a - b);
    for (const [id, lost] of st.lost) box.appendChild(lostCard(id, lost));
    for (const [id, ev] of st.running) box.appendChild(runningCard(id, ev));
    if (!ids.length) { box.appendChild(T.el('p', 'nothing waiting', 'empty')); return; }
    if (st.sel >= ids.length) st.sel = ids.length - 1;
    ids.forEach((id, i) => {
      const ev = st.pending.get(id);
      const card = document.createElement('div');
      card.className = 'card' + (i === st.sel ? ' selected' : '');
      card.dataset.op = id;
      const h = T.el('h3', `#${id} ${ev.tool} `);
      T.put(h, ev.path);
      card.appendChild(h);
      if (ev.description) card.appendChild(T.el('p', ev.description));
      if (ev.tool === 'exec') {
        const argv = ev.argv || [];
        const p = T.el('p', 'argv: ', 'mono');
        argv.forEach((a, k) => { if (k) p.appendChild(document.createTextNode(' ')); T.put(p, JSON.stringify(a)); });
        card.appendChild(p);
        // the variables with their values (secret-looking ones masked by the server)
        const env = ev.env || (ev.args && ev.args.env) || null;
        if (env && Object.keys(env).length) {
          const e = T.el('p', 'env: ', 'mono env');
          Object.keys(env).sort().forEach((k, i) => { if (i) e.appendChild(document.createTextNode(' ')); T.put(e, `${k}=${JSON.stringify(env[k])}`); });
          if (ev.envTruncated) T.put(e, ' (cut: GET …/ops has the whole values)');
          card.appendChild(e);
        }
        card.appendChild(outputBox(id));
      }
      if (ev.tool === 'changeset') changesetBox(card, id, ev);
      else if (ev.diff && ev.diff.text !== undefined) renderDiff(card, ev.diff, id);
      else if (ev.preview) renderDiff(card, { text: ev.preview.split('\n').map((l) => '+' + l).join('\n') });
      if (ev.size !== undefined) card.appendChild(T.el('p', `${ev.size} bytes, sha256 ${ev.sha256 || ''}`, 'muted'));
      const row = document.createElement('p');
      const sim = document.createElement('select');
      sim.className = 'similar';
      for (const [v, l] of [['', 'just this one'], ['directory', 'allow similar: same directory'], ['extension', 'allow similar: same extension'],
        ['command', 'allow similar: this exact command (same argv, directory, variables and values)'], ['session', 'allow similar: whole session']]) {
        const o = document.createElement('option');
        o.value = v; o.textContent = l;
        sim.appendChild(o);
      }
      const draft = st.drafts.get(id) || { reason: '', similar: '' };
      st.drafts.set(id, draft);
      sim.value = draft.similar;
      sim.addEventListener('change', () => { draft.similar = sim.value; });
      const cset = ev.tool === 'changeset';
      const ok = T.el('button', cset ? 'Approve selected (a)' : 'Approve (a)');
      ok.className = 'approve';
      ok.addEventListener('click', () => decide(id, true, sim.value, ''));
      if (cset) sim.hidden = true; // a changeset is decided file by file, never by a rule
      const reason = document.createElement('input');
      reason.className = 'reason';
      reason.placeholder = 'reason for rejecting';
      reason.maxLength = 1000;
      reason.value = draft.reason;
      reason.addEventListener('input', () => { draft.reason = reason.value; });
      const no = T.el('button', cset ? 'Reject all (r)' : 'Reject (r)');
      no.className = 'reject danger';
      no.addEventListener('click', () => decide(id, false, '', reason.value));
      row.append(sim, ' ', ok, ' ', reason, ' ', no);
      if (ev.tool === 'exec') {
        const kill = T.el('button', 'Kill');
        kill.className = 'kill danger';
        kill.addEventListener('click', () => killOp(id));
        row.append(' ', kill);
      }
      card.appendChild(row);
      const msg = T.el('p', '', 'error');
      msg.dataset.msg = id;
      card.appendChild(msg);
      box.appendChild(card);
      if (refocus === id) reason.focus();
    });
    for (const k of st.drafts.keys()) if (!st.pending.has(k)) st.drafts.delete(k);
    for (const k of st.diffs.keys()) if (!st.pending.has(k)) st.diffs.delete(k);
    for (const k of st.changesets.keys()) if (!st.pending.has(k)) st.changesets.delete(k);
    performance.mark('jb-approvals-painted');
  }

  // A changeset (what a supervised writable command changed, held for the buyer): one checkbox
  // per file — the approvable ones checked —, each file's diff drawn only when opened. The
  // files are read in pages (GET …/ops/:opId/changeset) once; until then the request's first
  // 100 stand. "Approve selected" sends the checked paths with the changeset's digest.
  function changesetBox(card, id, ev) {
    let cs = st.changesets.get(id);
    if (!cs) {
      cs = { files: null, checked: new Map(), open: new Set(), sha: ev.changesetSha256 ?? (ev.args || {}).changesetSha256, error: '' };
      st.changesets.set(id, cs);
      loadChangeset(id, cs);
    }
    const a = ev.args || {}; // a request made of an op row (a reconnect's snapshot): its args count the files
    const listed = Array.isArray(ev.files) ? ev.files : [];
    const total = cs.files ? cs.files.length : ev.total ?? a.files;
    const approvable = cs.files ? cs.files.filter((f) => f.approvable).length : ev.approvableCount ?? a.approvable;
    const head = T.el('p', `${total} file(s), ${approvable} approvable, from command #${ev.execOpId ?? a.execOpId}: `, 'muted');
    T.put(head, (ev.argv || []).join(' '));
    card.appendChild(head);
    const list = T.el('div', '', 'changeset');
    for (const f of cs.files || listed) {
      const row = T.el('div', '', 'cs-file');
      const cb = document.createElement('input');
      cb.type = 'checkbox';
      cb.disabled = !f.approvable;
      cb.checked = f.approvable && cs.checked.get(f.path) !== false;
      cb.dataset.path = f.path;
      cb.addEventListener('change', () => cs.checked.set(f.path, cb.checked));
      const name = T.el('span', ` ${f.change} `, 'mono');
      T.put(name, f.path);
      const open = T.el('button', cs.open.has(f.path) ? 'hide diff' : 'diff');
      open.addEventListener('click', () => { if (!cs.open.delete(f.path)) cs.open.add(f.path); renderApprovals(); });
      row.append(cb, name, ' ', open);
      if (!f.approvable) T.put(row, ` — not approvable: ${f.why || ''}`);
      list.appendChild(row);
      if (!cs.open.has(f.path)) continue;
      if (f.diff && f.diff.text !== undefined) renderDiff(list, f.diff);
      else list.appendChild(T.el('p', !cs.files ? 'loading…' : f.binary ? `binary, ${f.size} bytes` : 'no diff', 'muted'));
    }
    card.appendChild(list);
    if (cs.error) card.appendChild(T.el('p', cs.error, 'error'));
  }

  async function loadChangeset(id, cs) {
    const files = [];
    for (let after = -1; ;) {
      const r = await api('GET', jobPath(`/ops/${id}/changeset?after=${after}&limit=1000`));
      if (r.status !== 200) { cs.error = errText(r); break; }
      files.push(...r.json.files);
      cs.sha = r.json.changesetSha256;
      if (r.json.next === null) { cs.files = files; break; }
      after = r.json.next;
    }
    if (st.pending.has(id)) renderApprovals();
  }

  // The body of an approval of changeset `id`: its digest and the checked approvable paths.
  function changesetChoice(id) {
    const cs = st.changesets.get(id);
    const ev = st.pending.get(id) || {};
    const files = (cs.files || (Array.isArray(ev.files) ? ev.files : [])).filter((f) => f.approvable && cs.checked.get(f.path) !== false);
    return { changesetSha256: cs.sha, files: files.map((f) => f.path) };
  }

  function outputBox(id) {
    const out = T.el('div', undefined, 'out');
    out.dataset.out = id;
    for (const o of st.out.get(id) || []) out.appendChild(T.el('span', o.data, o.stream === 'stderr' ? 'stderr' : '', true));
    return out;
  }

  // a decision that lost: the server's word on who decided first, and the op's state now
  function lostCard(id, lost) {
    const card = document.createElement('div');
    card.className = 'card lost';
    card.dataset.lost = id;
    const h = T.el('h3', `#${id} not decided here `);
    T.put(h, lost.path || '');
    card.appendChild(h);
    card.appendChild(T.el('p', lost.message, 'error'));
    const op = st.ops.get(id) || {};
    const fin = T.el('p', 'the op now: ', 'final');
    fin.appendChild(T.el('b', op.state || lost.state || 'unknown'));
    if (op.decidedBy) T.put(fin, ` (decided by ${op.decidedBy})`);
    card.appendChild(fin);
    const ok = T.el('button', 'Dismiss');
    ok.addEventListener('click', () => { st.lost.delete(id); renderApprovals(); });
    card.appendChild(ok);
    return card;
  }

  // an approved exec while its command runs: its argv, live output and a kill button
  function runningCard(id, ev) {
    const card = document.createElement('div');
    card.className = 'card running';
    card.dataset.running = id;
    card.appendChild(T.el('h3', `#${id} exec running: ${(ev.argv || []).join(' ')}`));
    card.appendChild(outputBox(id));
    const kill = T.el('button', 'Kill');
    kill.className = 'kill danger';
    kill.addEventListener('click', () => killOp(id));
    card.appendChild(kill);
    return card;
  }

  async function decide(id, approve, similar, reason) {
    const cset = approve && (st.pending.get(id) || {}).tool === 'changeset' && st.changesets.has(id);
    const body = cset ? changesetChoice(id) : approve ? (similar ? { allowSimilar: similar } : {}) : (reason ? { reason } : {});
    const r = await api('POST', jobPath(`/${approve ? 'approve' : 'reject'}/${id}`), body);
    if (r.status >= 300) {
      if (r.status === 409) { // decided first elsewhere (another browser, a rule, the timeout), or the session ended
        const e = (r.json && r.json.error) || {};
        st.lost.set(id, { path: (st.pending.get(id) || st.ops.get(id) || {}).path, message: errText(r), state: e.state });
        st.pending.delete(id);
        renderApprovals();
        await loadOps(Math.max(0, id - 1));
        renderApprovals();
        return;
      }
      const m = document.querySelector(`[data-msg="${Number(id)}"]`);
      if (m) m.textContent = errText(r);
      return;
    }
    const ev = st.pending.get(id);
    st.pending.delete(id);
    if (approve && ev && ev.tool === 'exec') st.running.set(id, ev);
    if (r.json && r.json.opId) upsertOp(r.json);
    renderApprovals();
  }

  async function killOp(id) {
    const r = await api('POST', jobPath(`/ops/${id}/kill`), {});
    if (r.status >= 300) $('control-error').textContent = refusal('kill', r);
  }

  // running execs are killed from the feed too: click a running exec row
  $('feed').addEventListener('dblclick', (e) => {
    const row = e.target.closest('.feed-row');
    const op = row && st.ops.get(Number(row.dataset.op));
    if (op && op.tool === 'exec' && op.state === 'running') killOp(op.opId);
  });

  document.addEventListener('keydown', (e) => {
    if (e.target.closest('input, select, textarea') || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.closest('#feed')) return feedKey(e);
    const ids = [...st.pending.keys()].sort((a, b) => a - b);
    if (!ids.length) return;
    const id = ids[Math.min(st.sel, ids.length - 1)];
    const card = document.querySelector(`.card[data-op="${id}"]`);
    if (e.key === 'j') { st.sel = Math.min(st.sel + 1, ids.length - 1); renderApprovals(); }
    else if (e.key === 'k') { st.sel = Math.max(st.sel - 1, 0); renderApprovals(); }
    else if (e.key === 'a') decide(id, true, card.querySelector('.similar').value, '');
    else if (e.key === 'r') {
      const reason = card.querySelector('.reason');
      if (!reason.value) { reason.focus(); e.preventDefault(); return; } // type a reason, then r again or click
      decide(id, false, '', reason.value);
    }
  });

  // ---------- contract and changes ----------
  // The session contract (sandbox/WALLS.md "The session contract") as sections: the session,
  // each wall with its settings, what the jail looks like from inside, problems, residual
  // risks, then the rest folded. Values: yes/no, lists joined or listed, objects as nested
  // lists two levels deep, deeper ones as JSON text; long lists folded with their count.
  function val(v, depth = 0) {
    if (v === null || v === undefined) return T.el('span', '—', 'muted');
    if (typeof v === 'boolean') return T.el('span', v ? 'yes' : 'no', v ? 'ok' : 'bad');
    if (typeof v !== 'object') return T.el('span', v);
    if (Array.isArray(v)) {
      if (!v.length) return T.el('span', 'none', 'muted');
      let body;
      if (v.every((x) => x === null || typeof x !== 'object')) body = T.el('span', v.join(', '), 'mono');
      else { body = document.createElement('ol'); for (const x of v) { const li = document.createElement('li'); li.appendChild(val(x, depth + 1)); body.appendChild(li); } }
      if (v.length <= 12) return body;
      const d = document.createElement('details');
      d.appendChild(T.el('summary', `${v.length} items`));
      d.appendChild(body);
      return d;
    }
    if (depth >= 2) return T.el('code', JSON.stringify(v));
    return dl(Object.entries(v), depth + 1);
  }
  function dl(pairs, depth = 0) {
    const d = document.createElement('dl');
    for (const [k, v] of pairs) {
      d.appendChild(T.el('dt', k));
      const dd = document.createElement('dd');
      dd.appendChild(val(v, depth));
      d.appendChild(dd);
    }
    return d;
  }
  function section(c, title, node, cls) {
    const s = document.createElement('section');
    s.className = 'contract-part' + (cls ? ' ' + cls : '');
    s.appendChild(T.el('h4', title));
    s.appendChild(node);
    c.appendChild(s);
    return s;
  }
  function renderContract(s) {
    const c = $('contract');
    c.textContent = '';
    const w = s.walls;
    section(c, 'Session', dl([['agent', s.agentId], ['workspace', s.workspace], ['image', s.image], ['limits', s.limits],
      ['excluded', s.exclude || []], ...(w ? [['contract', `version ${w.contractVersion ?? '?'}, ${w.status ?? ''} at ${w.at ?? '?'} by ${w.worker ?? '?'}`],
        ['walls required', w.required], ['override', w.override ?? false]] : [])]));
    if (!w) { c.appendChild(T.el('p', 'the walls are not up yet', 'muted')); return; }
    const walls = w.walls && typeof w.walls === 'object' ? w.walls : {};
    const wallsBox = document.createElement('div');
    wallsBox.className = 'walls';
    for (const [name, wall] of Object.entries(walls)) {
      const card = document.createElement('div');
      card.className = 'wall';
      const up = wall && wall.up;
      const h = T.el('h5', name + ' ');
      h.appendChild(T.el('span', up ? 'up' : 'down', up ? 'ok' : 'bad'));
      card.appendChild(h);
      if (wall && typeof wall === 'object') card.appendChild(dl(Object.entries(wall).filter(([k]) => k !== 'up'), 1));
      else card.appendChild(val(wall));
      wallsBox.appendChild(card);
    }
    section(c, 'Walls', wallsBox, 'walls-part');
    if (w.jailSeenFromInside) section(c, 'Checks from inside the jail', val(w.jailSeenFromInside), 'inside');
    if (w.problems && Object.keys(w.problems).length) section(c, 'Problems', val(w.problems), 'problems');
    const risks = w.residualRisks || [];
    const ul = document.createElement('ul');
    for (const r of risks) { const li = document.createElement('li'); li.appendChild(val(r, 1)); ul.appendChild(li); }
    section(c, `Residual risks (${risks.length})`, risks.length ? ul : T.el('p', 'none stated', 'muted'), 'risks');
    if (w.failure) section(c, 'Launch failure', val(w.failure), 'problems');
    const shown = ['contractVersion', 'status', 'at', 'worker', 'required', 'override', 'walls', 'jailSeenFromInside', 'problems', 'residualRisks', 'failure', 'prescan'];
    const rest = Object.entries(w).filter(([k]) => !shown.includes(k));
    if (rest.length) {
      const d = document.createElement('details');
      d.className = 'contract-more';
      d.appendChild(T.el('summary', 'more: ' + rest.map(([k]) => k).join(', ')));
      d.appendChild(dl(rest));
      c.appendChild(d);
    }
  }

  async function loadChanges() {
    const r = await api('GET', jobPath('/changes'));
    const box = $('changes');
    box.textContent = '';
    if (r.status !== 200) { box.appendChild(T.el('p', errText(r), 'error')); return; }
    if (!r.json.changes.length) { box.appendChild(T.el('p', 'no changes yet', 'empty')); return; }
    const t = document.createElement('table');
    const head = document.createElement('tr');
    for (const h of ['op', 'tool', 'path', 'detail', 'at']) head.appendChild(T.el('th', h));
    t.appendChild(head);
    for (const ch of r.json.changes) {
      const tr = document.createElement('tr');
      const detail = ch.tool === 'move' ? `${ch.from} → ${ch.to}` : ch.tool === 'exec' ? (ch.argv || []).join(' ')
        : ch.sha256After ? `${ch.size} bytes, sha256 ${ch.sha256After.slice(0, 12)}…` : ch.type || '';
      for (const v of [ch.opId, ch.tool, ch.path, detail, ch.at]) tr.appendChild(T.el('td', v));
      t.appendChild(tr);
    }
    box.appendChild(t);
  }
  $('changes-reload').addEventListener('click', (e) => { e.preventDefault(); loadChanges(); });

  // ---------- audit ----------
  $('verify').addEventListener('click', async () => {
    const v = $('verdict');
    v.className = '';
    v.textContent = 'verifying…';
    const body = $('audit-body');
    body.textContent = '';
    try {
      const [kr, er] = await Promise.all([fetch('/v1/audit/keys', { headers: HDR }), fetch(jobPath('/audit'), { headers: HDR })]);
      if (!kr.ok || !er.ok) throw new Error('export: HTTP ' + (kr.ok ? er.status : kr.status));
      const keys = await JBVerify.importKeys(await kr.json());
      const res = await JBVerify.verify(await er.text(), st.job, keys, st.heads, (row, ok) => {
        const tr = document.createElement('tr');
        if (!ok) tr.className = 'bad';
        for (const x of [row.seq, row.operation, row.path, row.timestamp, row.keyId, String(row.hash || '').slice(0, 16)]) tr.appendChild(T.el('td', x ?? ''));
        tr.appendChild(T.el('td', ok ? '✓' : '✗', ok ? 'ok' : 'bad'));
        body.appendChild(tr);
      });
      st.verdict = res;
      if (res.ok) {
        v.className = 'ok';
        v.textContent = `intact: ${res.entries} entries${res.sealed ? ', sealed' : ''}, Ed25519 signatures and hash links verified, ${res.headsChecked} live heads match`;
      } else {
        v.className = 'bad';
        v.textContent = `TAMPERED at seq ${res.firstBadSeq}: ${res.reason}${res.detail ? ' (' + T.visible(res.detail) + ')' : ''}`;
      }
    } catch (e) {
      v.className = 'bad';
      v.textContent = 'could not verify: ' + T.visible(e.message || e);
    }
  });

  start();
})();
