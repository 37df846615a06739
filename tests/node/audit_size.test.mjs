// audit_size.test.mjs — no op without its audit entry, through the real stack (socket.io-client
// agent → jailboxd → worker → the session's spawner inside gVisor + Docker): a writable command
// that adds 5,000 files has its entry (a summary of its changes: counts and the SHA-256 of the
// list's canonical bytes; the chain verifies offline with jailboxctl), its changes (GET
// …/changes: all 5,000, hashing to the entry's sha256) and its answer; an outcome whose commit
// fails (JB_TEST_FAULT=exec_entry_too_large: an entry over the chain's cap) fails the op with
// the reason, an entry and an answer; an outcome that is lost (exec_commit_lost) is reaped
// by the worker past the command's timeout plus the grace; an exec's env values are gone from
// ops.args once the op ends. Needs root, Docker with runsc; the image gets /bin/sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { linkSync, mkdirSync, mkdtempSync, realpathSync, writeFileSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { JAILBOXD } from './lib/server.mjs';

const IMAGE = 'jailbox-sandbox:auditsize';
const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');
const sha = (b) => createHash('sha256').update(b).digest('hex');
const tmp = mkdtempSync(join(tmpdir(), 'jb-auditsize-'));
const FAULT = join(tmp, 'fault');

let K, srv;

// The canonical bytes of a change list (api/audit.md "Canonical bytes", "Changes of a writable
// command"): keys sorted, no whitespace, strings as JSON.stringify escapes them but with
// upper-case hex in \u00XX
const str = (x) => JSON.stringify(x).replace(/\\(u00[0-9a-f]{2}|.)/g, (m, g) => g.length > 1 ? '\\u' + g.slice(1).toUpperCase() : m);
const canonical = (v) => Array.isArray(v) ? '[' + v.map(canonical).join(',') + ']'
  : v && typeof v === 'object'
    ? '{' + Object.keys(v).sort().map((k) => str(k) + ':' + canonical(v[k])).join(',') + '}'
    : str(v);

const entriesOf = async (jobId) => {
  const ex = await srv.req('GET', `/v1/jailbox/${jobId}/audit`, { token: srv.serviceToken });
  assert.equal(ex.status, 200, ex.text);
  return { text: ex.text, rows: ex.text.trim().split('\n').map((l) => JSON.parse(l)) };
};

const verifyOffline = async (jobId, text) => {
  const keys = await srv.req('GET', '/v1/audit/keys', { token: null });
  const f = join(tmp, `${jobId}.jsonl`), k = join(tmp, `${jobId}.keys.json`);
  writeFileSync(f, text);
  writeFileSync(k, keys.text);
  const out = execFileSync(CTL, ['audit', 'verify', f, '--keys', k, '--json'], { encoding: 'utf8' });
  assert.equal(JSON.parse(out).ok, true, out);
};

const session = async () => {
  const s = await K.openSession(() => {}, { mode: 'unsupervised' });
  const agent = await K.connect(s.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(s.jobId)).state === 'active');
  return { ...s, agent };
};

