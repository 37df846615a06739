// readopt.test.mjs — a worker that dies or is killed loses no session: the worker started
// again under the same id takes over the running containers (their shim channels were held by
// the descriptor keeper, sandbox/worker/keeper.c), checks their walls again and serves them;
// pending approvals stay pending and land once approved; nothing runs twice; every chain
// verifies offline; a kept channel is taken over only by the container it was kept for.
// JB_READOPT_SESSIONS sets how many live sessions the kill -9 case runs (default 3). Needs root,
// dockerd with runsc.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, renameSync,
  statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { JAILBOXD } from './lib/server.mjs';
import { startJail, openSession, connect, waitEvent, waitFor, waitState, call, containersOf,
  stopServers } from './lib/jail.mjs';
import { verifiedChain } from './lib/mcp.mjs';
import { toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:readopt'; // startJail adds JB_IMAGE_SUFFIX
const N = Number(process.env.JB_READOPT_SESSIONS || 3);

const servers = [];
after(() => stopServers(servers));

const workerPid = (srv) => Number(readFileSync(join(srv.state, 'worker-0.pid'), 'utf8'));
const readyCount = (srv) => (srv.log().match(/"msg":"worker ready"/g) || []).length;

// the content a read of `path` returns, or null when the call failed (its error kept in errs)
async function readOf(agent, path, errs = []) {
  try {
    const r = await call(agent, 'read', { path }, 20000);
    if (r.result && !r.result.isError) return r.result.structuredContent?.content ?? null;
    errs.push(JSON.stringify(r.error ?? r.result).slice(0, 300));
  } catch (e) {
    errs.push(e.message);
  }
  return null;
}

// a session with a.txt, its buyer and agent connected, active (one read done)
async function liveSession(srv, i) {
  const s = await openSession(srv, (d) => writeFileSync(join(d, 'a.txt'), `before ${i}\n`), { mode: 'supervised' });
  s.buyer = await connect(srv, s.buyerToken);
  s.agent = await connect(srv, s.agentToken);
  assert.equal(await readOf(s.agent, 'a.txt'), `before ${i}\n`);
  await waitState(srv, s.jobId, ['active']);
  return s;
}

test(`worker SIGKILLed with ${N} live sessions (writes pending, reads in flight): served again within 5 s, the writes approved land once, every chain verifies`, { timeout: 600000 }, async () => {
  // the default handler threads: each pending write waits on a thread of its own
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim' });
  servers.push(srv);
  const sessions = [];
  for (let i = 0; i < N; i++) sessions.push(await liveSession(srv, i));
  const cids = {};
  for (const s of sessions) cids[s.jobId] = (await containersOf(s.jobId)).map((c) => c.Id);
  // a supervised write pending in each
  const writes = [];
  for (const [i, s] of sessions.entries()) {
    writes.push(call(s.agent, 'write', { path: 'a.txt', content: `after ${i}\n` }, 120000).catch((e) => ({ cut: e.message })));
    s.req = await waitEvent(s.buyer, 'jailbox:approval_request');
  }
  // reads in flight when the worker dies
  const inflight = sessions.map((s) => readOf(s.agent, 'a.txt', s.errs = []));
  const before = readyCount(srv);
  const t0 = Date.now();
  process.kill(workerPid(srv), 'SIGKILL');
  await Promise.all(inflight);
  // every session served again (a read answers with the file) — measured from the kill
  const served = await Promise.all(sessions.map(async (s, i) => {
    await waitFor(srv, `session ${i} served`, async () => (await readOf(s.agent, 'a.txt', s.errs)) === `before ${i}\n`, 30000);
    return Date.now() - t0;
  }));
  console.log(`# ${N} sessions served again after the worker's SIGKILL in ms:`, served.join(' '));
  assert.ok(readyCount(srv) > before, 'a new worker started');
  for (const s of sessions)
    for (const e of s.errs) assert.doesNotMatch(e, /rejected by the buyer/, e);
  assert.ok(Math.max(...served) < 5000, `served again after ${Math.max(...served)} ms`);
  for (const s of sessions) {
    const st = await waitState(srv, s.jobId, ['active'], 1000);
    assert.equal(st.pendingOps, 1);
    assert.deepEqual((await containersOf(s.jobId)).map((c) => c.Id), cids[s.jobId], 'the same container');
    // the image has no /bin/sh: exec stays unavailable, as the launch found it
    assert.deepEqual([st.walls.exec.available, st.walls.exec.reason], [false, 'the image has no /bin/sh: no command can run']);
  }
  // the pending writes are approved after the restart and land, once
  for (const s of sessions) {
    const ap = await srv.req('POST', `/v1/jailbox/${s.jobId}/approve/${s.req.opId}`, { token: s.buyerToken });
    assert.equal(ap.status, 200, ap.text);
  }
  const answers = await Promise.all(writes);
  for (const [i, s] of sessions.entries()) {
    const a = answers[i];
    assert.ok(a.result && !a.result.isError, JSON.stringify(a));
    assert.equal(readFileSync(join(s.dir, 'a.txt'), 'utf8'), `after ${i}\n`);
    const rows = (await srv.db.query("SELECT state FROM ops WHERE job_id = $1 AND tool = 'write'", [s.jobId])).rows;
    assert.deepEqual(rows.map((r) => r.state), ['done']);
    const chain = verifiedChain(srv, s.jobId);
    assert.equal(chain.filter((e) => e.operation === 'write').length, 1, 'one write in the chain');
  }
  // and the sessions still end cleanly
  for (const s of sessions) {
    const ab = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken });
    assert.equal(ab.status, 200, ab.text);
  }
  for (const s of sessions) await waitFor(srv, 'container gone', async () => (await containersOf(s.jobId)).length === 0, 15000);
});

