// waiting.test.mjs — tool calls that wait (a write or a command waiting for its sandbox, an op
// waiting for the buyer or for a paused session to resume) each wait on a thread of their
// own (server/pool.h): the JAILBOX_WS_WORKERS handler threads stay free for buyers' controls
// and other agents, JAILBOX_MAX_WAITING_CALLS bounds the waits and
// JAILBOX_MAX_WAITING_PER_SESSION one session's share of them (past either: -32017
// unavailable at once), and the extra threads end when the waits do. No worker runs here, so every queued
// write waits until its session ends.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { startServer } from './lib/server.mjs';
import { agentKit, toolFailure } from './lib/agent.mjs';

const WAITING = 12, PER_SESSION = 3;
let srv, kit;
before(async () => {
  srv = await startServer({ JAILBOX_WS_WORKERS: '2', JAILBOX_MAX_WAITING_CALLS: String(WAITING),
    JAILBOX_MAX_WAITING_PER_SESSION: String(PER_SESSION) });
  kit = agentKit(srv);
});
after(async () => { await srv.stop(); });

const threads = () => readdirSync(`/proc/${srv.child.pid}/task`).length;

test(`${WAITING} calls wait at once beside two handler threads; buyers and other agents are answered meanwhile; one more is refused; the threads end with the waits`, { timeout: 120000 }, async () => {
  const S = [];
  for (let i = 0; i <= WAITING; i++) {
    const s = await srv.open({ mode: 'unsupervised' });
    await srv.setState(s.jobId, 'active');
    s.agent = await kit.connect(s.agentToken);
    S.push(s);
  }
  const idle = threads();
  const calls = S.slice(0, WAITING).map((s, i) => {
    const t0 = Date.now();
    return kit.call(s.agent, 'write', { path: `f${i}.txt`, content: 'x\n' }, 60000)
      .then((r) => ({ r, ms: Date.now() - t0 }), (e) => ({ r: { error: { message: String(e) } }, ms: Date.now() - t0 }));
  });
  const ids = S.slice(0, WAITING).map((s) => s.jobId);
  await kit.waitFor(`${WAITING} writes stored`, async () =>
    (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE tool = 'write' AND job_id = ANY($1)", [ids])).rows[0].n === WAITING,
  15000);
  // each waits on a thread of its own, beside the two kept free
  await kit.waitFor('a thread for each waiting call', () => threads() >= idle + WAITING, 5000);
  const during = threads();
  // one more is refused at once, naming the bound
  let t0 = Date.now();
  const over = await kit.call(S[WAITING].agent, 'write', { path: 'over.txt', content: 'x\n' }, 10000);
  const overMs = Date.now() - t0;
  assert.equal(over.error?.code, -32017, JSON.stringify(over));
  assert.match(over.error.message, /too many calls are waiting/);
  assert.ok(overMs < 3000, `the refusal took ${overMs} ms`);
  // a buyer connects and pauses a session; another agent lists its tools: all on the free threads
  t0 = Date.now();
  const buyer = await kit.connect(S[WAITING].buyerToken);
  const paused = await buyer.timeout(5000).emitWithAck('jailbox:pause', {});
  const listed = await S[WAITING].agent.timeout(5000).emitWithAck('mcp', { jsonrpc: '2.0', id: 'l', method: 'tools/list' });
  const freeMs = Date.now() - t0;
  assert.ok(!paused?.error, JSON.stringify(paused));
  assert.ok(Array.isArray(listed.result?.tools) && listed.result.tools.some((t) => t.name === 'write'), JSON.stringify(listed).slice(0, 300));
  assert.ok(freeMs < 3000, `a buyer's connect and pause and an agent's tools/list took ${freeMs} ms behind ${WAITING} waiting calls`);
  // none of the waiting writes was answered meanwhile
  const early = await Promise.race([Promise.any(calls), new Promise((res) => setTimeout(() => res(null), 100))]);
  assert.equal(early, null, `a write was answered while its sandbox ran nothing: ${JSON.stringify(early)}`);
  // the sessions end: every write is answered, as not run
  for (const s of S.slice(0, WAITING)) {
    const r = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken, body: { reason: 'test over' } });
    assert.equal(r.status, 200, r.text);
  }
  const answers = await Promise.all(calls);
  for (const { r } of answers) {
    const f = toolFailure(r);
    assert.ok(f, `a write of an aborted session succeeded: ${JSON.stringify(r)}`);
    assert.doesNotMatch(f.message ?? '', /too many calls are waiting|timeout/, JSON.stringify(r));
  }
  // the extra threads end with the waits
  await kit.waitFor('the waiting calls\' threads to end', () => threads() <= idle, 10000);
  console.log(`# threads: ${idle} idle, ${during} with ${WAITING} calls waiting, ${threads()} after; refusal ${overMs} ms, free threads answered in ${freeMs} ms`);
  for (const s of S) s.agent.close();
  buyer.close();
});

