// reviewer.test.mjs — the operator's op reviewer end to end. A real HTTP server in this file
// (node http on 127.0.0.1) is jailboxd's JAILBOX_REVIEWER_URL and answers by the op's path:
// allow (the op runs without the buyer, decidedBy reviewer, the reason in the audit entry and
// the ops list), deny (an isError refusal, nothing written), slow (past the timeout: the buyer
// is asked with the reviewer's "timed out" shown, approves, and the write lands), garbage
// (not JSON, an unknown verdict, HTTP 500, a huge body: each asks the buyer), and an ask rule
// (askedBy names it). Meanwhile a slow review blocks only its own op. Then a second jailboxd
// whose JAILBOX_REVIEWER_CMD is a small program: allow, killed after its timeout, failing until
// the reviewer is paused. The chains are verified offline at the end. Bad reviewer settings
// stop jailboxd at start. Needs root and Docker with runsc (as policy.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync, realpathSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';
import { CTL, connectClient, verifiedChain } from './lib/mcp.mjs';
import { JAILBOXD } from './lib/server.mjs';

const TIMEOUT_MS = 2000;
const EXTRA = [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/echo']; // exec is offered only with a shell
let kit, srv, hook, hookUrl;
const reviews = []; // the requests the webhook received, parsed
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// the webhook's answer to a review of `path`, by the part before the first '-'
const ANSWERS = {
  allow: (res, req) => json(res, 200, { verdict: 'allow', reason: `looks fine: ${req.op.path}`, extra: { ignored: true } }),
  deny: (res) => json(res, 200, { verdict: 'deny', reason: 'no secrets in notes' }),
  ask: (res) => json(res, 200, { verdict: 'ask', reason: 'please look\nat this\u0007 one' }),
  slow: async (res) => { await sleep(TIMEOUT_MS * 2.5); json(res, 200, { verdict: 'allow', reason: 'too late' }); },
  notjson: (res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('<html>allow</html>'); },
  verdict: (res) => json(res, 200, { verdict: 'yes', reason: 'sure' }),
  status: (res) => json(res, 500, { verdict: 'allow', reason: 'an error page that says allow' }),
  huge: (res) => json(res, 200, { verdict: 'allow', reason: 'x'.repeat(1 << 20) }),
  dup: (res) => { res.writeHead(200); res.end('{"verdict":"deny","verdict":"allow"}'); },
  ruled: (res) => json(res, 200, { verdict: 'ask', reason: 'the rule asked; so do I' }),
};
function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

before(async () => {
  hook = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const r = JSON.parse(body);
      reviews.push({ ...r, raw: body, contentType: req.headers['content-type'], auth: req.headers.authorization, at: Date.now() });
      const key = r.op.tool === 'exec' ? 'allow' : r.op.path.split('-')[0];
      (ANSWERS[key] ?? ANSWERS.ask)(res, r);
    });
  });
  await new Promise((r) => hook.listen(0, '127.0.0.1', r));
  // credentials in the URL: sent as Basic auth, never logged
  hookUrl = `http://rev:hook-secret@127.0.0.1:${hook.address().port}/review?k=1`;
  kit = await startSandboxServer('jailbox-sandbox:reviewer', { JAILBOX_APPROVAL_TIMEOUT: '60',
    JAILBOX_REVIEWER_URL: hookUrl, JAILBOX_REVIEWER_TIMEOUT_MS: String(TIMEOUT_MS),
    JAILBOX_REVIEWER_FAILURES: '0' }, EXTRA);
  srv = kit.srv;
});

after(async () => {
  kit?.closeSockets();
  await srv?.stop();
  hook?.close();
});

const build = (dir) => {
  writeFileSync(join(dir, 'allow-edit.c'), 'int x = 0;\n');
  writeFileSync(join(dir, 'other.c'), 'int y = 0;\n');
};

// a buyer socket that approves every request it is asked, recording them
async function approvingBuyer(S) {
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req);
    const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
    assert.equal(ack.ok, true, JSON.stringify(ack));
  });
  return { buyer, asked };
}

