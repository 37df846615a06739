// crash.test.mjs — crash safety with real processes: jailboxd killed with SIGKILL
// and started again (sessions, pending approvals and chains intact; a pending op approved
// afterwards runs); the worker killed (its sessions failed with a reason, no container left
// behind); PostgreSQL restarted under load (requests in between get 503 — never a wrong
// answer — jailboxd reconnects, nothing committed is lost). Needs root, dockerd with runsc.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, realpathSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { startServer } from './lib/server.mjs';
import { startJail, openSession, connect, waitEvent, waitFor, waitState, sessionOf, call,
  containersOf, stopServers } from './lib/jail.mjs';
import { toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:crash'; // startJail adds JB_IMAGE_SUFFIX

const servers = [];
after(() => stopServers(servers));

async function verify(srv, jobId) {
  const v = await srv.req('GET', `/v1/jailbox/${jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.status, 200, v.text);
  assert.equal(v.json.ok, true, v.text);
  return v.json;
}

test('jailboxd SIGKILLed and started again: session, pending approval and chain intact; the op is approved and runs', { timeout: 300000 }, async () => {
  const env = { JAILBOX_WORKER_CONTROL: '' };
  const first = await startJail({ image: IMAGE, shim: 'jailbox-shim', env });
  const s = await openSession(first, (d) => writeFileSync(join(d, 'a.txt'), 'before\n'), { mode: 'supervised' });
  const buyer = await connect(first, s.buyerToken);
  const agent = await connect(first, s.agentToken);
  await waitState(first, s.jobId, ['active']);
  call(agent, 'write', { path: 'a.txt', content: 'after the crash\n' }).catch(() => {});
  const req = await waitEvent(buyer, 'jailbox:approval_request');
  const before = await sessionOf(first, s.jobId);
  assert.equal(before.pendingOps, 1);
  const headBefore = before.auditHead;

  // SIGKILL: no shutdown of any kind (the worker and the embedded PostgreSQL live on)
  const gone = new Promise((res) => first.child.on('exit', res));
  first.child.kill('SIGKILL');
  await gone;
  await first.db.end();
  const again = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: IMAGE + (process.env.JB_IMAGE_SUFFIX ?? '') }, { dir: first.dir });
  servers.push(again);
  again.wsAddr = again.log().match(/"msg":"ws listening","addr":"([^"]+)"/)[1];

  const st = await sessionOf(again, s.jobId);
  assert.equal(st.state, 'active');
  assert.equal(st.pendingOps, 1);
  assert.deepEqual(st.auditHead, headBefore, 'the chain did not move');
  await verify(again, s.jobId);
  const pend = await again.req('GET', `/v1/jailbox/${s.jobId}/ops?state=pending`, { token: s.buyerToken });
  assert.equal(pend.json.ops.length, 1);
  assert.equal(pend.json.ops[0].opId, req.opId);
  assert.equal(readFileSync(join(s.dir, 'a.txt'), 'utf8'), 'before\n');

  // the buyer approves after the crash; the adopted worker runs the op in the same sandbox
  const ap = await again.req('POST', `/v1/jailbox/${s.jobId}/approve/${req.opId}`, { token: s.buyerToken });
  assert.equal(ap.status, 200, ap.text);
  await waitFor(again, 'op done', async () => {
    const r = await again.db.query('SELECT state FROM ops WHERE op_id = $1', [req.opId]);
    return r.rows[0].state === 'done';
  }, 30000).catch(async (e) => {
    const r = await again.db.query('SELECT op_id, tool, state, result FROM ops WHERE job_id = $1', [s.jobId]);
    const wpid = Number(readFileSync(join(again.state, 'worker-0.pid'), 'utf8'));
    throw new Error(e.message + '\nops: ' + JSON.stringify(r.rows) + '\nworker ' + wpid + ' alive: ' + existsSync('/proc/' + wpid));
  });
  assert.equal(readFileSync(join(s.dir, 'a.txt'), 'utf8'), 'after the crash\n');
  const audit = await again.req('GET', `/v1/jailbox/${s.jobId}/audit`, { token: again.serviceToken });
  const w = audit.text.trim().split('\n').map((l) => JSON.parse(l)).find((e) => e.operation === 'write');
  assert.equal(w.details.ok, true);
  await verify(again, s.jobId);
  // and the session still works end to end
  const ab = await again.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken });
  assert.equal(ab.status, 200, ab.text);
  await waitFor(again, 'container gone', async () => (await containersOf(s.jobId)).length === 0, 5000);
});

// Sessions on the attach-stream channel (JAILBOX_SHIM_SOCKET_DIR=none) cannot outlive their
// worker (the container's stdin closes with it); those on the socket channel are re-adopted
// (readopt.test.mjs).
test('worker killed: its sessions that cannot be re-adopted are failed with a reason and no container is left behind', { timeout: 300000 }, async () => {
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim', env: { JAILBOX_SHIM_SOCKET_DIR: 'none' } });
  servers.push(srv);
  const a = await openSession(srv);
  const b = await openSession(srv);
  assert.equal((await containersOf(a.jobId)).length, 1);
  const pid = Number(readFileSync(join(srv.state, 'worker-0.pid'), 'utf8'));
  const readyBefore = (srv.log().match(/"msg":"worker ready"/g) || []).length;
  process.kill(pid, 'SIGKILL');
  await waitFor(srv, 'worker restarted', () => (srv.log().match(/"msg":"worker ready"/g) || []).length > readyBefore, 60000);
  for (const s of [a, b]) {
    const st = await waitState(srv, s.jobId, ['failed'], 30000);
    assert.match(st.stateReason, /worker restarted/);
    // `docker ps -a` with the session label: nothing
    await waitFor(srv, 'no container', async () => (await containersOf(s.jobId)).length === 0, 10000);
    const entries = (await srv.req('GET', `/v1/jailbox/${s.jobId}/audit`, { token: srv.serviceToken })).text
      .trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(entries[entries.length - 1].operation, 'seal');
    await verify(srv, s.jobId);
  }
  // the new worker takes new sessions
  const c = await openSession(srv);
  assert.equal((await containersOf(c.jobId)).length, 1);
});

// the jailbox_ops_handled_total{path} counter of /metrics (api/rest/metrics.c)
async function handled(srv, path) {
  const r = await srv.req('GET', '/metrics', { token: srv.serviceToken });
  const m = r.text.match(new RegExp(`^jailbox_ops_handled_total\\{path="${path}"\\} (\\d+)`, 'm'));
  assert.ok(m, r.text.slice(0, 2000));
  return Number(m[1]);
}

// The first calls of a session take the ops row (the one that moves it to active, and any
// before jailboxd holds its copy of the active session); reads until one is relayed to the
// worker on its ops socket, after which every read of the active session is.
async function relayed(srv, agent, path) {
  for (let i = 0; i < 50; i++) {
    const d = await handled(srv, 'direct');
    { const r = await call(agent, 'read', { path }); assert.ok(r.result && !r.result.isError, 'a read failed'); }
    if (await handled(srv, 'direct') > d) return;
  }
  assert.fail('no read was relayed to the worker');
}

test('worker killed while a supervised write\'s stat runs in it: the call ends, no row left waiting, chain intact; reads are relayed to the new worker again', { timeout: 300000 }, async () => {
  // the attach-stream channel: the session ends with its worker (re-adoption: readopt.test.mjs)
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim', env: { JAILBOX_SHIM_SOCKET_DIR: 'none' } });
  servers.push(srv);
  const a = await openSession(srv, (d) => {
    writeFileSync(join(d, 'a.txt'), 'hello\n');
    writeFileSync(join(d, 'big.bin'), Buffer.alloc(250 * 1024 * 1024, 7));
  }, { mode: 'supervised' });
  const agent = await connect(srv, a.agentToken);
  await relayed(srv, agent, 'a.txt');
  const d0 = await handled(srv, 'direct');
  // the service thread keeps its connections to the worker's ops socket after this
  for (let i = 0; i < 8; i++) assert.equal((await call(agent, 'read', { path: 'a.txt' })).result?.structuredContent?.content, 'hello\n');
  assert.equal(await handled(srv, 'direct') - d0, 8);
  const seq = async () => {
    const r = await srv.db.query('SELECT last_value::bigint AS v, is_called FROM ops_op_id_seq');
    return r.rows[0].is_called ? Number(r.rows[0].v) : 0;
  };
  const seq0 = await seq();
  const t0 = Date.now();
  // the supervised write's stat (a queued op row) hashes 250 MiB in the shim, inside the
  // worker's transaction
  const w = call(agent, 'write', { path: 'big.bin', content: 'x\n' }, 180000).catch((e) => ({ cut: e.message }));
  await waitFor(srv, 'stat in flight', async () => (await seq()) > seq0, 10000);
  const readyBefore = (srv.log().match(/"msg":"worker ready"/g) || []).length;
  process.kill(Number(readFileSync(join(srv.state, 'worker-0.pid'), 'utf8')), 'SIGKILL');
  const r = await w;
  const took = Date.now() - t0;
  // an answer (no hang until the run timeout), and never a success: nothing was written
  assert.ok(toolFailure(r) || r.cut, JSON.stringify(r));
  assert.ok(took < 60000, `the call took ${took} ms`);
  assert.equal(readFileSync(join(a.dir, 'big.bin')).length, 250 * 1024 * 1024);
  await waitFor(srv, 'worker restarted', () => (srv.log().match(/"msg":"worker ready"/g) || []).length > readyBefore, 60000);
  await waitState(srv, a.jobId, ['failed'], 30000);
  // the stat whose transaction was killed never completed: its row failed with the session;
  // nothing of the session waits for a worker
  const rows = (await srv.db.query('SELECT op_id, tool, state FROM ops WHERE job_id = $1 AND op_id > $2', [a.jobId, seq0])).rows;
  assert.ok(rows.some((o) => o.tool === 'stat'), JSON.stringify(rows));
  assert.ok(rows.every((o) => o.state === 'failed'), JSON.stringify(rows));
  const waiting = (await srv.db.query("SELECT op_id, tool, state FROM ops WHERE job_id = $1 AND state IN ('approved', 'pending')", [a.jobId])).rows;
  assert.deepEqual(waiting, [], 'ops left waiting in a failed session');
  await verify(srv, a.jobId);
  // the relay's connections to the dead worker are replaced: relayed again, every read
  const c = await openSession(srv, (d) => writeFileSync(join(d, 'c.txt'), 'again\n'), { mode: 'unsupervised' });
  const agentC = await connect(srv, c.agentToken);
  await relayed(srv, agentC, 'c.txt');
  const d1 = await handled(srv, 'direct'), q1 = await handled(srv, 'queued');
  const warnedBefore = (srv.log().match(/"msg":"direct op: /g) || []).length;
  for (let i = 0; i < 8; i++) assert.equal((await call(agentC, 'read', { path: 'c.txt' })).result?.structuredContent?.content, 'again\n');
  assert.equal(await handled(srv, 'direct') - d1, 8);
  assert.equal(await handled(srv, 'queued') - q1, 0);
  assert.equal((srv.log().match(/"msg":"direct op: /g) || []).length, warnedBefore);
  await verify(srv, c.jobId);
});

test('a worker that sends a line too many (not JSON, or a refusal followed by the real answer): no call ever gets another call\'s answer', { timeout: 300000 }, async () => {
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim' });
  servers.push(srv);
  const N = 40;
  const a = await openSession(srv, (d) => { for (let i = 0; i < N; i++) writeFileSync(join(d, `f${i}.txt`), `content-${i}\n`); }, { mode: 'unsupervised' });
  const agent = await connect(srv, a.agentToken);
  // a proxy in front of the worker's ops socket: every fifth request first gets a stray line,
  // then, 20 ms later, the worker's real answer
  const sock = join(srv.state, 'worker-0.ops');
  const real = sock + '.real';
  execFileSync('mv', [sock, real]);
  let stray = 0;
  const proxy = net.createServer((c) => {
    let buf = '';
    c.on('error', () => {});
    c.on('data', (d) => {
      buf += d;
      for (let nl; (nl = buf.indexOf('\n')) >= 0;) {
        const line = buf.slice(0, nl + 1);
        buf = buf.slice(nl + 1);
        const k = Number((JSON.parse(line).path.match(/^f(\d+)\.txt$/) || [0, -1])[1]);
        const u = net.createConnection(real);
        let ans = '';
        u.on('error', () => c.destroy());
        u.on('data', (x) => {
          ans += x;
          if (!ans.includes('\n')) return;
          u.destroy();
          if (k % 5 === 0) {
            stray++;
            c.write(k % 10 === 0 ? 'not json\n' : '{"ran":false,"state":"","reason":"stray"}\n');
            setTimeout(() => { if (!c.destroyed) c.write(ans); }, 20);
          } else c.write(ans);
        });
        u.write(line);
      }
    });
  });
  await new Promise((res) => proxy.listen(sock, res));
  try {
    for (let round = 0; round < 3; round++) {
      const calls = [];
      for (let i = 0; i < N; i++) calls.push(call(agent, 'read', { path: `f${i}.txt` }, 60000).then((r) => ({ i, r })));
      // a call the proxy spoiled takes the queued path, where only a few may wait at once:
      // its own content, or "unavailable, try again" — never another file's
      for (const { i, r } of await Promise.all(calls)) {
        if (r.error) assert.equal(r.error.code, -32017, `f${i}.txt: ${JSON.stringify(r).slice(0, 300)}`);
        else assert.equal(r.result?.structuredContent?.content, `content-${i}\n`, `f${i}.txt: ${JSON.stringify(r).slice(0, 300)}`);
      }
      // and one at a time: each connection is used again right after its answer
      for (let i = 0; i < N; i++) assert.equal((await call(agent, 'read', { path: `f${i}.txt` })).result?.structuredContent?.content, `content-${i}\n`, `f${i}.txt`);
    }
    assert.ok(stray >= 20, `${stray} stray lines`);
  } finally {
    proxy.close();
    execFileSync('mv', ['-f', real, sock]);
  }
  await verify(srv, a.jobId);
});

test('PostgreSQL restarted under load: 503 in between (never a wrong answer), reconnect, nothing committed lost', { timeout: 300000 }, async () => {
  const srv = await startServer({ JAILBOX_DB_CONNECT_TIMEOUT: '2' });
  servers.push(srv);
  const s = await srv.open({});
  await srv.setState(s.jobId, 'active');
  const ops = [];
  for (let i = 0; i < 400; i++) ops.push(await srv.pendingOp(s.jobId, `f${i}.txt`));
  const pgbin = '/usr/lib/postgresql/' + readdirSync('/usr/lib/postgresql').sort().pop() + '/bin/pg_ctl';
  const data = join(srv.state, 'pg/data');

  const seen = { get: {}, approve: {} };
  const approved = []; // answered 200: committed
  const unsure = [];   // answered 503: maybe committed, maybe not
  let stop = false;
  const getter = (async () => {
    while (!stop) {
      const r = await srv.req('GET', '/v1/jailbox/' + s.jobId, { token: s.buyerToken }).catch((e) => ({ status: 'net:' + e.message }));
      seen.get[r.status] = (seen.get[r.status] || 0) + 1;
      if (r.status === 200) {
        assert.equal(r.json.jobId, s.jobId);
        assert.equal(r.json.state, 'active');
      } else {
        assert.equal(r.status, 503, r.text);
        assert.equal(r.json.error.code, 'database_unavailable', r.text);
      }
    }
  })();
  const approver = (async () => {
    for (const op of ops) {
      if (stop) break;
      const r = await srv.req('POST', `/v1/jailbox/${s.jobId}/approve/${op}`, { token: s.buyerToken }).catch((e) => ({ status: 'net:' + e.message }));
      seen.approve[r.status] = (seen.approve[r.status] || 0) + 1;
      if (r.status === 200) {
        assert.equal(r.json.opId, op);
        assert.equal(r.json.state, 'approved');
        approved.push(op);
      } else {
        assert.equal(r.status, 503, r.text);
        unsure.push(op);
      }
      await new Promise((res) => setTimeout(res, 5));
    }
  })();
  srv.db.on('error', () => {}); // the test's own idle connections are cut too
  await new Promise((r) => setTimeout(r, 400));
  const t0 = Date.now();
  // stopped (fast: every connection cut), left down 2 s, started again
  const ctl = (...a) => execFileSync('runuser', ['-u', 'jailbox', '--', pgbin, ...a, '-D', data, '-w', '-t', '60'], { stdio: 'ignore' });
  ctl('stop', '-m', 'fast');
  await new Promise((r) => setTimeout(r, 2000));
  ctl('start', '-l', join(srv.state, 'pg/restart.log'));
  const restartMs = Date.now() - t0;
  // jailboxd reconnects by itself: a GET succeeds again
  await waitFor(srv, 'GET 200 again', async () => (await srv.req('GET', '/v1/jailbox/' + s.jobId, { token: s.buyerToken })).status === 200, 30000);
  const back = Date.now() - t0;
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await Promise.all([getter, approver]);
  console.log('# PostgreSQL restart', restartMs, 'ms; 200 again after', back, 'ms; answers', JSON.stringify(seen));
  assert.ok(seen.get[503] > 0 || seen.approve[503] > 0, 'the restart was seen: ' + JSON.stringify(seen));
  assert.ok(approved.length > 0);
  // every approval answered 200 is there
  const r = await srv.db.query("SELECT op_id FROM ops WHERE job_id = $1 AND state = 'approved'", [s.jobId]);
  const inDb = new Set(r.rows.map((x) => Number(x.op_id)));
  for (const op of approved) assert.ok(inDb.has(op), `approved op ${op} lost`);
  // an approval answered 503 either committed or not; retried it says which, never twice
  for (const op of unsure) {
    const again = await srv.req('POST', `/v1/jailbox/${s.jobId}/approve/${op}`, { token: s.buyerToken });
    assert.ok([200, 409].includes(again.status), again.text);
    if (again.status === 409) assert.equal(again.json.error.state, 'approved');
  }
  await verify(srv, s.jobId);
});

test('a crash between an escape\'s abort and its seal: the sweeper seals the chain and announces it', { timeout: 120000 }, async () => {
  const srv = await startServer({});
  servers.push(srv);
  const s = await srv.open({});
  await srv.setState(s.jobId, 'active');
  await srv.pendingOp(s.jobId);
  // what step 1 of an escape leaves when the process dies right after it: the session ended,
  // an alert recorded, no seal, a pending op (a fixture: SQL as db/escape.c writes it)
  await srv.db.query("UPDATE sessions SET state = 'aborted', state_reason = 'escape_detected', ended_at = now() WHERE job_id = $1", [s.jobId]);
  await srv.db.query("INSERT INTO security_alerts (job_id, kind, escape, detail, seq) VALUES ($1, 'path_traversal', true, 'fixture', 1)", [s.jobId]);
  await srv.db.query('INSERT INTO seals_pending (job_id) VALUES ($1)', [s.jobId]);
  // a session whose seal was deleted (tampering) is not "repaired"
  const t = await srv.open({});
  const tr = await srv.req('POST', `/v1/jailbox/${t.jobId}/abort`, { token: t.buyerToken });
  assert.equal(tr.status, 200);
  await srv.db.query("DELETE FROM audit_entries WHERE job_id = $1 AND operation = 'seal'", [t.jobId]);
  const st = await waitFor(srv, 'sealed by the sweeper', async () => {
    const r = await srv.req('GET', `/v1/jailbox/${s.jobId}/audit`, { token: srv.serviceToken });
    const e = r.text.trim().split('\n').map((l) => JSON.parse(l));
    return e[e.length - 1].operation === 'seal' ? e : null;
  }, 15000);
  assert.ok(st.length >= 2);
  const g = await sessionOf(srv, s.jobId);
  assert.equal(g.pendingOps, 0, 'the pending op was rejected');
  await verify(srv, s.jobId);
  assert.match(srv.log(), /sweeper: sealed a chain a crash left open/);
  await new Promise((r) => setTimeout(r, 4500));
  const tv = await srv.req('GET', `/v1/jailbox/${t.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(tv.json.ok, false, 'a deleted seal stays missing: ' + tv.text);
});

// a jail whose image has /bin/sh and sleep, for the running commands of the tests below
async function execJail(env = {}) {
  const srv = await startJail({ image: 'jailbox-sandbox:crash-exec', shim: 'jailbox-shim', env,
    extra: [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep'] });
  servers.push(srv);
  return srv;
}

const auditOf = async (srv, jobId) => (await srv.req('GET', `/v1/jailbox/${jobId}/audit`, { token: srv.serviceToken })).text
  .trim().split('\n').map((l) => JSON.parse(l));

// the exec op of `jobId` once the worker marked it running
async function runningExec(srv, jobId) {
  return waitFor(srv, 'exec running', async () => {
    const r = await srv.db.query("SELECT op_id FROM ops WHERE job_id = $1 AND tool = 'exec' AND state = 'running'", [jobId]);
    return r.rows[0] ? Number(r.rows[0].op_id) : null;
  }, 30000);
}

test('worker killed while an exec runs: the call ends with the cause, the op failed with a reason and an audit entry; the session is re-adopted and serves again', { timeout: 300000 }, async () => {
  const srv = await execJail();
  const a = await openSession(srv, (d) => writeFileSync(join(d, 'a.txt'), 'still here\n'), { mode: 'unsupervised' });
  const agent = await connect(srv, a.agentToken);
  const t0 = Date.now();
  const x = call(agent, 'exec', { argv: ['sleep', '30'] }, 60000).catch((e) => ({ cut: e.message }));
  const opId = await runningExec(srv, a.jobId);
  const wpid = Number(readFileSync(join(srv.state, 'worker-0.pid'), 'utf8'));
  const tk = Date.now();
  process.kill(wpid, 'SIGKILL');
  const r = await x;
  const took = Date.now() - tk;
  console.log('# exec call answered', took, 'ms after the worker\'s SIGKILL:', JSON.stringify(r).slice(0, 400));
  const f = toolFailure(r);
  assert.ok(f, 'the call failed: ' + JSON.stringify(r));
  assert.equal(r.result?.isError, true, 'a tool-execution error (isError): ' + JSON.stringify(r));
  assert.doesNotMatch(f.message, /rejected by the buyer|before the op ran/);
  assert.match(f.message, /worker/);
  assert.equal(f.data.reason, 'worker_restarted', JSON.stringify(f));
  assert.ok(took < 15000, `the call took ${took} ms after the kill`);
  assert.ok(Date.now() - t0 < 30000, 'ended before the command would have');
  const row = (await srv.db.query('SELECT state, result FROM ops WHERE op_id = $1', [opId])).rows[0];
  assert.equal(row.state, 'failed', JSON.stringify(row));
  assert.equal(row.result.ok, false);
  assert.match(row.result.error.message, /worker/);
  // the ops listing shows it so
  const list = await srv.req('GET', `/v1/jailbox/${a.jobId}/ops`, { token: srv.serviceToken });
  assert.equal(list.status, 200, list.text);
  const lo = list.json.ops.find((o) => o.opId === opId);
  assert.equal(lo.state, 'failed', JSON.stringify(lo));
  // the chain has the exec's entry (failed, with the reason), and verifies
  const entries = await auditOf(srv, a.jobId);
  const e = entries.find((x) => x.operation === 'exec' && x.details.opId === opId);
  assert.ok(e, 'an audit entry for the exec: ' + JSON.stringify(entries.map((x) => x.operation)));
  assert.equal(e.details.ok, false);
  assert.match(JSON.stringify(e.details), /worker/);
  await verify(srv, a.jobId);
  // the session lives on in its container, re-adopted: files are served
  const st = await sessionOf(srv, a.jobId);
  assert.equal(st.state, 'active', st.stateReason);
  assert.equal((await call(agent, 'read', { path: 'a.txt' })).result?.structuredContent?.content, 'still here\n');
  assert.equal((await containersOf(a.jobId)).length, 1);
});

test('jailboxd SIGKILLed while an exec runs (the worker lives on): after the restart the op holds the command\'s real result, in the ops list and the chain', { timeout: 300000 }, async () => {
  const env = { JAILBOX_WORKER_CONTROL: '' };
  const first = await execJail(env);
  servers.pop(); // replaced by the restarted server below
  const a = await openSession(first, () => {}, { mode: 'unsupervised' });
  const agent = await connect(first, a.agentToken);
  const x = call(agent, 'exec', { command: 'sleep 4; echo finished; exit 3' }, 60000).catch((e) => ({ cut: e.message }));
  const opId = await runningExec(first, a.jobId);
  const wpid = Number(readFileSync(join(first.state, 'worker-0.pid'), 'utf8'));
  const gone = new Promise((res) => first.child.on('exit', res));
  first.child.kill('SIGKILL');
  await gone;
  await first.db.end();
  const r = await x; // the agent's connection went with jailboxd
  assert.ok(r.cut || toolFailure(r), JSON.stringify(r));
  const again = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: 'jailbox-sandbox:crash-exec' + (process.env.JB_IMAGE_SUFFIX ?? '') }, { dir: first.dir });
  servers.push(again);
  assert.ok(existsSync('/proc/' + wpid), 'the worker lived on');
  // the worker finishes the command and stores its outcome; the new jailboxd shows it
  const op = await waitFor(again, 'exec done', async () => {
    const l = await again.req('GET', `/v1/jailbox/${a.jobId}/ops`, { token: again.serviceToken });
    assert.equal(l.status, 200, l.text);
    const o = l.json.ops.find((y) => y.opId === opId);
    return o && o.state !== 'running' ? o : null;
  }, 30000);
  assert.equal(op.state, 'done', JSON.stringify(op));
  assert.equal(op.result.ok, true, JSON.stringify(op));
  assert.equal(op.result.exitCode ?? op.result.result?.exitCode, 3, JSON.stringify(op));
  assert.equal(Number(readFileSync(join(again.state, 'worker-0.pid'), 'utf8')), wpid, 'the same worker, adopted');
  const execs = (await auditOf(again, a.jobId)).filter((y) => y.operation === 'exec');
  assert.equal(execs.length, 1, JSON.stringify(execs));
  const e = execs[0];
  assert.equal(e.details.ok, true);
  assert.equal(e.details.exitCode, 3);
  await verify(again, a.jobId);
  assert.equal((await sessionOf(again, a.jobId)).state, 'active');
  const ab = await again.req('POST', `/v1/jailbox/${a.jobId}/abort`, { token: a.buyerToken });
  assert.equal(ab.status, 200, ab.text);
  await waitFor(again, 'container gone', async () => (await containersOf(a.jobId)).length === 0, 10000);
});
