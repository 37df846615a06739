// controls.test.mjs — one schema per buyer control (api/controls.c), two fronts: every REST
// body, valid or not, is fed to the Socket.IO form of the same control (the body with the
// path's opId / ruleId added) on a twin session in the same state, and both must give the same
// outcome (taken, or refused with the same error code). And two buyers deciding one op at the
// same time, one by REST and one by socket: one wins, the other is told how it was decided.
// A real jailboxd and PostgreSQL, the stock socket.io-client and fetch.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { io } from 'socket.io-client';
import { startServer } from './lib/server.mjs';

let srv, wsAddr;
before(async () => {
  srv = await startServer({ JAILBOX_WS_LISTEN: '127.0.0.1:0' });
  wsAddr = srv.log().match(/"msg":"ws listening","addr":"([^"]+)"/)[1];
});
after(async () => { assert.equal((await srv.stop()).code, 0); });

function sock(token) { return sockWith({ token }); }
function sockWith(auth, extra = {}) {
  const c = io('http://' + wsAddr, { transports: ['websocket'], auth, reconnection: false, forceNew: true, ...extra });
  return new Promise((res, rej) => {
    c.once('connect', () => res(c));
    c.once('connect_error', (e) => { c.close(); rej(e); });
  });
}

const RULE = { tool: 'write', effect: 'allow', path: 'docs/**' };
const REASONS = [{}, { reason: 'fine' }, { reason: '' }, { reason: 5 }, { reason: null }, { reason: 'x'.repeat(1025) },
  { reason: 'a\u0001b' }, { reason: 'ok', extra: 1 }, { bogus: true }, [], 'text', 7];

// control → [session state, REST method, path (with :op / :rule), socket event, path field, bodies]
const CASES = {
  pause: ['active', 'POST', 'pause', 'jailbox:pause', null, REASONS],
  resume: ['paused', 'POST', 'resume', 'jailbox:resume', null, REASONS],
  abort: ['active', 'POST', 'abort', 'jailbox:abort', null, REASONS],
  accept: ['done', 'POST', 'accept', 'jailbox:accept', null, REASONS],
  accept_wrong_state: ['active', 'POST', 'accept', 'jailbox:accept', null, [{}]],
  approve: ['active', 'POST', 'approve/:op', 'jailbox:approve', 'opId', [...REASONS,
    { allowSimilar: 'directory' }, { reason: 'ok', allowSimilar: 'extension' }, { allowSimilar: 'session' },
    { allowSimilar: 'command' }, { allowSimilar: 'bogus' }, { allowSimilar: '' }, { allowSimilar: 3 },
    { allowSimilar: 'x'.repeat(33) }]],
  reject: ['active', 'POST', 'reject/:op', 'jailbox:reject', 'opId', [...REASONS, { allowSimilar: 'directory' }]],
  kill: ['active', 'POST', 'ops/:op/kill', 'jailbox:kill', 'opId', REASONS],
  mode: ['active', 'PATCH', '', 'jailbox:mode', null, [{ mode: 'unsupervised' }, { mode: 'supervised' }, {},
    { mode: 'bogus' }, { mode: 1 }, { mode: 'supervised', reason: 'x' }, { mode: null }, []]],
  mode_ended: ['accepted', 'PATCH', '', 'jailbox:mode', null, [{ mode: 'unsupervised' }, { mode: 'bogus' }]],
  rule_add: ['active', 'POST', 'rules', 'jailbox:rule_add', null, [{ rule: RULE }, { rules: [RULE] },
    { rules: [RULE, { ...RULE, path: 'b/**' }] }, {}, { rule: 5 }, { rules: {} }, { rules: [{ tool: 'nope' }] },
    { rule: { ...RULE, id: 'op-taken' } }, { rule: RULE, bogus: 1 }, { rules: [] }, []]],
  rule_revoke: ['active', 'DELETE', 'rules/:rule', 'jailbox:rule_revoke', 'ruleId', [{}, { reason: 'x' }, []]],
  rule_revoke_unknown: ['active', 'DELETE', 'rules/nope', 'jailbox:rule_revoke', 'ruleId', [{}]],
  effects_clear: ['active', 'POST', 'effects/clear', 'jailbox:effects_clear', null, REASONS],
  effects_clear_ended: ['accepted', 'POST', 'effects/clear', 'jailbox:effects_clear', null, [{}]],
  rollback: ['paused', 'POST', 'rollback', 'jailbox:rollback', null, [{}, { dryRun: true }, { force: true, reason: 'r' },
    { to: 99999999 }, { to: 'x' }, { to: 0 }, { dryRun: 1 }, { force: null }, { bogus: true }, [], 'text', 7]],
  rollback_active: ['active', 'POST', 'rollback', 'jailbox:rollback', null, [{ dryRun: true }]],
  rollback_ended: ['accepted', 'POST', 'rollback', 'jailbox:rollback', null, [{}, { dryRun: true }]],
};

