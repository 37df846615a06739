// contents.test.mjs — what PostgreSQL keeps of the buyer's file contents: a write's or an
// edit's content and an exec's stdin stay in ops.args only while the op waits to run
// (migration 030); once it is done, failed or rejected only their size and SHA-256 remain.
// Drives a real session of 1,000 unsupervised writes and supervised writes approved and
// rejected through jailboxd, the worker and the shim (needs root, Docker with runsc), then
// looks at the stored rows with SQL and checks that the op list, the change summary and the
// audit export still hold every op.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:contents';
const MARK = 'CONTENTMARK' + Math.random().toString(36).slice(2, 10); // in every content sent
const sha = (b) => createHash('sha256').update(b).digest('hex');

let K, srv;

before(async () => {
  K = await startSandboxServer(IMAGE, { JAILBOX_APPROVAL_TIMEOUT: '60', JAILBOX_ESCAPE_ABORT: 'none' }, [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/cat']);
  srv = K.srv;
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// Every string in `v` (a parsed JSON value) with the key path that holds it.
function strings(v, at = '$', out = []) {
  if (typeof v === 'string') out.push([at, v]);
  else if (Array.isArray(v)) v.forEach((x, i) => strings(x, `${at}[${i}]`, out));
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) strings(x, `${at}.${k}`, out);
  return out;
}

// The stored rows of job `jobId` whose args still hold content: the marker anywhere in the
// text, a content or stdin key, or any string value long enough to be file content.
async function contentRows(jobId) {
  const r = await srv.db.query('SELECT op_id, tool, state, args FROM ops WHERE job_id = $1 ORDER BY op_id', [jobId]);
  const bad = [];
  for (const row of r.rows) {
    const text = JSON.stringify(row.args);
    const long = strings(row.args).filter(([k, s]) => s.length > 96 && !/\.(sha256|stdinSha256|expectSha256)$/.test(k));
    if (text.includes(MARK) || 'content' in (row.args ?? {}) || 'stdin' in (row.args ?? {}) || long.length)
      bad.push({ op: row.op_id, tool: row.tool, state: row.state, args: text.slice(0, 200) });
  }
  return { rows: r.rows, bad };
}

test('after 1,000 writes and supervised ones approved and rejected, ops.args holds no content', { timeout: 900000 }, async () => {
  // --- unsupervised: 1,000 writes (text and base64), an edit, an exec with stdin
  const U = await K.openSession((d) => {
    writeFileSync(join(d, 'e.txt'), 'edit me: old\n');
    for (let k = 0; k < 50; k++) mkdirSync(join(d, 'w', String(k)), { recursive: true });
  }, { mode: 'unsupervised' });
  const agentU = await K.connect(U.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(U.jobId)).state === 'active');
  const sent = new Map();
  const N = 1000;
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < N; i = next++) {
      const body = `${MARK} file ${i} ` + 'x'.repeat(i % 300) + '\n';
      const path = `w/${i % 50}/f${i}.txt`;
      const args = i % 10 === 7
        ? { path, content: Buffer.from(body).toString('base64'), encoding: 'base64' }
        : { path, content: body };
      const r = await K.ok(agentU, 'write', args);
      assert.equal(r.written, Buffer.byteLength(body));
      sent.set(path, body);
    }
  };
  const t0 = Date.now();
  await worker(); // one at a time: calls of one session queue behind each other
  const writeMs = Date.now() - t0;
  assert.equal(sent.size, N);
  for (const i of [0, 7, 499, 999]) {
    const p = `w/${i % 50}/f${i}.txt`;
    assert.equal(readFileSync(join(U.dir, p), 'utf8'), sent.get(p));
  }
  const ed = await K.ok(agentU, 'edit', { path: 'e.txt', edits: [{ oldText: 'old', newText: `new ${MARK}` }] });
  assert.equal(ed.replaced ?? 1, 1, JSON.stringify(ed));
  assert.equal(readFileSync(join(U.dir, 'e.txt'), 'utf8'), `edit me: new ${MARK}\n`);
  const stdin = `${MARK} piped in\n`;
  const ex = await K.call(agentU, 'exec', { argv: ['cat'], stdin });
  const exr = ex.result?.structuredContent;
  assert.equal(exr?.stdout, stdin, JSON.stringify(ex));

  // --- supervised: while pending the buyer sees the content; approved ones land, rejected don't
  const S = await K.openSession((d) => writeFileSync(join(d, 'keep.txt'), 'original\n'));
  const buyer = await K.connect(S.buyerToken);
  const agentS = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  const decided = [];
  for (let i = 0; i < 6; i++) {
    const path = `s${i}.txt`;
    const body = `${MARK} supervised ${i}\n`;
    const pending = K.call(agentS, 'write', { path, content: body }, 120000);
    const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === path);
    // the buyer's review reads the content from the stored op while it is pending
    const list = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
    assert.equal(list.status, 200, list.text);
    const op = list.json.ops.find((o) => o.opId === req.opId);
    assert.equal(op?.args?.content, body, JSON.stringify(op));
    const approve = i % 3 !== 2;
    const ack = await buyer.timeout(10000).emitWithAck(approve ? 'jailbox:approve' : 'jailbox:reject',
      { opId: req.opId, ...(approve ? {} : { reason: 'not this one' }) });
    assert.equal(ack.ok, true, JSON.stringify(ack));
    const r = await pending;
    if (approve) assert.equal(r.result?.isError, false, JSON.stringify(r));
    else assert.equal(toolFailure(r)?.data?.reason, 'rejected', JSON.stringify(r));
    decided.push({ opId: req.opId, path, body, approve });
  }
  // a supervised edit, approved
  const pe = K.call(agentS, 'edit', { path: 'keep.txt', edits: [{ oldText: 'original', newText: `edited ${MARK}` }] }, 120000);
  const reqE = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'keep.txt');
  assert.equal((await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: reqE.opId })).ok, true);
  assert.equal((await pe).result?.isError, false);
  assert.equal(readFileSync(join(S.dir, 'keep.txt'), 'utf8'), `edited ${MARK}\n`);

  // --- SQL: no finished op keeps content in ops.args
  for (const job of [U.jobId, S.jobId]) {
    const { rows, bad } = await contentRows(job);
    assert.deepEqual(bad, [], `${job}: content left in ops.args`);
    assert.ok(rows.length >= (job === U.jobId ? N + 1 : 7), `${job}: ${rows.length} rows`);
  }
  const all = await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE args::text LIKE '%' || $1 || '%'", [MARK]);
  assert.equal(all.rows[0].n, 0);
  // what remains of a write: its size and hash
  const w = await srv.db.query("SELECT args FROM ops WHERE job_id = $1 AND tool = 'write' AND path = 'w/7/f7.txt'", [U.jobId]);
  const b7 = sent.get('w/7/f7.txt');
  assert.deepEqual([w.rows[0].args.size, w.rows[0].args.sha256, w.rows[0].args.encoding, w.rows[0].args.contentDropped],
    [Buffer.byteLength(b7), sha(b7), 'base64', true]);
  {
    const e = await srv.db.query("SELECT op_id, args FROM ops WHERE job_id = $1 AND tool = 'exec'", [U.jobId]);
    assert.deepEqual([e.rows[0].args.stdinBytes, e.rows[0].args.stdinSha256], [Buffer.byteLength(stdin), sha(stdin)]);
    const list = await srv.req('GET', `/v1/jailbox/${U.jobId}/ops?after=${Number(e.rows[0].op_id) - 1}&limit=1`, { token: U.buyerToken });
    assert.equal(list.status, 200, list.text);
    const eo = list.json.ops.find((o) => o.tool === 'exec');
    assert.equal(eo?.args?.stdinBytes, Buffer.byteLength(stdin), JSON.stringify(eo));
  }

  // --- the readers: the op list, the change summary, the audit export and its verification
  let after = 0, listed = 0;
  for (;;) {
    const r = await srv.req('GET', `/v1/jailbox/${U.jobId}/ops?after=${after}&limit=200`, { token: U.buyerToken });
    assert.equal(r.status, 200, r.text);
    for (const o of r.json.ops) if (o.tool === 'write') {
      listed++;
      assert.equal(o.args.sha256, sha(sent.get(o.path)), o.path);
      assert.equal(o.args.content, undefined);
    }
    if (r.json.next == null) break;
    after = r.json.next;
  }
  assert.equal(listed, N);
  const ch = await srv.req('GET', `/v1/jailbox/${U.jobId}/changes`, { token: U.buyerToken });
  assert.equal(ch.status, 200, ch.text);
  const writes = ch.json.changes.filter((c) => c.tool === 'write');
  assert.equal(writes.length, N);
  for (const c of writes) assert.deepEqual([c.sha256After, c.size], [sha(sent.get(c.path)), Buffer.byteLength(sent.get(c.path))]);
  const chS = await srv.req('GET', `/v1/jailbox/${S.jobId}/changes`, { token: S.buyerToken });
  assert.deepEqual(chS.json.changes.filter((c) => c.tool === 'write').map((c) => c.path).sort(),
    decided.filter((d) => d.approve).map((d) => d.path).sort());
  for (const c of chS.json.changes.filter((c) => c.tool === 'write'))
    assert.equal(c.sha256After, sha(decided.find((d) => d.path === c.path).body));
  for (const s of [U, S]) {
    const a = await srv.req('GET', `/v1/jailbox/${s.jobId}/audit`, { token: srv.serviceToken });
    assert.equal(a.status, 200);
    assert.ok(!a.text.includes(MARK), 'the audit export holds no content');
    const lines = a.text.trim().split('\n').map((l) => JSON.parse(l));
    const rejected = lines.filter((l) => l.details?.decision === 'rejected');
    if (s === S) {
      assert.equal(rejected.length, decided.filter((d) => !d.approve).length);
      for (const l of rejected) assert.equal(l.details.sha256, sha(decided.find((d) => d.path === l.path).body));
    } else {
      assert.ok(lines.filter((l) => l.operation === 'write').length >= N);
    }
    const v = await srv.req('GET', `/v1/jailbox/${s.jobId}/audit/verify`, { token: srv.serviceToken });
    assert.equal(v.json.ok, true, JSON.stringify(v.json));
  }
  console.log(`# ${N} writes in ${writeMs} ms (one at a time)`);
});

