// rest.test.mjs — the REST API against a real jailboxd and PostgreSQL: every
// endpoint, every role boundary, illegal transitions, decision races, bad input.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { symlinkSync, mkdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { startServer } from './lib/server.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, 'jailboxd exits 0 on SIGTERM');
});

const countSessions = async () => Number((await srv.db.query('SELECT count(*) FROM sessions')).rows[0].count);

test('open a session: 201 with tokens, defaults filled in', async () => {
  const s = await srv.open({ jobId: 'open-1' });
  assert.equal(s.jobId, 'open-1');
  assert.equal(s.state, 'created');
  assert.equal(s.mode, 'supervised');
  assert.match(s.buyerToken, /^jbt_[A-Za-z0-9_-]{43}$/);
  assert.match(s.agentToken, /^jbt_[A-Za-z0-9_-]{43}$/);
  assert.notEqual(s.buyerToken, s.agentToken);
  const g = await srv.req('GET', '/v1/jailbox/open-1', { token: s.buyerToken });
  assert.equal(g.status, 200);
  assert.equal(g.json.state, 'created');
  assert.equal(g.json.mode, 'supervised');
  assert.equal(g.json.pendingOps, 0);
  assert.deepEqual(g.json.limits, { memoryMiB: 1024, cpus: 1, pids: 256, timeoutSec: 3600, idleTimeoutSec: 900 });
  assert.match(g.json.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.deepEqual(g.json.auditHead.seq >= 0, true);
  // tokens are stored only as hashes
  const t = await srv.db.query('SELECT encode(token_hash, \'hex\') h FROM tokens WHERE job_id = $1', ['open-1']);
  assert.equal(t.rows.length, 2);
  for (const row of t.rows) assert.ok(!s.buyerToken.includes(row.h) && row.h.length === 64);
  // a launch job is queued for the worker
  const lj = await srv.db.query("SELECT kind, state FROM launch_jobs WHERE job_id = 'open-1'");
  assert.deepEqual(lj.rows, [{ kind: 'launch', state: 'queued' }]);
});

test('open: generated jobId, unsupervised mode, limits and exclusions kept', async () => {
  const s = await srv.open({ mode: 'unsupervised', exclude: ['*.pem', '.env'],
    limits: { memoryMiB: 512, cpus: 0.5, pids: 64, timeoutSec: 60 } });
  assert.match(s.jobId, /^job-[0-9a-f]{24}$/);
  const g = await srv.req('GET', `/v1/jailbox/${s.jobId}`, { token: srv.serviceToken });
  assert.equal(g.json.mode, 'unsupervised');
  assert.deepEqual(g.json.exclude, ['*.pem', '.env']);
  assert.deepEqual(g.json.limits, { memoryMiB: 512, cpus: 0.5, pids: 64, timeoutSec: 60, idleTimeoutSec: 900 });
});

test('open: duplicate jobId 409, nothing changed', async () => {
  await srv.open({ jobId: 'dup-1', workspace: 'inside-dup' });
  const n = await countSessions();
  const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
    body: { jobId: 'dup-1', agentId: 'a', workspace: 'inside-dup' } });
  assert.equal(r.status, 409);
  assert.equal(r.json.error.code, 'exists');
  assert.equal(await countSessions(), n);
});

test('open: the sandbox image — JAILBOX_SANDBOX_IMAGE by default, a named one from the allowlist', async () => {
  const d = await srv.open({ jobId: 'img-default', workspace: 'img-default' });
  assert.equal(d.image, 'jailbox-sandbox:latest');
  let g = await srv.req('GET', '/v1/jailbox/img-default', { token: srv.serviceToken });
  assert.equal(g.json.image, 'jailbox-sandbox:latest');
  // a name without a tag means :latest; the audit's first entry names the image
  const b = await srv.open({ jobId: 'img-build', workspace: 'img-build', image: 'jailbox-sandbox-build' });
  assert.equal(b.image, 'jailbox-sandbox-build:latest');
  g = await srv.req('GET', '/v1/jailbox/img-build', { token: b.buyerToken });
  assert.equal(g.json.image, 'jailbox-sandbox-build:latest');
  const a = await srv.db.query(
    "SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = 'img-build' AND seq = 1");
  assert.equal(a.rows[0].d.image, 'jailbox-sandbox-build:latest');
  const t = await srv.open({ jobId: 'img-tag', workspace: 'img-tag', image: 'jailbox-sandbox:latest' });
  assert.equal(t.image, 'jailbox-sandbox:latest');
});

