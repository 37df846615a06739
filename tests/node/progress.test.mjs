// progress.test.mjs — long calls through stock MCP clients: the official SDK client, over each
// transport (Streamable HTTP POST /mcp answered as text/event-stream, stdio through
// `jailboxctl mcp-bridge`, the Socket.IO `mcp` event), runs a command longer than its request
// timeout and gets its result, because jailboxd sends notifications/progress (the command's
// last output line) at least every JAILBOX_PROGRESS_INTERVAL_S and the client resets its timeout
// on each (resetTimeoutOnProgress); without progress the same call times out in the client.
// A supervised write tells "waiting for the buyer"; a client that declares the Tasks extension
// gets a task for a command: working, then completed with its result.
//
// Scaled for CI: an interval of 1 s, a client timeout of 2.5 s, commands of 6 s. JB_PROGRESS_LONG=1
// runs the full case instead: the default interval (10 s), the SDK's default timeout (60 s) and
// a command of 150 s over the bridge and POST /mcp at once.
// Needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { realpathSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';
import { connectClient } from './lib/mcp.mjs';

const LONG = process.env.JB_PROGRESS_LONG === '1';
const IMAGE = 'jailbox-sandbox-test:progress';
const MODERN = '2026-07-28';
let K, srv, U, S;
const clients = [];