test('a finished op stored with content (an older row) keeps only size and hash; a pending one keeps it', { timeout: 60000 }, async () => {
  const s = await srv.open({ mode: 'supervised' });
  await srv.setState(s.jobId, 'active');
  const body = `${MARK} older row\n`;
  const ins = await srv.db.query(
    "INSERT INTO ops (job_id, tool, path, args, state) VALUES ($1, 'write', 'old.txt', $2, 'pending'), ($1, 'write', 'old64.txt', $3, 'pending') RETURNING op_id, args",
    [s.jobId, { content: body }, { content: Buffer.from(body).toString('base64'), encoding: 'base64' }]);
  assert.equal(ins.rows[0].args.content, body, 'pending: kept');
  const up = await srv.db.query("UPDATE ops SET state = 'failed' WHERE job_id = $1 RETURNING path, args", [s.jobId]);
  assert.equal(up.rows.length, 2);
  for (const row of up.rows)
    assert.deepEqual([row.args.content, row.args.size, row.args.sha256, row.args.contentDropped],
      [undefined, Buffer.byteLength(body), sha(body), true], row.path);
});

// The samples of a Prometheus text page, by `name{labels}`.
async function metrics() {
  const r = await srv.req('GET', '/metrics', { token: srv.serviceToken });
  assert.equal(r.status, 200, r.text);
  const m = {};
  for (const line of r.text.split('\n')) {
    const x = line.match(/^([a-z_]+(?:\{[^}]*\})?) (\S+)$/);
    if (x) m[x[1]] = Number(x[2]);
  }
  return m;
}