before(async () => {
  K = await startSandboxServer(IMAGE, { JAILBOX_EXEC_MAX_TIMEOUT_S: '600', JB_TEST_FAULT: FAULT, JAILBOX_EXEC_ENV_ALLOW: 'MY_SETTING' },
    [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep']);
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

test('a writable command that adds 5,000 files: its entry (a summary), its changes (all, matching the sha256) and its answer', { timeout: 300000 }, async () => {
  const S = await session();
  const t0 = Date.now();
  const r = await K.call(S.agent, 'exec', { writable: true, timeoutSec: 240, command:
    'i=0; while [ $i -lt 4997 ]; do : > dir_with_a_long_name_for_each_of_the_files_$i.txt; i=$((i+1)); done; ' +
    // names the canonical bytes escape: a control character, a quote, a backslash
    ': > "ctl_$(printf \'\\033\')_x"; : > \'q"uote\'; : > \'back\\slash\'' }, 280000);
  console.log('# 5,000-file command answered in ms:', Date.now() - t0);
  assert.ok(r.result && !r.result.isError, JSON.stringify(r).slice(0, 2000));
  const res = r.result.structuredContent;
  assert.equal(res.exitCode, 0);
  assert.equal(res.changesTotal, 5000);
  assert.equal(res.changes.length, 1000, 'the answer lists the first 1,000');
  assert.equal(readdirSync(S.dir).length, 5000);
  const sum = res.changesSummary;
  assert.deepEqual([sum.total, sum.listed, sum.truncated, sum.counts.added], [5000, 5000, false, 5000]);

  // the audit entry: the summary, never the list; the chain verifies offline
  const { text, rows } = await entriesOf(S.jobId);
  const e = rows.find((x) => x.operation === 'exec' && x.details.writable);
  assert.ok(e, 'the exec has its entry');
  assert.equal(e.details.ok, true);
  assert.equal(e.details.changes, undefined, 'no list in the entry');
  assert.deepEqual(e.details.changesSummary, sum);
  assert.ok(Buffer.byteLength(JSON.stringify(e)) < 8192, 'the entry is small');
  await verifyOffline(S.jobId, text);

  // the changes: all 5,000, the canonical bytes of the list hash to the entry's sha256
  const cs = await srv.req('GET', `/v1/jailbox/${S.jobId}/changes`, { token: S.buyerToken });
  assert.equal(cs.status, 200, cs.text.slice(0, 500));
  const ex = cs.json.changes.filter((c) => c.tool === 'exec');
  assert.equal(ex.length, 1);
  assert.equal(ex[0].effectsTotal, 5000);
  assert.equal(ex[0].effectsTruncated, false);
  assert.equal(ex[0].effects.length, 5000);
  assert.deepEqual(ex[0].effectsSummary, sum);
  assert.equal(sha(canonical(ex[0].effects)), e.details.changesSummary.sha256);
  for (const name of ['ctl_\u001b_x', 'q"uote', 'back\\slash'])
    assert.ok(ex[0].effects.some((c) => c.path === name), `${JSON.stringify(name)} is listed`);
  assert.deepEqual(ex[0].effects.slice(0, 1000), res.changes);
  const paths = ex[0].effects.map((c) => c.path);
  assert.deepEqual(paths, [...paths].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))), 'in path order');
});

test('an outcome whose commit fails (an entry over the cap): the op fails with the reason, an entry and an answer', { timeout: 120000 }, async () => {
  const S = await session();
  writeFileSync(FAULT, 'exec_entry_too_large\n');
  const t0 = Date.now();
  const r = await K.call(S.agent, 'exec', { writable: true, command: ': > made.txt' }, 60000);
  const f = toolFailure(r);
  assert.ok(f, JSON.stringify(r));
  assert.ok(Date.now() - t0 < 10000, 'answered at once, not by the reaper');
  assert.match(f.message, /the command ran \(exit code 0; 1 changes in the workspace, which stay\) but its outcome could not be stored: .*bytes, more than 65536/, f.message);
  const { text, rows } = await entriesOf(S.jobId);
  const e = rows.find((x) => x.operation === 'exec');
  assert.deepEqual([e.details.ok, e.details.error, e.details.ran, e.details.exitCode, e.details.changesTotal],
    [false, 'unstored', true, 0, 1], JSON.stringify(e));
  assert.match(e.details.reason, /more than 65536/);
  await verifyOffline(S.jobId, text);
  const ops = (await srv.db.query("SELECT state FROM ops WHERE job_id = $1 AND tool = 'exec'", [S.jobId])).rows;
  assert.deepEqual(ops.map((o) => o.state), ['failed']);
  // the session goes on: the next command runs
  assert.equal((await K.ok(S.agent, 'exec', { argv: ['sh', '-c', 'echo next'] })).stdout, 'next\n');

  // a queued file op the same way: its write stays, the op fails with the reason and an
  // entry, once (not claimed and run again without end)
  writeFileSync(FAULT, 'op_entry_too_large\n');
  const w = toolFailure(await K.call(S.agent, 'write', { path: 'w.txt', content: 'written\n' }, 30000));
  assert.ok(w, 'the write is answered with its failure');
  assert.match(w.message, /the write ran in the sandbox \(it succeeded there: its effect stays\) but its outcome could not be stored: .*more than 65536/, w.message);
  assert.equal(readFileSync(join(S.dir, 'w.txt'), 'utf8'), 'written\n');
  const after2 = await entriesOf(S.jobId);
  const we = after2.rows.filter((x) => x.operation === 'write');
  assert.equal(we.length, 1, JSON.stringify(we));
  assert.deepEqual([we[0].details.ok, we[0].details.error, we[0].details.sandboxOk], [false, 'unstored', true]);
  await verifyOffline(S.jobId, after2.text);
  const wo = (await srv.db.query("SELECT state FROM ops WHERE job_id = $1 AND tool = 'write'", [S.jobId])).rows;
  assert.deepEqual(wo.map((o) => o.state), ['failed']);
});

test('an outcome that is lost: the worker reaps the running op past its timeout plus the grace, with an entry and an answer', { timeout: 120000 }, async () => {
  const S = await session();
  writeFileSync(FAULT, 'exec_commit_lost\n');
  const t0 = Date.now();
  const r = await K.call(S.agent, 'exec', { argv: ['sh', '-c', 'echo lost'], timeoutSec: 1 }, 90000);
  const waited = Date.now() - t0;
  console.log('# lost outcome reaped after ms:', waited);
  const f = toolFailure(r);
  assert.ok(f, JSON.stringify(r));
  assert.match(f.message, /no outcome of the command was stored by its worker/);
  assert.ok(waited >= 15000, `reaped only past the grace (${waited} ms)`);
  const { text, rows } = await entriesOf(S.jobId);
  const e = rows.find((x) => x.operation === 'exec');
  assert.deepEqual([e.details.ok, e.details.error], [false, 'overdue'], JSON.stringify(e));
  assert.doesNotMatch(text, /did not finish/);
  await verifyOffline(S.jobId, text);
  const ops = (await srv.db.query("SELECT state FROM ops WHERE job_id = $1 AND tool = 'exec'", [S.jobId])).rows;
  assert.deepEqual(ops.map((o) => o.state), ['failed']);
});

test('an abort while a command runs: its entry and answer say no outcome was stored, not that it did not finish', { timeout: 120000 }, async () => {
  const S = await session();
  const x = K.call(S.agent, 'exec', { argv: ['sleep', '30'] }, 60000);
  await K.waitFor('running', async () => (await srv.db.query(
    "SELECT 1 FROM ops WHERE job_id = $1 AND tool = 'exec' AND state = 'running'", [S.jobId])).rowCount > 0, 30000);
  const a = await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: S.buyerToken, body: { reason: 'enough' } });
  assert.equal(a.status, 200, a.text);
  const f = toolFailure(await x);
  assert.ok(f);
  assert.match(f.message, /no outcome of the command was stored/, f.message);
  assert.doesNotMatch(f.message, /did not finish/);
  const { text, rows } = await entriesOf(S.jobId);
  const e = rows.find((r) => r.operation === 'exec');
  assert.deepEqual([e.details.error, e.details.outcome], ['aborted', 'unknown'], JSON.stringify(e));
  assert.doesNotMatch(text, /did not finish/);
  await verifyOffline(S.jobId, text);
});

