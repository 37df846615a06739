// rollback.test.mjs — a session's rollback through the real stack: the official MCP SDK client
// (Streamable HTTP) writes, edits, makes a folder, moves and deletes files in an unsupervised
// session; the worker keeps a pre-image before each change (migration 044). Then: a rollback
// of an active session is refused (409 not_paused), an op approved meanwhile refuses it (409
// ops_running), two at once take one (409 rollback_running), the dry run lists the agent's
// ops newest first and every path, the rollback is queued (202) and followed over GET
// …/rollbacks/:id until it is done, resume is refused while it waits, and the workspace is
// back to its bytes at open (the SHA-256 of every file, and the same folders). Refusals: no
// token 401, another session's buyer 403, the operator without a reason 400, an unknown key
// 400, `to` not an op of the session 404 — and Socket.IO `jailbox:rollback` answers the same
// codes as REST for the same bad input. Needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync, lstatSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';
import { connectClient, CTL } from './lib/mcp.mjs';

const sha = (b) => createHash('sha256').update(b).digest('hex');

// {relative path: sha256 of a file, or 'dir'} of the tree under `root`
function tree(root, rel = '', out = {}) {
  for (const e of readdirSync(join(root, rel)).sort()) {
    const p = rel ? `${rel}/${e}` : e;
    const st = lstatSync(join(root, p));
    if (st.isDirectory()) {
      out[p] = 'dir';
      tree(root, p, out);
    } else {
      out[p] = sha(readFileSync(join(root, p)));
    }
  }
  return out;
}

let K, srv, A, B, client, buyerA, atOpen;
const ops = []; // the agent's ops in A, oldest first: {opId, tool, path}
const path = (S, suffix) => `/v1/jailbox/${S.jobId}${suffix}`;
const post = (S, suffix, body, token = S.buyerToken) => srv.req('POST', path(S, suffix), { token, body });
const get = (S, suffix, token = S.buyerToken) => srv.req('GET', path(S, suffix), { token });
const rollback = (S, body, token) => post(S, '/rollback', body, token);
const sockRollback = (sock, arg) => sock.timeout(10000).emitWithAck('jailbox:rollback', arg);

before(async () => {
  K = await startSandboxServer('jailbox-sandbox:rollback', { JAILBOX_ESCAPE_ABORT: 'none' });
  srv = K.srv;
  A = await K.openSession((d) => {
    writeFileSync(join(d, 'a.txt'), 'alpha\n');
    writeFileSync(join(d, 'b.txt'), 'bravo\nbravo two\n');
    mkdirSync(join(d, 'src'));
    writeFileSync(join(d, 'src/c.txt'), 'charlie\n');
    writeFileSync(join(d, 'd.bin'), Buffer.from([0, 1, 2, 255, 254]));
  }, { mode: 'unsupervised' });
  B = await K.openSession(() => {}, { mode: 'unsupervised' });
  atOpen = tree(A.dir);
  client = await connectClient('http', K, A, 'rollback-test');
  buyerA = await K.connect(A.buyerToken);
  const ok = async (name, args) => {
    const r = await client.callTool({ name, arguments: args });
    assert.equal(r.isError, false, `${name}: ${JSON.stringify(r).slice(0, 400)}`);
  };
  await ok('write', { path: 'a.txt', content: 'alpha, rewritten by the agent\n' });
  await ok('write', { path: 'new.txt', content: 'made by the agent\n' });
  await ok('edit', { path: 'b.txt', edits: [{ oldText: 'bravo two', newText: 'bravo edited' }] });
  await ok('mkdir', { path: 'lib/deep' });
  await ok('move', { source: 'src/c.txt', destination: 'lib/deep/c.txt' });
  await ok('delete', { path: 'd.bin' });
  const list = await get(A, '/ops?limit=100', srv.serviceToken);
  assert.equal(list.status, 200, list.text);
  const changing = ['write', 'edit', 'mkdir', 'move', 'delete']; // not the stats they made
  for (const o of list.json.ops)
    if (o.state === 'done' && changing.includes(o.tool)) ops.push({ opId: o.opId, tool: o.tool, path: o.path });
  assert.deepEqual(ops.map((o) => o.tool), ['write', 'write', 'edit', 'mkdir', 'move', 'delete']);
  assert.notDeepEqual(tree(A.dir), atOpen);
});

