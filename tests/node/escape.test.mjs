// escape.test.mjs — escape detection through the whole real stack: jailboxd, a
// jailbox-worker, sessions in gVisor + Docker + bwrap (the test shim, so the tests can make
// the shim itself misbehave), the agent and the buyer on the stock socket.io-client. One test
// per signal: the session is aborted with reason escape_detected, the container is gone, the
// chain ends in a verified seal, the buyer gets jailbox:security_alert {kind, detail, seq}
// (also listed over REST) after jailbox:abort, the agent gets jailbox:abort and is
// disconnected, and its trust score drops by JAILBOX_TRUST_PENALTY with the event in its
// history. Then the policy: signals that only alert, after N. Needs root, dockerd with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { linkSync, mkdirSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startJail, openSession, connect, waitEvent, waitFor, waitState, sessionOf, call, control,
  docker, containersOf, closeAll } from './lib/jail.mjs';
import { toolFailure } from './lib/agent.mjs';

const PENALTY = 15;
let srv;
let outside;

before(async () => {
  srv = await startJail({ image: 'jailbox-sandbox:escape',
    env: { JAILBOX_TRUST_PENALTY: String(PENALTY), JAILBOX_ALERT_AFTER: 'excluded_path:3' } });
  outside = join(srv.dir, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'outside secret\n');
});

after(async () => {
  await closeAll(srv);
  const log = srv.log();
  const jobs = (await srv.db.query('SELECT job_id FROM sessions')).rows.map((r) => r.job_id);
  await srv.stop();
  assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  for (const j of jobs) assert.deepEqual(await containersOf(j), [], 'container left behind for ' + j);
});

let agentNo = 0;
// a session with its agent and buyer connected (the agent's arrival makes it active)
async function live(build = () => {}, extra = {}) {
  const agentId = `agent-esc-${++agentNo}`;
  const s = await openSession(srv, (d) => {
    writeFileSync(join(d, 'a.txt'), 'hello\n');
    build(d);
  }, { agentId, mode: 'unsupervised', ...extra });
  const buyer = await connect(srv, s.buyerToken);
  const agent = await connect(srv, s.agentToken);
  await waitState(srv, s.jobId, ['active']);
  const before = await srv.req('GET', '/v1/agents/' + agentId, { token: srv.serviceToken });
  return { ...s, agentId, buyer, agent, score: before.json.trustScore };
}

// everything an escape must leave behind; `t0` is when the signal was given
async function assertEscaped(S, kind, t0) {
  const alert = await waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === kind && p.escape === true, 30000);
  const alertAt = Date.now();
  // the container is gone before the buyer hears of it
  assert.deepEqual(await containersOf(S.jobId), [], "container still there when the alert came\n" + srv.log().split("\n").filter((l) => l.includes(S.jobId)).join("\n"));
  assert.equal(typeof alert.detail, 'string');
  assert.ok(alert.detail.length > 0);
  assert.equal(typeof alert.seq, 'number');
  const abortEv = await waitEvent(S.buyer, 'jailbox:abort');
  assert.equal(abortEv.reason, 'escape_detected');
  const agentAbort = await waitEvent(S.agent, 'jailbox:abort');
  assert.equal(agentAbort.reason, 'escape_detected');
  // order: abort to the agent, then the alert to the buyer
  const iAbort = S.buyer.events.findIndex((e) => e.event === 'jailbox:abort');
  const iAlert = S.buyer.events.findIndex((e) => e.event === 'jailbox:security_alert' && e.payload.escape);
  assert.ok(iAbort >= 0 && iAbort < iAlert, 'jailbox:abort comes before the alert');
  // the agent's socket is closed by the server
  await waitFor(srv, 'agent disconnected', () => S.agent.disconnectReason, 5000);
  assert.equal(S.agent.disconnectReason, 'io server disconnect');
  const st = await sessionOf(srv, S.jobId);
  assert.equal(st.state, 'aborted');
  assert.equal(st.stateReason, 'escape_detected');
  assert.equal(st.pendingOps, 0);
  // the chain: the abort entry names the signal, the seal ends it, and it verifies
  const audit = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: srv.serviceToken });
  const entries = audit.text.trim().split('\n').map((l) => JSON.parse(l));
  const last = entries[entries.length - 1];
  assert.equal(last.operation, 'seal');
  const abortEntry = entries.find((e) => e.seq === alert.seq);
  assert.equal(abortEntry.operation, 'abort');
  assert.equal(abortEntry.details.kind, kind);
  assert.equal(abortEntry.details.reason, 'escape_detected');
  const v = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, v.text);
  // visible over REST
  const al = await srv.req('GET', `/v1/jailbox/${S.jobId}/alerts`, { token: srv.serviceToken });
  assert.equal(al.status, 200, al.text);
  const a = al.json.alerts.find((x) => x.kind === kind && x.escape);
  assert.ok(a, al.text);
  assert.equal(a.seq, alert.seq);
  // the trust score paid, and the history says why
  const ag = await srv.req('GET', '/v1/agents/' + S.agentId, { token: srv.serviceToken });
  assert.equal(ag.json.trustScore, S.score - PENALTY);
  const h = ag.json.history.filter((e) => e.kind === 'escape_detected');
  assert.equal(h.length, 1, JSON.stringify(ag.json.history));
  assert.equal(h[0].scoreDelta, -PENALTY);
  assert.equal(h[0].jobId, S.jobId);
  assert.equal(h[0].detail.kind, kind);
  assert.equal(h[0].detail.seq, alert.seq);
  return { alert, ms: alertAt - t0 };
}