test('open: an image outside the allowlist or a bad name is 400, nothing created or queued', async () => {
  const n = await countSessions();
  const jobs = async () => Number((await srv.db.query('SELECT count(*) FROM launch_jobs')).rows[0].count);
  const nj = await jobs();
  mkdirSync(join(srv.wsroot, 'img-refused'));
  for (const image of ['debian:12', 'jailbox-sandbox-build:other', 'jailbox-sandbox:latest2', 'jailbox-sandbo']) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
      body: { agentId: 'a', workspace: 'img-refused', image } });
    assert.equal(r.status, 400, image);
    assert.equal(r.json.error.code, 'bad_request', image);
    assert.match(r.json.error.message, /JAILBOX_SANDBOX_IMAGES/, image);
    assert.ok(r.json.error.message.includes(`'${image}'`), r.json.error.message);
  }
  for (const image of ['', 'a b', '-x', 'x//y', 'a'.repeat(257), 7, null, ['jailbox-sandbox'], 'x\ty']) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
      body: { agentId: 'a', workspace: 'img-refused', image } });
    assert.equal(r.status, 400, JSON.stringify(image));
    assert.equal(r.json.error.code, 'bad_request', JSON.stringify(image));
    assert.match(r.json.error.message, /image/, JSON.stringify(image));
  }
  assert.equal(await countSessions(), n);
  assert.equal(await jobs(), nj);
});

test('open: workspace must resolve under the root', async () => {
  const n = await countSessions();
  symlinkSync('/etc', join(srv.wsroot, 'escape-link'));
  for (const ws of ['/etc', '../', '..', 'escape-link', 'does-not-exist', '.', '/']) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
      body: { agentId: 'a', workspace: ws } });
    assert.equal(r.status, 400, `workspace ${ws}`);
    assert.equal(r.json.error.code, 'bad_workspace', `workspace ${ws}`);
    // the message names the root a relative path was taken under
    if (ws === 'does-not-exist') assert.ok(r.json.error.message.includes(realpathSync(srv.wsroot)), r.text);
  }
  // absolute path inside the root is fine
  mkdirSync(join(srv.wsroot, 'inside-abs'));
  const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
    body: { agentId: 'a', workspace: join(srv.wsroot, 'inside-abs') } });
  assert.equal(r.status, 201);
  assert.equal(await countSessions(), n + 1);
});

test('open: one live session per tree — same, parent or child workspace is 409 until it ends', async () => {
  const s = await srv.open({ workspace: 'tree/a' });
  mkdirSync(join(srv.wsroot, 'tree/a/b'), { recursive: true });
  const n = await countSessions();
  for (const ws of ['tree/a', 'tree', 'tree/a/b', join(srv.wsroot, 'tree/a')]) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, body: { agentId: 'a', workspace: ws } });
    assert.equal(r.status, 409, ws);
    assert.equal(r.json.error.code, 'workspace_in_use', ws);
  }
  mkdirSync(join(srv.wsroot, 'tree/ab'), { recursive: true }); // a sibling sharing a prefix is free
  assert.equal((await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, body: { agentId: 'a', workspace: 'tree/ab' } })).status, 201);
  assert.equal(await countSessions(), n + 1);
  await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken });
  assert.equal((await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, body: { agentId: 'a', workspace: 'tree/a/b' } })).status, 201);
});

