// rollback_escape.test.mjs — rollback on escape (JAILBOX_ROLLBACK_ON_ESCAPE) through the real
// stack: an unsupervised session changes two files and makes a third with three writes, then
// an escape ends it — caught by the worker (its container killed from outside: sandbox_died)
// or by jailboxd (a path with ".."). Once
// the sandbox is gone and before the chain is sealed, the workspace is rolled back to its
// bytes at open: the entry `rollback` (actor system, reason escape_detected, the three files,
// treeBefore/treeAfter) is the last before the seal, the chain verifies offline, the session is
// aborted and sealed. With the setting off the same escape leaves the writes on disk and the
// chain holds no rollback. A rollback that overruns its time does not hold the seal back.
// Needs root, Docker with runsc.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { verifiedChain } from './lib/mcp.mjs';
import { containersOf, docker } from './lib/jail.mjs';

const IMAGE = 'jailbox-sandbox:rollback-escape';
const kits = [];
// JB_TEST_FAULT's file: the worker acts on the point it names (sandbox/worker/worker.h)
const fault = join(mkdtempSync(join(tmpdir(), 'jb-fault-')), 'point');

after(async () => {
  for (const kit of kits) {
    kit.closeSockets();
    const log = kit.srv.log();
    await kit.srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

async function server(env) {
  const kit = await startSandboxServer(IMAGE, {
    JAILBOX_PREIMAGE_DIR: mkdtempSync(join(tmpdir(), 'jb-preimages-')), ...env });
  kits.push(kit);
  return kit;
}

// every entry under `dir` by content: path → 'f <sha256>' | 'd' | 'l <target>' (modes left
// out: the workspace's group access is given at launch and taken back at the end)
function tree(dir, rel = '', out = {}) {
  for (const name of readdirSync(join(dir, rel)).sort()) {
    const p = rel ? rel + '/' + name : name;
    const st = lstatSync(join(dir, p));
    if (st.isDirectory()) { out[p] = 'd'; tree(dir, p, out); }
    else if (st.isSymbolicLink()) out[p] = 'l ' + readlinkSync(join(dir, p));
    else out[p] = 'f ' + createHash('sha256').update(readFileSync(join(dir, p))).digest('hex');
  }
  return out;
}

// the tree hash v1 of `dir` (api/audit.md; tests/node/lib/treehash.py)
const treeHash = (dir) => execFileSync('python3', [join(import.meta.dirname, 'lib/treehash.py'), dir], { encoding: 'utf8' }).trim();

// an unsupervised session, live, after three writes that landed: a.txt and sub/b.txt changed,
// new.txt made
async function sessionWithWrites(kit) {
  const S = await kit.openSession((d) => {
    writeFileSync(join(d, 'a.txt'), 'hello\n');
    mkdirSync(join(d, 'sub'));
    writeFileSync(join(d, 'sub/b.txt'), 'bee\n');
    writeFileSync(join(d, 'keep.txt'), 'untouched\n');
  }, { mode: 'unsupervised' });
  const atOpen = tree(S.dir);
  const buyer = await kit.connect(S.buyerToken);
  const agent = await kit.connect(S.agentToken);
  await kit.ok(agent, 'write', { path: 'a.txt', content: 'changed by the agent\n' });
  await kit.ok(agent, 'edit', { path: 'sub/b.txt', edits: [{ oldText: 'bee', newText: 'BEE' }] });
  await kit.ok(agent, 'write', { path: 'new.txt', content: 'made by the agent\n' });
  const written = tree(S.dir);
  assert.equal(written['new.txt'], 'f ' + createHash('sha256').update('made by the agent\n').digest('hex'));
  assert.notEqual(written['a.txt'], atOpen['a.txt']);
  assert.notEqual(written['sub/b.txt'], atOpen['sub/b.txt']);
  return { ...S, buyer, agent, atOpen, written };
}

// the escape, caught by the worker (`by` 'worker') or by jailboxd; the kind it raises
async function escape(kit, S, by) {
  if (by === 'worker') { // the container killed from outside: the worker sees its sandbox die
    const [c] = await containersOf(S.jobId);
    assert.equal((await docker('POST', `/containers/${c.Id}/kill`)).status, 204);
    return 'sandbox_died';
  }
  const r = await kit.call(S.agent, 'read', { path: '../secret.txt' }).catch((e) => ({ cut: e.message }));
  assert.ok(r.cut || toolFailure(r), JSON.stringify(r));
  return 'path_traversal';
}

// waits for the seal; the verified chain
async function sealed(kit, S) {
  await kit.waitFor('the seal', async () => {
    const a = await kit.srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: kit.srv.serviceToken });
    return a.status === 200 && a.text.trim().split('\n').map((l) => JSON.parse(l)).at(-1).operation === 'seal';
  }, 60000);
  const st = await kit.sessionOf(S.jobId);
  assert.deepEqual([st.state, st.stateReason], ['aborted', 'escape_detected']);
  assert.equal((await kit.srv.db.query('SELECT count(*)::int AS n FROM seals_pending WHERE job_id = $1', [S.jobId])).rows[0].n, 0);
  return verifiedChain(kit.srv, S.jobId);
}

const timings = {};
after(() => console.log('# escape → seal with the rollback between, ms:', JSON.stringify(timings)));

test('rollback on escape: the three writes undone after the sandbox is gone, the entry before the seal (worker and jailboxd escapes)', { timeout: 300000 }, async () => {
  const kit = await server({ JAILBOX_ROLLBACK_ON_ESCAPE: '1', JAILBOX_ROLLBACK_ON_ESCAPE_TIMEOUT_S: '5', JB_TEST_FAULT: fault });
  for (const by of ['worker', 'jailboxd']) {
    const S = await sessionWithWrites(kit);
    const t0 = Date.now();
    const kind = await escape(kit, S, by);
    const chain = await sealed(kit, S);
    timings[by] = Date.now() - t0;
    const now = tree(S.dir);
    const rb = chain.find((e) => e.operation === 'rollback');
    assert.deepEqual(now, S.atOpen, `the workspace is back to its bytes at open (${by}): ${JSON.stringify(rb)}`);

    // the chain: abort, then the rollback, then the seal
    const ops = chain.map((e) => e.operation);
    const iAbort = ops.lastIndexOf('abort');
    const iRollback = ops.indexOf('rollback');
    assert.equal(ops.at(-1), 'seal');
    assert.equal(iRollback, ops.length - 2, ops.join(' '));
    assert.ok(iAbort >= 0 && iAbort < iRollback, ops.join(' '));
    assert.equal(chain[iAbort].details.kind, kind);
    const d = chain[iRollback].details;
    assert.deepEqual([d.actor, d.reason, d.to, d.force], ['system', 'escape_detected', null, false]);
    assert.deepEqual([d.restored, d.conflicts, d.failed, d.filesCount], [3, 0, 0, 3], JSON.stringify(d));
    assert.deepEqual(d.files.map((f) => [f.path, f.outcome]).sort(),
      [['a.txt', 'restored'], ['new.txt', 'restored'], ['sub/b.txt', 'restored']]);
    assert.equal(d.files.find((f) => f.path === 'new.txt').restored.kind, 'absent');
    assert.match(d.treeBefore, /^[0-9a-f]{64}$/);
    assert.notEqual(d.treeBefore, d.treeAfter);
    assert.equal(d.error, undefined);
    // the state the rollback says it returned to is the one at open (its hash leaves out the
    // jail's group access the session's grant added): the pre-scan's; given back, the
    // workspace is that tree again
    const atOpen = chain.find((e) => e.operation === 'pre_scan').details.treeSha256;
    assert.equal(d.treeAfter, atOpen);
    assert.equal(treeHash(S.dir), atOpen);
    // the job, and the buyer heard of it
    const job = (await kit.srv.db.query("SELECT state FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", [S.jobId])).rows;
    assert.deepEqual(job, [{ state: 'done' }]);
    const ev = await kit.waitEvent(S.buyer, 'jailbox:rollback', (e) => e.state === 'done');
    assert.equal(ev.restored, 3);
  }
});

// A rollback that does not end in its time (the worker's thread stalls past it: a test fault)
// does not hold the seal back: jailboxd's sweeper seals once the time is up, the rollback
// recorded in the chain as failed (timeout) before the seal; nothing was restored.
test('a rollback on escape that overruns its time: sealed anyway, the rollback recorded as failed', { timeout: 300000 }, async () => {
  const kit = kits[0];
  const S = await sessionWithWrites(kit);
  writeFileSync(fault, 'escape_rollback_stall\n');
  const t0 = Date.now();
  await escape(kit, S, 'worker');
  const chain = await sealed(kit, S);
  const ms = Date.now() - t0;
  timings.overrun = ms;
  assert.ok(ms >= 4000 && ms < 15000, `sealed after ${ms} ms (the time is 5 s)`);
  assert.match(kit.srv.log(), /"test fault".*"point":"escape_rollback_stall"/);
  const ops = chain.map((e) => e.operation);
  assert.deepEqual(ops.slice(-2), ['rollback', 'seal'], ops.join(' '));
  const d = chain.at(-2).details;
  assert.deepEqual([d.actor, d.reason, d.error, d.restored], ['system', 'escape_detected', 'timeout', 0], JSON.stringify(d));
  const job = (await kit.srv.db.query("SELECT state, error FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", [S.jobId])).rows;
  assert.deepEqual(job, [{ state: 'failed', error: 'timeout' }]);
  // the stalled run wakes past its time: it finds the chain sealed, restores nothing, and the
  // chain takes no more
  await kit.waitFor('the stalled rollback ends', () => kit.srv.log().split('\n').some((l) =>
    l.includes(S.jobId) && /"msg":"rollback failed".*"error":"chain_sealed"/.test(l)), 15000);
  assert.deepEqual(tree(S.dir), S.written);
  assert.equal(verifiedChain(kit.srv, S.jobId).length, chain.length);
});

test('without JAILBOX_ROLLBACK_ON_ESCAPE the escape leaves the writes on disk', { timeout: 300000 }, async () => {
  for (const k of kits.splice(0)) { // one server at a time
    k.closeSockets();
    const log = k.srv.log();
    await k.srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
  const kit = await server({});
  const S = await sessionWithWrites(kit);
  await escape(kit, S, 'worker');
  const chain = await sealed(kit, S);
  assert.deepEqual(tree(S.dir), S.written);
  assert.equal(chain.filter((e) => e.operation === 'rollback').length, 0);
  assert.equal((await kit.srv.db.query("SELECT count(*)::int AS n FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", [S.jobId])).rows[0].n, 0);
});
