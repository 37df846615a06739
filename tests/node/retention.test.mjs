// retention.test.mjs — an ended session stays readable by its buyer token (ops, changes,
// alerts, the audit export and its verification, the session itself, a Socket.IO snapshot)
// until JAILBOX_BUYER_READ_RETENTION_S has passed since it ended, then 401; every control on
// it answers 409 invalid_state with the session's state, on REST and on Socket.IO alike.
// A real jailboxd and PostgreSQL, the stock socket.io-client and fetch, jailboxctl.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { io } from 'socket.io-client';
import { startServer } from './lib/server.mjs';
import { CTL } from './lib/mcp.mjs';

let srv, short;
const wsOf = (s) => s.log().match(/"msg":"ws listening","addr":"([^"]+)"/)[1];
before(async () => {
  srv = await startServer({ JAILBOX_WS_LISTEN: '127.0.0.1:0' });
  short = await startServer({ JAILBOX_WS_LISTEN: '127.0.0.1:0', JAILBOX_BUYER_READ_RETENTION_S: '2' });
});
after(async () => {
  for (const s of [srv, short]) assert.equal((await s.stop()).code, 0);
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function sock(s, token) {
  const c = io('http://' + wsOf(s), { transports: ['websocket'], auth: { token }, reconnection: false, forceNew: true });
  c.events = [];
  c.onAny((event, payload) => c.events.push({ event, payload }));
  return new Promise((res, rej) => {
    c.once('connect', () => res(c));
    c.once('connect_error', (e) => { c.close(); rej(e); });
  });
}

// a session that ends in `end` ('accepted' or 'aborted') with a pending op rejected by the end,
// one decided op, an alert; returns its tokens and op ids
async function ended(s, end) {
  const o = await s.open();
  await s.setState(o.jobId, end === 'accepted' ? 'done' : 'active');
  const decided = await s.pendingOp(o.jobId, 'src/decided.c');
  let r = await s.req('POST', `/v1/jailbox/${o.jobId}/reject/${decided}`, { token: o.buyerToken, body: { reason: 'no' } });
  assert.equal(r.status, 200, r.text);
  const pending = await s.pendingOp(o.jobId, 'src/pending.c');
  await s.db.query("INSERT INTO security_alerts (job_id, kind, escape, detail) VALUES ($1, 'path_escape', false, 'a test alert')",
    [o.jobId]);
  r = await s.req('POST', `/v1/jailbox/${o.jobId}/${end === 'accepted' ? 'accept' : 'abort'}`, { token: o.buyerToken, body: { reason: 'end' } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.state, end);
  return { ...o, decided, pending };
}

const READS = (j) => [`/v1/jailbox/${j}`, `/v1/jailbox/${j}/ops`, `/v1/jailbox/${j}/ops?state=rejected`,
  `/v1/jailbox/${j}/changes`, `/v1/jailbox/${j}/alerts`, `/v1/jailbox/${j}/rules`, `/v1/jailbox/${j}/audit`,
  `/v1/jailbox/${j}/audit/verify`];

// every REST control, with a body it would take on a live session
const CONTROLS = (o) => [
  ['POST', `/v1/jailbox/${o.jobId}/approve/${o.pending}`, { reason: 'ok' }],
  ['POST', `/v1/jailbox/${o.jobId}/approve/${o.pending}`, { allowSimilar: 'directory' }],
  ['POST', `/v1/jailbox/${o.jobId}/reject/${o.pending}`, { reason: 'no' }],
  ['POST', `/v1/jailbox/${o.jobId}/ops/${o.pending}/kill`, {}],
  ['POST', `/v1/jailbox/${o.jobId}/pause`, {}],
  ['POST', `/v1/jailbox/${o.jobId}/resume`, {}],
  ['POST', `/v1/jailbox/${o.jobId}/abort`, { reason: 'again' }],
  ['POST', `/v1/jailbox/${o.jobId}/accept`, {}],
  ['PATCH', `/v1/jailbox/${o.jobId}`, { mode: 'unsupervised' }],
  ['POST', `/v1/jailbox/${o.jobId}/rules`, { rule: { tool: 'write', effect: 'allow' } }],
  ['DELETE', `/v1/jailbox/${o.jobId}/rules/some-rule`, undefined],
];
const EVENTS = (o) => [
  ['jailbox:approve', { opId: o.pending, reason: 'ok' }], ['jailbox:reject', { opId: o.pending }],
  ['jailbox:kill', { opId: o.pending }], ['jailbox:pause', {}], ['jailbox:resume', {}], ['jailbox:abort', {}],
  ['jailbox:accept', {}], ['jailbox:mode', { mode: 'unsupervised' }],
  ['jailbox:rule_add', { rule: { tool: 'write', effect: 'allow' } }], ['jailbox:rule_revoke', { ruleId: 'x' }],
  ['jailbox:pre_scan_done', {}],
];

for (const end of ['accepted', 'aborted']) {
  test(`after ${end}: the buyer token reads everything and verifies the chain; controls are 409 invalid_state`, async () => {
    const o = await ended(srv, end);
    for (const path of READS(o.jobId)) {
      const r = await srv.req('GET', path, { token: o.buyerToken });
      assert.equal(r.status, 200, `${path}: ${r.status} ${r.text}`);
    }
    const sess = (await srv.req('GET', `/v1/jailbox/${o.jobId}`, { token: o.buyerToken })).json;
    assert.equal(sess.state, end);
    assert.ok(sess.endedAt);
    const ops = (await srv.req('GET', `/v1/jailbox/${o.jobId}/ops`, { token: o.buyerToken })).json.ops;
    assert.deepEqual(ops.map((x) => [x.opId, x.state]).sort(), [[o.decided, 'rejected'], [o.pending, 'rejected']]);
    const al = (await srv.req('GET', `/v1/jailbox/${o.jobId}/alerts`, { token: o.buyerToken })).json;
    assert.equal(JSON.stringify(al).includes('a test alert'), true, JSON.stringify(al));
    const v = await srv.req('GET', `/v1/jailbox/${o.jobId}/audit/verify`, { token: o.buyerToken });
    assert.equal(v.json.ok, true, v.text);
    assert.equal(v.json.sealed, true, v.text);
    // the chain exported and verified offline with the buyer token, as a buyer would
    const tmp = mkdtempSync(join(tmpdir(), 'jb-ret-'));
    const env = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: o.buyerToken };
    writeFileSync(join(tmp, 'chain.jsonl'), execFileSync(CTL, ['audit', 'export', o.jobId], { env, encoding: 'utf8' }));
    writeFileSync(join(tmp, 'keys.json'), execFileSync(CTL, ['audit', 'keys'], { env, encoding: 'utf8' }));
    const off = JSON.parse(execFileSync(CTL, ['audit', 'verify', join(tmp, 'chain.jsonl'), '--keys', join(tmp, 'keys.json'),
      '--session', o.jobId, '--json'], { encoding: 'utf8' }));
    assert.equal(off.ok, true, JSON.stringify(off));
    assert.ok(off.entries >= 3, JSON.stringify(off));

    for (const [m, path, body] of CONTROLS(o)) {
      const r = await srv.req(m, path, { token: o.buyerToken, body });
      assert.equal(r.status, 409, `${m} ${path}: ${r.status} ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_state', r.text);
      assert.equal(r.json.error.state, end, r.text);
    }
    // a service token's controls too (kill and rules take it)
    const k = await srv.req('POST', `/v1/jailbox/${o.jobId}/rules`, { token: srv.serviceToken, body: { rule: { tool: 'write', effect: 'allow' } } });
    assert.equal(k.status, 409, k.text);
    assert.equal(k.json.error.state, end);
    // nothing changed: the chain is as sealed, the op still rejected
    const v2 = await srv.req('GET', `/v1/jailbox/${o.jobId}/audit/verify`, { token: o.buyerToken });
    assert.deepEqual(v2.json, v.json);
    // the agent token is revoked at the end, as before
    const a = await srv.req('GET', `/v1/jailbox/${o.jobId}/ops`, { token: o.agentToken });
    assert.equal(a.status, 401, a.text);
    await assert.rejects(sock(srv, o.agentToken), /unknown or revoked token/);

    // Socket.IO: the snapshot, read-only; every control answers invalid_state with the state
    const b = await sock(srv, o.buyerToken);
    try {
      for (let i = 0; i < 50 && !b.events.some((e) => e.event === 'jailbox:state'); i++) await sleep(20);
      const snap = b.events.find((e) => e.event === 'jailbox:state');
      assert.ok(snap, JSON.stringify(b.events));
      assert.equal(snap.payload.state, end);
      assert.equal(snap.payload.snapshot, true);
      assert.equal(b.events.filter((e) => e.event === 'jailbox:approval_request').length, 0);
      for (const [ev, arg] of EVENTS(o)) {
        const ack = await b.timeout(5000).emitWithAck(ev, arg);
        assert.equal(ack.error?.code, 'invalid_state', `${ev}: ${JSON.stringify(ack)}`);
        assert.equal(ack.error.state, end, `${ev}: ${JSON.stringify(ack)}`);
      }
    } finally { b.close(); }
  });
}

test('JAILBOX_BUYER_READ_RETENTION_S=2: reads end 2 s after the session ended, with 401', async () => {
  const o = await ended(short, 'aborted');
  const t0 = Date.now();
  for (const path of READS(o.jobId)) {
    const r = await short.req('GET', path, { token: o.buyerToken });
    assert.equal(r.status, 200, `${path}: ${r.status} ${r.text}`);
  }
  (await sock(short, o.buyerToken)).close();
  const ctl = await short.req('POST', `/v1/jailbox/${o.jobId}/pause`, { token: o.buyerToken });
  assert.equal(ctl.status, 409, ctl.text);
  assert.ok(Date.now() - t0 < 1500, 'the reads ran well inside the period');
  await sleep(2300 - (Date.now() - t0));
  for (const path of READS(o.jobId)) {
    const r = await short.req('GET', path, { token: o.buyerToken });
    assert.equal(r.status, 401, `${path}: ${r.status} ${r.text}`);
    assert.equal(r.json.error.code, 'unauthorized');
    assert.match(r.json.error.message, /read access has expired \(JAILBOX_BUYER_READ_RETENTION_S\)/);
  }
  for (const [m, path, body] of CONTROLS(o)) {
    const r = await short.req(m, path, { token: o.buyerToken, body });
    assert.equal(r.status, 401, `${m} ${path}: ${r.status} ${r.text}`);
  }
  await assert.rejects(sock(short, o.buyerToken), /read access has expired/);
  // the session itself is still there for the service token
  const s = await short.req('GET', `/v1/jailbox/${o.jobId}/audit/verify`, { token: short.serviceToken });
  assert.equal(s.status, 200, s.text);
  assert.equal(s.json.ok, true);
});

test('a live session: reads and controls of its buyer token are unchanged', async () => {
  const o = await srv.open();
  await srv.setState(o.jobId, 'active');
  const r = await srv.req('POST', `/v1/jailbox/${o.jobId}/pause`, { token: o.buyerToken });
  assert.equal(r.status, 200, r.text);
  assert.equal((await srv.req('GET', `/v1/jailbox/${o.jobId}/ops`, { token: o.buyerToken })).status, 200);
  // another session's buyer token still gets 403, an unknown one 401
  const other = await srv.open();
  assert.equal((await srv.req('GET', `/v1/jailbox/${o.jobId}/ops`, { token: other.buyerToken })).status, 403);
  assert.equal((await srv.req('GET', `/v1/jailbox/${o.jobId}/ops`, { token: 'jbt_' + 'A'.repeat(43) })).status, 401);
});