// a session in `state`, with a pending write op and a buyer rule "mine"
async function twin(state, tool = 'write') {
  const o = await srv.open();
  await srv.setState(o.jobId, state === 'accepted' ? 'active' : state);
  const op = tool === 'exec'
    ? Number((await srv.db.query(
      "INSERT INTO ops (job_id, tool, path, args, state) VALUES ($1, 'exec', NULL, '{\"argv\":[\"true\"]}', 'pending') RETURNING op_id",
      [o.jobId])).rows[0].op_id)
    : await srv.pendingOp(o.jobId, 'src/a.c');
  const r = await srv.req('POST', `/v1/jailbox/${o.jobId}/rules`, { token: o.buyerToken, body: { rule: { ...RULE, id: 'mine' } } });
  assert.equal(r.status, 201, r.text);
  if (state === 'accepted') await srv.setState(o.jobId, 'done');
  if (state === 'accepted') assert.equal((await srv.req('POST', `/v1/jailbox/${o.jobId}/accept`, { token: o.buyerToken })).status, 200);
  return { ...o, op };
}

// the outcome of an answer: 'ok', or the error code (with the state of invalid_state)
const restOutcome = (r) => (r.status >= 200 && r.status < 300 ? 'ok'
  : r.json?.error?.code + (r.json?.error?.state ? ':' + r.json.error.state : ''));
const sockOutcome = (a) => (a?.ok === true ? 'ok' : a?.error?.code + (a?.error?.state ? ':' + a.error.state : ''));