after(async () => {
  await client?.close().catch(() => {});
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

test('who may ask: no token 401, another session 403, the operator says why', async () => {
  assert.equal((await rollback(A, {}, null)).status, 401);
  assert.equal((await get(A, '/rollbacks/1', null)).status, 401);
  const other = await rollback(A, { dryRun: true }, B.buyerToken);
  assert.equal(other.status, 403, other.text);
  assert.equal((await get(A, '/rollbacks/1', B.buyerToken)).status, 403);
  const op = await rollback(A, { dryRun: true }, srv.serviceToken); // no reason
  assert.equal(op.status, 400, op.text);
  assert.match(op.json.error.message, /reason/);
});

test('an active session: 409 not_paused on both doors, and changes says why', async () => {
  const r = await rollback(A, {});
  assert.equal(r.status, 409, r.text);
  assert.equal(r.json.error.code, 'not_paused');
  assert.equal(r.json.error.state, 'active');
  const ack = await sockRollback(buyerA, {});
  assert.equal(ack.error?.code, 'not_paused', JSON.stringify(ack));
  assert.equal(ack.error.state, 'active');
  const ch = await get(A, '/changes');
  assert.equal(ch.status, 200, ch.text);
  assert.deepEqual([ch.json.rollback.available, ch.json.rollback.why], [false, 'not_paused']);
  assert.equal(ch.json.rollback.wouldUndo, ops.length);
});

test('bad input: the same code over REST and Socket.IO', async () => {
  assert.equal((await post(A, '/pause', { reason: 'review' })).status, 200);
  const cases = [
    [{ bogus: 1 }, 400, 'bad_request'],
    [{ to: 'x' }, 400, 'bad_request'],
    [{ to: 0 }, 400, 'bad_request'],
    [{ force: 'yes' }, 400, 'bad_request'],
    [{ dryRun: 1 }, 400, 'bad_request'],
    [{ to: 999999 }, 404, 'no_such_op'],
  ];
  const past = await srv.db.query('SELECT max(op_id) AS m FROM ops'); // past every op
  cases.push([{ to: Number(past.rows[0].m) + 1000 }, 404, 'no_such_op']);
  for (const [arg, status, code] of cases) {
    const r = await rollback(A, arg);
    assert.equal(r.status, status, `${JSON.stringify(arg)}: ${r.text}`);
    assert.equal(r.json.error.code, code, `${JSON.stringify(arg)}: ${r.text}`);
    const ack = await sockRollback(buyerA, arg);
    assert.equal(ack.error?.code, code, `socket ${JSON.stringify(arg)}: ${JSON.stringify(ack)}`);
  }
  const notObject = await srv.req('POST', path(A, '/rollback'), { token: A.buyerToken, raw: '[1]' });
  assert.equal(notObject.status, 400);
  assert.equal((await sockRollback(buyerA, [1])).error?.code, 'bad_request');
  const n = await srv.db.query("SELECT count(*)::int AS n FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", [A.jobId]);
  assert.equal(n.rows[0].n, 0, 'bad input queued a rollback');
});

test('an op approved meanwhile: 409 ops_running (pause first and let it end)', async () => {
  const last = ops[ops.length - 1].opId;
  await srv.db.query("UPDATE ops SET state = 'approved' WHERE op_id = $1", [last]);
  try {
    const r = await rollback(A, {});
    assert.equal(r.status, 409, r.text);
    assert.equal(r.json.error.code, 'ops_running');
    assert.equal((await sockRollback(buyerA, { dryRun: true })).error?.code, 'ops_running');
  } finally {
    await srv.db.query("UPDATE ops SET state = 'done' WHERE op_id = $1", [last]);
  }
});

test('the dry run: the agent\'s ops newest first, every path, nothing queued', async () => {
  const r = await rollback(A, { dryRun: true });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.wouldUndo, [...ops].reverse(), JSON.stringify(r.json));
  const paths = r.json.files.map((f) => f.path);
  for (const p of ['a.txt', 'new.txt', 'b.txt', 'lib/deep', 'd.bin'])
    assert.ok(paths.includes(p), `${p} not in the plan: ${JSON.stringify(r.json.files)}`);
  assert.ok(paths.some((p) => p.endsWith('c.txt')), `the move is not in the plan: ${JSON.stringify(r.json.files)}`);
  const a = r.json.files.find((f) => f.path === 'a.txt');
  assert.deepEqual([a.kind, a.sha256], ['file', atOpen['a.txt']]);
  assert.equal(r.json.files.find((f) => f.path === 'new.txt').kind, 'absent');
  assert.equal(r.json.count, r.json.files.length);
  // to: the first write stays
  const part = await rollback(A, { to: ops[0].opId, dryRun: true });
  assert.equal(part.status, 200, part.text);
  assert.deepEqual(part.json.wouldUndo.map((o) => o.opId), ops.slice(1).map((o) => o.opId).reverse());
  // the socket's ack carries the same plan
  const ack = await sockRollback(buyerA, { dryRun: true });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  assert.deepEqual(ack.wouldUndo, r.json.wouldUndo);
  const ch = await get(A, '/changes');
  assert.deepEqual(ch.json.rollback, { available: true, wouldUndo: ops.length });
  // jailboxctl: the same plan (--json), in words, and its usage errors
  const ctl = (...args) => spawnSync(CTL, ['rollback', ...args], { encoding: 'utf8', timeout: 30000,
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: A.buyerToken } });
  const cj = ctl(A.jobId, '--dry-run', '--json');
  assert.equal(cj.status, 0, cj.stderr);
  assert.deepEqual(JSON.parse(cj.stdout).wouldUndo, r.json.wouldUndo);
  const ch2 = ctl(A.jobId, '--dry-run', '--to', String(ops[0].opId));
  assert.equal(ch2.status, 0, ch2.stderr);
  assert.match(ch2.stdout, new RegExp(`^would undo ${ops.length - 1} ops`));
  assert.equal(ctl(A.jobId, '--to', 'x').status, 2);
  const far = ctl(A.jobId, '--to', '99999999');
  assert.equal(far.status, 1);
  assert.match(far.stderr, /no_such_op/);
  const n = await srv.db.query("SELECT count(*)::int AS n FROM launch_jobs WHERE job_id = $1 AND kind = 'rollback'", [A.jobId]);
  assert.equal(n.rows[0].n, 0, 'a dry run queued a rollback');
});

