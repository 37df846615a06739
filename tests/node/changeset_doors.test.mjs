// changeset_doors.test.mjs — the buyer's side of a changeset through the whole stack (agent →
// jailboxd → worker → the session's spawner inside gVisor + Docker): a writable `sed -i` over
// three files in a supervised session is approved as a command, stored with args.changeset,
// run on an overlay and held as one op of tool `changeset`; the buyer reads its files (REST,
// the socket, jailboxctl changes --op), is refused for a path not in it, a stale digest, an
// empty subset and a duplicate — nothing stored —, approves two of the three files over REST
// with `files`, and the disk then holds exactly those two; every row has its decision and
// outcome, and the decision's audit entry its counts and approvedSha256. Then the console
// (headless Chromium): a second changeset's card, one checkbox unticked, a diff opened,
// "Approve selected" — only the ticked file lands. Needs root, Docker with runsc, and
// /usr/bin/chromium; the image gets /bin/sh, sed and cat.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { chromium } from 'playwright-core';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { JAILBOXD } from './lib/server.mjs';

const IMAGE = 'jailbox-sandbox:changeset';
const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');
const sha = (b) => createHash('sha256').update(b).digest('hex');

let K, srv, S, agent, buyer;

before(async () => {
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none' },
    [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sed', '/usr/bin/cat']);
  srv = K.srv;
  S = await K.openSession((d) => {
    for (const f of ['a.txt', 'b.txt', 'c.txt']) writeFileSync(join(d, f), `old ${f}\n`);
    writeFileSync(join(d, 'keep.txt'), 'untouched\n');
  }, { mode: 'supervised' });
  agent = await K.connect(S.agentToken);
  buyer = await K.connect(S.buyerToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

const approve = (op, body) =>
  srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${op}`, { token: S.buyerToken, body });

test('a writable sed -i is held as a changeset; the buyer approves two of its three files', { timeout: 240000 }, async () => {
  const disk = (f) => readFileSync(join(S.dir, f), 'utf8');
  // the command: approved as any supervised exec, stored with changeset: true
  const call = K.call(agent, 'exec', { command: 'sed -i s/old/new/ a.txt b.txt c.txt', writable: true }, 180000);
  const ex = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'exec', 30000);
  const pend = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
  assert.equal(pend.json.ops.find((o) => o.opId === ex.opId).args.changeset, true, pend.text);
  let a = await approve(ex.opId);
  assert.equal(a.status, 200, a.text);

  // its effects: one changeset op, pending; nothing on disk yet
  const req = await K.waitEvent(buyer, 'jailbox:approval_request',
    (p) => p.tool === 'changeset' && p.execOpId === ex.opId, 120000);
  assert.equal(req.total, 3);
  assert.deepEqual(req.files.map((f) => f.path), ['a.txt', 'b.txt', 'c.txt']);
  for (const f of ['a.txt', 'b.txt', 'c.txt']) assert.equal(disk(f), `old ${f}\n`, f);

  // the view: REST, the socket (the same body), jailboxctl
  const v = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${req.opId}/changeset`, { token: S.buyerToken });
  assert.equal(v.status, 200, v.text);
  assert.equal(v.json.execOpId, ex.opId);
  assert.equal(v.json.state, 'pending');
  assert.equal(v.json.total, 3);
  assert.equal(v.json.approvable, 3);
  assert.equal(v.json.changesetSha256, req.changesetSha256);
  assert.equal(v.json.next, null);
  assert.deepEqual(v.json.files.map((f) => [f.idx, f.path, f.change, f.approvable, f.decision]),
    [[0, 'a.txt', 'modified', true, null], [1, 'b.txt', 'modified', true, null], [2, 'c.txt', 'modified', true, null]]);
  assert.match(v.json.files[0].diff.text, /-old a\.txt\n\+new a\.txt/);
  const page = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${req.opId}/changeset?limit=2`, { token: S.buyerToken });
  assert.deepEqual([page.json.files.length, page.json.next], [2, 1]);
  const sv = await buyer.timeout(10000).emitWithAck('jailbox:changeset', { opId: req.opId });
  assert.equal(sv.ok, true, JSON.stringify(sv));
  assert.deepEqual(sv.files, v.json.files);
  const nf = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${ex.opId}/changeset`, { token: S.buyerToken });
  assert.equal(nf.status, 404, nf.text); // the exec is not a changeset
  const ctlEnv = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: S.buyerToken };
  const listed = execFileSync(CTL, ['changes', S.jobId, '--op', String(req.opId), '--diff'], { env: ctlEnv, encoding: 'utf8' });
  assert.match(listed, /modified +a\.txt +approvable/);
  assert.match(listed, /\+new c\.txt/);

  // refused, nothing stored
  const digest = v.json.changesetSha256;
  a = await approve(req.opId, { changesetSha256: digest, files: ['a.txt', 'zz.txt'] });
  assert.deepEqual([a.status, a.json.error.code, a.json.error.paths], [422, 'not_in_changeset', ['zz.txt']], a.text);
  a = await approve(req.opId, { changesetSha256: '0'.repeat(64), files: ['a.txt'] });
  assert.deepEqual([a.status, a.json.error.code], [409, 'changed'], a.text);
  a = await approve(req.opId, { changesetSha256: digest, files: [] });
  assert.deepEqual([a.status, a.json.error.code], [422, 'empty_subset'], a.text);
  a = await approve(req.opId, { files: ['a.txt', 'a.txt'] });
  assert.deepEqual([a.status, a.json.error.code], [422, 'duplicate'], a.text);
  const sk = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId, files: ['nope'] });
  assert.equal(sk.error.code, 'not_in_changeset', JSON.stringify(sk)); // the same check on the socket
  const still = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${req.opId}/changeset`, { token: S.buyerToken });
  assert.equal(still.json.state, 'pending');
  assert.ok(still.json.files.every((f) => f.decision === null));

  // two of three approved; the worker applies them
  a = await approve(req.opId, { changesetSha256: digest, files: ['c.txt', 'a.txt'] });
  assert.equal(a.status, 200, a.text);
  assert.equal(a.json.state, 'approved');
  const done = await K.waitFor('the changeset applied', async () => {
    const x = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${req.opId}/changeset`, { token: S.buyerToken });
    return ['done', 'failed'].includes(x.json.state) ? x.json : null;
  }, 120000);
  assert.equal(done.state, 'done', JSON.stringify(done));
  assert.deepEqual(done.files.map((f) => [f.path, f.decision, f.outcome]),
    [['a.txt', 'approved', 'applied'], ['b.txt', 'rejected', null], ['c.txt', 'approved', 'applied']]);
  assert.equal(disk('a.txt'), 'new a.txt\n');
  assert.equal(disk('b.txt'), 'old b.txt\n');
  assert.equal(disk('c.txt'), 'new c.txt\n');
  assert.equal(disk('keep.txt'), 'untouched\n');
  // the agent's call, which waited for the decision, answers with what was applied
  const r = await call;
  assert.ok(!toolFailure(r), JSON.stringify(r));
  const cs = r.result.structuredContent.changeset;
  assert.equal(cs.opId, req.opId, JSON.stringify(cs));
  assert.deepEqual([cs.state, cs.applied, cs.rejected], ['applied', 2, 1], JSON.stringify(cs));

  // the decision's audit entry
  const audit = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: srv.serviceToken });
  const entries = audit.text.trim().split('\n').map((l) => JSON.parse(l));
  const d = entries.find((e) => e.operation === 'changeset' && e.details.decision === 'approved');
  assert.ok(d, 'no decision entry');
  assert.deepEqual([d.details.opId, d.details.approved, d.details.rejected, d.details.approvedSha256],
    [req.opId, 2, 1, sha('a.txt\nc.txt\n')]);
  const again = await approve(req.opId);
  assert.equal(again.status, 409, again.text); // decided already
});

