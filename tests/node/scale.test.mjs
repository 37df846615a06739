// scale.test.mjs — jailbox scaled out on this host with real processes: one
// PostgreSQL, real redis-server, two jailboxd instances (external DB mode, Redis fan-out),
// a standalone jailbox-worker (gVisor + Docker + bwrap: needs root and dockerd with runsc, as
// fileops.test.mjs), and nginx in front with deploy/nginx/jailbox.conf.
//   1. agent socket on instance A, buyer socket on B, approval over REST on B: the agent's
//      call returns; events caused on one instance reach the buyer on the other, once.
//   2. Redis killed and started again mid-session: no op or decision lost, events go on
//      (over PostgreSQL NOTIFY meanwhile), fan-out over Redis resumes by itself.
//   3. an op whose commit fails: no instance announces it; stored again, its approval request
//      reaches the buyer on each instance once.
//   4. SIGTERM to the instance holding both sockets (through nginx) while a write waits
//      for approval: /readyz 503, both socket.io-client clients reconnect through nginx to
//      the other instance, get the state and the pending approval, and the session goes on.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { io } from 'socket.io-client';
import pgClient from 'pg';
import { toolFailure } from './lib/agent.mjs';
import {
  ROOT, JAILBOXD, cleanup, scratch, sharedSecrets, sleep, startInstance, startNginx, startPostgres,
  startRedis, startWorker, waitFor,
} from './lib/cluster.mjs';

const IMAGE = 'jailbox-sandbox:scale' + (process.env.JB_IMAGE_SUFFIX ?? ''); // a suffix keeps parallel checkouts apart
let dir, pg, redis, secrets, wsroot, A, B, W, lb;
const sockets = [];
let S; // the session the tests share

const logs = () => [A, B, W].filter(Boolean).map((p) => p.log().slice(-3000)).join('\n----\n');

function connect(addr, token, opts = {}) {
  const s = io('http://' + addr, { transports: ['websocket'], auth: { token }, reconnection: false, forceNew: true, ...opts });
  s.events = [];
  s.onAny((event, payload) => s.events.push({ event, payload }));
  sockets.push(s);
  return new Promise((res, rej) => {
    s.once('connect', () => res(s));
    s.once('connect_error', (e) => { if (!opts.reconnection) rej(e); });
  });
}

function waitEvent(s, name, pred = () => true, ms = 20000) {
  const have = s.events.find((e) => e.event === name && pred(e.payload));
  if (have) return Promise.resolve(have.payload);
  return new Promise((res, rej) => {
    const t = setTimeout(() => { s.offAny(f); rej(new Error(`no ${name} within ${ms} ms; got ${JSON.stringify(s.events).slice(-3000)}\n${logs()}`)); }, ms);
    const f = (event, payload) => { if (event === name && pred(payload)) { clearTimeout(t); s.offAny(f); res(payload); } };
    s.onAny(f);
  });
}
const count = (s, name, pred) => s.events.filter((e) => e.event === name && pred(e.payload)).length;

let rpcId = 0;
function call(agent, name, args, ms = 90000) {
  return agent.timeout(ms).emitWithAck('mcp', { jsonrpc: '2.0', id: ++rpcId, method: 'tools/call', params: { name, arguments: args } });
}