test('the rollback: one of two at once, resume waits, the workspace back to its bytes at open', { timeout: 120000 }, async () => {
  const [r1, r2] = await Promise.all([rollback(A, {}), rollback(A, {})]);
  const took = [r1, r2].filter((r) => r.status === 202);
  const refused = [r1, r2].filter((r) => r.status === 409);
  assert.equal(took.length, 1, `${r1.status} ${r1.text} / ${r2.status} ${r2.text}`);
  assert.equal(refused.length, 1);
  assert.equal(refused[0].json.error.code, 'rollback_running');
  const id = took[0].json.rollbackId;
  assert.equal(took[0].json.state, 'queued');
  // resume while it waits or runs: refused (unless it ended already, before the resume)
  const asked = Date.now();
  const res = await post(A, '/resume', {});
  console.log(`# resume while rollback ${id} was queued or running: ${res.status} ${res.json?.error?.code ?? ''}`);
  if (res.status !== 409) {
    const g = await get(A, `/rollbacks/${id}`);
    assert.ok(['done', 'failed'].includes(g.json.state) && Date.parse(g.json.finishedAt) <= asked + 5,
      `resume answered ${res.status} while rollback ${id} was ${g.json.state}: ${res.text}`);
  } else {
    assert.equal(res.json.error.code, 'rollback_running', res.text);
  }
  assert.ok(buyerA.events.some((e) => e.event === 'jailbox:rollback' && e.payload.rollbackId === id),
    'no jailbox:rollback {state: queued}');
  let g;
  await K.waitFor(`rollback ${id} to end`, async () => {
    g = await get(A, `/rollbacks/${id}`);
    assert.equal(g.status, 200, g.text);
    return ['done', 'failed'].includes(g.json.state);
  }, 90000);
  assert.equal(g.json.state, 'done', JSON.stringify(g.json));
  assert.deepEqual([g.json.to, g.json.force, g.json.by], [null, false, 'buyer']);
  assert.equal(g.json.result.conflicts, 0, JSON.stringify(g.json.result));
  assert.deepEqual(tree(A.dir), atOpen);
  // the worker's end reaches the buyer; resume is the buyer's again; nothing left to undo
  await K.waitEvent(buyerA, 'jailbox:rollback', (p) => p.rollbackId === id && p.state === 'done', 20000);
  const ch = await get(A, '/changes');
  assert.equal(ch.json.rollback.wouldUndo, 0, JSON.stringify(ch.json.rollback));
  const again = await post(A, '/resume', {});
  assert.ok([200, 409].includes(again.status), again.text);
  if (again.status === 409) assert.notEqual(again.json.error.code, 'rollback_running', again.text);
  // another session's buyer cannot read it
  assert.equal((await get(A, `/rollbacks/${id}`, B.buyerToken)).status, 403);
  assert.equal((await get(B, `/rollbacks/${id}`)).status, 404);
});