test(`one session's agent holds at most ${PER_SESSION} waiting calls; another session's call still waits`, { timeout: 60000 }, async () => {
  const [A, B] = [await srv.open({ mode: 'unsupervised' }), await srv.open({ mode: 'unsupervised' })];
  for (const s of [A, B]) {
    await srv.setState(s.jobId, 'active');
    s.agent = await kit.connect(s.agentToken);
  }
  const settle = (p) => p.then((r) => r, (e) => ({ error: { message: String(e) } }));
  const mine = Array.from({ length: PER_SESSION + 2 }, (_, i) =>
    settle(kit.call(A.agent, 'write', { path: `a${i}.txt`, content: 'x\n' }, 30000)));
  const stored = async (s) => (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE tool = 'write' AND job_id = $1", [s.jobId])).rows[0].n;
  await kit.waitFor(`${PER_SESSION} of A's writes stored`, async () => await stored(A) === PER_SESSION, 15000);
  // the two past the session's share are refused at once, saying so
  const refused = [];
  for (const p of mine) {
    const r = await Promise.race([p, new Promise((res) => setTimeout(() => res(null), 3000))]);
    if (r) refused.push(r);
    if (refused.length === 2) break;
  }
  assert.equal(refused.length, 2, 'the calls past the session\'s share were not refused at once');
  for (const r of refused) {
    assert.equal(r.error?.code, -32017, JSON.stringify(r));
    assert.match(r.error.message, /too many calls of this session are waiting/);
  }
  // the buyer's whole diff is not counted in the session's share its agent holds
  const op = Number((await srv.db.query(
    "INSERT INTO ops (job_id, tool, path, args, state) VALUES ($1, 'write', 'p.txt', $2, 'pending') RETURNING op_id",
    [A.jobId, JSON.stringify({ content: 'new\n' })])).rows[0].op_id);
  const diff = await fetch(`${srv.url}/v1/jailbox/${A.jobId}/ops/${op}/diff`,
    { headers: { authorization: `Bearer ${A.buyerToken}` }, signal: AbortSignal.timeout(1500) })
    .then(async (x) => `${x.status} ${await x.text()}`, (e) => e.name);
  assert.equal(diff, 'TimeoutError', `the buyer's diff was answered at once, not read: ${diff}`);
  // an op stored without a place (a mkdir of an active session waits for none; a delete or a
  // move first has the shim list what it takes, for the landing check) that meets a pause is
  // not refused "try again" for want of one: it will still run at the resume
  const del = settle(kit.call(A.agent, 'mkdir', { path: 'd0' }, 30000));
  await kit.waitFor('A\'s mkdir stored', async () => (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE tool = 'mkdir' AND job_id = $1", [A.jobId])).rows[0].n === 1, 15000);
  const pz = await srv.req('POST', `/v1/jailbox/${A.jobId}/pause`, { token: A.buyerToken });
  assert.equal(pz.status, 200, pz.text);
  const early = await Promise.race([del, new Promise((res) => setTimeout(() => res(null), 1500))]);
  assert.equal(early, null, `the stored mkdir was answered during the pause: ${JSON.stringify(early)}`);
  // B's agent is not held to A's count
  const theirs = settle(kit.call(B.agent, 'write', { path: 'b.txt', content: 'x\n' }, 30000));
  await kit.waitFor('B\'s write stored', async () => await stored(B) === 1, 15000);
  for (const s of [A, B]) {
    const r = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken, body: { reason: 'test over' } });
    assert.equal(r.status, 200, r.text);
  }
  for (const r of [...await Promise.all(mine), await theirs]) assert.ok(toolFailure(r), JSON.stringify(r));
  const d = await del;
  assert.ok(toolFailure(d), JSON.stringify(d));
  assert.doesNotMatch(toolFailure(d).message ?? '', /too many calls/, JSON.stringify(d));
  // every place taken in this file was given back: a new session gets all of its share
  const C = await srv.open({ mode: 'unsupervised' });
  await srv.setState(C.jobId, 'active');
  C.agent = await kit.connect(C.agentToken);
  const again = Array.from({ length: PER_SESSION }, (_, i) =>
    settle(kit.call(C.agent, 'write', { path: `c${i}.txt`, content: 'x\n' }, 30000)));
  await kit.waitFor(`${PER_SESSION} of C's writes stored`, async () => await stored(C) === PER_SESSION, 15000);
  const r = await srv.req('POST', `/v1/jailbox/${C.jobId}/abort`, { token: C.buyerToken, body: { reason: 'test over' } });
  assert.equal(r.status, 200, r.text);
  for (const x of await Promise.all(again)) assert.doesNotMatch(toolFailure(x)?.message ?? '', /too many calls/, JSON.stringify(x));
  for (const s of [A, B, C]) s.agent.close();
});
