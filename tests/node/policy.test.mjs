// policy.test.mjs — approval rules end to end: a supervised session where the buyer (a
// socket.io-client buyer socket) approves the agent's first src/ edit with allowSimilar
// "directory" — the next nine src/ edits by the official MCP SDK client run without asking,
// a tests/ edit still asks, and after the buyer revokes the rule a src/ edit asks again; the
// audit chain, exported with jailboxctl and verified offline, says for each op who decided it
// and by which rule, and GET …/ops?decidedBy= finds them. Then rules given at open (a deny
// that refuses naming the rule, an allow that runs), and the bad input the rules refuse.
// Needs root and Docker with runsc (as refactor.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';
import { CTL, connectClient, verifiedChain } from './lib/mcp.mjs';
import { JAILBOXD } from './lib/server.mjs';

let kit, srv;

// the operator's rules: a locked deny no buyer rule can get round, an unlocked allow a
// buyer's rule decides before
const OPERATOR = [
  '# the operator\'s rules (JAILBOX_POLICY_FILE)',
  JSON.stringify({ id: 'op-no-keys', tool: 'write', path: '*.key', effect: 'deny', locked: true }),
  '',
  JSON.stringify({ id: 'op-txt', tool: 'write', path: '*.txt', effect: 'allow' }),
].join('\n') + '\n';

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'jb-policy-file-'));
  writeFileSync(join(dir, 'policy.jsonl'), OPERATOR);
  kit = await startSandboxServer('jailbox-sandbox:policy', { JAILBOX_APPROVAL_TIMEOUT: '60',
    JAILBOX_POLICY_FILE: join(dir, 'policy.jsonl') }, [`${realpathSync('/bin/sh')}:/bin/sh`]); // exec is offered with a shell
  srv = kit.srv;
});

after(async () => {
  kit?.closeSockets();
  await srv?.stop();
});

// a workspace with src/f0.c … src/f10.c and tests/t.c, each "int x = 0;\n"
function build(dir) {
  mkdirSync(join(dir, 'src'), { recursive: true });
  mkdirSync(join(dir, 'tests'), { recursive: true });
  for (let i = 0; i <= 10; i++) writeFileSync(join(dir, `src/f${i}.c`), 'int x = 0;\n');
  writeFileSync(join(dir, 'tests/t.c'), 'int x = 0;\n');
}