test('a rule too large to record whole (an argvPrefix of 4 KiB strings) is added, its entry holding its hash', { timeout: 60000 }, async () => {
  const S = await srv.open({ mode: 'supervised' });
  const rule = { id: 'big', tool: 'exec', argvPrefix: ['make', ...Array.from({ length: 20 }, (_, i) => `${i}`.padEnd(4000, 'x'))], effect: 'ask' };
  const r = await srv.req('POST', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken, body: { rule } });
  assert.equal(r.status, 201, r.text.slice(0, 300));
  const { text, rows } = await entriesOf(S.jobId);
  const e = rows.find((x) => x.operation === 'rule_add' && x.details.ruleId === 'big');
  assert.ok(e, 'the rule has its entry');
  assert.equal(e.details.rule, undefined);
  assert.match(e.details.ruleSha256, /^[0-9a-f]{64}$/);
  assert.ok(e.details.ruleBytes > 80000);
  await verifyOffline(S.jobId, text);
});

test('a workspace whose pre-scan flags 400 long paths opens: its pre_scan entry lists what fits and hashes the whole list', { timeout: 120000 }, async () => {
  const long = 'a_directory_name_long_enough_to_matter_'.repeat(4);
  const S = await K.openSession((d) => {
    mkdirSync(join(d, long));
    writeFileSync(join(d, 'target.txt'), 't\n');
    for (let i = 0; i < 400; i++) linkSync(join(d, 'target.txt'), join(d, long, `hard_link_with_a_long_name_${i}.txt`));
  }, { mode: 'unsupervised' });
  const st = await K.sessionOf(S.jobId);
  const flagged = st.walls?.prescan?.flagged;
  const { text, rows } = await entriesOf(S.jobId);
  const e = rows.find((x) => x.operation === 'pre_scan');
  assert.ok(e, 'the pre-scan has its entry');
  assert.ok(e.details.flaggedCount >= 400, JSON.stringify(e.details).slice(0, 300));
  assert.ok(e.details.flaggedListed < e.details.flaggedCount);
  assert.equal(e.details.flagged.length, e.details.flaggedListed);
  assert.match(e.details.flaggedSha256, /^[0-9a-f]{64}$/);
  assert.equal(flagged?.length, e.details.flaggedCount, 'the contract lists them all');
  assert.equal(sha(canonical(flagged)), e.details.flaggedSha256, 'the hash is of the list the contract shows');
  await verifyOffline(S.jobId, text);
});