for (const [name, [state, method, tail, event, field, bodies]] of Object.entries(CASES)) {
  test(`${name}: every REST body gives the same outcome as the socket form of ${event}`, async () => {
    const seen = new Set();
    for (const body of bodies) {
      const tool = name === 'kill' ? 'exec' : 'write';
      const a = await twin(state, tool), b = await twin(state, tool);
      const pathValue = (o) => (tail.includes(':op') ? o.op : tail.includes(':rule') ? 'mine' : tail === 'rules/nope' ? 'nope' : undefined);
      const path = `/v1/jailbox/${a.jobId}${tail ? '/' : ''}${tail.replace(':op', a.op).replace(':rule', 'mine')}`;
      const r = await srv.req(method, path, { token: a.buyerToken, raw: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
      const form = body !== null && typeof body === 'object' && !Array.isArray(body) && field
        ? { ...body, [field]: pathValue(b) } : body;
      const s = await sock(b.buyerToken);
      let ack;
      try { ack = await s.timeout(5000).emitWithAck(event, form); } finally { s.close(); }
      const ro = restOutcome(r), so = sockOutcome(ack);
      assert.equal(so, ro, `${name} ${JSON.stringify(body)}: REST ${r.status} ${r.text} / socket ${JSON.stringify(ack)}`);
      seen.add(ro === 'ok' ? 'ok' : 'refused');
      // and the session ended up the same
      const [sa, sb] = await Promise.all([a, b].map((o) => srv.req('GET', `/v1/jailbox/${o.jobId}`, { token: srv.serviceToken })));
      assert.equal(sb.json.state, sa.json.state);
      assert.equal(sb.json.mode, sa.json.mode);
      assert.equal(sb.json.pendingOps, sa.json.pendingOps);
    }
    if (bodies.length > 1 && !name.endsWith('_ended')) assert.equal(seen.size, 2, `${name}: both taken and refused bodies were tried`);
  });
}

test('an empty REST body is the socket event without an argument', async () => {
  for (const [ctl, event] of [['pause', 'jailbox:pause'], ['abort', 'jailbox:abort']]) {
    const a = await twin('active'), b = await twin('active');
    const r = await srv.req('POST', `/v1/jailbox/${a.jobId}/${ctl}`, { token: a.buyerToken });
    const s = await sock(b.buyerToken);
    const ack = await s.timeout(5000).emitWithAck(event);
    s.close();
    assert.equal(r.status, 200, r.text);
    assert.equal(ack.ok, true, JSON.stringify(ack));
  }
});

test('two buyers decide the same op at once (REST and socket): one wins, the other is told how', async () => {
  for (let i = 0; i < 8; i++) {
    const o = await twin('active');
    const s = await sock(o.buyerToken);
    const restApproves = i % 2 === 0;
    const [r, ack] = await Promise.all([
      srv.req('POST', `/v1/jailbox/${o.jobId}/${restApproves ? 'approve' : 'reject'}/${o.op}`, { token: o.buyerToken, body: { reason: 'rest' } }),
      s.timeout(5000).emitWithAck(restApproves ? 'jailbox:reject' : 'jailbox:approve', { opId: o.op, reason: 'socket' }),
    ]);
    s.close();
    const wins = [r.status === 200, ack.ok === true];
    assert.equal(wins.filter(Boolean).length, 1, `exactly one wins: ${r.text} / ${JSON.stringify(ack)}`);
    const loser = wins[0] ? ack.error : r.json.error;
    const winner = wins[0] ? (restApproves ? 'approved' : 'rejected') : (restApproves ? 'rejected' : 'approved');
    const why = wins[0] ? 'rest' : 'socket';
    if (!wins[0]) assert.equal(r.status, 409, r.text);
    assert.equal(loser.code, 'invalid_state', JSON.stringify(loser));
    assert.equal(loser.state, winner, JSON.stringify(loser));
    assert.match(loser.message, new RegExp(`^op ${o.op} was decided already: ${winner} by buyer at .*\\(reason "${why}"\\) in state ${winner}$`));
  }
});

test('a decision that lost to allowSimilar is told so too', async () => {
  const o = await twin('active');
  const r1 = await srv.req('POST', `/v1/jailbox/${o.jobId}/reject/${o.op}`, { token: o.buyerToken });
  assert.equal(r1.status, 200, r1.text);
  const s = await sock(o.buyerToken);
  const ack = await s.timeout(5000).emitWithAck('jailbox:approve', { opId: o.op, allowSimilar: 'directory' });
  s.close();
  const r2 = await srv.req('POST', `/v1/jailbox/${o.jobId}/approve/${o.op}`, { token: o.buyerToken, body: { allowSimilar: 'directory' } });
  for (const e of [ack.error, r2.json.error]) {
    assert.equal(e.code, 'invalid_state', JSON.stringify(e));
    assert.equal(e.state, 'rejected');
    assert.match(e.message, /was decided already: rejected by buyer/);
  }
});

// A socket is authorised at CONNECT; its token is checked again on every control, as REST
// checks each request's: a console sign-in signed out (its token revoked) or past its end
// controls nothing through a socket it opened before.
test('a console socket whose sign-in was signed out or expired since CONNECT controls nothing', async () => {
  const origin = 'http://127.0.0.1:' + new URL(srv.url).port;
  const signIn = async (o) => {
    const r = await srv.req('POST', '/v1/console/session', { token: o.buyerToken, headers: { 'x-jailbox-console': '1' } });
    assert.equal(r.status, 200, r.text);
    return r.headers.get('set-cookie').split(';')[0];
  };
  const cookieSock = (cookie) => sockWith({}, { extraHeaders: { cookie, origin } });
  const mode = async (o) => (await srv.req('GET', `/v1/jailbox/${o.jobId}`, { token: o.buyerToken })).json.mode;
  for (const end of ['signout', 'expiry']) {
    const o = await twin('active');
    const cookie = await signIn(o);
    const s = await cookieSock(cookie);
    try {
      let ack = await s.timeout(5000).emitWithAck('jailbox:mode', { mode: 'unsupervised' });
      assert.equal(ack.ok, true, JSON.stringify(ack));
      if (end === 'signout') {
        const r = await srv.req('DELETE', '/v1/console/session', { headers: { cookie, 'x-jailbox-console': '1' } });
        assert.equal(r.status, 204, r.text);
      } else {
        const raw = Buffer.from(cookie.slice(cookie.indexOf('=') + 1 + 'jbt_'.length), 'base64url');
        const hash = createHash('sha256').update(raw).digest();
        const u = await srv.db.query("UPDATE tokens SET expires_at = now() - interval '1 s' WHERE token_hash = $1", [hash]);
        assert.equal(u.rowCount, 1);
      }
      assert.equal((await srv.req('GET', `/v1/jailbox/${o.jobId}`, { headers: { cookie } })).status, 401);
      for (const [ev, arg] of [['jailbox:mode', { mode: 'supervised' }], ['jailbox:approve', { opId: o.op }], ['jailbox:abort', {}]]) {
        ack = await s.timeout(5000).emitWithAck(ev, arg);
        assert.equal(ack.error?.code, 'unauthorized', `${end} ${ev}: ${JSON.stringify(ack)}`);
      }
    } finally { s.close(); }
    assert.equal(await mode(o), 'unsupervised', end);
    const ops = await srv.req('GET', `/v1/jailbox/${o.jobId}/ops?state=pending`, { token: o.buyerToken });
    assert.equal(ops.json.ops.length, 1, `${end}: the op is still pending`);
    assert.equal((await srv.req('GET', `/v1/jailbox/${o.jobId}`, { token: o.buyerToken })).json.state, 'active', end);
  }
});

// The operator (the service token) stops a session: pause, resume and abort over REST and
// `jailboxctl abort --reason`, always with a reason, recorded in the chain and told to the
// buyer as the operator's ("service"); without a reason it is 400 and nothing changes.
const CTL = process.env.JAILBOXCTL || join(dirname(process.env.JAILBOXD), 'jailboxctl');
function ctl(args, token) {
  return new Promise((resolve) => {
    const c = spawn(CTL, args, { env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: token } });
    let out = '';
    c.stdout.on('data', (d) => { out += d; });
    c.stderr.on('data', (d) => { out += d; });
    c.on('close', (code) => resolve({ code, out }));
    c.stdin.end();
  });
}
const entries = async (job, op) => (await srv.db.query(
  'SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = $1 AND operation = $2 ORDER BY seq',
  [job, op])).rows.map((r) => r.d);
const stateOf = async (o) => (await srv.req('GET', `/v1/jailbox/${o.jobId}`, { token: srv.serviceToken })).json;

test('the operator pauses and aborts a live session with a reason, over REST and jailboxctl; the chain and the buyer see it as the operator\'s', async () => {
  const o = await twin('active');
  const svc = (verb, body) => srv.req('POST', `/v1/jailbox/${o.jobId}/${verb}`, { token: srv.serviceToken, body });
  for (const body of [undefined, {}, { reason: '' }, { reason: null }, { reason: 'a\u0001b' }, { reason: 'x'.repeat(1025) }]) {
    const r = await svc('abort', body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.code, 'bad_request');
    assert.match(r.json.error.message, /'reason'/);
  }
  assert.equal((await svc('pause')).status, 400);
  assert.equal((await stateOf(o)).state, 'active', 'a refused control changes nothing');
  // the buyer's decisions stay the buyer's
  assert.equal((await svc(`approve/${o.op}`, { reason: 'x' })).status, 403);
  assert.equal((await svc('accept', { reason: 'x' })).status, 403);
  const buyer = await sock(o.buyerToken);
  try {
    const seen = [];
    buyer.on('jailbox:state', (p) => { if (!p.snapshot) seen.push(['state', p]); });
    buyer.on('jailbox:abort', (p) => seen.push(['abort', p]));
    let r = await svc('pause', { reason: 'incident 42: looking' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.state, 'paused');
    const st = await stateOf(o);
    assert.deepEqual([st.pausedBy, st.stateReason], ['service', 'incident 42: looking']);
    r = await srv.req('POST', `/v1/jailbox/${o.jobId}/resume`, { token: o.buyerToken });
    assert.equal(r.status, 409, 'the operator\'s pause is lifted by the operator');
    assert.match(r.json.error.message, /paused by the operator/);
    r = await svc('resume', { reason: 'incident 42: fine' });
    assert.equal(r.status, 200, r.text);
    r = await svc('abort', { reason: 'runaway: incident 43' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual([r.json.state, r.json.previous, r.json.rejectedOps], ['aborted', 'active', 1]);
    const end = Date.now() + 5000;
    while (seen.filter(([k]) => k === 'abort').length === 0 && Date.now() < end) await new Promise((res) => setTimeout(res, 20));
    const states = seen.filter(([k]) => k === 'state').map(([, p]) => [p.state, p.actor, p.reason]);
    assert.deepEqual(states, [['paused', 'service', 'incident 42: looking'], ['active', 'service', 'incident 42: fine'],
      ['aborted', 'service', 'runaway: incident 43']]);
    const ab = seen.find(([k]) => k === 'abort')[1];
    assert.deepEqual([ab.jobId, ab.actor, ab.reason], [o.jobId, 'service', 'runaway: incident 43']);
  } finally { buyer.close(); }
  const [abort] = await entries(o.jobId, 'abort');
  assert.deepEqual([abort.actor, abort.reason, abort.from, abort.to], ['service', 'runaway: incident 43', 'active', 'aborted']);
  assert.deepEqual((await entries(o.jobId, 'pause')).map((d) => [d.actor, d.reason]), [['service', 'incident 42: looking']]);
  const v = await srv.req('GET', `/v1/jailbox/${o.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, v.text);

  // jailboxctl with the service token: no reason is refused, --reason ends the session
  const p = await twin('active');
  let c = await ctl(['abort', p.jobId], srv.serviceToken);
  assert.notEqual(c.code, 0, c.out);
  assert.match(c.out, /bad_request|reason/);
  assert.equal((await stateOf(p)).state, 'active');
  c = await ctl(['abort', p.jobId, '--reason', 'buyer unreachable, lifetime too long'], srv.serviceToken);
  assert.equal(c.code, 0, c.out);
  assert.deepEqual([(await stateOf(p)).state, (await stateOf(p)).pausedBy], ['aborted', null]);
  const [e] = await entries(p.jobId, 'abort');
  assert.deepEqual([e.actor, e.reason], ['service', 'buyer unreachable, lifetime too long']);
});

test('the operator\'s kill and rule changes are the operator\'s in the chain and the events, not the buyer\'s', async () => {
  const o = await twin('active', 'exec');
  let q;
  const svc = (method, path, body) => srv.req(method, `/v1/jailbox/${o.jobId}/${path}`, { token: srv.serviceToken, body });
  const buyer = await sock(o.buyerToken);
  try {
    const rules = [];
    buyer.on('jailbox:rule', (p) => rules.push([p.action, p.ruleId, p.by]));
    let r = await svc('POST', 'rules', { rule: { ...RULE, id: 'svc-1' } });
    assert.equal(r.status, 201, r.text);
    r = await svc('DELETE', 'rules/mine');
    assert.equal(r.status, 200, r.text);
    r = await svc('POST', `ops/${o.op}/kill`, { reason: 'incident 44' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.outcome, 'rejected');
    // a queued exec killed by the operator before it started
    q = Number((await srv.db.query(
      "INSERT INTO ops (job_id, tool, path, args, state, decision) VALUES ($1, 'exec', NULL, '{\"argv\":[\"true\"]}', 'approved', 'auto') RETURNING op_id",
      [o.jobId])).rows[0].op_id);
    r = await svc('POST', `ops/${q}/kill`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.outcome, 'failed');
    const end = Date.now() + 5000;
    while (rules.length < 2 && Date.now() < end) await new Promise((res) => setTimeout(res, 20));
    assert.deepEqual(rules, [['added', 'svc-1', 'service'], ['revoked', 'mine', 'service']]);
    const q2 = (await srv.db.query('SELECT reason, result FROM ops WHERE op_id = $1', [q])).rows[0];
    assert.equal(q2.reason, 'killed by the operator');
    assert.equal(q2.result.error.message, 'killed by the operator before it started');
  } finally { buyer.close(); }
  assert.deepEqual((await entries(o.jobId, 'rule_add')).map((d) => [d.ruleId, d.by]), [['mine', 'buyer'], ['svc-1', 'service']]);
  assert.deepEqual((await entries(o.jobId, 'rule_revoke')).map((d) => [d.ruleId, d.by]), [['mine', 'service']]);
  const [rej] = await entries(o.jobId, 'op'); // a pending exec's rejection
  assert.deepEqual([rej.opId, rej.decision, rej.decidedBy], [o.op, 'rejected', 'service']);
  const [ex] = await entries(o.jobId, 'exec');
  assert.deepEqual([ex.opId, ex.decision, ex.killedBy], [q, 'killed', 'service']);
  const ops = (await srv.req('GET', `/v1/jailbox/${o.jobId}/ops?state=rejected`, { token: o.buyerToken })).json;
  assert.deepEqual(ops.ops.map((x) => [x.opId, x.decidedBy]), [[o.op, 'service']], JSON.stringify(ops));
  const v = await srv.req('GET', `/v1/jailbox/${o.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, v.text);
});