test('approve and allow similar (directory): nine src/ edits run unasked, tests/ asks, a revoked rule asks again; the verified chain says who decided each op', { timeout: 180000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  let rule = null;
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req);
    const first = asked.length === 1;
    const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve',
      first ? { opId: req.opId, allowSimilar: 'directory' } : { opId: req.opId });
    if (first) rule = ack.rule ?? { ackError: ack };
    else assert.equal(ack.ok, true, JSON.stringify(ack));
  });
  const client = await connectClient('http', kit, S, 'jailbox-policy-test');
  const edit = async (path, n) => {
    const r = await client.callTool({ name: 'edit', arguments: { path, edits: [{ oldText: 'int x = 0;', newText: `int x = ${n};` }] } });
    assert.equal(r.isError, false, `${path}: ${JSON.stringify(r).slice(0, 400)}`);
    assert.equal(readFileSync(join(S.dir, path), 'utf8'), `int x = ${n};\n`);
  };
  try {
    await edit('src/f0.c', 100);
    assert.equal(asked.length, 1);
    assert.deepEqual({ tool: rule.tool, path: rule.path, effect: rule.effect }, { tool: 'edit', path: 'src/**', effect: 'allow' }, JSON.stringify(rule));
    assert.match(rule.id, /^r-[0-9a-f]{12}$/);
    const added = await kit.waitEvent(buyer, 'jailbox:rule', (e) => e.action === 'added');
    assert.deepEqual([added.ruleId, added.by, added.opId, added.rule.path], [rule.id, 'allowSimilar', asked[0].opId, 'src/**']);

    for (let i = 1; i <= 9; i++) await edit(`src/f${i}.c`, i);
    assert.equal(asked.length, 1, 'the nine src/ edits ran without asking: ' + JSON.stringify(asked.map((a) => a.path)));

    await edit('tests/t.c', 7); // outside the rule: asks
    assert.deepEqual(asked.map((a) => a.path), ['src/f0.c', 'tests/t.c']);

    const listed = await srv.req('GET', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken });
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(listed.json.rules.map((r) => [r.id, r.state ?? r.source]),
      [['op-no-keys', 'operator'], [rule.id, 'live'], ['op-txt', 'operator']]);

    const rv = await buyer.timeout(10000).emitWithAck('jailbox:rule_revoke', { ruleId: rule.id });
    assert.deepEqual(rv, { ok: true, result: { ruleId: rule.id, state: 'revoked' } });
    await kit.waitEvent(buyer, 'jailbox:rule', (e) => e.action === 'revoked' && e.ruleId === rule.id);
    const again = await buyer.timeout(10000).emitWithAck('jailbox:rule_revoke', { ruleId: rule.id });
    assert.equal(again.error?.code, 'conflict', JSON.stringify(again));

    await edit('src/f10.c', 10); // the revoked rule decides nothing: asks
    assert.deepEqual(asked.map((a) => a.path), ['src/f0.c', 'tests/t.c', 'src/f10.c']);
  } finally {
    await client.close();
  }

  // ---- GET …/ops by decider ----
  const byRule = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=rule:${rule.id}`, { token: S.buyerToken });
  assert.equal(byRule.status, 200, byRule.text);
  assert.deepEqual(byRule.json.ops.map((o) => `${o.tool} ${o.path}`), [1, 2, 3, 4, 5, 6, 7, 8, 9].map((i) => `edit src/f${i}.c`));
  assert.ok(byRule.json.ops.every((o) => o.decisionReason === `allowed by rule ${rule.id}` && o.state === 'done'));
  const byBuyer = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=buyer`, { token: S.buyerToken });
  assert.deepEqual(byBuyer.json.ops.map((o) => `${o.tool} ${o.path}`), ['edit src/f0.c', 'edit tests/t.c', 'edit src/f10.c']);
  const anyRule = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=rule`, { token: srv.serviceToken });
  assert.equal(anyRule.json.ops.length, 9);
  const bad = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=someone`, { token: S.buyerToken });
  assert.equal(bad.status, 400, bad.text);

  // ---- the chain: who decided each edit, and the rule's life ----
  const rows = verifiedChain(srv, S.jobId);
  const edits = rows.filter((r) => r.operation === 'edit');
  assert.deepEqual(edits.map((r) => [r.path, r.details.decidedBy, r.details.reason ?? null]), [
    ['src/f0.c', 'buyer', null],
    ...[1, 2, 3, 4, 5, 6, 7, 8, 9].map((i) => [`src/f${i}.c`, `rule:${rule.id}`, `allowed by rule ${rule.id}`]),
    ['tests/t.c', 'buyer', null],
    ['src/f10.c', 'buyer', null],
  ]);
  assert.ok(edits.every((r) => r.details.ok === true));
  const life = rows.filter((r) => r.operation.startsWith('rule_'));
  assert.deepEqual(life.map((r) => [r.operation, r.details.ruleId, r.details.by]),
    [['rule_add', rule.id, 'allowSimilar'], ['rule_revoke', rule.id, 'buyer']]);
  assert.equal(life[0].details.opId, asked[0].opId);
  assert.equal(life[0].details.rule.path, 'src/**');
  const seqOf = (pred) => rows.find(pred).seq;
  // the rule was added after the first edit was decided and before the second ran; revoked before the last
  assert.ok(seqOf((r) => r.operation === 'rule_add') < seqOf((r) => r.path === 'src/f1.c'));
  assert.ok(seqOf((r) => r.operation === 'rule_revoke') < seqOf((r) => r.path === 'src/f10.c'));
});