test('webhook reviewer: allow runs unasked, deny refuses, ask/timeout/garbage ask the buyer with the reviewer\'s verdict; a slow review blocks only its op; the verified chain says who decided', { timeout: 240000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised', policy: { rules: [
    { id: 'ask-ruled', tool: 'write', path: 'ruled-*', effect: 'ask' },
    { id: 'allow-rule', tool: 'write', path: 'byrule-*', effect: 'allow' },
    { id: 'deny-rule', tool: 'write', path: 'norule-*', effect: 'deny' },
  ] } });
  const { asked } = await approvingBuyer(S);
  // the buyer's jailboxctl watch shows who asked and what the reviewer said
  const watch = spawn(CTL, ['watch', S.jobId], { env: { ...process.env, JAILBOX_URL: srv.url,
    JAILBOX_WS_URL: 'http://' + kit.wsAddr, JAILBOX_TOKEN: S.buyerToken } });
  let watched = '';
  watch.stdout.on('data', (d) => { watched += d; });
  await kit.waitFor('watch connected', () => watched.includes('state awaiting_agent'), 20000);
  const client = await connectClient('http', kit, S, 'jailbox-reviewer-test');
  const write = (path, content = `${path}\n`) => client.callTool({ name: 'write', arguments: { path, content } });
  const seen = (path) => reviews.filter((r) => r.op.path === path && r.session.jobId === S.jobId);
  try {
    // ---- allow: runs without the buyer ----
    let r = await write('allow-a.txt');
    assert.equal(r.isError, false, JSON.stringify(r));
    assert.equal(readFileSync(join(S.dir, 'allow-a.txt'), 'utf8'), 'allow-a.txt\n');
    r = await client.callTool({ name: 'edit', arguments: { path: 'allow-edit.c', edits: [{ oldText: 'int x = 0;', newText: 'int x = 1;' }] } });
    assert.equal(r.isError, false, JSON.stringify(r));
    assert.equal(readFileSync(join(S.dir, 'allow-edit.c'), 'utf8'), 'int x = 1;\n');
    r = await client.callTool({ name: 'exec', arguments: { argv: ['echo', 'hi'], env: { LANG: 'C.UTF-8' } } });
    assert.equal(r.isError, false, JSON.stringify(r));
    assert.deepEqual(asked, [], 'the reviewer allowed all three');

    // the requests: the op as the buyer would see it, the session, never a token
    const [wreq] = seen('allow-a.txt');
    assert.equal(wreq.contentType, 'application/json');
    assert.equal(wreq.auth, 'Basic ' + Buffer.from('rev:hook-secret').toString('base64'));
    assert.ok(srv.log().includes(`"msg":"op reviewer configured","timeoutMs":"${TIMEOUT_MS}","kind":"webhook"`));
    assert.match(srv.log(), /"msg":"op reviewed","jobId":"[^"]+","requestId":"[0-9a-f]{32}","tool":"write","verdict":"allow"/);
    assert.ok(!srv.log().includes('hook-secret'), 'the reviewer URL\'s credentials were logged');
    assert.equal(wreq.type, 'jailbox.review');
    assert.match(wreq.requestId, /^[0-9a-f]{32}$/);
    assert.deepEqual([wreq.session.jobId, wreq.session.mode, wreq.session.image.includes('jailbox-sandbox:reviewer'), wreq.askedBy],
      [S.jobId, 'supervised', true, 'mode']);
    assert.deepEqual([wreq.op.tool, wreq.op.size, wreq.op.exists], ['write', 12, false]);
    assert.match(wreq.op.sha256, /^[0-9a-f]{64}$/);
    assert.match(wreq.op.diff.text, /^\+allow-a\.txt$/m);
    const [ereq] = seen('allow-edit.c');
    assert.match(ereq.op.diff.text, /^-int x = 0;$/m);
    assert.match(ereq.op.diff.text, /^\+int x = 1;$/m);
    const xreq = reviews.find((x) => x.op.tool === 'exec' && x.session.jobId === S.jobId);
    assert.deepEqual([xreq.op.argv, xreq.op.cwd, xreq.op.writable, xreq.op.envNames, xreq.op.env], [['echo', 'hi'], '.', false, ['LANG'], { LANG: 'C.UTF-8' }]);
    for (const x of reviews) {
      for (const secret of [S.buyerToken, S.agentToken, srv.serviceToken])
        assert.ok(!x.raw.includes(secret), 'a review request carries a token');
    }

    // ---- a rule's allow or deny: the reviewer is not asked ----
    r = await write('byrule-x.txt');
    assert.equal(r.isError, false, JSON.stringify(r));
    r = await write('norule-x.txt');
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /denied by rule deny-rule/);
    assert.deepEqual([seen('byrule-x.txt').length, seen('norule-x.txt').length], [0, 0]);

    // ---- deny: refused, nothing written ----
    r = await write('deny-notes.txt', 'API_KEY=1\n');
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.match(r.content[0].text, /denied by the reviewer: no secrets in notes/);
    assert.equal(r.structuredContent?.error?.reason, 'denied', JSON.stringify(r));
    assert.equal(existsSync(join(S.dir, 'deny-notes.txt')), false);

    // ---- slow: past the timeout the buyer is asked; meanwhile other work goes on ----
    const O = await kit.openSession(() => {}, { mode: 'unsupervised' });
    const other = await connectClient('http', kit, O, 'jailbox-other');
    let settled = false;
    const t0 = Date.now();
    const slow = write('slow-a.txt').finally(() => { settled = true; });
    await kit.waitFor('the slow review sent', () => seen('slow-a.txt').length === 1, 10000);
    const t1 = Date.now();
    const rd = await other.callTool({ name: 'write', arguments: { path: 'o.txt', content: 'o\n' } });
    const ops = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops`, { token: S.buyerToken });
    const took = Date.now() - t1;
    const stillWaiting = !settled;
    await other.close();
    assert.equal(rd.isError, false, JSON.stringify(rd));
    assert.equal(ops.status, 200);
    r = await slow;
    const slowMs = Date.now() - t0;
    assert.equal(r.isError, false, JSON.stringify(r));
    assert.equal(readFileSync(join(S.dir, 'slow-a.txt'), 'utf8'), 'slow-a.txt\n');
    assert.ok(slowMs >= TIMEOUT_MS, `the slow write took ${slowMs} ms`);
    assert.ok(stillWaiting, `a write in another session and a REST read (${took} ms) waited for the slow review`);
    const slowAsk = asked.find((a) => a.path === 'slow-a.txt');
    assert.deepEqual(slowAsk.reviewer, { verdict: 'ask', reason: `reviewer timed out after ${TIMEOUT_MS} ms`, failed: true });
    assert.equal(slowAsk.askedBy, 'mode');

    // ---- the reviewer's ask, and garbage: each asks the buyer, who approves ----
    const cases = [
      ['ask-b.txt', { verdict: 'ask', reason: 'please look at this  one', failed: false }],
      ['notjson-c.txt', /^the reviewer's answer is not a JSON object/],
      ['verdict-d.txt', /^the reviewer answered an unknown verdict "yes"$/],
      ['status-e.txt', /^reviewer answered HTTP 500$/],
      ['huge-f.txt', /^the reviewer's answer is over 65536 bytes$/],
      ['dup-g.txt', /^the reviewer's answer is not a JSON object \(.*duplicate/],
    ];
    for (const [path, want] of cases) {
      r = await write(path);
      assert.equal(r.isError, false, `${path}: ${JSON.stringify(r)}`);
      assert.equal(readFileSync(join(S.dir, path), 'utf8'), `${path}\n`);
      const a = asked.find((x) => x.path === path);
      assert.ok(a, `${path} was not asked`);
      if (want instanceof RegExp) {
        assert.equal(a.reviewer.verdict, 'ask', path);
        assert.equal(a.reviewer.failed, true, path);
        assert.match(a.reviewer.reason, want, path);
      } else {
        assert.deepEqual(a.reviewer, want, path);
      }
    }

    // ---- an ask rule: askedBy names it, the reviewer is told which rule ----
    r = await write('ruled-h.txt');
    assert.equal(r.isError, false, JSON.stringify(r));
    const ra = asked.find((x) => x.path === 'ruled-h.txt');
    assert.equal(ra.askedBy, 'rule:ask-ruled');
    assert.deepEqual(ra.reviewer, { verdict: 'ask', reason: 'the rule asked; so do I', failed: false });
    assert.deepEqual([seen('ruled-h.txt')[0].askedBy, seen('ruled-h.txt')[0].rule], ['rule:ask-ruled', 'ask-ruled']);
    await kit.waitFor('watch shows the last request', () => watched.includes('so do I'), 20000);
    assert.match(watched, /APPROVAL REQUESTED op #\d+: write slow-a\.txt [^\n]*\n(?: {4}[^\n]*\n)*? {4}reviewer failed: reviewer timed out after \d+ ms\n/);
    assert.match(watched, /APPROVAL REQUESTED op #\d+: write ruled-h\.txt [^\n]*\n(?: {4}[^\n]*\n)*? {4}asked by rule ask-ruled\n {4}reviewer says ask: the rule asked; so do I\n/);
    assert.match(watched, / {4}reviewer says ask: please look at this  one\n/);
  } finally {
    watch.kill();
    await client.close();
  }

  // ---- GET …/ops by decider ----
  const byRev = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=reviewer`, { token: S.buyerToken });
  assert.equal(byRev.status, 200, byRev.text);
  assert.deepEqual(byRev.json.ops.map((o) => [o.tool, o.path, o.decisionReason, o.state]), [
    ['write', 'allow-a.txt', 'looks fine: allow-a.txt', 'done'],
    ['edit', 'allow-edit.c', 'looks fine: allow-edit.c', 'done'],
    ['exec', '.', 'looks fine: .', 'done']]);
  const byBuyer = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=buyer`, { token: S.buyerToken });
  const reasons = Object.fromEntries(byBuyer.json.ops.map((o) => [o.path, o.decisionReason]));
  assert.equal(reasons['slow-a.txt'], `reviewer failed: reviewer timed out after ${TIMEOUT_MS} ms`);
  assert.equal(reasons['ruled-h.txt'], 'asked by rule ask-ruled; reviewer asked: the rule asked; so do I');

  // ---- the chain: who decided each op, and why ----
  const rows = verifiedChain(srv, S.jobId);
  const dec = Object.fromEntries(rows.filter((x) => ['write', 'edit', 'exec'].includes(x.operation))
    .map((x) => [`${x.operation} ${x.path}`, [x.details.ok, x.details.decidedBy, x.details.reason ?? null]]));
  assert.deepEqual(dec['write allow-a.txt'], [true, 'reviewer', 'looks fine: allow-a.txt']);
  assert.deepEqual(dec['edit allow-edit.c'], [true, 'reviewer', 'looks fine: allow-edit.c']);
  assert.deepEqual(dec['exec .'], [true, 'reviewer', 'looks fine: .']);
  assert.deepEqual(dec['write deny-notes.txt'], [false, 'reviewer', 'no secrets in notes']);
  assert.deepEqual(dec['write byrule-x.txt'], [true, 'rule:allow-rule', 'allowed by rule allow-rule']);
  assert.deepEqual(dec['write slow-a.txt'], [true, 'buyer', `reviewer failed: reviewer timed out after ${TIMEOUT_MS} ms`]);
  assert.deepEqual(dec['write status-e.txt'], [true, 'buyer', 'reviewer failed: reviewer answered HTTP 500']);
  assert.deepEqual(dec['write ask-b.txt'], [true, 'buyer', 'reviewer asked: please look at this  one']);
  for (const p of ['slow-a.txt', 'notjson-c.txt', 'verdict-d.txt', 'status-e.txt', 'huge-f.txt', 'dup-g.txt'])
    assert.equal(dec[`write ${p}`][1], 'buyer', `${p}: a failed review never allows`);
});

test('program reviewer (JAILBOX_REVIEWER_CMD): allow, killed after its timeout (with what it started), paused after failures in a row', { timeout: 240000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'jb-reviewer-cmd-'));
  chmodSync(dir, 0o755);
  const log = join(dir, 'calls.log');
  const prog = join(dir, 'review.sh');
  // a shell script (quick to start on a loaded machine): the request's op path picks the answer
  writeFileSync(prog, `#!/bin/sh
