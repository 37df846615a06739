// changeset_batch.test.mjs — an agent's batch through the real stack (socket.io-client agent →
// jailboxd → worker → shim in gVisor + Docker): write, edit and delete calls with a
// `changeset` name are checked and answered at once, staged (nothing on disk, nothing asked);
// commit_changeset offers them as one changeset (one approval request, a row and a diff per
// file); the buyer approves three paths — those land but the one whose file the buyer changed
// after it was staged, which fails `changed` — and the rest are rejected; the commit call
// answers every member's outcome; jailboxctl lists and approves it as a command's. A second op
// on a staged path is refused; an empty or unknown batch is refused; a batch rejected whole
// lands nothing; a rollback afterwards returns the tree to its bytes at open (but the buyer's
// own change); a batch never committed is rejected at `done`. Unsupervised, a committed batch
// runs at once (a move's two rows). Needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, lstatSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { JAILBOXD } from './lib/server.mjs';

const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');

const sha = (b) => createHash('sha256').update(b).digest('hex');
let K, srv, S;
let atOpen;
const api = (suffix) => `/v1/jailbox/${S.jobId}${suffix}`;
const post = (suffix, body) => srv.req('POST', api(suffix), { token: S.buyerToken, body });
const get = (suffix) => srv.req('GET', api(suffix), { token: S.buyerToken });

// {path: sha256 | 'dir'} of every entry under `root`
function tree(root, rel = '', out = {}) {
  for (const e of readdirSync(join(root, rel)).sort()) {
    const p = rel ? `${rel}/${e}` : e;
    if (lstatSync(join(root, p)).isDirectory()) {
      out[p] = 'dir';
      tree(root, p, out);
    } else {
      out[p] = sha(readFileSync(join(root, p)));
    }
  }
  return out;
}