// What the op series said before migration 030: a scan of ops.
async function scanned() {
  const ops = {};
  for (const row of (await srv.db.query('SELECT tool, state, count(*)::int AS n FROM ops GROUP BY 1, 2')).rows)
    ops[`jailbox_ops{tool="${row.tool}",state="${row.state}"}`] = row.n;
  const w = (await srv.db.query(
    'SELECT count(*)::int AS n, coalesce(sum(extract(epoch FROM decided_at - created_at)), 0)::float8 AS s,'
    + ' count(*) FILTER (WHERE decided_at - created_at <= interval \'0.1 s\')::int AS le01'
    + ' FROM ops WHERE decided_at IS NOT NULL')).rows[0];
  return { ops, wait: w };
}

test('/metrics: the op series are counters that follow every op, equal to a scan of ops', { timeout: 300000 }, async () => {
  const check = async () => {
    const m = await metrics();
    const { ops, wait } = await scanned();
    const shown = Object.fromEntries(Object.entries(m).filter(([k]) => k.startsWith('jailbox_ops{') && m[k] !== 0));
    assert.deepEqual(shown, ops);
    assert.equal(m.jailbox_approval_wait_seconds_count, wait.n);
    assert.equal(m['jailbox_approval_wait_seconds_bucket{le="+Inf"}'], wait.n);
    assert.equal(m['jailbox_approval_wait_seconds_bucket{le="0.1"}'], wait.le01);
    assert.ok(Math.abs(m.jailbox_approval_wait_seconds_sum - wait.s) < 1e-3, `${m.jailbox_approval_wait_seconds_sum} ${wait.s}`);
    return m;
  };
  const m0 = await check();
  const s = await K.openSession((d) => writeFileSync(join(d, 'm.txt'), 'm\n'));
  const agent = await K.connect(s.agentToken);
  const buyer = await K.connect(s.buyerToken);
  await K.waitFor('active', async () => (await K.sessionOf(s.jobId)).state === 'active');
  const pending = K.call(agent, 'write', { path: 'm2.txt', content: 'metric\n' }, 120000);
  const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'm2.txt');
  const m1 = await check();
  const key = (st) => `jailbox_ops{tool="write",state="${st}"}`;
  assert.equal((m1[key('pending')] ?? 0), (m0[key('pending')] ?? 0) + 1, 'the pending write is counted');
  await new Promise((r) => setTimeout(r, 1200)); // a wait of more than a second
  assert.equal((await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId })).ok, true);
  assert.equal((await pending).result?.isError, false);
  const m2 = await check();
  assert.equal(m2[key('pending')] ?? 0, m0[key('pending')] ?? 0, 'no longer pending');
  assert.equal(m2[key('done')], (m0[key('done')] ?? 0) + 1);
  // decided: the buyer's approval after more than a second (bucket 1 < t <= 2.5), and the
  // supervision's look at the target (a stat op decided by the mode at once)
  const b = (m, le) => m[`jailbox_approval_wait_seconds_bucket{le="${le}"}`];
  assert.equal(m2.jailbox_approval_wait_seconds_count, m0.jailbox_approval_wait_seconds_count + 2);
  assert.equal(b(m2, '2.5') - b(m2, '1'), b(m0, '2.5') - b(m0, '1') + 1);
  assert.equal(b(m2, '0.1'), b(m0, '0.1') + 1);
  // the scrape folded the changes: none left, and the counters alone hold the figures
  assert.equal((await srv.db.query('SELECT count(*)::int AS n FROM op_count_changes')).rows[0].n, 0);
  await check();
});

