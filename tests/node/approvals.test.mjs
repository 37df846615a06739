// approvals.test.mjs — an approval means what it shows: allow-similar "command" allows the
// approved command exactly (the same argv, cwd, variables and writable; an added option asks
// again), env is an allow-list that the operator extends (JAILBOX_EXEC_ENV_ALLOW), the buyer is
// shown each variable's value (masked when it looks secret) in the approval request and in the
// pending op, and the console's cookie opens a socket only from the console page's exact
// origin. Needs root and Docker with runsc (as exec.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

let kit, srv;
const GH = 'ghp_' + 'Q7'.repeat(18); // the shape of a GitHub token (the scanner's github_token)

before(async () => {
  kit = await startSandboxServer('jailbox-sandbox:approvals', {
    JAILBOX_APPROVAL_TIMEOUT: '60', JAILBOX_EXEC_ENV_ALLOW: 'GIT_DIR,MY_TOKEN',
  }, [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/echo']);
  srv = kit.srv;
});

after(async () => {
  kit?.closeSockets();
  await srv?.stop();
});

const build = (d) => { writeFileSync(join(d, 'Makefile'), 'check:\n\techo ok\n'); mkdirSync(join(d, 'sub')); };

test('allow-similar "command" allows the approved argv exactly: an added option, another cwd, a variable or writable asks again', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const buyer = await kit.connect(S.buyerToken);
  const asked = [];
  let rule = null;
  buyer.on('jailbox:approval_request', async (req) => {
    asked.push(req);
    if (asked.length === 1) {
      const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId, allowSimilar: 'command' });
      rule = ack.rule ?? { ackError: ack };
    } else {
      await buyer.timeout(10000).emitWithAck('jailbox:reject', { opId: req.opId, reason: 'not what I allowed' });
    }
  });
  const agent = await kit.connect(S.agentToken);
  await kit.call(agent, 'exec', { argv: ['echo', 'a'] });
  assert.equal(asked.length, 1);
  // the same argv: by the rule, unasked
  let r = await kit.call(agent, 'exec', { argv: ['echo', 'a'] });
  assert.equal(asked.length, 1, 'the exact command asked again');
  assert.ok(!toolFailure(r), JSON.stringify(r));
  // an option appended (GNU tools read options anywhere: make check --eval=…), another cwd, a
  // variable the buyer did not see, the workspace writable: each asks (and is rejected)
  const variants = [
    { argv: ['echo', 'a', '--eval=x:;id'] },
    { argv: ['echo', 'a'], cwd: 'sub' },
    { argv: ['echo', 'a'], env: { LANG: 'C' } },
    { argv: ['echo', 'a'], writable: true },
    { argv: ['echo'] },
  ];
  for (const [i, v] of variants.entries()) {
    r = await kit.call(agent, 'exec', v);
    assert.equal(asked.length, 2 + i, `not asked: ${JSON.stringify(v)}`);
    assert.equal(toolFailure(r)?.data?.reason, 'rejected', JSON.stringify(r));
  }
  assert.deepEqual({ argv: rule.argv, cwd: rule.cwd, argvPrefix: rule.argvPrefix, env: rule.env, writable: rule.writable },
    { argv: ['echo', 'a'], cwd: '.', argvPrefix: undefined, env: undefined, writable: undefined }, JSON.stringify(rule));
  const ops = (await srv.db.query('SELECT args->\'argv\' AS argv, decided_by FROM ops WHERE job_id = $1 AND tool = \'exec\' ORDER BY op_id', [S.jobId])).rows;
  assert.deepEqual(ops.map((o) => o.decided_by), ['buyer', `rule:${rule.id}`, 'buyer', 'buyer', 'buyer', 'buyer', 'buyer']);
  agent.close();
});