test('audit: opening, every transition and every rejection is a chain entry; an end seals it', async () => {
  const s = await srv.open({ jobId: 'aud-1' });
  const ops = async () => (await srv.db.query(
    "SELECT seq, operation, path, jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = 'aud-1' ORDER BY seq")).rows;
  let rows = await ops();
  assert.deepEqual(rows.map((r) => r.operation), ['state']);
  assert.equal(rows[0].details.to, 'created');
  await srv.setState('aud-1', 'active');
  const tok = { token: s.buyerToken };
  await srv.req('POST', '/v1/jailbox/aud-1/pause', tok);
  await srv.req('POST', '/v1/jailbox/aud-1/resume', tok);
  const op = await srv.pendingOp('aud-1', 'src/x.c');
  await srv.req('POST', `/v1/jailbox/aud-1/reject/${op}`, { ...tok, body: { reason: 'no' } });
  const op2 = await srv.pendingOp('aud-1', 'src/y.c');
  await srv.req('POST', `/v1/jailbox/aud-1/approve/${op2}`, tok); // written to the chain when it runs
  await srv.pendingOp('aud-1', 'src/z.c');
  await srv.req('POST', '/v1/jailbox/aud-1/abort', { ...tok, body: { reason: 'enough' } });
  rows = await ops();
  assert.deepEqual(rows.map((r) => r.operation), ['state', 'pause', 'resume', 'write', 'abort', 'seal']);
  assert.deepEqual(rows.map((r) => r.seq), [1, 2, 3, 4, 5, 6].map(String));
  assert.deepEqual([rows[3].path, rows[3].details.decision, rows[3].details.ok], ['src/x.c', 'rejected', false]);
  assert.deepEqual([rows[4].details.actor, rows[4].details.reason, rows[4].details.rejectedOps], ['buyer', 'enough', 1]);
  assert.equal(rows[5].details.entries, 5);
  const v = await srv.req('GET', '/v1/jailbox/aud-1/audit/verify', { token: srv.serviceToken });
  assert.equal(v.status, 200);
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
  assert.equal(v.json.entries, 6);
  const g = await srv.req('GET', '/v1/jailbox/aud-1', { token: srv.serviceToken });
  assert.equal(g.json.auditHead.seq, 6);
});

test('auth: missing, malformed, unknown tokens are 401', async () => {
  const s = await srv.open();
  for (const h of [undefined, 'Basic abc', 'Bearer', 'Bearer jbt_short',
                   'Bearer jbt_' + 'A'.repeat(43), 'Bearer ' + s.buyerToken + 'x']) {
    const headers = h ? { authorization: h } : {};
    const r = await srv.req('GET', `/v1/jailbox/${s.jobId}`, { headers });
    assert.equal(r.status, 401, String(h));
    assert.equal(r.json.error.code, 'unauthorized');
    assert.match(r.headers.get('www-authenticate') || '', /^Bearer /);
  }
  // the token is checked before anything in the request is: bad input without a token is 401
  for (const [m, p, raw] of [['POST', '/v1/jailbox', '{bad'], ['PATCH', `/v1/jailbox/${s.jobId}`, '{bad'],
                             ['POST', `/v1/jailbox/${s.jobId}/abort`, '{bad'], ['GET', `/v1/jailbox/${s.jobId}/ops?limit=x`, undefined],
                             ['POST', `/v1/jailbox/${s.jobId}/approve/1`, '{bad']]) {
    const r = await srv.req(m, p, { raw });
    assert.equal(r.status, 401, `${m} ${p}`);
  }
});

test('auth: role and session boundaries are 403', async () => {
  const a = await srv.open({ jobId: 'role-a' });
  const b = await srv.open({ jobId: 'role-b' });
  await srv.setState('role-b', 'active');
  const opB = await srv.pendingOp('role-b');
  const cases = [
    ['GET', '/v1/jailbox/role-b', a.buyerToken],          // buyer of A on B
    ['GET', '/v1/jailbox/role-b/ops', a.buyerToken],
    ['POST', `/v1/jailbox/role-b/approve/${opB}`, a.buyerToken],
    ['POST', `/v1/jailbox/role-b/reject/${opB}`, a.buyerToken],
    ['POST', '/v1/jailbox/role-b/abort', a.buyerToken],
    ['POST', '/v1/jailbox/role-b/pause', a.buyerToken],
    ['PATCH', '/v1/jailbox/role-b', a.buyerToken],
    ['POST', '/v1/jailbox/role-b/abort', b.agentToken],   // agent token on abort
    ['GET', '/v1/jailbox/role-b', b.agentToken],          // agents do not read the contract over REST
    ['POST', `/v1/jailbox/role-b/approve/${opB}`, b.agentToken],
    ['POST', '/v1/jailbox', b.buyerToken],                // only the service opens sessions
    ['GET', '/v1/agents/agent-1', b.buyerToken],
    ['POST', `/v1/jailbox/role-b/approve/${opB}`, srv.serviceToken], // approvals are the buyer's
    ['POST', '/v1/jailbox/role-b/accept', srv.serviceToken], // and acceptance
    ['GET', '/v1/jailbox/no-such-session', a.buyerToken], // another (unknown) session
  ];
  for (const [m, p, tok] of cases) {
    const r = await srv.req(m, p, { token: tok, body: m === 'PATCH' ? { mode: 'unsupervised' } : undefined });
    assert.equal(r.status, 403, `${m} ${p}`);
    assert.equal(r.json.error.code, 'forbidden');
  }
  const st = await srv.db.query("SELECT state, mode FROM sessions WHERE job_id = 'role-b'");
  assert.deepEqual(st.rows[0], { state: 'active', mode: 'supervised' });
  const op = await srv.db.query('SELECT state FROM ops WHERE op_id = $1', [opB]);
  assert.equal(op.rows[0].state, 'pending');
});