before(async () => {
  K = await startSandboxServer(IMAGE, {
    ...(LONG ? {} : { JAILBOX_PROGRESS_INTERVAL_S: '1' }), JAILBOX_EXEC_MAX_TIMEOUT_S: '900',
  }, [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep', '/usr/bin/echo']);
  srv = K.srv;
  U = await K.openSession(() => {}, { mode: 'unsupervised' });
  S = await K.openSession(() => {}, { mode: 'supervised' });
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  K?.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

async function client(kind, session, name) {
  const c = await connectClient(kind, K, session, name);
  clients.push(c);
  return c;
}

// a command that prints "step N" once a second for `n` seconds
const steps = (n) => ({ command: `i=0; while [ $i -lt ${n} ]; do i=$((i+1)); echo step $i; sleep 1; done`, timeoutSec: n + 60 });

// exec of `args` by `c` with progress; its result and the notifications it got
async function withProgress(c, args, timeout) {
  const seen = [];
  const r = await c.callTool({ name: 'exec', arguments: args }, undefined,
    { ...(timeout ? { timeout } : {}), resetTimeoutOnProgress: true, onprogress: (p) => seen.push({ ...p, at: Date.now() }) });
  return { r, seen };
}

function checkProgress(seen, r, n) {
  assert.ok(!r.isError, JSON.stringify(r).slice(0, 1000));
  assert.equal(r.structuredContent.exitCode, 0);
  assert.match(r.structuredContent.stdout, new RegExp(`step ${n}\\n$`));
  const min = LONG ? Math.floor(n / 10) - 1 : n - 3;
  assert.ok(seen.length >= min, `${seen.length} notifications for a ${n} s command`);
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, JSON.stringify(seen));
  assert.ok(seen.some((p) => /^running, \d+ s: step \d+$/.test(p.message)), JSON.stringify(seen));
}

if (LONG) {
  test('a 150 s command over the bridge and POST /mcp, the SDK\'s default 60 s timeout, progress every 10 s', { timeout: 600000 }, async () => {
    const [h, b] = [await client('http', U, 'long-http'), await client('stdio', U, 'long-stdio')];
    const t0 = Date.now();
    const [rh, rb] = await Promise.all([withProgress(h, steps(150)), withProgress(b, steps(150))]);
    checkProgress(rh.seen, rh.r, 150);
    checkProgress(rb.seen, rb.r, 150);
    console.log(`# both answered after ${Date.now() - t0} ms; notifications: http ${rh.seen.length}, stdio ${rb.seen.length}`);
  });
} else {
  for (const kind of ['http', 'stdio', 'socket']) {
    test(`${kind}: a 6 s command with a 2.5 s client timeout finishes, told by progress`, { timeout: 120000 }, async () => {
      const c = await client(kind, U, 'progress-' + kind);
      const { r, seen } = await withProgress(c, steps(6), 2500);
      checkProgress(seen, r, 6);
      // at least once a second after the first interval, never more than 2.5 s apart
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].at - seen[i - 1].at < 2500, JSON.stringify(seen));
    });
  }

  test('without a progress token the same call times out in the client (-32001)', { timeout: 60000 }, async () => {
    const c = await client('http', U, 'no-progress');
    await assert.rejects(c.callTool({ name: 'exec', arguments: steps(6) }, undefined, { timeout: 2500 }),
      (e) => e.code === -32001);
  });
}

test('a supervised write waiting for the buyer is told so over POST /mcp; the approval answers it', { timeout: 120000 }, async () => {
  const c = await client('http', S, 'progress-write');
  const seen = [];
  const call = c.callTool({ name: 'write', arguments: { path: 'a.txt', content: 'hello\n' } }, undefined,
    { timeout: LONG ? 60000 : 2500, resetTimeoutOnProgress: true, onprogress: (p) => seen.push(p) });
  const op = await K.waitFor('the pending write', async () => {
    const p = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
    return p.json?.ops?.[0];
  });
  await K.waitFor('two notifications', () => seen.length >= 2, LONG ? 60000 : 20000);
  const ap = await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${op.opId}`, { token: S.buyerToken });
  assert.equal(ap.status, 200, ap.text);
  const r = await call;
  assert.ok(!r.isError, JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'hello\n');
  assert.match(seen[0].message, /^waiting for the buyer to approve or reject the write$/);
});

test('Tasks extension: a command becomes a task, working while it runs, then completed with its result', { timeout: 120000 }, async () => {
  const meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
    'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } } };
  const post = async (id, method, params) => {
    const name = params.name ?? params.taskId;
    const r = await fetch(srv.url + '/mcp', { method: 'POST', body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } }),
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: 'Bearer ' + U.agentToken,
        'mcp-protocol-version': MODERN, 'mcp-method': method, 'mcp-name': name } });
    assert.equal(r.status, 200);
    return (await r.json()).result;
  };
  const t0 = Date.now();
  const task = await post(1, 'tools/call', { name: 'exec', arguments: steps(3) });
  assert.ok(Date.now() - t0 < 2500, `the task took ${Date.now() - t0} ms`);
  assert.equal(task.resultType, 'task', JSON.stringify(task));
  assert.equal(task.status, 'working');
  const states = [];
  let last;
  for (let i = 0; i < 100; i++) {
    last = await post(10 + i, 'tasks/get', { taskId: task.taskId });
    states.push(last.status);
    if (last.status !== 'working') break;
    await new Promise((res) => setTimeout(res, 200));
  }
  assert.equal(states[0], 'working', JSON.stringify(states));
  assert.equal(last.status, 'completed', JSON.stringify(last));
  assert.equal(last.result.structuredContent.exitCode, 0, JSON.stringify(last));
  assert.match(last.result.structuredContent.stdout, /step 3\n$/);
});

test('the operator kills a running command: the agent is told so, the chain names the operator', { timeout: 120000 }, async () => {
  const V = await K.openSession(() => {}, { mode: 'unsupervised' });
  const agent = await K.connect(V.agentToken);
  const call = K.call(agent, 'exec', { command: 'echo started; sleep 60', timeoutSec: 90 }, 90000);
  const op = await K.waitFor('the command running', async () => (await srv.db.query(
    "SELECT op_id FROM ops WHERE job_id = $1 AND tool = 'exec' AND state = 'running'", [V.jobId])).rows[0]?.op_id);
  const r = await srv.req('POST', `/v1/jailbox/${V.jobId}/ops/${op}/kill`, { token: srv.serviceToken, body: { reason: 'runaway' } });
  assert.equal(r.status, 200, r.text);
  const a = await call;
  const text = a.result?.content?.[0]?.text ?? JSON.stringify(a);
  assert.match(text, /the operator killed the command/);
  const rows = (await srv.db.query(
    "SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = $1 AND operation = 'exec' ORDER BY seq", [V.jobId])).rows;
  const e = rows.map((x) => x.d).find((d) => d.argv?.includes('echo started; sleep 60'));
  assert.ok(e, JSON.stringify(rows));
  assert.equal(e.killedBy, 'service', JSON.stringify(e));
});