test('env is an allow-list: GIT_DIR and CC refused unless the operator allows them; an allowed one shows its value, a secret-looking one masked', { timeout: 120000 }, async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const buyer = await kit.connect(S.buyerToken);
  const agent = await kit.connect(S.agentToken);
  // not allowed: refused before anyone is asked, naming the variable
  for (const name of ['CC', 'CXX', 'CONFIG_SHELL', 'GIT_WORK_TREE', 'RUSTC_WRAPPER', 'NODE_ENV']) {
    const f = toolFailure(await kit.call(agent, 'exec', { argv: ['git', 'status'], env: { [name]: '/workspace/evil' } }));
    assert.equal(f?.data?.reason, 'denied', `${name}: ${JSON.stringify(f)}`);
    assert.match(f.message, new RegExp(`'${name}' is not allowed`));
  }
  // a locale names no file
  let f = toolFailure(await kit.call(agent, 'exec', { argv: ['echo'], env: { LC_ALL: '/workspace/locale' } }));
  assert.equal(f?.data?.reason, 'denied', JSON.stringify(f));
  // an allowed name holds no code: make expands every variable of the environment, so
  // VERBOSE='$(shell …)' would run where a Makefile says $(VERBOSE), behind a masked value
  f = toolFailure(await kit.call(agent, 'exec', { argv: ['make'], env: { VERBOSE: '$(shell touch X) ' + GH } }));
  assert.equal(f?.data?.reason, 'denied', JSON.stringify(f));
  assert.match(f.message, /VERBOSE/);
  // allowed by the operator (GIT_DIR, MY_TOKEN): the buyer sees the values, secrets masked
  const call = kit.call(agent, 'exec', { argv: ['git', 'status'], env: { GIT_DIR: '/workspace/.evil', MY_TOKEN: 'plain-text-1', LANG: GH, LC_MESSAGES: 'x'.repeat(3000) } });
  const ev = await kit.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'exec');
  assert.deepEqual(ev.envNames, ['GIT_DIR', 'LANG', 'LC_MESSAGES', 'MY_TOKEN']);
  assert.deepEqual(ev.env, { GIT_DIR: '/workspace/.evil', MY_TOKEN: '[REDACTED:name]', LANG: '[REDACTED:github_token]',
    LC_MESSAGES: 'x'.repeat(1024) + '… (3000 bytes)' });
  assert.ok(!JSON.stringify(ev).includes('plain-text-1') && !JSON.stringify(ev).includes(GH), 'a secret value in the request');
  // the pending op says the same (REST)
  const page = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
  const row = page.json.ops.find((o) => o.opId === ev.opId);
  assert.deepEqual(row.args.env, ev.env);
  assert.ok(!page.text.includes('plain-text-1') && !page.text.includes(GH), 'a secret value in GET ops');
  const a = await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${ev.opId}`, { token: S.buyerToken, body: { reason: 'no' } });
  assert.equal(a.status, 200, a.text);
  assert.equal(toolFailure(await call)?.data?.reason, 'rejected');
  // once decided, the values are no longer shown
  const done = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops`, { token: S.buyerToken });
  assert.equal(done.json.ops.find((o) => o.opId === ev.opId).args.env, null);
  // allow-similar from an exec with variables: the rule names them and binds their values
  const call2 = kit.call(agent, 'exec', { argv: ['echo', 'v'], env: { GIT_DIR: '.git' } });
  const ev2 = await kit.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.opId !== ev.opId);
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ev2.opId, allowSimilar: 'command' });
  assert.deepEqual([ack.rule?.env, ack.rule?.envSha256?.length], [['GIT_DIR'], 64], JSON.stringify(ack));
  await call2;
  const evs = () => buyer.events.filter((e) => e.event === 'jailbox:approval_request').length;
  const before = evs();
  let r = await kit.call(agent, 'exec', { argv: ['echo', 'v'], env: { GIT_DIR: '.git' } });
  assert.ok(!toolFailure(r), JSON.stringify(r));
  assert.equal(evs(), before, 'the same value asked again');
  const call3 = kit.call(agent, 'exec', { argv: ['echo', 'v'], env: { GIT_DIR: '/workspace/.evil' } });
  const ev3 = await kit.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.opId > ev2.opId);
  assert.deepEqual(ev3.env, { GIT_DIR: '/workspace/.evil' });
  await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${ev3.opId}`, { token: S.buyerToken, body: { reason: 'no' } });
  assert.equal(toolFailure(await call3)?.data?.reason, 'rejected');
  agent.close();
});

test('the console cookie opens a socket only from the console page\'s exact origin', { timeout: 60000 }, async () => {
  const S = await srv.open();
  const code = (await srv.req('POST', '/v1/console/codes', { token: S.buyerToken })).json.code;
  const r = await fetch(srv.url + '/v1/console/session', { method: 'POST', headers: { 'X-Jailbox-Console': '1', 'X-Jailbox-Console-Code': code } });
  assert.equal(r.status, 200);
  const cookie = r.headers.get('set-cookie').split(';')[0];
  const { io } = await import('socket.io-client');
  const attempt = (origin) => new Promise((res) => {
    const s = io('http://' + kit.wsAddr, { transports: ['websocket'], reconnection: false, forceNew: true, extraHeaders: { cookie, origin } });
    s.once('connect', () => { s.close(); res('connected'); });
    s.once('connect_error', (e) => { s.close(); res(e.message); });
  });
  const { hostname, port } = new URL(srv.url);
  assert.equal(await attempt(`http://${hostname}:${port}`), 'connected');
  for (const o of [`http://localhost:${port}`, `http://evil.example:${port}`, `https://${hostname}:${port}`, `http://${hostname}:${Number(port) + 1}`, ''])
    assert.match(await attempt(o), /only from its own page's origin|authentication required/, o);
});