// The worker killed at each step of a changing op (JB_TEST_FAULT, sandbox/worker/relay.c):
// before the shim's write the op runs once after the restart; after it (before the commit)
// the restarted worker finds the op in the shim's journal and commits its first answer — a
// supervised write is not reported `changed`, a move not `not_found`; after the commit
// nothing runs again. Every op is done once, in the files and in the chain.
test('worker killed before the shim\'s write, after it, after the commit: every op lands once, never `changed`, the chain verifies', { timeout: 600000 }, async () => {
  const fault = join(mkdtempSync(join(tmpdir(), 'jb-fault-')), 'point');
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim', env: { JB_TEST_FAULT: fault } });
  servers.push(srv);
  const s = await liveSession(srv, 0);
  const points = ['before_shim_write', 'after_shim_write', 'after_commit'];
  for (const [k, point] of points.entries()) {
    for (const op of ['write', 'move']) {
      writeFileSync(fault, point + '\n');
      const before = readyCount(srv);
      const args = op === 'write' ? { path: 'a.txt', content: `${point} ${k}\n` }
        : { source: 'a.txt', destination: `moved-${k}.txt` };
      const t0 = Date.now();
      const answer = call(s.agent, op, args, 120000).catch((e) => ({ cut: e.message }));
      const req = await waitEvent(s.buyer, 'jailbox:approval_request', (p) => p.tool === op && !p.seen);
      req.seen = true;
      const ap = await srv.req('POST', `/v1/jailbox/${s.jobId}/approve/${req.opId}`, { token: s.buyerToken });
      assert.equal(ap.status, 200, ap.text);
      const a = await answer;
      const took = Date.now() - t0;
      // after_commit fires once the op is committed: the answer may reach the agent first
      await waitFor(srv, `the fault ${point} fired`, () => !existsSync(fault), 10000);
      assert.ok(readyCount(srv) > before || /test fault/.test(srv.log()), 'the worker restarted');
      assert.ok(a.result && !a.result.isError, `${op} at ${point}: ${JSON.stringify(a)}`);
      console.log(`# ${op}, worker killed ${point}: answered in ${took} ms`);
      const row = (await srv.db.query('SELECT state, result FROM ops WHERE op_id = $1', [req.opId])).rows[0];
      assert.equal(row.state, 'done', JSON.stringify(row));
      if (op === 'write') {
        assert.equal(readFileSync(join(s.dir, 'a.txt'), 'utf8'), `${point} ${k}\n`);
      } else {
        assert.ok(!existsSync(join(s.dir, 'a.txt')));
        assert.equal(readFileSync(join(s.dir, `moved-${k}.txt`), 'utf8'), `${point} ${k}\n`);
      }
      await waitState(srv, s.jobId, ['active'], 5000);
    }
  }
  const chain = verifiedChain(srv, s.jobId);
  const changing = chain.filter((e) => e.operation === 'write' || e.operation === 'move');
  assert.equal(changing.length, points.length * 2, JSON.stringify(changing.map((e) => e.operation)));
  assert.ok(changing.every((e) => e.details.ok === true), JSON.stringify(changing.map((e) => e.details)));
  const rows = (await srv.db.query("SELECT tool, state FROM ops WHERE job_id = $1 AND tool IN ('write', 'move')", [s.jobId])).rows;
  assert.equal(rows.length, points.length * 2);
  assert.ok(rows.every((r) => r.state === 'done'), JSON.stringify(rows));
  assert.equal((srv.log().match(/"msg":"test fault: the worker exits"/g) || []).length, points.length * 2);
});