test('state machine: legal path and every illegal transition 409 with the current state', async () => {
  const s = await srv.open({ jobId: 'sm-1' });
  const post = (verb) => srv.req('POST', `/v1/jailbox/sm-1/${verb}`, { token: s.buyerToken });
  // from created nothing but abort
  for (const v of ['pause', 'resume', 'accept']) {
    const r = await post(v);
    assert.equal(r.status, 409, v);
    assert.equal(r.json.error.code, 'invalid_state');
    assert.equal(r.json.error.state, 'created');
  }
  await srv.setState('sm-1', 'active');
  assert.equal((await post('resume')).status, 409);
  assert.equal((await post('accept')).json.error.state, 'active');
  let r = await post('pause');
  assert.equal(r.status, 200);
  assert.deepEqual([r.json.previous, r.json.state], ['active', 'paused']);
  assert.equal((await post('pause')).json.error.state, 'paused');
  r = await post('resume');
  assert.deepEqual([r.json.previous, r.json.state], ['paused', 'active']);
  await srv.setState('sm-1', 'done');
  for (const v of ['pause', 'resume']) assert.equal((await post(v)).json.error.state, 'done', v);
  r = await post('accept');
  assert.equal(r.status, 200);
  assert.equal(r.json.state, 'accepted');
  // ended: the buyer's token reads on (JAILBOX_BUYER_READ_RETENTION_S) but controls are 409
  // invalid_state with the state; the service sees the end state
  const ab = await post('abort');
  assert.equal(ab.status, 409, ab.text);
  assert.deepEqual([ab.json.error.code, ab.json.error.state], ['invalid_state', 'accepted']);
  const g = await srv.req('GET', '/v1/jailbox/sm-1', { token: srv.serviceToken });
  assert.equal(g.json.state, 'accepted');
  assert.ok(g.json.endedAt);
  const teardown = await srv.db.query("SELECT count(*) FROM launch_jobs WHERE job_id = 'sm-1' AND kind = 'teardown'");
  assert.equal(Number(teardown.rows[0].count), 1);
});

test('abort: from every live state, pending ops rejected, reason kept, second abort refused', async () => {
  for (const st of ['created', 'prescanning', 'awaiting_agent', 'active', 'paused', 'done']) {
    const s = await srv.open();
    await srv.setState(s.jobId, st);
    const op = await srv.pendingOp(s.jobId);
    const r = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken, body: { reason: 'changed my mind' } });
    assert.equal(r.status, 200, st);
    assert.equal(r.json.previous, st);
    assert.equal(r.json.rejectedOps, 1);
    const o = await srv.db.query('SELECT state, reason FROM ops WHERE op_id = $1', [op]);
    assert.deepEqual(o.rows[0], { state: 'rejected', reason: 'session aborted' });
    const g = await srv.req('GET', `/v1/jailbox/${s.jobId}`, { token: srv.serviceToken });
    assert.equal(g.json.stateReason, 'changed my mind');
  }
  for (const st of ['accepted', 'aborted', 'failed']) {
    const s = await srv.open();
    await srv.setState(s.jobId, st);
    const r = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken });
    assert.equal(r.status, 409, st);
    assert.equal(r.json.error.state, st);
  }
});