test('rules given at open: a deny refuses naming the rule, an allow runs unasked, uses run out', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised', policy: { rules: [
    { id: 'no-tests', tool: 'write', path: 'tests/**', effect: 'deny' },
    { id: 'notes', tool: 'write', path: '*.md', effect: 'allow', uses: 2 },
  ] } });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req.path);
    await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  });
  const client = await connectClient('http', kit, S, 'jailbox-policy-test');
  try {
    const denied = await client.callTool({ name: 'write', arguments: { path: 'tests/new.c', content: 'x\n' } });
    assert.equal(denied.isError, true, JSON.stringify(denied));
    assert.match(denied.content[0].text, /denied by rule no-tests/);
    for (const p of ['a.md', 'src/b.md']) {
      const r = await client.callTool({ name: 'write', arguments: { path: p, content: 'notes\n' } });
      assert.equal(r.isError, false, JSON.stringify(r));
    }
    assert.deepEqual(asked, []);
    const third = await client.callTool({ name: 'write', arguments: { path: 'c.md', content: 'notes\n' } });
    assert.equal(third.isError, false, JSON.stringify(third));
    assert.deepEqual(asked, ['c.md'], 'the rule had two uses');
  } finally {
    await client.close();
  }
  const all = await srv.req('GET', `/v1/jailbox/${S.jobId}/rules?all=true`, { token: S.buyerToken });
  assert.deepEqual(all.json.rules.filter((r) => !r.source).map((r) => [r.id, r.state]), [['no-tests', 'live'], ['notes', 'expired']]);
  const rows = verifiedChain(srv, S.jobId);
  assert.deepEqual(rows.filter((r) => r.operation.startsWith('rule_')).map((r) => [r.operation, r.details.ruleId, r.details.by ?? r.details.why]),
    [['rule_add', 'no-tests', 'open'], ['rule_add', 'notes', 'open'], ['rule_expire', 'notes', 'uses']]);
  const writes = rows.filter((r) => r.operation === 'write');
  assert.deepEqual(writes.map((r) => [r.path, r.details.ok, r.details.decidedBy]), [
    ['tests/new.c', false, 'rule:no-tests'], ['a.md', true, 'rule:notes'], ['src/b.md', true, 'rule:notes'], ['c.md', true, 'buyer']]);
});