before(async () => {
  K = await startSandboxServer('jailbox-sandbox:batch', { JAILBOX_ESCAPE_ABORT: 'none' });
  srv = K.srv;
  S = await K.openSession((d) => {
    writeFileSync(join(d, 'a.txt'), 'alpha\n');
    writeFileSync(join(d, 'e.txt'), 'one\ntwo\nthree\n');
    writeFileSync(join(d, 'x.txt'), 'x at open\n');
    writeFileSync(join(d, 'd.txt'), 'to be deleted\n');
  }, { mode: 'supervised' });
  S.buyer = await K.connect(S.buyerToken);
  S.agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  atOpen = tree(S.dir);
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

const staged = {}; // path -> op id

test('staged: each call answered at once, nothing on disk, nothing asked; one op per path', { timeout: 60000 }, async () => {
  const calls = [
    ['write', { path: 'a.txt', content: 'alpha, rewritten\n' }],
    ['write', { path: 'n.txt', content: 'new file\n' }],
    ['write', { path: 'x.txt', content: 'x by the agent\n' }],
    ['edit', { path: 'e.txt', edits: [{ oldText: 'two', newText: 'TWO' }] }],
    ['delete', { path: 'd.txt' }],
  ];
  for (const [tool, args] of calls) {
    const t0 = Date.now();
    const r = await K.call(S.agent, tool, { ...args, changeset: 'refactor' }, 20000);
    assert.ok(r.result && !r.result.isError, `${tool}: ${JSON.stringify(r).slice(0, 400)}`);
    const sc = r.result.structuredContent;
    assert.equal(sc.staged, true, JSON.stringify(sc));
    assert.equal(sc.changeset, 'refactor');
    assert.ok(Number.isInteger(sc.opId));
    staged[args.path] = sc.opId;
    console.log(`# ${tool} ${args.path} staged as op ${sc.opId} in ${Date.now() - t0} ms`);
  }
  assert.deepEqual(tree(S.dir), atOpen, 'a staged op changed the workspace');
  assert.equal(S.buyer.events.filter((e) => e.event === 'jailbox:approval_request').length, 0,
    'a staged op was announced');
  const st = await srv.db.query('SELECT state FROM ops WHERE op_id = ANY($1)', [Object.values(staged)]);
  assert.deepEqual(st.rows.map((x) => x.state), Array(5).fill('staged'));
  // the same path again in the open batch: refused, naming the first op
  const f = toolFailure(await K.call(S.agent, 'write', { path: 'a.txt', content: 'again', changeset: 'refactor' }));
  assert.equal(f?.data?.reason, 'bad_request', JSON.stringify(f));
  assert.equal(f.data.opId, staged['a.txt']);
  assert.match(f.message, new RegExp(`op ${staged['a.txt']}`));
  // a name that is not one
  const bad = toolFailure(await K.call(S.agent, 'write', { path: 'q.txt', content: 'q', changeset: 'a/b' }));
  assert.equal(bad?.code, -32602, JSON.stringify(bad));
});

test('commit_changeset of an empty or unknown batch: bad_request', async () => {
  for (const args of [{ changeset: 'nothing-here' }, {}, { changeset: 'x', more: 1 }]) {
    const f = toolFailure(await K.call(S.agent, 'commit_changeset', args));
    assert.equal(f?.code, -32602, JSON.stringify(f));
    assert.equal(f.data?.reason, 'bad_request');
  }
});

test('commit: one approval request with 5 files and their diffs; 3 approved by path; the changed file fails; the rest rejected', { timeout: 120000 }, async () => {
  const call = K.call(S.agent, 'commit_changeset', { changeset: 'refactor' }, 110000);
  call.then((r) => { if (r.error || r.result?.isError) console.log('# commit answered early: ' + JSON.stringify(r) + srv.log().split('\n').filter((l) => /commit_changeset/.test(l)).join(' | ')); });
  const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.batch === 'refactor', 20000);
  assert.equal(ask.total, 5, JSON.stringify(ask));
  assert.deepEqual(ask.files.map((f) => [f.path, f.change]),
    [['a.txt', 'modified'], ['n.txt', 'added'], ['x.txt', 'modified'], ['e.txt', 'modified'], ['d.txt', 'deleted']]);
  assert.match(ask.changesetSha256, /^[0-9a-f]{64}$/);
  assert.equal(S.buyer.events.filter((e) => e.event === 'jailbox:approval_request').length, 1);
  const page = await get(`/ops/${ask.opId}/changeset`);
  assert.equal(page.status, 200, page.text);
  assert.equal(page.json.total, 5);
  assert.equal(page.json.changesetSha256, ask.changesetSha256);
  const row = (p) => page.json.files.find((f) => f.path === p);
  assert.match(row('a.txt').diff.text, /-alpha\n\+alpha, rewritten/);
  assert.match(row('n.txt').diff.text, /\+new file/);
  assert.match(row('e.txt').diff.text, /-two\n\+TWO/);
  assert.equal(row('a.txt').oldSha256, atOpen['a.txt']);
  assert.equal(row('a.txt').newSha256, sha('alpha, rewritten\n'));
  assert.equal(row('d.txt').oldSha256, atOpen['d.txt']);
  assert.equal(row('n.txt').oldType, 'absent');
  // nothing is run while the changeset waits
  assert.deepEqual(tree(S.dir), atOpen);
  // the buyer changes x.txt after it was staged
  writeFileSync(join(S.dir, 'x.txt'), 'x changed by the buyer\n');
  // a subset naming one end of nothing / a path not in it is refused as for a command's
  const nope = await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ask.opId, files: ['zz.txt'] });
  assert.equal(nope.error?.code, 'not_in_changeset', JSON.stringify(nope));
  // jailboxctl lists it and approves the subset as for a command's changeset
  const ctlEnv = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: S.buyerToken };
  const listed = execFileSync(CTL, ['changes', S.jobId, '--op', String(ask.opId), '--diff'], { env: ctlEnv, encoding: 'utf8' });
  for (const p of ['a.txt', 'n.txt', 'x.txt', 'e.txt', 'd.txt']) assert.match(listed, new RegExp(p.replace('.', '\\.')), listed);
  assert.match(listed, /\+alpha, rewritten/, listed);
  execFileSync(CTL, ['approve', S.jobId, String(ask.opId), '--files', 'a.txt,x.txt,e.txt'], { env: ctlEnv, encoding: 'utf8' });
  const r = await call;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r).slice(0, 600));
  const cs = r.result.structuredContent.changeset;
  console.log(`# commit answer: ${JSON.stringify(cs)}`);
  assert.equal(cs.opId, ask.opId);
  assert.deepEqual([cs.state, cs.applied, cs.rejected, cs.failed], ['failed', 2, 2, 1]);
  const m = Object.fromEntries(cs.members.map((x) => [x.path, x]));
  assert.deepEqual(cs.members.map((x) => x.opId), Object.values(staged));
  assert.equal(m['a.txt'].state, 'done');
  assert.equal(m['e.txt'].state, 'done');
  assert.equal(m['x.txt'].state, 'failed');
  assert.equal(m['x.txt'].error?.code, 'changed', JSON.stringify(m['x.txt']));
  assert.equal(m['n.txt'].state, 'rejected');
  assert.match(m['n.txt'].error, /not approved in changeset refactor/);
  assert.equal(m['d.txt'].state, 'rejected');
  // the disk holds exactly the approved files; the buyer's change stays
  const now = tree(S.dir);
  assert.equal(now['a.txt'], sha('alpha, rewritten\n'));
  assert.equal(readFileSync(join(S.dir, 'e.txt'), 'utf8'), 'one\nTWO\nthree\n');
  assert.equal(readFileSync(join(S.dir, 'x.txt'), 'utf8'), 'x changed by the buyer\n');
  assert.ok(!existsSync(join(S.dir, 'n.txt')));
  assert.equal(now['d.txt'], atOpen['d.txt']);
  // the rows' decisions and the batch op done
  const after = await get(`/ops/${ask.opId}/changeset`);
  assert.deepEqual(after.json.files.map((f) => f.decision), ['approved', 'rejected', 'approved', 'approved', 'rejected']);
  assert.equal(after.json.state, 'done');
  // a batch name is free again once committed
  const again = await K.call(S.agent, 'write', { path: 'a.txt', content: 'later', changeset: 'refactor' });
  assert.equal(again.result?.structuredContent?.staged, true, JSON.stringify(again));
  staged.later = again.result.structuredContent.opId;
});