// An upgrade: the worker binary replaced on disk, then SIGTERM to the worker. It drains (no new
// claim, the op in flight finishes) and exits without touching its containers; jailboxd starts
// the new binary at once, which re-adopts them. The pending writes are approved and land once.
test('SIGTERM upgrade to a new worker binary: the sessions stay up in the same containers and are served by the new worker', { timeout: 600000 }, async () => {
  const bin = join(mkdtempSync(join(tmpdir(), 'jb-wbin-')), 'jailbox-worker');
  copyFileSync(join(dirname(JAILBOXD), 'jailbox-worker'), bin);
  chmodSync(bin, 0o755);
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim', env: { JAILBOX_WORKER_BIN: bin } });
  servers.push(srv);
  const sessions = [await liveSession(srv, 0), await liveSession(srv, 1)];
  const cids = {};
  for (const s of sessions) cids[s.jobId] = (await containersOf(s.jobId)).map((c) => c.Id);
  const writes = [];
  for (const [i, s] of sessions.entries()) {
    writes.push(call(s.agent, 'write', { path: 'a.txt', content: `upgraded ${i}\n` }, 120000).catch((e) => ({ cut: e.message })));
    s.req = await waitEvent(s.buyer, 'jailbox:approval_request');
  }
  // the new binary, put in place as a package manager would (a new file renamed over the old)
  copyFileSync(join(dirname(JAILBOXD), 'jailbox-worker'), bin + '.new');
  chmodSync(bin + '.new', 0o755);
  renameSync(bin + '.new', bin);
  const newIno = statSync(bin).ino;
  const old = workerPid(srv);
  const before = readyCount(srv);
  const t0 = Date.now();
  process.kill(old, 'SIGTERM');
  await waitFor(srv, 'the old worker gone', () => !existsSync('/proc/' + old), 20000);
  const stopped = Date.now() - t0;
  assert.match(srv.log(), /"msg":"worker stopping"[^\n]*"sessions":"left running for the next worker"/);
  await waitFor(srv, 'the new worker ready', () => readyCount(srv) > before, 20000);
  const served = await Promise.all(sessions.map(async (s, i) => {
    await waitFor(srv, `session ${i} served`, async () => (await readOf(s.agent, 'a.txt')) === `before ${i}\n`, 30000);
    return Date.now() - t0;
  }));
  console.log(`# SIGTERM upgrade: old worker gone after ${stopped} ms; sessions served again after ms:`, served.join(' '));
  const pid = workerPid(srv);
  assert.notEqual(pid, old);
  assert.equal(statSync('/proc/' + pid + '/exe').ino, newIno, 'the new worker runs the new binary');
  for (const s of sessions) {
    const st = await waitState(srv, s.jobId, ['active'], 1000);
    assert.equal(st.pendingOps, 1);
    assert.deepEqual((await containersOf(s.jobId)).map((c) => c.Id), cids[s.jobId], 'the same container');
    const ap = await srv.req('POST', `/v1/jailbox/${s.jobId}/approve/${s.req.opId}`, { token: s.buyerToken });
    assert.equal(ap.status, 200, ap.text);
  }
  const answers = await Promise.all(writes);
  for (const [i, s] of sessions.entries()) {
    assert.ok(answers[i].result && !answers[i].result.isError, JSON.stringify(answers[i]));
    assert.equal(readFileSync(join(s.dir, 'a.txt'), 'utf8'), `upgraded ${i}\n`);
    const chain = verifiedChain(srv, s.jobId);
    assert.equal(chain.filter((e) => e.operation === 'write').length, 1);
  }
});

