// adversarial.test.mjs — faults a reviewer found by attacking the op path,
// each held by a test through the whole real stack: socket.io-client agent → jailboxd →
// jailbox-worker → jailbox-shim inside gVisor + Docker + bwrap. Needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { linkSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:adversarial';

let K;
let outside;

before(async () => {
  // escape signals only alert here: the tests look at what the agent sees, on one session
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none' });
  outside = join(K.srv.dir, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'outside secret\n');
});

after(async () => {
  if (K) {
    K.closeSockets();
    const log = K.srv.log();
    await K.srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// Fault: flagged entries were hidden from list only by jailboxd comparing the requested
// path with the pre-scan's list — so they showed through a symlinked directory, past the
// list's first 1,000 entries, and when made after the pre-scan.
test('entries the pre-scan would flag stay invisible to list however they are reached', { timeout: 240000 }, async () => {
  const S = await K.openSession((d) => {
    mkdirSync(join(d, 'sub'));
    writeFileSync(join(d, 'sub/ok.txt'), 'fine\n');
    linkSync(join(outside, 'secret.txt'), join(d, 'sub/hl'));
    execFileSync('mkfifo', [join(d, 'sub/pipe')]);
    symlinkSync('/etc', join(d, 'sub/abs-out'));
    symlinkSync('../../outside', join(d, 'sub/rel-out'));
    symlinkSync('ok.txt', join(d, 'sub/in'));
    symlinkSync('sub', join(d, 'via'));
    // more flags than the pre-scan's list keeps (1,000): hard links to one inside file
    mkdirSync(join(d, 'many'));
    writeFileSync(join(d, 'many/base'), 'shared\n');
    for (let i = 0; i < 1100; i++) linkSync(join(d, 'many/base'), join(d, 'many/h' + String(i).padStart(4, '0')));
  }, { mode: 'unsupervised' });
  const agent = await K.connect(S.agentToken);
  const flagged = (await K.sessionOf(S.jobId)).walls.prescan;
  assert.equal(flagged.flaggedCount, 4 + 1101, JSON.stringify(flagged).slice(0, 300));
  assert.equal(flagged.flagged.length, 1000);
  // late: made by someone else after the pre-scan
  linkSync(join(outside, 'secret.txt'), join(S.dir, 'sub/late-hl'));
  symlinkSync('/', join(S.dir, 'sub/late-root'));
  execFileSync('mkfifo', [join(S.dir, 'sub/late-pipe')]);
  const want = ['in', 'ok.txt'];
  assert.deepEqual((await K.ok(agent, 'list', { path: 'sub' })).entries.map((e) => e.name).sort(), want);
  const via = await K.ok(agent, 'list', { path: 'via' });
  assert.deepEqual(via.entries.map((e) => e.name).sort(), want, JSON.stringify(via.entries));
  assert.equal(via.count, 2);
  const rec = await K.ok(agent, 'list', { recursive: true });
  const names = rec.entries.map((e) => e.name).sort();
  assert.deepEqual(names, ['many', 'sub', 'sub/in', 'sub/ok.txt', 'via'], JSON.stringify(names.slice(0, 20)));
  assert.equal(rec.count, names.length);
  // and still refused, whichever way
  for (const path of ['via/hl', 'via/pipe', 'sub/late-hl', 'sub/late-pipe', 'many/h1099', 'many/base'])
    await K.refused(agent, 'read', { path });
  await K.refused(agent, 'list', { path: 'sub/late-root' });
  assert.equal(readFileSync(join(outside, 'secret.txt'), 'utf8'), 'outside secret\n');
});

// Fault: exclusion globs were matched with fnmatch(FNM_PATHNAME), whose "**" is one
// component's "*": the buyer's "**/.env" hid "x/.env" only, not ".env" nor "a/b/.env".
test('"**" in an exclusion stands for any number of directories, none included', { timeout: 240000 }, async () => {
  const S = await K.openSession((d) => {
    writeFileSync(join(d, '.env'), 'TOP=1\n');
    mkdirSync(join(d, 'a/b'), { recursive: true });
    writeFileSync(join(d, 'a/b/.env'), 'DEEP=1\n');
    writeFileSync(join(d, 'a/b/ok.txt'), 'fine\n');
    symlinkSync('a/b/.env', join(d, 'env-link'));
  }, { mode: 'unsupervised', exclude: ['**/.env'] });
  const agent = await K.connect(S.agentToken);
  for (const path of ['.env', 'a/b/.env']) {
    await K.refused(agent, 'read', { path }, 'excluded');
    await K.refused(agent, 'write', { path, content: 'x' }, 'excluded');
  }
  await K.refused(agent, 'read', { path: 'env-link' }, 'excluded'); // the shim, on the resolved path
  const names = (await K.ok(agent, 'list', { recursive: true })).entries.map((e) => e.name).sort();
  assert.deepEqual(names, ['a', 'a/b', 'a/b/ok.txt', 'env-link']);
  assert.equal(readFileSync(join(S.dir, '.env'), 'utf8'), 'TOP=1\n');
  assert.equal(readFileSync(join(S.dir, 'a/b/.env'), 'utf8'), 'DEEP=1\n');
});

// Fault: an unsupervised write over a file too large for the shim to hash (256 MiB) went
// ahead and was kept in the change summary with sha256Before null — "a new file". Its
// pre-image (300 MiB, over the session's JAILBOX_PREIMAGE_MAX_BYTES) is now refused first:
// preimage_budget, before the shim is asked; either way nothing is replaced.
test('a write never replaces a file whose SHA-256 the change summary cannot record', { timeout: 240000 }, async () => {
  const S = await K.openSession((d) => {
    execFileSync('truncate', ['-s', String(300 * 1024 * 1024), join(d, 'huge.bin')]);
    writeFileSync(join(d, 'small.txt'), 'before\n');
  }, { mode: 'unsupervised' });
  const agent = await K.connect(S.agentToken);
  await K.refused(agent, 'write', { path: 'huge.bin', content: 'tiny\n' }, 'preimage_budget');
  assert.equal(statSync(join(S.dir, 'huge.bin')).size, 300 * 1024 * 1024);
  await K.ok(agent, 'write', { path: 'small.txt', content: 'after\n' });
  await K.ok(agent, 'write', { path: 'new.txt', content: 'new\n' });
  const r = await K.srv.req('GET', `/v1/jailbox/${S.jobId}/changes`, { token: K.srv.serviceToken });
  assert.equal(r.status, 200, r.text);
  const by = Object.fromEntries(r.json.changes.map((c) => [c.path, c]));
  assert.deepEqual(Object.keys(by).sort(), ['new.txt', 'small.txt']);
  const sha = (s) => createHash('sha256').update(s).digest('hex');
  assert.deepEqual([by['small.txt'].sha256Before, by['small.txt'].sha256After], [sha('before\n'), sha('after\n')]);
  assert.equal(by['new.txt'].sha256Before, null);
});

// Fault: the worker's claim locked the op's row, then the session's; an abort locks the
// session's row, then fails the queued ops: the two deadlocked and PostgreSQL cancelled one —
// sometimes the buyer's abort ("fail queued ops: deadlock detected"), which was then lost.
test('an abort racing queued and approved ops always goes through', { timeout: 300000 }, async () => {
  const abortNow = async (buyer) => {
    const a = await buyer.timeout(15000).emitWithAck('jailbox:abort', { reason: 'race' });
    assert.equal(a?.ok, true, 'the abort was lost: ' + JSON.stringify(a));
  };
  for (let round = 0; round < 4; round++) { // supervised: approve and abort at once
    const R = await K.openSession(() => {});
    const buyer = await K.connect(R.buyerToken);
    const agent = await K.connect(R.agentToken);
    const pending = K.call(agent, 'write', { path: 'race.txt', content: 'raced\n' }, 60000).catch((e) => ({ closed: e.message }));
    const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'race.txt');
    await Promise.all([buyer.timeout(15000).emitWithAck('jailbox:approve', { opId: req.opId }), abortNow(buyer)]);
    await pending;
    assert.equal((await K.sessionOf(R.jobId)).state, 'aborted', `round ${round}`);
  }
  for (let round = 0; round < 3; round++) { // unsupervised: a stream of queued writes
    const R = await K.openSession(() => {}, { mode: 'unsupervised' });
    const buyer = await K.connect(R.buyerToken);
    const agent = await K.connect(R.agentToken);
    await K.ok(agent, 'write', { path: 'first.txt', content: '1\n' });
    const calls = [];
    for (let i = 0; i < 6; i++)
      calls.push(K.call(agent, 'write', { path: `f${i}.txt`, content: `${i}\n` }, 60000).catch((e) => ({ closed: e.message })));
    await new Promise((r) => setTimeout(r, 5 * round));
    await abortNow(buyer);
    await Promise.all(calls);
    assert.equal((await K.sessionOf(R.jobId)).state, 'aborted', `round ${round}`);
  }
});

// The same fault made certain: a transaction that holds the session's row (as an abort does)
// and then touches the session's queued op must not meet a claim holding that op's row.
test('the worker claims an op in the lock order of every chain writer: the session row, then the op', { timeout: 120000 }, async () => {
  const R = await K.openSession((d) => writeFileSync(join(d, 'x.txt'), 'x\n'), { mode: 'unsupervised' });
  const agent = await K.connect(R.agentToken);
  await K.ok(agent, 'read', { path: 'x.txt' }); // active, sandbox up
  const tx = await K.srv.db.connect();
  try {
    await tx.query('BEGIN');
    // FOR NO KEY UPDATE: the op's insert (its foreign key takes KEY SHARE) still goes in;
    // the claim's FOR UPDATE waits
    await tx.query('SELECT 1 FROM sessions WHERE job_id = $1 FOR NO KEY UPDATE', [R.jobId]);
    const call = K.call(agent, 'write', { path: 'w.txt', content: 'w\n' }, 60000);
    // the op is queued; the worker's claim is now waiting for the session row
    await K.waitFor('queued op', async () => (await K.srv.db.query(
      "SELECT 1 FROM ops WHERE job_id = $1 AND tool = 'write' AND state = 'approved'", [R.jobId])).rowCount === 1);
    await new Promise((r) => setTimeout(r, 500));
    // as jb_db_session_end_ops does: it must neither wait for the claim nor deadlock with it
    const t0 = Date.now();
    await tx.query("UPDATE ops SET reason = reason WHERE job_id = $1 AND state = 'approved'", [R.jobId]);
    assert.ok(Date.now() - t0 < 500, `the op's row was held by a claim waiting for the session row (${Date.now() - t0} ms)`);
    await tx.query('ROLLBACK');
    const r = await call;
    assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  } finally {
    tx.release();
  }
  assert.equal(readFileSync(join(R.dir, 'w.txt'), 'utf8'), 'w\n');
});