const timings = {};
after(() => console.log('# escape signal → alert with the container gone, ms:', JSON.stringify(timings)));

test('path traversal (jailboxd syntax check): aborted, pending ops rejected, sealed, alerted, score lowered', { timeout: 180000 }, async () => {
  const S = await live(() => {}, { mode: 'supervised' });
  // a pending supervised write, then the escape
  const pending = call(S.agent, 'write', { path: 'new.txt', content: 'held\n' });
  await waitEvent(S.buyer, 'jailbox:approval_request');
  const t0 = Date.now();
  // the agent is answered before its socket is ended
  const r = await call(S.agent, 'read', { path: '../outside/secret.txt' }).catch((e) => ({ cut: e.message }));
  assert.equal(toolFailure(r)?.data?.reason, 'denied', JSON.stringify(r));
  const { ms } = await assertEscaped(S, 'path_traversal', t0);
  timings.path_traversal = ms;
  assert.ok(ms < 1000, `took ${ms} ms`);
  const held = await pending.catch((e) => ({ gone: e.message }));
  assert.ok(held.gone || toolFailure(held), JSON.stringify(held));
  const ops = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops`, { token: srv.serviceToken });
  const w = ops.json.ops.find((o) => o.tool === 'write');
  assert.equal(w.state, 'rejected');
});

test('absolute path (jailboxd syntax check)', { timeout: 180000 }, async () => {
  const S = await live();
  const t0 = Date.now();
  const r = await call(S.agent, 'write', { path: '/etc/passwd', content: 'x' }).catch((e) => ({ cut: e.message }));
  assert.equal(toolFailure(r)?.data?.reason, 'denied', JSON.stringify(r));
  const { ms } = await assertEscaped(S, 'absolute_path', t0);
  timings.absolute_path = ms;
  assert.ok(ms < 1000, `took ${ms} ms`);
});

test('through a symlink that leaves the workspace (flagged by the pre-scan)', { timeout: 180000 }, async () => {
  const S = await live((d) => symlinkSync(outside, join(d, 'out')));
  const t0 = Date.now();
  const r = await call(S.agent, 'read', { path: 'out/secret.txt' }).catch((e) => ({ cut: e.message }));
  assert.equal(toolFailure(r)?.data?.reason, 'flagged', JSON.stringify(r));
  const { ms } = await assertEscaped(S, 'symlink_escape', t0);
  timings.symlink_escape = ms;
  assert.ok(ms < 1000, `took ${ms} ms`);
});

test('onto a symlink that leaves the workspace (flagged by the pre-scan)', { timeout: 180000 }, async () => {
  const S = await live((d) => symlinkSync(join(outside, 'secret.txt'), join(d, 'onto')));
  const t0 = Date.now();
  await call(S.agent, 'write', { path: 'onto', content: 'overwrite\n' }).catch(() => {});
  await assertEscaped(S, 'symlink_escape', t0);
  assert.equal(readFileSync(join(outside, 'secret.txt'), 'utf8'), 'outside secret\n');
});

test('a symlink leaving the workspace made after the pre-scan (caught at open time by the shim)', { timeout: 180000 }, async () => {
  const S = await live();
  symlinkSync(outside, join(S.dir, 'late'));
  const t0 = Date.now();
  const r = await call(S.agent, 'read', { path: 'late/secret.txt' }).catch((e) => ({ cut: e.message }));
  assert.equal(toolFailure(r)?.data?.reason, 'denied', JSON.stringify(r));
  const { alert } = await assertEscaped(S, 'symlink_escape', t0);
  assert.match(alert.detail, /leads out of the workspace/);
});

test('ops waiting behind an escape run nothing once it is caught (reads handed straight to the worker, one at a time per session)', { timeout: 180000 }, async () => {
  const S = await live();
  symlinkSync(outside, join(S.dir, 'late'));
  // the session row held from here: the worker's transactions for the ops queue up behind it
  // in the order they come — the escape first, then two plain reads
  const hold = await srv.db.connect();
  await hold.query('BEGIN');
  await hold.query('SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE', [S.jobId]);
  const t0 = Date.now();
  const esc = call(S.agent, 'read', { path: 'late/secret.txt' }).catch((e) => ({ cut: e.message }));
  await new Promise((r) => setTimeout(r, 300));
  const after = [0, 1].map(() => call(S.agent, 'read', { path: 'a.txt' }).catch((e) => ({ cut: e.message })));
  await new Promise((r) => setTimeout(r, 300));
  await hold.query('COMMIT');
  hold.release();
  const r = await esc;
  assert.equal(toolFailure(r)?.data?.reason, 'denied', JSON.stringify(r));
  for (const a of await Promise.all(after))
    assert.ok(!a.result || a.result.isError, 'a read ran after the escape was caught: ' + JSON.stringify(a).slice(0, 300));
  await assertEscaped(S, 'symlink_escape', t0);
  // nothing was read after the escape: its op is the last that ran in the shim
  const ran = (await srv.db.query("SELECT op_id, path, result FROM ops WHERE job_id = $1 AND tool = 'read' ORDER BY op_id", [S.jobId])).rows;
  assert.ok(ran.every((o) => o.result?.ok !== true), JSON.stringify(ran));
});

// The same, observed in the sandbox itself: a direct read runs in the shim before anything is
// stored (41e08a3), so an escape caught by a direct read must end the session's shim use at
// once — not when its op is committed. The reads that came after it wait for nothing in the
// database before they run; had they run, the file they read would have a new access time
// (set far in the past first, so that relatime updates it).
test('a read that comes after an escape caught by a direct read does not run in the shim', { timeout: 180000 }, async (t) => {
  const S = await live((d) => { writeFileSync(join(d, 'probe.txt'), 'probe\n'); writeFileSync(join(d, 'b.txt'), 'b\n'); });
  symlinkSync(outside, join(S.dir, 'late'));
  const old = new Date('2001-01-01T00:00:00Z');
  const atime = (f) => statSync(join(S.dir, f)).atimeMs;
  // the observer works: a read moves the access time
  utimesSync(join(S.dir, 'probe.txt'), old, new Date());
  assert.equal((await call(S.agent, 'read', { path: 'probe.txt' })).result?.isError, false);
  if (atime('probe.txt') === old.getTime()) return t.skip('the workspace keeps no access times here');
  utimesSync(join(S.dir, 'b.txt'), old, new Date());
  const hold = await srv.db.connect();
  await hold.query('BEGIN');
  await hold.query('SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE', [S.jobId]);
  const t0 = Date.now();
  const esc = call(S.agent, 'read', { path: 'late/secret.txt' }).catch((e) => ({ cut: e.message }));
  await new Promise((r) => setTimeout(r, 300));
  const later = call(S.agent, 'read', { path: 'b.txt' }).catch((e) => ({ cut: e.message }));
  await new Promise((r) => setTimeout(r, 300));
  await hold.query('COMMIT');
  hold.release();
  assert.equal(toolFailure(await esc)?.data?.reason, 'denied');
  assert.ok(!(await later).result || (await later).result.isError, JSON.stringify(await later));
  await assertEscaped(S, 'symlink_escape', t0);
  assert.equal(atime('b.txt'), old.getTime(), 'b.txt was read in the shim after the escape was caught');
});

test('a hard link made after the pre-scan (caught at open time by the shim)', { timeout: 180000 }, async () => {
  const S = await live();
  linkSync(join(outside, 'secret.txt'), join(S.dir, 'late-hard'));
  const t0 = Date.now();
  await call(S.agent, 'read', { path: 'late-hard' }).catch(() => {});
  const { alert } = await assertEscaped(S, 'hard_link', t0);
  assert.match(alert.detail, /hard links/);
});

test('a hard link (flagged by the pre-scan)', { timeout: 180000 }, async () => {
  const S = await live((d) => linkSync(join(outside, 'secret.txt'), join(d, 'hard')));
  const t0 = Date.now();
  await call(S.agent, 'read', { path: 'hard' }).catch(() => {});
  const { ms } = await assertEscaped(S, 'hard_link', t0);
  timings.hard_link = ms;
});

test('the shim killed by the syscall filter (SIGSYS)', { timeout: 180000 }, async () => {
  const S = await live();
  const t0 = Date.now();
  await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.die', how: 'sigsys' }, timeoutMs: 10000 }, 20000).catch(() => {});
  const { alert, ms } = await assertEscaped(S, 'seccomp_kill', t0);
  assert.match(alert.detail, /exit code 159/);
  timings.seccomp_kill = ms;
});

test('the shim exiting by itself', { timeout: 180000 }, async () => {
  const S = await live();
  const t0 = Date.now();
  await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.die', how: 'exit', code: 3 }, timeoutMs: 10000 }, 20000).catch(() => {});
  const { alert, ms } = await assertEscaped(S, 'shim_exit', t0);
  assert.match(alert.detail, /exit code 3/);
  timings.shim_exit = ms;
});

test('the container killed from outside', { timeout: 180000 }, async () => {
  const S = await live();
  const t0 = Date.now();
  const k = await docker('POST', `/containers/${S.containerId}/kill`);
  assert.equal(k.status, 204);
  const { ms } = await assertEscaped(S, 'sandbox_died', t0);
  timings.sandbox_died = ms;
});

test('a malformed line from the shim', { timeout: 180000 }, async () => {
  const S = await live();
  const t0 = Date.now();
  const r = await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.emit', what: 'malformed' }, timeoutMs: 10000 }, 20000);
  assert.equal(r.ok, false);
  const { ms } = await assertEscaped(S, 'protocol_violation', t0);
  timings.protocol_violation_malformed = ms;
});

test('an oversized line from the shim', { timeout: 180000 }, async () => {
  const S = await live();
  const t0 = Date.now();
  const r = await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.emit', what: 'oversized' }, timeoutMs: 20000 }, 30000);
  assert.equal(r.ok, false);
  assert.match(r.error, /over/);
  const { ms } = await assertEscaped(S, 'protocol_violation', t0);
  timings.protocol_violation_oversized = ms;
});

// A read handed straight to the worker runs in the shim before it is stored (41e08a3). When
// the shim answers it with a malformed line and the worker then may not store the op (here:
// jailboxd decided on its copy of the session, and the session's mode changed since, as a
// switch made on another instance would), the protocol violation must still be raised: the op
// is not run again on that shim (its channel is dead), so nothing else would tell it.
test('a malformed answer to a direct read the worker may not store', { timeout: 180000 }, async () => {
  const S = await live();
  // jailboxd keeps its copy of the session; the worker knows the session's audit head
  const r0 = await call(S.agent, 'read', { path: 'a.txt' });
  assert.ok(r0.result && !r0.result.isError, JSON.stringify(r0));
  await srv.db.query("UPDATE sessions SET mode = 'supervised' WHERE job_id = $1", [S.jobId]);
  const armed = await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.arm', what: 'malformed' }, timeoutMs: 10000 }, 20000);
  assert.equal(armed.ok, true, JSON.stringify(armed));
  const t0 = Date.now();
  const read = call(S.agent, 'read', { path: 'a.txt' }).catch((e) => ({ cut: e.message }));
  const { ms } = await assertEscaped(S, 'protocol_violation', t0);
  timings.protocol_violation_direct_read_refused = ms;
  const r = await read;
  assert.ok(!r.result || r.result.isError, JSON.stringify(r));
});

// Before a changing op the worker asks the shim whether it ran the op already (`recall`,
// sandbox/proto/PROTOCOL.md "Exactly once"). A malformed line in answer to that question is
// the same protocol violation as in answer to the op itself: the session is aborted, the write
// is not reported done and no later op runs on the dead channel.
test('a malformed answer to the recall before a write', { timeout: 180000 }, async () => {
  const S = await live();
  const armed = await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.arm', what: 'malformed', target: 'recall' }, timeoutMs: 10000 }, 20000);
  assert.equal(armed.ok, true, JSON.stringify(armed));
  const t0 = Date.now();
  const write = call(S.agent, 'write', { path: 'b.txt', content: 'x\n' }).catch((e) => ({ cut: e.message }));
  const { ms } = await assertEscaped(S, 'protocol_violation', t0);
  timings.protocol_violation_recall = ms;
  const r = await write;
  assert.ok(!r.result || r.result.isError, JSON.stringify(r));
});

// An answer of the wrong shape ({ok:true} without its result) is a protocol violation too
// (without the check the worker made no answer of it at all: the op could not be stored, and
// no escape was raised).
test('an answer to a write without its result', { timeout: 180000 }, async () => {
  const S = await live();
  const armed = await control(srv.ctl, { jobId: S.jobId, request: { op: 'test.arm', what: 'noresult', target: 'write' }, timeoutMs: 10000 }, 20000);
  assert.equal(armed.ok, true, JSON.stringify(armed));
  const t0 = Date.now();
  const write = call(S.agent, 'write', { path: 'c.txt', content: 'x\n' }).catch((e) => ({ cut: e.message }));
  const { ms } = await assertEscaped(S, 'protocol_violation', t0);
  timings.protocol_violation_noresult = ms;
  const r = await write;
  assert.ok(!r.result || r.result.isError, JSON.stringify(r));
});

test('repeated excluded-file reads alert after N (JAILBOX_ALERT_AFTER) without aborting or scoring', { timeout: 180000 }, async () => {
  const S = await live((d) => writeFileSync(join(d, 'secret.key'), 'k\n'), { exclude: ['*.key'] });
  for (let i = 1; i <= 7; i++) {
    const r = await call(S.agent, 'read', { path: 'secret.key' });
    assert.equal(toolFailure(r).data.reason, 'excluded');
  }
  const alerts = await waitFor(srv, 'two alerts', async () => {
    const al = await srv.req('GET', `/v1/jailbox/${S.jobId}/alerts`, { token: srv.serviceToken });
    return al.json.alerts.length >= 2 ? al.json.alerts : null;
  });
  assert.deepEqual(alerts.map((a) => [a.kind, a.escape]), [['excluded_path', false], ['excluded_path', false]]);
  const ev = await waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'excluded_path' && p.count === 6);
  assert.equal(ev.escape, false);
  assert.equal((await sessionOf(srv, S.jobId)).state, 'active');
  const ag = await srv.req('GET', '/v1/agents/' + S.agentId, { token: srv.serviceToken });
  assert.equal(ag.json.trustScore, S.score);
  assert.equal(ag.json.history.filter((e) => e.kind === 'security_alert').length, 2);
  // the work goes on
  const ok = await call(S.agent, 'read', { path: 'a.txt' });
  assert.equal(ok.result.structuredContent.content, 'hello\n');
  const audit = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: srv.serviceToken });
  const ops = audit.text.trim().split('\n').map((l) => JSON.parse(l).operation);
  assert.equal(ops.filter((o) => o === 'security_alert').length, 2);
});