test('an exec\'s env values are gone from ops.args once it ends; names, sizes and hashes stay', { timeout: 120000 }, async () => {
  const S = await session();
  const VALUE = 'value-' + Math.random().toString(36).slice(2);
  const r = await K.ok(S.agent, 'exec', { argv: ['sh', '-c', 'echo ${MY_SETTING%%-*}'], env: { MY_SETTING: VALUE } });
  assert.equal(r.stdout, 'value\n');
  const row = (await srv.db.query("SELECT args FROM ops WHERE job_id = $1 AND tool = 'exec'", [S.jobId])).rows[0];
  assert.deepEqual(row.args.env, { MY_SETTING: { bytes: Buffer.byteLength(VALUE), sha256: sha(VALUE) } });
  assert.equal(row.args.envDropped, true);
  const all = await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE args::text LIKE '%' || $1 || '%'", [VALUE]);
  assert.equal(all.rows[0].n, 0);
  // the buyer's view of the op still names the variable
  const list = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?limit=10`, { token: S.buyerToken });
  assert.equal(list.status, 200, list.text);
  assert.ok(!list.text.includes(VALUE));
  // a row stored before the trigger (migration 042 rewrites them as 030 did): the function
  const old = await srv.db.query(
    `SELECT jb_op_args_without_env('{"argv":["x"],"env":{"A":"secret-a","B":""}}'::jsonb) AS a`);
  assert.deepEqual(old.rows[0].a.env, { A: { bytes: 8, sha256: sha('secret-a') }, B: { bytes: 0, sha256: sha('') } });
  // supervised: the values the buyer was shown while the op was pending (envShown) go too
  const V = await K.openSession(() => {}, { mode: 'supervised' });
  const agentV = await K.connect(V.agentToken);
  const buyerV = await K.connect(V.buyerToken);
  const call = K.call(agentV, 'exec', { argv: ['sh', '-c', 'echo ${MY_SETTING%%-*}'], env: { MY_SETTING: VALUE } });
  const ev = await K.waitEvent(buyerV, 'jailbox:approval_request', (p) => p.tool === 'exec');
  assert.equal(ev.env.MY_SETTING, VALUE, 'the buyer is shown the value');
  const pending = (await srv.db.query('SELECT args FROM ops WHERE op_id = $1', [ev.opId])).rows[0];
  assert.ok(JSON.stringify(pending.args).includes(VALUE), 'kept while pending');
  const ap = await srv.req('POST', `/v1/jailbox/${V.jobId}/approve/${ev.opId}`, { token: V.buyerToken });
  assert.equal(ap.status, 200, ap.text);
  const rv = await call;
  assert.ok(!toolFailure(rv), JSON.stringify(rv));
  const done = (await srv.db.query('SELECT args FROM ops WHERE op_id = $1', [ev.opId])).rows[0];
  assert.equal(done.args.envShown, undefined, JSON.stringify(done.args));
  assert.equal(done.args.envDropped, true);
  const left = await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE args::text LIKE '%' || $1 || '%'", [VALUE]);
  assert.equal(left.rows[0].n, 0);
});