test('a diff preview is bounded and cleared once its session ended past the retention (30 days)', { timeout: 240000 }, async () => {
  const open = async () => {
    const s = await K.openSession((d) => writeFileSync(join(d, 'd.txt'), 'line\n'.repeat(3)));
    const agent = await K.connect(s.agentToken);
    const buyer = await K.connect(s.buyerToken);
    await K.waitFor('active', async () => (await K.sessionOf(s.jobId)).state === 'active');
    // a diff longer than JAILBOX_DIFF_PREVIEW_MAX (65,536 bytes by default)
    const p = K.call(agent, 'write', { path: 'd.txt', content: 'changed line\n'.repeat(8000) }, 120000);
    const req = await K.waitEvent(buyer, 'jailbox:approval_request', (x) => x.path === 'd.txt');
    assert.equal((await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId })).ok, true);
    assert.equal((await p).result?.isError, false);
    const ab = await srv.req('POST', `/v1/jailbox/${s.jobId}/abort`, { token: s.buyerToken, body: {} });
    assert.ok(ab.status < 300, ab.text);
    return { s, opId: req.opId };
  };
  const old = await open(), recent = await open();
  const diffOf = async (x) => (await srv.db.query('SELECT diff FROM ops WHERE op_id = $1', [x.opId])).rows[0].diff;
  const d = await diffOf(old);
  assert.equal(d.truncated, true);
  assert.ok(Buffer.byteLength(d.text) <= 65536 && d.bytes > 65536, JSON.stringify({ len: d.text.length, bytes: d.bytes }));
  await K.waitFor('ended', async () => (await srv.db.query('SELECT ended_at FROM sessions WHERE job_id = $1', [old.s.jobId])).rows[0].ended_at);
  await srv.db.query("UPDATE sessions SET ended_at = now() - interval '31 days' WHERE job_id = $1", [old.s.jobId]);
  // jailboxd's sweeper clears it within a minute
  await K.waitFor('preview cleared', async () => (await diffOf(old)) === null, 90000);
  assert.notEqual(await diffOf(recent), null, 'a recent session keeps its preview');
  const ops = await srv.req('GET', `/v1/jailbox/${old.s.jobId}/ops`, { token: srv.serviceToken });
  const op = ops.json.ops.find((o) => o.opId === old.opId);
  assert.deepEqual([op.diff, op.state, op.args.contentDropped], [null, 'done', true]);
});