test('a batch rejected whole: every member rejected, nothing lands, the call says so', { timeout: 60000 }, async () => {
  const w = await K.call(S.agent, 'write', { path: 'r.txt', content: 'never\n', changeset: 'r2' });
  assert.equal(w.result?.structuredContent?.staged, true, JSON.stringify(w));
  const call = K.call(S.agent, 'commit_changeset', { changeset: 'r2' }, 50000);
  const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.batch === 'r2', 20000);
  const ack = await S.buyer.timeout(10000).emitWithAck('jailbox:reject', { opId: ask.opId, reason: 'no' });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  const r = await call;
  const cs = r.result?.structuredContent?.changeset;
  assert.deepEqual([cs?.state, cs?.applied, cs?.rejected], ['rejected', 0, 1], JSON.stringify(r));
  assert.ok(!existsSync(join(S.dir, 'r.txt')));
});

test('rollback after pause: the tree back to its bytes at open (the buyer\'s own change stays)', { timeout: 120000 }, async () => {
  assert.equal((await post('/pause', { reason: 'review' })).status, 200);
  const r = await post('/rollback', {});
  assert.equal(r.status, 202, r.text);
  let g;
  await K.waitFor('rollback', async () => {
    g = await get(`/rollbacks/${r.json.rollbackId}`);
    return ['done', 'failed'].includes(g.json.state);
  }, 90000);
  assert.equal(g.json.state, 'done', JSON.stringify(g.json));
  assert.deepEqual(tree(S.dir), { ...atOpen, 'x.txt': sha('x changed by the buyer\n') });
  assert.equal((await post('/resume', {})).status, 200);
});

test('a batch never committed is rejected at done', { timeout: 60000 }, async () => {
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  const r = await K.call(S.agent, 'done', { summary: 'finished' });
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  const o = await srv.db.query('SELECT state, reason FROM ops WHERE op_id = $1', [staged.later]);
  assert.equal(o.rows[0].state, 'rejected');
  assert.match(o.rows[0].reason, /changeset refactor was not committed/);
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), 'alpha\n');
});

test('unsupervised: the batch runs at once when committed (mkdir, write under it, move); a move\'s rows go together', { timeout: 120000 }, async () => {
  const U = await K.openSession((d) => {
    writeFileSync(join(d, 'm.txt'), 'to be moved\n');
  }, { mode: 'unsupervised' });
  U.buyer = await K.connect(U.buyerToken);
  U.agent = await K.connect(U.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(U.jobId)).state === 'active');
  for (const [tool, args] of [['mkdir', { path: 'lib' }], ['write', { path: 'lib/w.txt', content: 'w\n' }],
    ['move', { source: 'm.txt', destination: 'moved.txt' }]]) {
    const r = await K.call(U.agent, tool, { ...args, changeset: 'u1' });
    assert.equal(r.result?.structuredContent?.staged, true, `${tool}: ${JSON.stringify(r)}`);
  }
  assert.ok(!existsSync(join(U.dir, 'lib')) && existsSync(join(U.dir, 'm.txt')), 'staged ops ran before the commit');
  // the move's destination is staged: another op on it is refused
  const f = toolFailure(await K.call(U.agent, 'write', { path: 'moved.txt', content: 'x', changeset: 'u1' }));
  assert.equal(f?.data?.reason, 'bad_request', JSON.stringify(f));
  const r = await K.call(U.agent, 'commit_changeset', { changeset: 'u1' }, 60000);
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  const cs = r.result.structuredContent.changeset;
  assert.deepEqual([cs.state, cs.applied, cs.rejected, cs.failed], ['applied', 3, 0, 0], JSON.stringify(cs));
  assert.equal(readFileSync(join(U.dir, 'lib/w.txt'), 'utf8'), 'w\n');
  assert.equal(readFileSync(join(U.dir, 'moved.txt'), 'utf8'), 'to be moved\n');
  assert.ok(!existsSync(join(U.dir, 'm.txt')));
  assert.equal(U.buyer.events.filter((e) => e.event === 'jailbox:approval_request').length, 0);
  const page = await srv.req('GET', `/v1/jailbox/${U.jobId}/ops/${cs.opId}/changeset`, { token: U.buyerToken });
  assert.deepEqual(page.json.files.map((x) => [x.path, x.change, x.decision]),
    [['lib', 'added', 'approved'], ['lib/w.txt', 'added', 'approved'], ['m.txt', 'deleted', 'approved'], ['moved.txt', 'added', 'approved']]);
  assert.equal(page.json.state, 'done');
});