async function sessionOf(inst, jobId) {
  const r = await inst.req('GET', '/v1/jailbox/' + jobId);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// writes `content` through the agent; returns {opId, result promise} once the buyer `b` saw
// the approval request
async function supervisedWrite(agent, b, content) {
  const before = new Set(b.events.filter((e) => e.event === 'jailbox:approval_request').map((e) => e.payload.opId));
  const result = call(agent, 'write', { path: 'a.txt', content });
  const req = await waitEvent(b, 'jailbox:approval_request', (p) => p.jobId === S.jobId && !before.has(p.opId) && p.path === 'a.txt', 60000);
  return { opId: req.opId, result };
}

async function metric(inst, key) {
  return (await inst.metrics())[key];
}

before(async () => {
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'), ['--shim', join(JAILBOXD, '../jailbox-shim'), '--tag', IMAGE], { stdio: 'inherit' });
  dir = scratch();
  wsroot = join(dir, 'workspaces');
  mkdirSync(wsroot);
  pg = await startPostgres(dir);
  redis = await startRedis(dir);
  secrets = sharedSecrets(dir);
  // the instances name the image of a session opened without one (JAILBOX_SANDBOX_IMAGE); the
  // worker checks it against its own allowlist
  const common = { pg, redis, secrets, wsroot, env: { JAILBOX_DRAIN_DELAY_MS: '700', JAILBOX_SHUTDOWN_GRACE_MS: '15000', JAILBOX_SANDBOX_IMAGE: IMAGE } };
  A = await startInstance('a', dir, common);
  B = await startInstance('b', dir, { ...common, redisUrl: redis.unixUrl }); // A over TCP, B over the Unix socket
  W = await startWorker('worker-1', dir, { pg, secrets, wsroot, env: { JAILBOX_SANDBOX_IMAGE: IMAGE } });
  lb = await startNginx(dir, [A, B]);
  for (const i of [A, B]) await waitFor(i.name + ' subscribed to Redis', async () => (await metric(i, 'jailbox_redis_up')) === 1, 20000, i.log);

  // a supervised session opened through the load balancer
  const name = 'ws-scale';
  mkdirSync(join(wsroot, name));
  writeFileSync(join(wsroot, name, 'a.txt'), 'v1\n');
  chmodSync(join(wsroot, name), 0o755);
  const r = await fetch(lb.url + '/v1/jailbox', {
    method: 'POST', headers: { authorization: 'Bearer ' + secrets.token, 'content-type': 'application/json' },
    body: JSON.stringify({ agentId: 'agent-scale', workspace: name }),
  });
  assert.equal(r.status, 201, await r.clone().text());
  S = { ...(await r.json()), dir: join(wsroot, name) };
  const st = await waitFor('awaiting_agent', async () => {
    const x = await sessionOf(B, S.jobId);
    return ['awaiting_agent', 'failed'].includes(x.state) ? x : null;
  }, 120000, logs);
  assert.equal(st.state, 'awaiting_agent', st.stateReason);
});

after(async () => {
  for (const s of sockets) s.close();
  const all = [A, B, W].filter(Boolean).map((p) => p.log()).join('\n');
  for (const p of [A, B, W, lb]) if (p) await p.stop();
  if (redis) await redis.stop();
  if (pg) pg.stop();
  if (dir) cleanup(dir);
  assert.doesNotMatch(all, /ERROR: (Address|Leak)Sanitizer|runtime error:/);
});

test('/metrics: service token only; Prometheus text with the cluster and instance series', async () => {
  assert.equal((await A.req('GET', '/metrics', { token: null })).status, 401);
  assert.equal((await A.req('GET', '/metrics', { token: S.buyerToken })).status, 403);
  assert.equal((await A.req('GET', '/metrics', { token: S.agentToken })).status, 403);
  const r = await A.req('GET', '/metrics');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const m = await A.metrics();
  assert.equal(m['jailbox_sessions{state="awaiting_agent"}'], 1);
  for (const k of ['jailbox_sockets{role="buyer"}', 'jailbox_sockets{role="agent"}', 'jailbox_approval_wait_seconds_count',
    'jailbox_audit_append_seconds_count', 'jailbox_launch_seconds_count', 'jailbox_redis_up', 'jailbox_draining'])
    assert.ok(k in m, k + ' missing:\n' + r.text);
  assert.ok(m['jailbox_launch_seconds_count'] >= 1, 'the launch is counted');
  assert.equal(m['jailbox_launch_seconds_bucket{le="+Inf"}'], m['jailbox_launch_seconds_count']);
  for (const w of ['gvisor', 'docker', 'bwrap']) assert.equal(m[`jailbox_wall_probe_up{wall="${w}"}`], 1, w + ':\n' + r.text);
  // the load balancer does not route /metrics
  assert.equal((await fetch(lb.url + '/metrics', { headers: { authorization: 'Bearer ' + secrets.token } })).status, 404);
});

test('a wrong Redis password: the instance serves, its fan-out stays down and the log says why', async () => {
  const C = await startInstance('c', dir, { pg, redis, redisUrl: `redis://:not-the-pass-7f3a@127.0.0.1:${redis.port}`, secrets, wsroot });
  try {
    await waitFor('AUTH refused in the log', () => /Redis unreachable.*AUTH/.test(C.log()), 10000, C.log);
    const m = await C.metrics();
    assert.equal(m.jailbox_redis_configured, 1);
    assert.equal(m.jailbox_redis_up, 0);
    assert.equal((await C.req('GET', '/v1/jailbox/' + S.jobId)).status, 200);
    assert.doesNotMatch(C.log(), /not-the-pass-7f3a/, 'the password is never logged');
  } finally {
    assert.deepEqual(await C.stop(), { code: 0, sig: null });
  }
});

let agentA, buyerA, buyerB;

test('agent on A, buyer on B, approval over REST on B: the call returns; events cross instances once', { timeout: 180000 }, async () => {
  agentA = await connect(A.wsAddr, S.agentToken);
  buyerB = await connect(B.wsAddr, S.buyerToken);
  buyerA = await connect(A.wsAddr, S.buyerToken);
  await waitFor('active', async () => (await sessionOf(B, S.jobId)).state === 'active', 20000, logs);
  const { opId, result } = await supervisedWrite(agentA, buyerB, 'v2\n');
  await waitEvent(buyerA, 'jailbox:approval_request', (p) => p.opId === opId);
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'v1\n', 'nothing is written before the approval');
  const pubB = await metric(B, 'jailbox_redis_published_total');
  const ap = await B.req('POST', `/v1/jailbox/${S.jobId}/approve/${opId}`, { token: S.buyerToken });
  assert.equal(ap.status, 200, ap.text);
  const r = await result;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.equal(r.result.structuredContent.written, 3);
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'v2\n');
  // the decision was made on B and reaches the buyer on A (over Redis) and on B, once each
  const isOp = (p) => p.opId === opId && p.state === 'approved';
  await waitEvent(buyerA, 'jailbox:op', isOp);
  await waitEvent(buyerB, 'jailbox:op', isOp);
  assert.ok((await metric(B, 'jailbox_redis_published_total')) > pubB, 'B published on Redis');
  // a control on A's socket reaches the buyer on B; one on B's REST reaches the buyer on A
  assert.deepEqual(await buyerA.timeout(10000).emitWithAck('jailbox:pause', {}), { ok: true, jobId: S.jobId, state: 'paused', previous: 'active', rejectedOps: 0 });
  await waitEvent(buyerB, 'jailbox:state', (p) => p.state === 'paused');
  await waitEvent(agentA, 'jailbox:state', (p) => p.state === 'paused');
  assert.equal((await B.req('POST', `/v1/jailbox/${S.jobId}/resume`, { token: S.buyerToken })).status, 200);
  await waitEvent(buyerA, 'jailbox:state', (p) => p.state === 'active' && p.previous === 'paused');
  await sleep(500); // duplicates, if any, would have arrived
  for (const [b, n] of [[buyerA, 'A'], [buyerB, 'B']]) {
    assert.equal(count(b, 'jailbox:op', isOp), 1, 'buyer on ' + n + ': the decision once');
    assert.equal(count(b, 'jailbox:approval_request', (p) => p.opId === opId), 1, 'buyer on ' + n + ': the request once');
    assert.equal(count(b, 'jailbox:state', (p) => p.state === 'paused'), 1, 'buyer on ' + n + ': the pause once');
    assert.equal(count(b, 'jailbox:state', (p) => p.state === 'active' && p.previous === 'paused'), 1, 'buyer on ' + n + ': the resume once');
  }
  assert.equal(count(agentA, 'jailbox:state', (p) => p.state === 'paused'), 1);
});