test('ops: list, filter, paginate, approve, reject, 404 and 409', async () => {
  const s = await srv.open({ jobId: 'ops-1' });
  await srv.setState('ops-1', 'active');
  const ids = [];
  for (let i = 0; i < 7; i++) ids.push(await srv.pendingOp('ops-1', `f${i}.c`));
  const tok = { token: s.buyerToken };
  let r = await srv.req('POST', `/v1/jailbox/ops-1/approve/${ids[0]}`, tok);
  assert.equal(r.status, 200);
  assert.equal(r.json.state, 'approved');
  assert.equal(r.json.decision, 'approved');
  r = await srv.req('POST', `/v1/jailbox/ops-1/reject/${ids[1]}`, { ...tok, body: { reason: 'not that file' } });
  assert.equal(r.status, 200);
  assert.deepEqual([r.json.state, r.json.reason], ['rejected', 'not that file']);
  r = await srv.req('POST', `/v1/jailbox/ops-1/approve/${ids[1]}`, tok);
  assert.equal(r.status, 409);
  assert.equal(r.json.error.state, 'rejected');
  for (const bad of ['999999999', '0', 'abc', '-1', '1e3', '99999999999999999999999']) {
    r = await srv.req('POST', `/v1/jailbox/ops-1/approve/${bad}`, tok);
    assert.equal(r.status, 404, bad);
  }
  // an op of another session is not found through this one
  const other = await srv.open();
  const foreign = await srv.pendingOp(other.jobId);
  assert.equal((await srv.req('POST', `/v1/jailbox/ops-1/approve/${foreign}`, tok)).status, 404);

  r = await srv.req('GET', '/v1/jailbox/ops-1/ops?state=pending', tok);
  assert.equal(r.status, 200);
  assert.deepEqual(r.json.ops.map((o) => o.opId), ids.slice(2));
  const g = await srv.req('GET', '/v1/jailbox/ops-1', tok);
  assert.equal(g.json.pendingOps, 5);
  // pages of 3 over all 7
  const seen = [];
  let after = 0;
  for (let page = 0; page < 5; page++) {
    r = await srv.req('GET', `/v1/jailbox/ops-1/ops?limit=3&after=${after}`, tok);
    assert.equal(r.status, 200);
    seen.push(...r.json.ops.map((o) => o.opId));
    if (r.json.next === null) break;
    after = r.json.next;
  }
  assert.deepEqual(seen, ids);
  for (const q of ['state=bogus', 'limit=0', 'limit=501', 'limit=x', 'after=-1', 'after=1.5']) {
    r = await srv.req('GET', `/v1/jailbox/ops-1/ops?${q}`, tok);
    assert.equal(r.status, 400, q);
  }
  assert.equal((await srv.req('GET', '/v1/jailbox/nope/ops', { token: srv.serviceToken })).status, 404);
  // after the session ends a pending op cannot be decided
  const s2 = await srv.open();
  await srv.setState(s2.jobId, 'active');
  const op2 = await srv.pendingOp(s2.jobId);
  await srv.db.query("UPDATE sessions SET state = 'failed' WHERE job_id = $1", [s2.jobId]);
  r = await srv.req('POST', `/v1/jailbox/${s2.jobId}/approve/${op2}`, { token: s2.buyerToken });
  assert.equal(r.status, 409);
});

test('races: two concurrent decisions on one op, exactly one wins (100 rounds each)', async () => {
  const s = await srv.open({ jobId: 'race-1' });
  await srv.setState('race-1', 'active');
  const tok = { token: s.buyerToken };
  for (const [v1, v2] of [['approve', 'approve'], ['approve', 'reject']]) {
    for (let i = 0; i < 100; i++) {
      const op = await srv.pendingOp('race-1');
      const [a, b] = await Promise.all([
        srv.req('POST', `/v1/jailbox/race-1/${v1}/${op}`, tok),
        srv.req('POST', `/v1/jailbox/race-1/${v2}/${op}`, tok),
      ]);
      const codes = [a.status, b.status].sort();
      assert.deepEqual(codes, [200, 409], `${v1}/${v2} round ${i}`);
      const winner = a.status === 200 ? a : b;
      const row = await srv.db.query('SELECT state FROM ops WHERE op_id = $1', [op]);
      assert.equal(row.rows[0].state, winner.json.state);
    }
  }
});

test('mode: PATCH switches it for a live session, not for an ended one', async () => {
  const s = await srv.open({ jobId: 'mode-1' });
  let r = await srv.req('PATCH', '/v1/jailbox/mode-1', { token: s.buyerToken, body: { mode: 'unsupervised' } });
  assert.equal(r.status, 200);
  assert.equal(r.json.mode, 'unsupervised');
  for (const body of [{}, { mode: 'free' }, { mode: 1 }, { mode: 'supervised', x: 1 }]) {
    r = await srv.req('PATCH', '/v1/jailbox/mode-1', { token: s.buyerToken, body });
    assert.equal(r.status, 400, JSON.stringify(body));
  }
  await srv.setState('mode-1', 'aborted');
  r = await srv.req('PATCH', '/v1/jailbox/mode-1', { token: s.buyerToken, body: { mode: 'supervised' } });
  assert.equal(r.status, 409);
});