test('a rule with uses: 1 allows one of twenty writes that arrive at once; the others ask; the agent\'s token cannot touch the rules', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised', policy: { rules: [
    { id: 'once', tool: 'write', path: 'src/**', effect: 'allow', uses: 1 },
  ] } });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req.path);
    await buyer.timeout(10000).emitWithAck('jailbox:reject', { opId: req.opId, reason: 'race test' });
  });
  // the agent's token has no say over the rules, on REST nor on its socket
  for (const [m, path, body] of [['GET', 'rules'], ['POST', 'rules', { rule: { tool: 'write', effect: 'allow' } }], ['DELETE', 'rules/once']]) {
    const r = await srv.req(m, `/v1/jailbox/${S.jobId}/${path}`, { token: S.agentToken, body });
    assert.equal(r.status, 403, `${m} ${path}: ${r.text}`);
  }
  const agentSock = await kit.connect(S.agentToken);
  for (const [ev, arg] of [['jailbox:rule_add', { rule: { tool: 'write', effect: 'allow' } }], ['jailbox:rule_revoke', { ruleId: 'once' }],
    ['jailbox:approve', { opId: 1, allowSimilar: 'session' }]]) {
    const ack = await agentSock.timeout(10000).emitWithAck(ev, arg);
    assert.equal(ack.error?.code, 'forbidden', `${ev}: ${JSON.stringify(ack)}`);
  }
  const client = await connectClient('http', kit, S, 'jailbox-policy-test');
  let results;
  try {
    // (calls over the server's waiting places are refused: they neither run nor ask)
    results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) =>
      client.callTool({ name: 'write', arguments: { path: `src/n${i}.md`, content: `${i}\n` } })));
  } finally {
    await client.close();
  }
  const ran = results.filter((r) => r.status === 'fulfilled' && !r.value.isError);
  assert.equal(ran.length, 1, JSON.stringify(results.map((r) => r.value?.content?.[0]?.text ?? String(r.reason))));
  assert.ok(asked.length >= 1 && asked.length <= 19, JSON.stringify(asked));
  const byRule = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?decidedBy=rule:once`, { token: S.buyerToken });
  assert.equal(byRule.json.ops.length, 1, byRule.text);
  const all = await srv.req('GET', `/v1/jailbox/${S.jobId}/rules?all=true`, { token: S.buyerToken });
  assert.deepEqual(all.json.rules.filter((r) => !r.source).map((r) => [r.id, r.state, r.usesLeft]), [['once', 'expired', 0]]);
});

test('bad rules are refused with a sentence naming what is wrong; nothing is stored', { timeout: 120000 }, async () => {
  const S = await srv.open({ mode: 'supervised' });
  const post = (body) => srv.req('POST', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken, body });
  const cases = [
    [{ tool: 'write', path: '', effect: 'allow' }, /must not be empty/],
    [{ tool: 'write', path: 'a'.repeat(1025), effect: 'allow' }, /at most 1024/],
    [{ tool: 'delete', path: '**', effect: 'allow' }, /"broad": true/],
    [{ tool: 'exec', effect: 'allow' }, /"broad": true/],
    [{ tool: 'exec', argvPrefix: ['sh'], effect: 'allow' }, /interpreter/],
    [{ tool: 'exec', argvPrefix: ['bash', '-c'], effect: 'allow' }, /interpreter/],
    [{ tool: 'exec', argvPrefix: ['python3', '-c'], effect: 'allow' }, /interpreter/],
    [{ tool: 'exec', argvPrefix: ['env', 'make'], effect: 'allow' }, /interpreter/],
    [{ tool: 'write', effect: 'allow', when: 'always' }, /unknown field "when"/],
    [{ tool: 'write', effect: 'allow', locked: true }, /operator/],
    [{ tool: 'write', effect: 'sometimes' }, /effect must be/],
  ];
  for (const [rule, want] of cases) {
    const r = await post({ rules: [rule] });
    assert.equal(r.status, 400, `${JSON.stringify(rule).slice(0, 100)}: ${r.text}`);
    assert.match(r.json.error.message, want, JSON.stringify(rule).slice(0, 100));
  }
  const many = Array.from({ length: 257 }, (_, i) => ({ id: `w${i}`, tool: 'write', path: `d${i}/**`, effect: 'ask' }));
  let r = await post({ rules: many });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /at most 256/);
  r = await post({ rules: many.slice(0, 256) });
  assert.equal(r.status, 201, r.text);
  r = await post({ rule: { tool: 'write', path: 'x/**', effect: 'ask' } }); // the 257th
  assert.equal(r.status, 409, r.text);
  r = await post({ rule: { id: 'w0', tool: 'write', path: 'x/**', effect: 'ask' } }); // an id taken
  assert.equal(r.status, 409, r.text);
  const list = await srv.req('GET', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken });
  assert.equal(list.json.rules.filter((x) => !x.source).length, 256);
  // the broad consent, given
  const S2 = await srv.open({ mode: 'supervised' });
  r = await srv.req('POST', `/v1/jailbox/${S2.jobId}/rules`, { token: S2.buyerToken, body: { rule: { tool: 'delete', path: '**', effect: 'allow', broad: true } } });
  assert.equal(r.status, 201, r.text);
  // another session's buyer may not
  r = await srv.req('POST', `/v1/jailbox/${S2.jobId}/rules`, { token: S.buyerToken, body: { rule: { tool: 'write', effect: 'ask' } } });
  assert.ok([401, 403].includes(r.status), r.text);
  r = await srv.req('DELETE', `/v1/jailbox/${S2.jobId}/rules/nope`, { token: S2.buyerToken });
  assert.equal(r.status, 404, r.text);
  // at open: the session is not created
  const o = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
    body: { agentId: 'agent-1', workspace: 'ws-bad-policy', policy: { rules: [{ tool: 'exec', argvPrefix: ['bash', '-c'], effect: 'allow' }] } } });
  assert.equal(o.status, 400, o.text);
  assert.match(o.json.error.message, /^policy\.rules\[0\]: .*interpreter/);
  // allowSimilar that does not fit the op: the op stays pending
  const opId = await srv.pendingOp(S2.jobId, 'top.c');
  r = await srv.req('POST', `/v1/jailbox/${S2.jobId}/approve/${opId}`, { token: S2.buyerToken, body: { allowSimilar: 'directory' } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /workspace root/);
  r = await srv.req('POST', `/v1/jailbox/${S2.jobId}/approve/${opId}`, { token: S2.buyerToken, body: { allowSimilar: 'everything' } });
  assert.equal(r.status, 400, r.text);
  const ops = await srv.req('GET', `/v1/jailbox/${S2.jobId}/ops?state=pending`, { token: S2.buyerToken });
  assert.deepEqual(ops.json.ops.map((x) => x.opId), [opId]);
  r = await srv.req('POST', `/v1/jailbox/${S2.jobId}/approve/${opId}`, { token: S2.buyerToken, body: { allowSimilar: 'extension' } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.rule.path, '/*.c');
  assert.equal(r.json.decidedBy, 'buyer');
});

test('the operator\'s policy file: a locked deny decides before the buyer\'s rules and cannot be revoked; an unlocked allow is overridden by a buyer\'s rule', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req.path);
    await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  });
  let r = await srv.req('POST', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken, body: { rules: [
    { id: 'mine-keys', tool: 'write', path: 'src/**', effect: 'allow' },
    { id: 'ask-notes', tool: 'write', path: 'notes.txt', effect: 'ask' },
  ] } });
  assert.equal(r.status, 201, r.text);
  r = await srv.req('DELETE', `/v1/jailbox/${S.jobId}/rules/op-no-keys`, { token: S.buyerToken });
  assert.equal(r.status, 409, r.text);
  assert.match(r.json.error.message, /operator's and locked/);
  r = await srv.req('POST', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken, body: { rule: { id: 'op-txt', tool: 'write', effect: 'ask' } } });
  assert.equal(r.status, 409, r.text);
  // nor at open: a session's rule named like the operator's would be credited to it in the
  // chain, and could not be revoked
  mkdirSync(join(srv.wsroot, 'ws-op-id'), { recursive: true });
  const o = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, body: { agentId: 'agent-1',
    workspace: 'ws-op-id', policy: { rules: [{ id: 'op-no-keys', tool: 'write', path: 'src/**', effect: 'allow' }] } } });
  assert.equal(o.status, 409, o.text);
  assert.match(o.json.error.message, /"op-no-keys" is the operator's/);
  const client = await connectClient('http', kit, S, 'jailbox-policy-test');
  try {
    const k = await client.callTool({ name: 'write', arguments: { path: 'src/a.key', content: 'k\n' } });
    assert.equal(k.isError, true, JSON.stringify(k));
    assert.match(k.content[0].text, /denied by rule op-no-keys/);
    const a = await client.callTool({ name: 'write', arguments: { path: 'src/a.c', content: 'a\n' } });
    assert.equal(a.isError, false, JSON.stringify(a));
    const t = await client.callTool({ name: 'write', arguments: { path: 'other.txt', content: 't\n' } });
    assert.equal(t.isError, false, JSON.stringify(t));
    assert.deepEqual(asked, [], 'src/a.c by the buyer\'s rule, other.txt by the operator\'s');
    const n = await client.callTool({ name: 'write', arguments: { path: 'notes.txt', content: 'n\n' } });
    assert.equal(n.isError, false, JSON.stringify(n));
    assert.deepEqual(asked, ['notes.txt'], 'the buyer\'s ask decides before the operator\'s unlocked allow');
  } finally {
    await client.close();
  }
  const rows = verifiedChain(srv, S.jobId);
  assert.deepEqual(rows.filter((x) => x.operation === 'write').map((x) => [x.path, x.details.decidedBy]), [
    ['src/a.key', 'rule:op-no-keys'], ['src/a.c', 'rule:mine-keys'], ['other.txt', 'rule:op-txt'], ['notes.txt', 'buyer']]);
  assert.equal(rows.find((x) => x.path === 'notes.txt' && x.operation === 'write').details.reason, 'asked by rule ask-notes');
});

test('a bad policy file stops jailboxd at start naming FILE:LINE', () => {
  const dir = mkdtempSync(join(tmpdir(), 'jb-policy-bad-'));
  const f = join(dir, 'bad.jsonl');
  writeFileSync(f, OPERATOR + JSON.stringify({ tool: 'exec', argvPrefix: ['bash', '-c'], effect: 'allow' }) + '\n');
  const p = spawnSync(JAILBOXD, [], { env: { ...process.env, JAILBOX_POLICY_FILE: f, JAILBOX_STATE_DIR: dir }, encoding: 'utf8', timeout: 20000 });
  assert.equal(p.status, 2, p.stderr);
  assert.match(p.stderr, new RegExp(`^jailboxd: policy: ${f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:5: argvPrefix \\["bash"…\\] starts a shell`));
  writeFileSync(f, '{"tool":"write","effect":"allow","uses":2}\n');
  const q = spawnSync(JAILBOXD, [], { env: { ...process.env, JAILBOX_POLICY_FILE: f, JAILBOX_STATE_DIR: dir }, encoding: 'utf8', timeout: 20000 });
  assert.equal(q.status, 2, q.stderr);
  assert.match(q.stderr, /bad\.jsonl:1: uses counts ops of one session/);
});

test('jailboxctl rules JOB [add|rm] and approve --allow-similar', { timeout: 60000 }, async () => {
  const S = await srv.open({ mode: 'supervised' });
  const env = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: S.buyerToken };
  const ctl = (...args) => spawnSync(CTL, args, { env, encoding: 'utf8', timeout: 20000 });
  let p = ctl('rules', S.jobId, 'add', JSON.stringify({ id: 'mk', tool: 'exec', argvPrefix: ['make', 'test'], effect: 'allow' }),
    JSON.stringify({ tool: 'write', path: 'src/**', effect: 'deny' }));
  assert.equal(p.status, 0, p.stderr);
  assert.match(p.stdout, /^mk +exec +allow argv make test \.\.\.$/m);
  p = ctl('rules', S.jobId, 'add', JSON.stringify({ tool: 'exec', argvPrefix: ['bash', '-c'], effect: 'allow' }));
  assert.equal(p.status, 2, p.stdout); // refused before it is sent
  assert.match(p.stderr, /rule 1: argvPrefix \["bash"…\] starts a shell/);
  p = ctl('rules', S.jobId, 'rm', 'mk');
  assert.equal(p.status, 0, p.stderr);
  assert.equal(p.stdout, 'rule mk: revoked\n');
  p = ctl('rules', S.jobId, '--all', '--json');
  assert.equal(p.status, 0, p.stderr);
  const mine = JSON.parse(p.stdout).rules.filter((r) => !r.source);
  assert.deepEqual(mine.map((r) => [r.id, r.state]), [['mk', 'revoked'], [mine[1].id, 'live']]);
  p = ctl('rules', S.jobId, 'rm', 'mk');
  assert.notEqual(p.status, 0);
  const opId = await srv.pendingOp(S.jobId, 'lib/x/y.h');
  p = ctl('approve', S.jobId, String(opId), '--allow-similar', 'extension');
  assert.equal(p.status, 0, p.stderr);
  assert.match(p.stdout, /^op \d+: approved \(approved\)\nallowed from now on: r-[0-9a-f]{12} +write +allow path lib\/x\/\*\*\/\*\.h\n$/);
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Writers on `agents` (two a socket) writing src/P_<writer>_<n>.c until stop(); every write must
// succeed unless `tolerant` (a session ending under them). A write refused because the server's
// waiting places (JAILBOX_MAX_WAITING_CALLS) are taken is sent again.
function writers(agents, prefix, tolerant = false) {
  let stopped = false;
  let n = 0;
  const loop = async (a, w) => {
    while (!stopped) {
      const r = await kit.call(a, 'write', { path: `src/${prefix}_${w}_${n++}.c`, content: 'x\n' }).catch((e) => ({ error: String(e) }));
      if (/too many calls are waiting/.test(r.error?.message ?? '')) continue;
      if (!tolerant) assert.ok(r.result && !r.result.isError, JSON.stringify(r).slice(0, 300));
      else if (!r.result || r.result.isError) return;
    }
  };
  const all = agents.flatMap((a, i) => [loop(a, 2 * i), loop(a, 2 * i + 1)]);
  return async () => { stopped = true; await Promise.all(all); };
}

test('rules added and revoked while writes arrive: every write is decided by the rules that stand at its insert (a rule\'s writes are one run of op ids, no write of the mode among them), and a rule\'s uses count exactly the writes it decided', { timeout: 300000 }, async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised' });
  const agents = await Promise.all([0, 1, 2].map(() => kit.connect(S.agentToken)));
  const USES = 100000;
  const ROUNDS = 10;
  for (let k = 0; k < ROUNDS; k++) {
    const stop = writers(agents, `r${k}`);
    await sleep(60 + 20 * k);
    const add = await srv.req('POST', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken,
      body: { rule: { id: `r${k}`, tool: 'write', path: 'src/**', effect: 'allow', uses: USES } } });
    assert.equal(add.status, 201, add.text);
    await sleep(120);
    const rev = await srv.req('DELETE', `/v1/jailbox/${S.jobId}/rules/r${k}`, { token: S.buyerToken });
    assert.equal(rev.status, 200, rev.text);
    await sleep(60);
    await stop();
  }
  for (const a of agents) a.close();
  const ops = (await srv.db.query('SELECT op_id, decided_by FROM ops WHERE job_id = $1 AND tool = \'write\' ORDER BY op_id', [S.jobId])).rows;
  const by = ops.map((o) => o.decided_by);
  assert.ok(by.every((d) => d === 'mode' || /^rule:r\d+$/.test(d)), JSON.stringify([...new Set(by)]));
  const rules = await srv.req('GET', `/v1/jailbox/${S.jobId}/rules?all=true`, { token: S.buyerToken });
  let decided = 0;
  for (let k = 0; k < ROUNDS; k++) {
    const at = by.flatMap((d, i) => (d === `rule:r${k}` ? [i] : []));
    decided += at.length;
    // one unbroken run: no write decided by the mode between the first and the last of them
    if (at.length) assert.equal(at[at.length - 1] - at[0] + 1, at.length, `rule r${k}: ${by.slice(at[0], at[at.length - 1] + 1).join(' ')}`);
    const r = rules.json.rules.find((x) => x.id === `r${k}`);
    assert.deepEqual([r.state, r.usesLeft], ['revoked', USES - at.length], `r${k}`);
  }
  assert.ok(decided > 0 && by.filter((d) => d === 'mode').length > 0, `rules decided ${decided} of ${by.length}`);
  // the chain: every write a rule decided comes after the rule's rule_add
  const rows = verifiedChain(srv, S.jobId);
  for (let k = 0; k < ROUNDS; k++) {
    const added = rows.findIndex((r) => r.operation === 'rule_add' && r.details.ruleId === `r${k}`);
    assert.ok(added >= 0);
    assert.ok(rows.every((r, i) => r.operation !== 'write' || r.details.decidedBy !== `rule:r${k}` || i > added));
  }
});

test('a session aborted while writes decided by a rule with uses arrive: the uses counted are the writes stored', { timeout: 180000 }, async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised', policy: { rules: [
    { id: 'many', tool: 'write', path: 'src/**', effect: 'allow', uses: 1000 },
  ] } });
  const agents = await Promise.all([0, 1, 2].map(() => kit.connect(S.agentToken)));
  const stop = writers(agents, 'ab', true);
  await sleep(400);
  const r = await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: S.buyerToken, body: { reason: 'test' } });
  assert.ok([200, 202].includes(r.status), r.text);
  await stop();
  for (const a of agents) a.close();
  const n = Number((await srv.db.query('SELECT count(*) FROM ops WHERE job_id = $1 AND decided_by = \'rule:many\'', [S.jobId])).rows[0].count);
  const left = (await srv.db.query('SELECT uses_left FROM policy_rules WHERE job_id = $1 AND rule_id = \'many\'', [S.jobId])).rows[0].uses_left;
  assert.ok(n > 0);
  assert.equal(left, 1000 - n);
});

test('a rule past its expiresAt decides nothing, and its rule_expire entry comes before the next op decided without it', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req.path);
    await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  });
  const agent = await kit.connect(S.agentToken);
  // whole seconds: 3 to 4 s from now
  const expiresAt = new Date(Date.now() + 4000).toISOString().replace(/\.\d+Z$/, 'Z');
  const add = await srv.req('POST', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken,
    body: { rule: { id: 'soon', tool: 'write', path: 'src/**', effect: 'allow', expiresAt } } });
  assert.equal(add.status, 201, add.text);
  await kit.ok(agent, 'write', { path: 'src/a.c', content: 'a\n' });
  assert.deepEqual(asked, []);
  await sleep(Math.max(0, Date.parse(expiresAt) - Date.now()) + 1100);
  await kit.ok(agent, 'write', { path: 'src/b.c', content: 'b\n' });
  assert.deepEqual(asked, ['src/b.c']);
  const all = await srv.req('GET', `/v1/jailbox/${S.jobId}/rules?all=true`, { token: S.buyerToken });
  assert.deepEqual(all.json.rules.filter((r) => !r.source).map((r) => [r.id, r.state]), [['soon', 'expired']]);
  const rows = verifiedChain(srv, S.jobId);
  const seq = (f) => rows.findIndex(f);
  const expired = seq((r) => r.operation === 'rule_expire' && r.details.ruleId === 'soon' && r.details.why === 'expiresAt');
  assert.ok(expired > 0, 'rule_expire entry');
  assert.ok(expired > seq((r) => r.operation === 'write' && r.path === 'src/a.c'));
  assert.ok(expired < seq((r) => r.operation === 'write' && r.path === 'src/b.c'));
  assert.deepEqual(rows.filter((r) => r.operation === 'write').map((r) => [r.path, r.details.decidedBy]), [['src/a.c', 'rule:soon'], ['src/b.c', 'buyer']]);
  agent.close();
});

test('an exec allow rule allows read-only commands; a writable one asks unless the rule says writable: true; allow-similar "command" of a writable exec says it', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised', policy: { rules: [
    { id: 'ro', tool: 'exec', argvPrefix: ['true'], effect: 'allow' },
  ] } });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  let similar = null;
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req.opId);
    const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', asked.length === 1 ? { opId: req.opId, allowSimilar: 'command' } : { opId: req.opId });
    if (asked.length === 1) similar = ack.rule ?? { ackError: ack };
  });
  const agent = await kit.connect(S.agentToken);
  // whether `true` runs in this image does not matter: the decision comes first
  await kit.call(agent, 'exec', { argv: ['true', 'x'] });
  assert.equal(asked.length, 0);
  await kit.call(agent, 'exec', { argv: ['true', 'y'], writable: true });
  assert.equal(asked.length, 1);
  assert.deepEqual([similar.argv, similar.cwd, similar.writable], [['true', 'y'], '.', true], JSON.stringify(similar));
  await kit.call(agent, 'exec', { argv: ['true', 'y'], writable: true });
  assert.equal(asked.length, 1, 'the rule made from the writable exec allows the same one again');
  await kit.call(agent, 'exec', { argv: ['true', 'y', 'z'], writable: true });
  assert.equal(asked.length, 2, 'an argument more asks: the rule is the exact command');
  const ops = (await srv.db.query('SELECT args->\'argv\' AS argv, decided_by FROM ops WHERE job_id = $1 AND tool = \'exec\' ORDER BY op_id', [S.jobId])).rows;
  assert.deepEqual(ops.map((o) => [o.argv.join(' '), o.decided_by]), [['true x', 'rule:ro'], ['true y', 'buyer'], ['true y', `rule:${similar.id}`], ['true y z', 'buyer']]);
  agent.close();
});