test('Redis killed and started again mid-session: nothing lost, fan-out resumes by itself', { timeout: 180000 }, async () => {
  await redis.stop();
  for (const i of [A, B]) await waitFor(i.name + ' sees Redis down', async () => (await metric(i, 'jailbox_redis_up')) === 0, 15000, i.log);
  // REST and sockets keep working; events go over PostgreSQL meanwhile
  const refusedB = await metric(B, 'jailbox_redis_refused_total');
  let w = await supervisedWrite(agentA, buyerB, 'v3\n');
  assert.equal((await B.req('POST', `/v1/jailbox/${S.jobId}/approve/${w.opId}`, { token: S.buyerToken })).status, 200);
  let r = await w.result;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'v3\n');
  const during = w.opId;
  await waitEvent(buyerA, 'jailbox:op', (p) => p.opId === during && p.state === 'approved');
  assert.ok((await metric(B, 'jailbox_redis_refused_total')) > refusedB, 'B fell back while Redis was down');

  const snapshots = (s) => s.events.filter((e) => e.event === 'jailbox:state' && e.payload.snapshot === true).length;
  const snap0 = [buyerA, buyerB, agentA].map(snapshots);
  await redis.restart();
  for (const i of [A, B]) await waitFor(i.name + ' back on Redis', async () => (await metric(i, 'jailbox_redis_up')) === 1, 20000, i.log);
  // once subscribed again, every instance sends its sockets the state (and the buyers their
  // pending approvals) again: whatever was published while it was not subscribed is covered
  await waitFor('state resent after the outage', () => [buyerA, buyerB, agentA].every((s, k) => snapshots(s) > snap0[k]), 10000, logs);
  const pubA = await metric(A, 'jailbox_redis_published_total');
  const recB = await metric(B, 'jailbox_redis_received_total');
  w = await supervisedWrite(agentA, buyerA, 'v4\n');
  // decided on A's socket this time: the buyer on B hears it through Redis again
  const ack = await buyerA.timeout(10000).emitWithAck('jailbox:approve', { opId: w.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  r = await w.result;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'v4\n');
  const after4 = w.opId;
  await waitEvent(buyerB, 'jailbox:op', (p) => p.opId === after4 && p.state === 'approved');
  assert.ok((await metric(A, 'jailbox_redis_published_total')) > pubA, 'A publishes on Redis again');
  assert.ok((await metric(B, 'jailbox_redis_received_total')) > recB, 'B receives from Redis again');
  await sleep(500);
  for (const b of [buyerA, buyerB]) {
    assert.equal(count(b, 'jailbox:op', (p) => p.opId === during && p.state === 'approved'), 1);
    assert.equal(count(b, 'jailbox:op', (p) => p.opId === after4 && p.state === 'approved'), 1);
  }
  // what arrives on Redis is checked: an envelope on another session's channel, malformed
  // JSON, an unknown kind (a wire name is not one: db/events.h), a duplicate key or a NUL byte
  // is never delivered
  const cli = redis.cli;
  const mark = (k) => ({ jobId: S.jobId, state: 'forged-' + k });
  cli('PUBLISH', 'jailbox:session:job-other', JSON.stringify({ job: S.jobId, kind: 'state', payload: mark(1) }));
  cli('PUBLISH', 'jailbox:session:' + S.jobId, '{"job":');
  cli('PUBLISH', 'jailbox:session:' + S.jobId, JSON.stringify({ job: S.jobId, kind: 'connect', payload: mark(2) }));
  cli('PUBLISH', 'jailbox:session:' + S.jobId, JSON.stringify({ job: S.jobId, kind: 'jailbox:state', payload: mark(2) }));
  cli('PUBLISH', 'jailbox:session:' + S.jobId, `{"job":"${S.jobId}","kind":"state","payload":{"state":"forged-3"},"job":"x"}`);
  cli('PUBLISH', 'jailbox:session:' + S.jobId, `{"job":"${S.jobId}","kind":"state","payload":{"state":"forged-4\\u0000"}}`);
  // a well-formed one on the right channel is delivered: the check above can fail
  cli('PUBLISH', 'jailbox:session:' + S.jobId, JSON.stringify({ job: S.jobId, kind: 'state', payload: mark('ok') }));
  await waitEvent(buyerB, 'jailbox:state', (p) => p.state === 'forged-ok');
  await sleep(300);
  for (const b of [buyerA, buyerB]) {
    assert.equal(b.events.filter((e) => /^forged-[1-4]/.test(e.payload?.state ?? '') || e.event === 'connect').length, 0);
  }

  // nothing lost: every op of the session is finished, nothing pending, the chain verifies
  const ops = await B.req('GET', `/v1/jailbox/${S.jobId}/ops`);
  assert.equal(ops.status, 200);
  const writes = ops.json.ops.filter((o) => o.tool === 'write');
  assert.equal(writes.length, 3);
  assert.ok(writes.every((o) => o.state === 'done'), JSON.stringify(writes));
  const v = await A.req('GET', `/v1/jailbox/${S.jobId}/audit/verify`);
  assert.equal(v.status, 200, v.text);
  assert.equal(v.json.ok, true, v.text);
});

