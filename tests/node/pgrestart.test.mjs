// pgrestart.test.mjs — the database restarted under load (`pg_ctl restart -m fast` of the
// embedded PostgreSQL) while agents write (unsupervised, and supervised with the buyer
// approving) and the buyer reads: every request in flight either completes or fails with
// database_unavailable (REST 503; MCP -32017 / reason unavailable); nothing an agent was told
// succeeded is lost (its op is done in `ops`, in the chain, and the file is in the workspace);
// jailboxd and its worker recover without a restart (the next requests succeed within a few
// seconds); every chain verifies offline. Needs root, dockerd with runsc.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startJail, openSession, connect, waitState, call, containersOf, closeAll, stopServers } from './lib/jail.mjs';
import { verifiedChain } from './lib/mcp.mjs';
import { toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:pgrestart'; // startJail adds JB_IMAGE_SUFFIX
const ROUNDS = Number(process.env.JB_PGRESTART_ROUNDS || 2);
const servers = [];
after(() => stopServers(servers, { sanitizer: false }));

// pg_ctl of the embedded cluster, run as the cluster's owner, without blocking the load (the
// requests go on while it runs)
async function pgCtl(srv, ...args) {
  const data = join(srv.state, 'pg/data');
  const bin = readFileSync(join(data, 'postmaster.opts'), 'utf8').split(' ')[0].replace(/postgres$/, 'pg_ctl');
  const cmd = [bin, '-D', data, ...args].map((a) => `'${a}'`).join(' ');
  return (await promisify(execFile)('su', ['-s', '/bin/sh', 'jailbox', '-c', cmd], { encoding: 'utf8' })).stdout;
}

// MCP answer -> 'ok' | 'unavailable' | a description of any other outcome
function mcpOutcome(r) {
  const f = toolFailure(r);
  if (!f) return r?.result ? 'ok' : 'no answer: ' + JSON.stringify(r).slice(0, 200);
  if (f.code === -32017 && f.data?.reason === 'unavailable') return 'unavailable';
  return 'other: ' + JSON.stringify(f).slice(0, 300);
}
function restOutcome(r) {
  if (r.status >= 200 && r.status < 300) return 'ok';
  if (r.status === 503 && r.json?.error?.code === 'database_unavailable') return 'unavailable';
  return `other: ${r.status} ${r.text.slice(0, 300)}`;
}

test('PostgreSQL restarted under load: requests complete or fail database_unavailable, nothing committed is lost, everything recovers, every chain verifies', { timeout: 600000 }, async () => {
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim' });
  servers.push(srv);
  const sessions = [];
  for (const mode of ['unsupervised', 'unsupervised', 'supervised']) {
    const s = await openSession(srv, (d) => writeFileSync(join(d, 'seed.txt'), 'seed\n'), { mode });
    s.mode = mode;
    s.buyer = await connect(srv, s.buyerToken);
    s.agent = await connect(srv, s.agentToken);
    const r = await call(s.agent, 'read', { path: 'seed.txt' }, 20000);
    assert.equal(mcpOutcome(r), 'ok', JSON.stringify(r));
    await waitState(srv, s.jobId, ['active']);
    s.told = []; // {path, content, at} the agent was told were written
    sessions.push(s);
  }
  const outcomes = []; // {who, what, at, outcome}
  const note = (who, what, outcome) => outcomes.push({ who, what, at: Date.now(), outcome });
  let stop = false;
  let stopAgents = false;
  let restartStart = Infinity;
  let restartEnd = Infinity;

  // each agent writes new files one after another
  const agentLoop = async (s, k) => {
    for (let n = 0; !stopAgents; n++) {
      const path = `w-${k}-${n}.txt`;
      const content = `write ${k} ${n}\n`;
      let r;
      try { r = await call(s.agent, 'write', { path, content }, 20000); } catch (e) { r = { cut: e.message }; }
      const o = mcpOutcome(r);
      note(`agent ${k}`, 'write ' + path, o);
      if (o === 'ok') s.told.push({ path, content, at: Date.now() });
      if (o !== 'ok') await new Promise((res) => setTimeout(res, 100));
    }
  };
  // the supervised session's buyer approves each request (again while the database answers 503)
  const sup = sessions[2];
  const approveLoop = async () => {
    const done = new Set();
    while (!stop) {
      const reqs = sup.buyer.events.filter((e) => e.event === 'jailbox:approval_request' && !done.has(e.payload.opId));
      for (const e of reqs) {
        // a request can be announced twice (live, then again in the snapshot after a reconnect): decide it once
        if (done.has(e.payload.opId)) continue;
        const r = await srv.req('POST', `/v1/jailbox/${sup.jobId}/approve/${e.payload.opId}`, { token: sup.buyerToken });
        const o = restOutcome(r);
        note('buyer', 'approve ' + e.payload.opId, o);
        if (o === 'ok') done.add(e.payload.opId);
        else if (r.status === 409) done.add(e.payload.opId); // noted as other: fails the test below
      }
      await new Promise((res) => setTimeout(res, 30));
    }
  };
  // the buyer reads the session and its ops
  const readLoop = async () => {
    while (!stop) {
      for (const s of sessions) {
        for (const path of [`/v1/jailbox/${s.jobId}`, `/v1/jailbox/${s.jobId}/ops`]) {
          let o;
          try { o = restOutcome(await srv.req('GET', path, { token: s.buyerToken })); } catch (e) { o = 'other: ' + e.message; }
          note('buyer', 'GET ' + path, o);
        }
      }
      await new Promise((res) => setTimeout(res, 50));
    }
  };
  const loops = [agentLoop(sessions[0], 0), agentLoop(sessions[1], 1), agentLoop(sup, 2), approveLoop(), readLoop()];
  // ROUNDS restarts, each once every agent and the buyer were served since the last one
  const whos = ['agent 0', 'agent 1', 'agent 2', 'buyer'];
  const recovered = [];
  const took = [];
  for (let round = 0; round < ROUNDS; round++) {
    await new Promise((res) => setTimeout(res, 1000));
    const t0 = Date.now();
    await pgCtl(srv, 'restart', '-m', 'fast', '-w', '-t', '60', '-l', join(srv.state, 'pg/postgres.log'));
    const t1 = Date.now();
    took.push(t1 - t0);
    // load goes on until every agent and the buyer have succeeded again after the restart
    const okAfter = (who) => outcomes.find((o) => o.who === who && o.at > t1 && o.outcome === 'ok');
    while (whos.some((w) => !okAfter(w)) && Date.now() < t1 + 15000) await new Promise((res) => setTimeout(res, 50));
    recovered.push(whos.map((w) => (okAfter(w) ? okAfter(w).at - t1 : null)));
    if (round === 0) { restartStart = t0; }
    restartEnd = t1;
  }
  await new Promise((res) => setTimeout(res, 500));
  // the agents stop first: the buyer goes on approving until the last supervised write ended
  stopAgents = true;
  await Promise.all(loops.slice(0, 3));
  stop = true;
  await Promise.all(loops);

  const unavailable = outcomes.filter((o) => o.outcome === 'unavailable').length;
  const others = outcomes.filter((o) => o.outcome !== 'ok' && o.outcome !== 'unavailable');
  console.log(`# ${ROUNDS} × pg_ctl restart -m fast, took ${took.join(', ')} ms; ${outcomes.length} requests, ` +
    `${outcomes.filter((o) => o.outcome === 'ok').length} ok, ${unavailable} unavailable, ${others.length} other; ` +
    `first success after each restart (ms) for ${whos.join(', ')}: ${JSON.stringify(recovered)}; ` +
    `writes the agents were told done: ${sessions.map((s) => s.told.length).join(', ')}`);
  const slow = recovered.some((r) => r.some((x) => x === null || x >= 5000));
  if (others.length || slow) {
    for (const w of whos) console.log(`# ${w}'s last outcomes:`, JSON.stringify(outcomes.filter((o) => o.who === w).slice(-4).map((o) => [o.at - restartEnd, o.what, o.outcome.slice(0, 200)])));
    console.log('# other outcomes:', JSON.stringify(others.slice(0, 5)));
    console.log('# sockets:', JSON.stringify(sessions.map((s) => [s.agent.connected, s.agent.disconnectReason, s.buyer.connected, s.buyer.disconnectReason])),
      'approval requests seen:', JSON.stringify(sup.buyer.events.filter((e) => e.event === 'jailbox:approval_request').map((e) => e.payload.opId)));
    const seenMsg = new Set();
    const worse = srv.log().split('\n').filter((l) => /"level":"(warn|error)"/.test(l))
      .filter((l) => { const m = (l.match(/"msg":"([^"]*)"/) || [])[1] + (l.match(/"detail":"([^"]{0,60})/) || [])[1]; return !seenMsg.has(m) && seenMsg.add(m); });
    console.log('# server warnings and errors, the first of each kind (up to 40):\n' + worse.slice(0, 40).map((l) => '#   ' + l.slice(0, 500)).join('\n'));
  }
  const stuck = (await srv.db.query("SELECT job_id, op_id, tool, path, state FROM ops WHERE state NOT IN ('done', 'failed', 'rejected')")).rows;
  assert.deepEqual(others, [], 'every request either completes or fails database_unavailable; ops not ended: ' +
    JSON.stringify(stuck) + '; restart at ' + restartStart + '..' + restartEnd);
  for (const r of recovered)
    for (const [i, w] of whos.entries()) {
      assert.ok(r[i] !== null, `${w} was served again after the restart`);
      assert.ok(r[i] < 5000, `${w} served again after ${r[i]} ms`);
    }
  // nothing the agents were told succeeded is lost
  for (const s of sessions) {
    assert.ok(s.told.length > 0);
    const rows = (await srv.db.query("SELECT path, state FROM ops WHERE job_id = $1 AND tool = 'write'", [s.jobId])).rows;
    const chain = verifiedChain(srv, s.jobId);
    const inChain = new Set(chain.filter((e) => e.operation === 'write' && e.details?.ok !== false).map((e) => String(e.path).replace(/^\/workspace\//, '')));
    for (const t of s.told) {
      assert.equal(readFileSync(join(s.dir, t.path), 'utf8'), t.content, t.path);
      assert.ok(rows.some((r) => String(r.path).replace(/^\/workspace\//, '') === t.path && r.state === 'done'), `${t.path} done in ops: ${JSON.stringify(rows.filter((r) => r.path === t.path))}`);
      assert.ok(inChain.has(t.path), `${t.path} in the chain`);
    }
    const st = await waitState(srv, s.jobId, ['active'], 5000);
    assert.equal(st.pendingOps ?? 0, 0);
  }
  for (const s of sessions) {
    const ab = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken });
    assert.equal(ab.status, 200, ab.text);
  }
});