// The lease (JAILBOX_WORKER_LEASE_S): a worker that stops answering (SIGSTOP: alive, its pid
// file locked, so nobody starts another) renews nothing; once its lease has run out the
// sweeper fails the session with the reason worker_unavailable and seals its chain. The agent
// waiting on a pending write is told the session failed — never "rejected by the buyer"; the
// worker, woken, removes the container.
test('a worker gone longer than its lease: the session fails with worker_unavailable, the waiting agent is told the real cause', { timeout: 300000 }, async () => {
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim', env: { JAILBOX_WORKER_LEASE_S: '3' } });
  servers.push(srv);
  const s = await liveSession(srv, 0);
  const lease = (await srv.db.query('SELECT lease_worker, lease_until > now() AS live FROM sessions WHERE job_id = $1', [s.jobId])).rows[0];
  assert.match(lease.lease_worker, /#0$/);
  assert.equal(lease.live, true);
  const w = call(s.agent, 'write', { path: 'a.txt', content: 'never\n' }, 120000).catch((e) => ({ cut: e.message }));
  await waitEvent(s.buyer, 'jailbox:approval_request');
  const pid = workerPid(srv);
  process.kill(pid, 'SIGSTOP');
  const t0 = Date.now();
  try {
    const st = await waitState(srv, s.jobId, ['failed'], 30000);
    console.log(`# session failed ${Date.now() - t0} ms after its worker stopped (lease 3 s):`, st.stateReason);
    assert.equal(st.stateReason, 'worker_unavailable');
    const f = toolFailure(await w);
    assert.ok(f, 'the write failed');
    assert.doesNotMatch(f.message, /rejected by the buyer/);
    assert.equal(f.data.reason, 'session_failed', JSON.stringify(f));
    assert.equal(readFileSync(join(s.dir, 'a.txt'), 'utf8'), 'before 0\n');
    const chain = verifiedChain(srv, s.jobId);
    assert.equal(chain[chain.length - 1].operation, 'seal');
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  await waitFor(srv, 'container removed', async () => (await containersOf(s.jobId)).length === 0, 30000);
});

// exec after re-adoption: the keeper holds the spawner's channel too, and the restarted worker
// takes it back (sandbox/worker/exec.c jb_spawner_adopt): the command that ran when the worker
// died is killed and its op failed worker_restarted; the next exec runs, and the contract still
// says exec is available.
test('worker SIGKILLed while an exec runs: the re-adopted session runs exec again, its contract says so', { timeout: 300000 }, async () => {
  const srv = await startJail({ image: 'jailbox-sandbox:readopt-exec', shim: 'jailbox-shim',
    extra: [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep', '/usr/bin/echo'] });
  servers.push(srv);
  const s = await openSession(srv, (d) => writeFileSync(join(d, 'a.txt'), 'x\n'), { mode: 'unsupervised' });
  const agent = await connect(srv, s.agentToken);
  const first = await call(agent, 'exec', { argv: ['echo', 'before'] }, 30000);
  assert.equal(first.result?.structuredContent?.stdout, 'before\n', JSON.stringify(first));
  const running = call(agent, 'exec', { argv: ['sleep', '30'] }, 60000).catch((e) => ({ cut: e.message }));
  await waitFor(srv, 'exec running', async () => (await srv.db.query(
    "SELECT 1 FROM ops WHERE job_id = $1 AND tool = 'exec' AND state = 'running'", [s.jobId])).rowCount > 0, 30000);
  const before = readyCount(srv);
  const t0 = Date.now();
  process.kill(workerPid(srv), 'SIGKILL');
  const f = toolFailure(await running);
  assert.equal(f?.data?.reason, 'worker_restarted', JSON.stringify(f));
  await waitFor(srv, 'a new worker', () => readyCount(srv) > before, 20000);
  const again = await waitFor(srv, 'exec served again', async () => {
    const r = await call(agent, 'exec', { argv: ['echo', 'after'] }, 30000);
    return r.result && !r.result.isError ? r : null;
  }, 20000);
  console.log(`# exec served again ${Date.now() - t0} ms after the worker's SIGKILL`);
  assert.equal(again.result.structuredContent.stdout, 'after\n');
  assert.equal(again.result.structuredContent.exitCode, 0);
  const st = await waitState(srv, s.jobId, ['active'], 1000);
  assert.equal(st.walls.exec.available, true, JSON.stringify(st.walls.exec));
  const execs = verifiedChain(srv, s.jobId).filter((e) => e.operation === 'exec');
  assert.deepEqual(execs.map((e) => e.details.ok), [true, false, true]);
});

// One request to the descriptor keeper of `srv`'s worker (sandbox/worker/keeper.c: SOCK_SEQPACKET,
// descriptors by SCM_RIGHTS, which node's net module cannot send): `text`, with /dev/null as its
// one descriptor when `withFd` (with 'hung-up': one end of a socket pair whose other end is
// closed, a channel whose sandbox is gone); the answer's packets up to "OK" or "END", one per line.
function askKeeper(srv, text, withFd) {
  const socks = readdirSync(srv.state).filter((f) => /^jbk-[0-9a-f]{16}\.s$/.test(f));
  assert.equal(socks.length, 1, 'the keeper socket in the state directory: ' + socks);
  const py = `import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
fds = [os.open('/dev/null', os.O_RDWR)] if sys.argv[3] == '1' else []
if sys.argv[3] == 'hung-up':
    a, b = socket.socketpair()
    fds = [a.fileno()]
socket.send_fds(s, [sys.argv[2].encode()], fds)
while True:
    m = s.recv(600).decode()
    print(m)
    if m in ('OK', 'END', 'BAD', 'FULL', ''): break`;
  const mode = withFd === 'hung-up' ? 'hung-up' : withFd ? '1' : '0';
  return execFileSync('python3', ['-c', py, join(srv.state, socks[0]), text, mode], { encoding: 'utf8' })
    .trim().split('\n');
}

// A kept channel belongs to one container: the keeper's entry for session A made to name B's
// container (put straight on the keeper's socket) is not taken over after the worker's SIGKILL —
// A fails with that reason, its container is removed and the entry let go — while B, whose
// entry is its own, is re-adopted and served.
test('a kept channel naming another container is not taken over: that session fails with the reason, the other is served', { timeout: 300000 }, async () => {
  const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim' });
  servers.push(srv);
  const a = await liveSession(srv, 0);
  const b = await liveSession(srv, 1);
  const cidA = (await containersOf(a.jobId)).map((c) => c.Id);
  const cidB = (await containersOf(b.jobId)).map((c) => c.Id);
  assert.equal(cidA.length, 1);
  assert.equal(cidB.length, 1);
  const held = askKeeper(srv, 'GET', false);
  assert.ok(held.some((l) => l.startsWith(`ENT ${a.jobId} ${cidA[0]} 1`)), held.join('\n'));
  assert.deepEqual(askKeeper(srv, `PUT ${a.jobId} ${cidB[0]} 100`, true), ['OK']);
  const before = readyCount(srv);
  process.kill(workerPid(srv), 'SIGKILL');
  const st = await waitState(srv, a.jobId, ['failed'], 30000);
  assert.equal(st.stateReason, `worker restarted; the channel the descriptor keeper held for the session belongs to container ${cidB[0].slice(0, 12)}, not to its container ${cidA[0].slice(0, 12)}: not taken over`);
  await waitFor(srv, 'a new worker', () => readyCount(srv) > before, 20000);
  await waitFor(srv, 'the other session served', async () => (await readOf(b.agent, 'a.txt')) === 'before 1\n', 20000);
  assert.deepEqual((await containersOf(b.jobId)).map((c) => c.Id), cidB, 'the same container');
  await waitFor(srv, "A's container removed", async () => (await containersOf(a.jobId)).length === 0, 20000);
  const after = askKeeper(srv, 'GET', false);
  assert.ok(!after.some((l) => l.startsWith(`ENT ${a.jobId} `)), after.join('\n'));
  assert.ok(after.some((l) => l.startsWith(`ENT ${b.jobId} ${cidB[0]} `)), after.join('\n'));
  assert.match(srv.log(), new RegExp(`"msg":"kept channel of another container"[^\\n]*"jobId":"${a.jobId}"`));
  // a kept channel whose sandbox is gone (its peer closed: the python process exits) is let go
  // within a second or two, as no worker may be left to say DEL; a live one stays
  assert.deepEqual(askKeeper(srv, 'PUT job-gone 0123456789ab 100', 'hung-up'), ['OK']);
  await waitFor(srv, 'the hung-up channel let go', () => !askKeeper(srv, 'GET', false).some((l) => l.startsWith('ENT job-gone ')), 3000);
  assert.ok(askKeeper(srv, 'GET', false).some((l) => l.startsWith(`ENT ${b.jobId} ${cidB[0]} `)));
});