test('a commit that fails announces nothing on any instance; the next one reaches each buyer once', { timeout: 120000 }, async () => {
  // events are published after the commit returned (db/events.h): a deferred trigger fails the
  // commit itself — not a statement — of the op a supervised write stores
  const db = new pgClient.Client({ host: pg.host, user: 'ext', database: 'postgres' });
  await db.connect();
  try {
    await db.query(`CREATE FUNCTION jb_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'commit refused by the test'; END $$`);
    await db.query(`CREATE CONSTRAINT TRIGGER jb_test_refuse AFTER INSERT ON ops
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
      WHEN (NEW.job_id = '${S.jobId}' AND NEW.tool = 'write' AND NEW.path = 'refused.txt') EXECUTE FUNCTION jb_test_refuse()`);
    const requests = (b) => count(b, 'jailbox:approval_request', (p) => p.path === 'refused.txt');
    const r = await call(agentA, 'write', { path: 'refused.txt', content: 'no\n' });
    assert.equal(toolFailure(r)?.data?.reason, 'unavailable', 'the write failed: ' + JSON.stringify(r));
    assert.equal((await db.query("SELECT count(*)::int n FROM ops WHERE job_id = $1 AND tool = 'write' AND path = 'refused.txt'", [S.jobId])).rows[0].n, 0);
    await sleep(1000); // an event published before the commit failed would have arrived
    for (const [b, n] of [[buyerA, 'A'], [buyerB, 'B']]) assert.equal(requests(b), 0, 'buyer on ' + n + ': nothing announced');

    await db.query('DROP TRIGGER jb_test_refuse ON ops');
    const w = call(agentA, 'write', { path: 'refused.txt', content: 'yes\n' });
    const req = await waitEvent(buyerB, 'jailbox:approval_request', (p) => p.path === 'refused.txt');
    await waitEvent(buyerA, 'jailbox:approval_request', (p) => p.opId === req.opId);
    assert.equal((await A.req('POST', `/v1/jailbox/${S.jobId}/reject/${req.opId}`, { token: S.buyerToken })).status, 200);
    const done = await w;
    assert.equal(toolFailure(done)?.data?.reason, 'rejected', JSON.stringify(done));
    const isOp = (p) => p.opId === req.opId && p.state === 'rejected';
    await waitEvent(buyerA, 'jailbox:op', isOp);
    await waitEvent(buyerB, 'jailbox:op', isOp);
    await sleep(500); // duplicates, if any, would have arrived
    for (const [b, n] of [[buyerA, 'A'], [buyerB, 'B']]) {
      assert.equal(requests(b), 1, 'buyer on ' + n + ': the request once');
      assert.equal(count(b, 'jailbox:op', isOp), 1, 'buyer on ' + n + ': the decision once');
    }
  } finally {
    await db.query('DROP TRIGGER IF EXISTS jb_test_refuse ON ops');
    await db.query('DROP FUNCTION IF EXISTS jb_test_refuse()');
    await db.end();
  }
});