test('the console: a changeset card, one file unticked, "Approve selected" lands the other', { timeout: 240000 }, async () => {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    const ctlEnv = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: S.buyerToken };
    const link = execFileSync(CTL, ['console'], { env: ctlEnv, encoding: 'utf8' }).match(/: (\S+)\n/)[1];
    const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push('pageerror: ' + e.message));
    await page.goto(link);
    await page.locator('#conn').filter({ hasText: 'live' }).waitFor();

    const call = K.call(agent, 'exec', { command: 'echo x > d1.txt; echo y > d2.txt', writable: true }, 180000);
    const ex = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command?.includes('d1.txt'), 30000);
    assert.equal((await approve(ex.opId)).status, 200);
    const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.execOpId === ex.opId, 120000);
    const card = page.locator(`.card[data-op="${req.opId}"]`);
    await card.locator('input[type=checkbox][data-path="d2.txt"]').waitFor();
    assert.equal(await card.locator('input[type=checkbox]:checked').count(), 2);
    await card.locator('.cs-file').filter({ hasText: 'd1.txt' }).locator('button').click();
    await card.locator('.diff .add').filter({ hasText: '+x' }).waitFor(); // drawn when opened
    await card.locator('input[type=checkbox][data-path="d2.txt"]').uncheck();
    await card.locator('button.approve').click();
    const done = await K.waitFor('the changeset applied', async () => {
      const x = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${req.opId}/changeset`, { token: S.buyerToken });
      return ['done', 'failed'].includes(x.json.state) ? x.json : null;
    }, 120000);
    assert.deepEqual(done.files.map((f) => [f.path, f.decision]), [['d1.txt', 'approved'], ['d2.txt', 'rejected']]);
    assert.equal(readFileSync(join(S.dir, 'd1.txt'), 'utf8'), 'x\n');
    assert.equal(existsSync(join(S.dir, 'd2.txt')), false);
    assert.ok(!toolFailure(await call));
    await card.waitFor({ state: 'detached' });
    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
  }
});