input=$(cat)
path=$(printf '%s' "$input" | sed -n 's/.*"op":{[^}]*"path":"\\([^"]*\\)".*/\\1/p')
envs=$(env | cut -d= -f1 | sort | tr '\\n' ' ')
printf '{"path":"%s","pid":%d,"env":"%s"}\\n' "$path" $$ "$envs" >> ${JSON.stringify(log)}
case "$path" in
  cmd-allow*) printf '{"verdict":"allow","reason":"the program agrees"}' ;;
  cmd-sleep*) sleep 60; printf '{"verdict":"allow"}' ;;
  cmd-fail*) exit 3 ;;
  *) printf '{"verdict":"ask"}' ;;
esac
`);
  chmodSync(prog, 0o755);
  const k2 = await startSandboxServer('jailbox-sandbox:reviewer', { JAILBOX_REVIEWER_CMD: prog,
    JAILBOX_REVIEWER_TIMEOUT_MS: '3000', JAILBOX_REVIEWER_FAILURES: '2', JAILBOX_REVIEWER_PAUSE_MS: '600000' }, EXTRA);
  const s2 = k2.srv;
  try {
    assert.match(s2.log(), /"msg":"op reviewer configured","timeoutMs":"3000","kind":"program"/);
    const S = await k2.openSession(() => {}, { mode: 'supervised' });
    const buyer = await k2.connect(S.buyerToken);
    const asked = [];
    buyer.on('jailbox:approval_request', async (req) => {
      asked.push(req);
      // (an ack still owed when the sockets close at the end is no failure: each write the
      // test awaits proves its approval landed)
      await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId }).catch(() => {});
    });
    const client = await connectClient('http', k2, S, 'jailbox-reviewer-cmd');
    const write = (path) => client.callTool({ name: 'write', arguments: { path, content: `${path}\n` } });
    const calls = () => readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    try {
      let r = await write('cmd-allow-1.txt');
      assert.equal(r.isError, false, JSON.stringify(r));
      assert.deepEqual(asked, []);
      assert.equal(calls()[0].env, 'LANG PATH PWD ', 'the program sees PATH and LANG only (and the PWD its shell sets)');

      const t0 = Date.now();
      r = await write('cmd-sleep-2.txt');
      assert.equal(r.isError, false, JSON.stringify(r));
      assert.ok(Date.now() - t0 >= 3000);
      assert.deepEqual(asked.at(-1).reviewer, { verdict: 'ask', reason: 'reviewer timed out after 3000 ms', failed: true });
      const sleeper = calls().find((c) => c.path === 'cmd-sleep-2.txt').pid;
      assert.throws(() => process.kill(sleeper, 0), /ESRCH/, 'the program was killed at its timeout');

      r = await write('cmd-allow-3.txt'); // a good answer ends the run of failures
      assert.equal(r.isError, false);
      assert.equal(asked.length, 1);

      for (const p of ['cmd-fail-4.txt', 'cmd-fail-5.txt']) {
        r = await write(p);
        assert.equal(r.isError, false);
        assert.deepEqual(asked.at(-1).reviewer, { verdict: 'ask', reason: 'reviewer program exited with status 3', failed: true }, p);
      }
      const before = calls().length;
      for (const p of ['cmd-fail-6.txt', 'cmd-allow-7.txt']) { // paused: not run, the buyer asked at once
        r = await write(p);
        assert.equal(r.isError, false);
        assert.equal(asked.at(-1).path, p);
        assert.match(asked.at(-1).reviewer.reason, /^reviewer unavailable: 2 failed reviews in a row \(the last: reviewer program exited with status 3\); not called for another \d+ s$/);
      }
      assert.equal(calls().length, before, 'the paused reviewer was not run');
    } finally {
      await client.close();
    }
    const rows = verifiedChain(s2, S.jobId);
    assert.deepEqual(rows.filter((x) => x.operation === 'write').map((x) => [x.path, x.details.decidedBy]), [
      ['cmd-allow-1.txt', 'reviewer'], ['cmd-sleep-2.txt', 'buyer'], ['cmd-allow-3.txt', 'reviewer'],
      ['cmd-fail-4.txt', 'buyer'], ['cmd-fail-5.txt', 'buyer'], ['cmd-fail-6.txt', 'buyer'], ['cmd-allow-7.txt', 'buyer']]);
  } finally {
    k2.closeSockets();
    await s2.stop();
  }
});

test('bad reviewer settings stop jailboxd at start; a URL\'s credentials are not repeated', () => {
  const dir = mkdtempSync(join(tmpdir(), 'jb-reviewer-bad-'));
  const start = (env) => spawnSync(JAILBOXD, [], { env: { ...process.env, JAILBOX_STATE_DIR: dir, ...env }, encoding: 'utf8', timeout: 20000 });
  const cases = [
    [{ JAILBOX_REVIEWER_URL: 'http://user:hunter2@example.com/hook' }, /^jailboxd: JAILBOX_REVIEWER_URL: http:\/\/ is allowed only to a loopback address/],
    [{ JAILBOX_REVIEWER_URL: 'http://10.0.0.1/hook' }, /loopback/],
    [{ JAILBOX_REVIEWER_URL: 'ftp://example.com/x' }, /scheme must be https/],
    [{ JAILBOX_REVIEWER_URL: 'not a url' }, /not an absolute URL/],
    [{ JAILBOX_REVIEWER_URL: 'https://example.com/a#frag' }, /fragment/],
    [{ JAILBOX_REVIEWER_CMD: 'review.sh' }, /^jailboxd: JAILBOX_REVIEWER_CMD: 'review\.sh' is not an absolute path/],
    [{ JAILBOX_REVIEWER_CMD: '/nonexistent/review' }, /JAILBOX_REVIEWER_CMD: \/nonexistent\/review/],
    [{ JAILBOX_REVIEWER_URL: 'https://example.com/a', JAILBOX_REVIEWER_CMD: '/bin/true' }, /both set/],
    [{ JAILBOX_REVIEWER_TIMEOUT_MS: '10' }, /JAILBOX_REVIEWER_TIMEOUT_MS/],
  ];
  for (const [env, want] of cases) {
    const p = start(env);
    assert.equal(p.status, 2, `${JSON.stringify(env)}: ${p.stderr}`);
    assert.match(p.stderr, want, JSON.stringify(env));
    assert.ok(!p.stderr.includes('hunter2'), 'the URL\'s password was printed');
  }
});