test('SIGTERM to the instance holding both sockets: clients reconnect through nginx, the session goes on', { timeout: 240000 }, async () => {
  for (const s of [agentA, buyerA, buyerB]) s?.close();
  await waitFor('old sockets gone', async () => {
    const [a, b] = [await A.metrics(), await B.metrics()];
    return a['jailbox_sockets{role="agent"}'] + b['jailbox_sockets{role="agent"}'] + a['jailbox_sockets{role="buyer"}'] + b['jailbox_sockets{role="buyer"}'] === 0;
  }, 10000);
  const viaLb = { reconnection: true, reconnectionDelay: 100, reconnectionDelayMax: 500, randomizationFactor: 0 };
  const where = async (role) => {
    for (const i of [A, B]) if ((await metric(i, `jailbox_sockets{role="${role}"}`)) === 1) return i;
    return null;
  };
  const lbAddr = '127.0.0.1:' + lb.port;
  const agent = await connect(lbAddr, S.agentToken, viaLb);
  const X = await waitFor('agent placed', () => where('agent'));
  let buyer;
  for (let i = 0; i < 6 && !buyer; i++) { // round robin: at most every other one lands on X
    const b = await connect(lbAddr, S.buyerToken, viaLb);
    if ((await waitFor('buyer placed', () => where('buyer'))) === X) buyer = b;
    else { b.close(); await waitFor('buyer gone', async () => (await where('buyer')) === null); }
  }
  assert.ok(buyer, 'the buyer socket landed on the agent\'s instance');
  const Y = X === A ? B : A;
  let reconnects = 0;
  for (const s of [agent, buyer]) s.io.on('reconnect', () => { reconnects++; });
  // the drain closes each socket with the Engine.IO close packet, then WebSocket close 1001
  const eioCloses = [0, 0];
  [agent, buyer].forEach((s, k) => s.io.engine.on('packet', (p) => { if (p.type === 'close') eioCloses[k]++; }));
  const wsCodes = [];
  for (const s of [agent, buyer]) s.io.engine.transport.ws.addEventListener('close', (e) => wsCodes.push(e.code));

  // a write waits for the buyer when the instance is told to stop
  const w = await supervisedWrite(agent, buyer, 'v5\n');
  const t0 = Date.now();
  X.child.kill('SIGTERM');
  // readyz turns 503 as soon as the signal is taken, within the drain delay (700 ms) before
  // any socket is closed; a request that beat the signal to jailboxd may still see 200
  let rz = await X.req('GET', '/readyz', { token: null });
  while (rz.status === 200 && Date.now() - t0 < 500) {
    await new Promise((r) => setTimeout(r, 20));
    rz = await X.req('GET', '/readyz', { token: null });
  }
  assert.equal(rz.status, 503, 'readyz during the drain');
  assert.equal(rz.json.error.code, 'draining');
  // the buyer (no call in flight) is closed first and comes back through nginx on the other
  // instance, where it is sent the state and the approval still pending, from the database
  await waitFor('buyer reconnected', () => reconnects >= 1 && buyer.connected, 30000, logs);
  assert.equal(await metric(Y, 'jailbox_sockets{role="buyer"}'), 1);
  await waitEvent(buyer, 'jailbox:approval_request', (p) => p.opId === w.opId && buyer.events.filter((e) => e.event === 'jailbox:approval_request' && e.payload.opId === w.opId).length >= 2);
  assert.ok(buyer.events.some((e) => e.event === 'jailbox:state' && e.payload.snapshot === true && e.payload.state === 'active'));
  // the agent's socket stays open while its call is in flight on the draining instance, and
  // takes no new work there
  assert.ok(agent.connected);
  const refusedNew = await agent.timeout(10000).emitWithAck('mcp', { jsonrpc: '2.0', id: ++rpcId, method: 'ping' });
  assert.equal(refusedNew.error?.code, 'draining', JSON.stringify(refusedNew));
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: w.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  // the call finishes on the draining instance and its answer reaches the agent: nothing lost
  const r5 = await w.result;
  assert.ok(r5.result && !r5.result.isError, JSON.stringify(r5));
  assert.equal(r5.result.structuredContent.written, 3);
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'v5\n');
  // then the agent is closed too and comes back on the other instance
  await waitFor('agent reconnected', () => reconnects >= 2 && agent.connected && buyer.connected, 30000, logs);
  assert.equal(await metric(Y, 'jailbox_sockets{role="agent"}'), 1);
  assert.deepEqual(eioCloses, [1, 1], 'Engine.IO close packet to both');
  assert.deepEqual(wsCodes, [1001, 1001]);
  // the drained instance exits cleanly, well within its grace
  const ex = await X.exited;
  assert.deepEqual(ex, { code: 0, sig: null }, X.log().slice(-3000));
  assert.ok(Date.now() - t0 < 15000);
  assert.doesNotMatch(X.log(), /closing sockets with calls in flight/);
  // the session goes on through the surviving instance
  const w2 = await supervisedWrite(agent, buyer, 'v6\n');
  const ap = await fetch(`${lb.url}/v1/jailbox/${S.jobId}/approve/${w2.opId}`, { method: 'POST', headers: { authorization: 'Bearer ' + S.buyerToken } });
  assert.equal(ap.status, 200);
  const r = await w2.result;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'v6\n');
  const ops = await Y.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`);
  assert.equal(ops.json.ops.length, 0);
  const all = (await Y.req('GET', `/v1/jailbox/${S.jobId}/ops`)).json.ops.filter((o) => o.tool === 'write' && o.path === 'a.txt');
  assert.equal(all.length, 5);
  assert.ok(all.every((o) => o.state === 'done'), JSON.stringify(all));
  const v = await Y.req('GET', `/v1/jailbox/${S.jobId}/audit/verify`);
  assert.equal(v.json.ok, true, v.text);
  // the cluster figures on /metrics agree with the database
  const m = await Y.metrics();
  assert.equal(m['jailbox_ops{tool="write",state="done"}'], 5);
  const decided = Number((await Y.req('GET', `/v1/jailbox/${S.jobId}/ops`)).json.ops.filter((o) => o.decidedAt).length);
  assert.equal(m['jailbox_approval_wait_seconds_count'], decided);
  assert.ok(m['jailbox_approval_wait_seconds_sum'] > 0);
  assert.ok(m['jailbox_audit_append_seconds_count'] > 0, 'this instance appended audit entries');
  assert.equal(m['jailbox_sessions{state="active"}'], 1);
});

// Each instance keeps a copy of a session's rules: the op's insert checks the rules' version it
// was decided on, so a copy made before a change on another instance decides nothing.
test('a rule revoked on one instance decides nothing on the other after its revocation; a rule added there decides the next op', { timeout: 240000 }, async () => {
  const up = [];
  for (const i of [A, B]) if ((await i.req('GET', '/readyz').catch(() => ({ status: 0 }))).status === 200) up.push(i);
  assert.ok(up.length >= 1);
  const Y = up[0];
  const C = await startInstance('rules-c', dir, { pg, redis, redisUrl: redis.unixUrl, secrets, wsroot, env: { JAILBOX_SANDBOX_IMAGE: IMAGE } });
  try {
    const name = 'ws-rules';
    mkdirSync(join(wsroot, name, 'race'), { recursive: true });
    chmodSync(join(wsroot, name), 0o777);
    chmodSync(join(wsroot, name, 'race'), 0o777);
    const o = await Y.req('POST', '/v1/jailbox', { body: { agentId: 'agent-rules', workspace: name, mode: 'unsupervised' } });
    assert.equal(o.status, 201, o.text);
    const R = o.json;
    await waitFor('awaiting_agent', async () => (await sessionOf(Y, R.jobId)).state === 'awaiting_agent', 120000, logs);
    const agent = await connect(C.wsAddr, R.agentToken);
    const rules = (method, path, body) => Y.req(method, `/v1/jailbox/${R.jobId}/rules${path}`, { token: R.buyerToken, body });
    const write = async (p) => {
      const r = await call(agent, 'write', { path: p, content: 'x\n' });
      return r;
    };
    const decider = async (p) => (await Y.req('GET', `/v1/jailbox/${R.jobId}/ops?limit=500`, { token: R.buyerToken })).json.ops.find((x) => x.path === p)?.decidedBy;
    let r = await rules('POST', '', { rule: { id: 'on-y', tool: 'write', path: 'race/**', effect: 'allow' } });
    assert.equal(r.status, 201, r.text);
    for (const p of ['race/1.txt', 'race/2.txt']) { // the second decided on C's copy
      const w = await write(p);
      assert.ok(w.result && !w.result.isError, JSON.stringify(w));
      assert.equal(await decider(p), 'rule:on-y', p);
    }
    r = await rules('DELETE', '/on-y');
    assert.equal(r.status, 200, r.text);
    let w = await write('race/3.txt');
    assert.ok(w.result && !w.result.isError, JSON.stringify(w));
    assert.equal(await decider('race/3.txt'), 'mode', 'the rule revoked on the other instance decided nothing');
    r = await rules('POST', '', { rule: { id: 'deny-y', tool: 'write', path: 'race/**', effect: 'deny' } });
    assert.equal(r.status, 201, r.text);
    w = await write('race/4.txt');
    assert.ok(toolFailure(w), JSON.stringify(w));
    assert.match(JSON.stringify(w), /denied by rule deny-y/);
    r = await rules('DELETE', '/deny-y');
    assert.equal(r.status, 200, r.text);
    w = await write('race/5.txt');
    assert.ok(w.result && !w.result.isError, JSON.stringify(w));
    assert.equal(await decider('race/5.txt'), 'mode');
    agent.close();
    assert.equal((await Y.req('POST', `/v1/jailbox/${R.jobId}/abort`, { token: R.buyerToken })).status < 300, true);
  } finally {
    await C.stop();
  }
});