test('agents: trust score and history for the service; 404 for unknown', async () => {
  await srv.open({ agentId: 'agent-ts' });
  const r = await srv.req('GET', '/v1/agents/agent-ts', { token: srv.serviceToken });
  assert.equal(r.status, 200);
  assert.equal(r.json.agentId, 'agent-ts');
  assert.equal(r.json.trustScore, 100);
  assert.deepEqual(r.json.history, []);
  assert.equal((await srv.req('GET', '/v1/agents/nobody', { token: srv.serviceToken })).status, 404);
});

test('bad input: each class 400 with the error shape and nothing stored', async () => {
  const n = await countSessions();
  const deep = '{"agentId":"a","workspace":"w","limits":' + '['.repeat(64) + ']'.repeat(64) + '}';
  const bodies = {
    malformed: '{"agentId": "a",',
    trailing: '{"agentId":"a","workspace":"w"} x',
    notObject: '["agentId"]',
    empty: '',
    duplicate: '{"agentId":"a","agentId":"b","workspace":"w"}',
    tooDeep: deep,
    unknownField: '{"agentId":"a","workspace":"w","color":"red"}',
    unknownLimit: '{"agentId":"a","workspace":"w","limits":{"gpus":1}}',
    wrongType: '{"agentId":5,"workspace":"w"}',
    wrongTypeMode: '{"agentId":"a","workspace":"w","mode":true}',
    wrongTypeExclude: '{"agentId":"a","workspace":"w","exclude":"*.pem"}',
    nulInString: '{"agentId":"a\\u0000b","workspace":"w"}',
    controlChar: '{"agentId":"a\\nb","workspace":"w"}',
    outOfRange: '{"agentId":"a","workspace":"w","limits":{"memoryMiB":1}}',
    outOfRangeHuge: '{"agentId":"a","workspace":"w","limits":{"pids":99999999999999999999999}}',
    floatForInt: '{"agentId":"a","workspace":"w","limits":{"pids":64.5}}',
    badMode: '{"agentId":"a","workspace":"w","mode":"yolo"}',
    badJobId: '{"jobId":"../x","agentId":"a","workspace":"w"}',
    missingField: '{"agentId":"a"}',
    invalidUtf8: Buffer.from([0x7b, 0x22, 0x61, 0x67, 0x65, 0x6e, 0x74, 0x49, 0x64, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]),
  };
  for (const [name, raw] of Object.entries(bodies)) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, raw, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400, name + ': ' + r.text);
    assert.equal(typeof r.json.error.code, 'string', name);
    assert.equal(typeof r.json.error.message, 'string', name);
  }
  // depth exactly 64 is parsed (and then refused for its type, not its depth)
  const ok64 = '{"agentId":"a","workspace":"w","limits":' + '['.repeat(63) + ']'.repeat(63) + '}';
  const r64 = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, raw: ok64 });
  assert.match(r64.json.error.message, /limits/);
  const big = '{"agentId":"' + 'a'.repeat(1024 * 1024) + '","workspace":"w"}';
  const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, raw: big });
  assert.equal(r.status, 413);
  assert.equal(r.json.error.code, 'payload_too_large');
  assert.equal(await countSessions(), n);
});

test('bad input: wrong method 405 with Allow', async () => {
  const r = await srv.req('DELETE', '/v1/jailbox/x', { token: srv.serviceToken });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'GET, PATCH');
  assert.equal(r.json.error.code, 'method_not_allowed');
  const r2 = await srv.req('GET', '/v1/jailbox');
  assert.equal(r2.status, 405);
  assert.equal(r2.headers.get('allow'), 'POST');
});

// raw bytes over TCP; resolves with what the server sent before closing (or 3 s)
function rawRequest(text) {
  const u = new URL(srv.url);
  return new Promise((resolve) => {
    const sock = net.connect(Number(u.port), u.hostname);
    let got = '';
    const t = setTimeout(() => { sock.destroy(); resolve({ got, closed: false }); }, 3000);
    sock.on('data', (d) => { got += d; });
    sock.on('error', () => {});
    sock.on('close', () => { clearTimeout(t); resolve({ got, closed: true }); });
    sock.write(text);
  });
}

test('bad input: header limits 431, smuggling 400 with the connection closed', async () => {
  let hdrs = '';
  for (let i = 0; i < 101; i++) hdrs += `X-H${i}: v\r\n`;
  let r = await rawRequest(`GET /healthz HTTP/1.1\r\nHost: x\r\n${hdrs}\r\n`);
  assert.match(r.got, /^HTTP\/1\.1 431/);
  assert.match(r.got, /"code":"headers_too_large"/);
  r = await rawRequest(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(9000)}\r\n\r\n`);
  assert.match(r.got, /^HTTP\/1\.1 431/);
  r = await rawRequest('POST /v1/jailbox HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}');
  assert.match(r.got, /^HTTP\/1\.1 400/);
  assert.equal(r.closed, true);
  r = await rawRequest('POST /v1/jailbox HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n');
  assert.match(r.got, /^HTTP\/1\.1 400/);
  assert.equal(r.closed, true);
  // 100 headers exactly are fine
  hdrs = '';
  for (let i = 0; i < 98; i++) hdrs += `X-H${i}: v\r\n`;
  r = await rawRequest(`GET /healthz HTTP/1.1\r\nHost: x\r\n${hdrs}Connection: close\r\n\r\n`);
  assert.match(r.got, /^HTTP\/1\.1 200/);
});

// waits (2 s at most) until fn() is true
async function eventually(fn, what) {
  for (let i = 0; i < 200; i++) { if (await fn()) return; await new Promise((r) => setTimeout(r, 10)); }
  assert.fail('not within 2 s: ' + what);
}

test('read cache: a change made elsewhere reaches GET, also after the listener reconnects', async () => {
  const s = await srv.open({ jobId: 'cache-1' });
  const get = () => srv.req('GET', '/v1/jailbox/cache-1', { token: s.buyerToken });
  assert.equal((await get()).json.state, 'created');
  assert.equal((await get()).json.state, 'created'); // now served from the cache
  // another writer (a worker, another instance) changes the row
  await srv.db.query("UPDATE sessions SET state = 'active' WHERE job_id = 'cache-1'");
  await eventually(async () => (await get()).json.state === 'active', 'state change seen');
  await srv.pendingOp('cache-1');
  await eventually(async () => (await get()).json.pendingOps === 1, 'new op counted');
  // cut the listener's connection: the cache must not serve stale data across the gap
  const killed = await srv.db.query(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jailboxd-listen'");
  assert.equal(killed.rows.length, 1);
  await eventually(async () => (await srv.db.query(
    "SELECT count(*)::int n FROM pg_stat_activity WHERE application_name = 'jailboxd-listen'")).rows[0].n === 1,
    'listener reconnected');
  assert.equal((await get()).json.pendingOps, 1);
  await srv.db.query("UPDATE sessions SET mode = 'unsupervised' WHERE job_id = 'cache-1'");
  await eventually(async () => (await get()).json.mode === 'unsupervised', 'change after reconnect seen');
  // an ended session is read at once as ended by its buyer (read-only until the retention ends)
  assert.equal((await srv.req('POST', '/v1/jailbox/cache-1/abort', { token: s.buyerToken })).status, 200);
  assert.equal((await get()).json.state, 'aborted');
  // a token revoked by another writer stops working too
  const s2 = await srv.open({ jobId: 'cache-2' });
  assert.equal((await srv.req('GET', '/v1/jailbox/cache-2', { token: s2.buyerToken })).status, 200);
  await srv.db.query("UPDATE tokens SET revoked_at = now() WHERE job_id = 'cache-2'");
  await eventually(async () => (await srv.req('GET', '/v1/jailbox/cache-2', { token: s2.buyerToken })).status === 401,
    'revocation seen');
  // the agent token of a cached session is still refused
  const s3 = await srv.open({ jobId: 'cache-3' });
  await srv.req('GET', '/v1/jailbox/cache-3', { token: s3.buyerToken });
  assert.equal((await srv.req('GET', '/v1/jailbox/cache-3', { token: s3.agentToken })).status, 403);
  assert.equal((await srv.req('GET', '/v1/jailbox/cache-3', { token: s2.buyerToken })).status, 401);
  assert.equal((await srv.req('GET', '/v1/jailbox/cache-3', { token: s.agentToken })).status, 401);
  assert.equal((await srv.req('GET', '/v1/jailbox/cache-3', { token: srv.serviceToken })).status, 200);
});

test('jailboxctl token create --role service: a working service token, stored only as a hash', async () => {
  const { execFileSync, spawnSync } = await import('node:child_process');
  const ctl = (process.env.JAILBOXD || '../../build/jailboxd').replace(/jailboxd$/, 'jailboxctl');
  const out = execFileSync(ctl, ['token', 'create', '--role', 'service', '--label', 'dash', '--state-dir', srv.state]).toString().trim();
  assert.match(out, /^jbt_[A-Za-z0-9_-]{43}$/);
  const s = await srv.open({ agentId: 'via-new-token' });
  const r = await srv.req('GET', `/v1/jailbox/${s.jobId}`, { token: out });
  assert.equal(r.status, 200);
  const rows = await srv.db.query("SELECT role, label FROM tokens WHERE label = 'dash'");
  assert.deepEqual(rows.rows, [{ role: 'service', label: 'dash' }]);
  const bad = spawnSync(ctl, ['token', 'create', '--role', 'buyer', '--state-dir', srv.state]);
  assert.equal(bad.status, 2);
  const none = spawnSync(ctl, ['token', 'create', '--role', 'service', '--state-dir', '/nonexistent']);
  assert.equal(none.status, 3);
  assert.match(none.stderr.toString(), /jailboxctl token create: .*PostgreSQL/);
});

test('audit review: rejections are always recordable, a corrupt head fails safe, forged key rows do not verify, mode changes are entries', async () => {
  const s = await srv.open({ jobId: 'aud-2' });
  await srv.setState('aud-2', 'active');
  const tok = { token: s.buyerToken };
  // an op whose path could not go into an entry as it is: recorded by its hash
  const longPath = 'd/'.repeat(2600) + 'f';
  const op = await srv.pendingOp('aud-2', longPath);
  await srv.db.query("UPDATE ops SET args = jsonb_build_object('sha256', repeat('z', 70000), 'size', -1) WHERE op_id = $1", [op]);
  let r = await srv.req('POST', `/v1/jailbox/aud-2/reject/${op}`, tok);
  assert.equal(r.status, 200, r.text);
  const e = (await srv.db.query("SELECT path, jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = 'aud-2' AND operation = 'write'")).rows[0];
  assert.match(e.path, /^sha256:[0-9a-f]{64}$/);
  assert.equal(e.details.sha256, undefined);
  assert.equal(e.details.size, undefined);
  // turning supervision off is an audit entry
  r = await srv.req('PATCH', '/v1/jailbox/aud-2', { ...tok, body: { mode: 'unsupervised' } });
  assert.equal(r.status, 200);
  const m = (await srv.db.query("SELECT jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = 'aud-2' AND operation = 'mode'")).rows;
  assert.deepEqual(m.map((x) => [x.details.from, x.details.to]), [['supervised', 'unsupervised']]);
  let v = await srv.req('GET', '/v1/jailbox/aud-2/audit/verify', { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
  // a key row whose public key is not the one its id names is no key
  const keys = await srv.db.query('SELECT key_id, public_key FROM audit_signing_keys');
  await srv.db.query("UPDATE audit_signing_keys SET public_key = decode(repeat('ab', 32), 'hex')");
  v = await srv.req('GET', '/v1/jailbox/aud-2/audit/verify', { token: srv.serviceToken });
  assert.equal(v.json.ok, false);
  assert.equal(v.json.reason, 'unknown key');
  for (const k of keys.rows) await srv.db.query('UPDATE audit_signing_keys SET public_key = $2 WHERE key_id = $1', [k.key_id, k.public_key]);
  // a corrupt stored head: the transition fails (503), the server stays up
  const s3 = await srv.open({ jobId: 'aud-3' });
  await srv.db.query("UPDATE audit_heads SET seq = 9223372036854775807 WHERE job_id = 'aud-3'");
  r = await srv.req('POST', '/v1/jailbox/aud-3/abort', { token: s3.buyerToken });
  assert.equal(r.status, 503);
  assert.equal((await srv.req('GET', '/healthz')).status, 200);
});
