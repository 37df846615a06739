// tools_offer.test.mjs — tools/list per session: `exec` is offered only where the session
// contract says its sandbox can run commands (walls.exec.available), the list's 2026-07-28 cache
// hint is per session (cacheScope "private"; ttlMs 0 while the contract is not written yet),
// older revisions get neither field, and an exec call on a session that cannot run commands is
// refused up front with a JSON-RPC error (no approval asked, nothing launched) — over the three
// transports with the official SDK client's default settings (Streamable HTTP on POST /mcp,
// stdio through `jailboxctl mcp-bridge`, the Socket.IO `mcp` event). Every image this host
// builds has a spawner, so the session without one has its contract say so in its row (as a
// worker writes it when the image's launcher has no spawner) before its agent connects; the
// other session's contract is the worker's own. A session on the minimal image (no /bin/sh)
// has its worker write exec unavailable itself, from what the spawner found in the image.
// Needs root, dockerd + runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { TRANSPORTS, connectClient } from './lib/mcp.mjs';
import { ROOT } from './lib/jail.mjs';
import { JAILBOXD } from './lib/server.mjs';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
const NO_SPAWNER = "the image's launcher has no spawner (rebuild it: deploy/sandbox-image/build.sh)";
const NO_SHELL = 'the image has no /bin/sh: no command can run';
const MINIMAL = 'jailbox-sandbox:tools-offer-minimal' + (process.env.JB_IMAGE_SUFFIX ?? ''); // no extras: no /bin/sh
let K, srv;
let X, N; // a session whose sandbox runs commands; one whose contract says it cannot (supervised)
let M; // a session on the minimal image (unsupervised)

before(async () => {
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
    ['--shim', join(dirname(JAILBOXD), 'jailbox-shim'), '--tag', MINIMAL], { stdio: 'inherit' });
  K = await startSandboxServer('jailbox-sandbox:tools-offer', { JAILBOX_APPROVAL_TIMEOUT: '60', JAILBOX_SANDBOX_IMAGES: MINIMAL },
    [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/echo']);
  srv = K.srv;
  const build = (d) => writeFileSync(join(d, 'a.txt'), 'a\n');
  [X, N, M] = await Promise.all([K.openSession(build, { mode: 'unsupervised' }), K.openSession(build, { mode: 'supervised' }),
    K.openSession(build, { mode: 'unsupervised', image: MINIMAL })]);
  await srv.db.query(`UPDATE sessions SET walls = jsonb_set(walls, '{exec}', jsonb_build_object('available', false, 'reason', $2::text))
    WHERE job_id = $1`, [N.jobId, NO_SPAWNER]);
});

after(async () => {
  K?.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// one JSON-RPC request POSTed to /mcp with the agent's token; `version`: the MCP-Protocol-Version
// header (2026-07-28: _meta and the routing headers too)
async function post(token, id, method, params = {}, version = MODERN) {
  const h = { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
    authorization: 'Bearer ' + token, 'mcp-protocol-version': version };
  if (version === MODERN) {
    h['mcp-method'] = method;
    if (params.name) h['mcp-name'] = params.name;
    params = { ...params, _meta: META };
  }
  const r = await fetch(srv.url + '/mcp', { method: 'POST', headers: h, body: JSON.stringify({ jsonrpc: '2.0', id, method, params }) });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return JSON.parse(text);
}
const names = (tools) => tools.map((t) => t.name).sort();

test('the contract decides: the worker wrote exec available for one session, the other says it cannot run commands', async () => {
  assert.equal((await K.sessionOf(X.jobId)).walls.exec.available, true);
  const n = (await K.sessionOf(N.jobId)).walls.exec;
  assert.deepEqual([n.available, n.reason], [false, NO_SPAWNER]);
});

test('the image decides too: with /bin/sh exec is available, on the minimal image (no shell) the worker writes it unavailable', async () => {
  const x = (await K.sessionOf(X.jobId)).walls.exec;
  assert.deepEqual([x.image?.shell, x.image?.programs], [true, ['sh']], JSON.stringify(x.image));
  const m = (await K.sessionOf(M.jobId)).walls.exec;
  assert.deepEqual([m.available, m.reason, m.image?.shell, m.image?.programs], [false, NO_SHELL, false, []], JSON.stringify(m).slice(0, 600));
  assert.equal(m.spawner, undefined, 'a spawner named where its channel was closed');
  assert.ok(m.jail.imageBinds.includes('/usr'), 'the binds the spawner reported');
  // tools/list: no exec for the minimal-image session, over the SDK client (bridge) and POST /mcp
  const client = await connectClient('stdio', K, M, 'jailbox-tools-offer');
  try {
    const listed = names((await client.listTools()).tools);
    assert.ok(!listed.includes('exec') && listed.includes('read'), String(listed));
    await assert.rejects(client.callTool({ name: 'exec', arguments: { command: 'echo hi' } }),
      (e) => e.code === -32602 && e.message.includes(NO_SHELL), 'exec on the minimal image');
  } finally {
    await client.close();
  }
  const r = (await post(M.agentToken, 1, 'tools/list')).result;
  assert.deepEqual([r.cacheScope, names(r.tools).includes('exec')], ['private', false]);
  const e = await post(M.agentToken, 2, 'tools/call', { name: 'exec', arguments: { argv: ['/usr/bin/setpriv', '--help'] } });
  assert.deepEqual([e.error?.code, e.error?.data?.reason], [-32602, 'exec_unavailable'], JSON.stringify(e));
  assert.match(e.error.message, /cannot run commands \(the image has no \/bin\/sh: no command can run\)/);
  const ops = await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool = 'exec'", [M.jobId]);
  assert.equal(ops.rows[0].n, 0, 'an exec op was stored');
  // the file tools of that session work
  const agent = await K.connect(M.agentToken);
  assert.ok(!toolFailure(await K.call(agent, 'read', { path: 'a.txt' })));
});

for (const kind of TRANSPORTS) {
  test(`tools/list over ${kind} (SDK client, default settings): exec only for the session that can run commands`, async () => {
    for (const [S, hasExec] of [[N, false], [X, true]]) {
      const client = await connectClient(kind, K, S, 'jailbox-tools-offer');
      try {
        const listed = names((await client.listTools()).tools);
        assert.equal(listed.includes('exec'), hasExec, `${S === N ? 'no-exec' : 'exec'} session: ${listed}`);
        assert.deepEqual(listed.filter((t) => t !== 'exec'),
          ['commit_changeset', 'delete', 'done', 'edit', 'find', 'list', 'mkdir', 'move', 'read', 'read_many', 'search', 'stat', 'write']);
      } finally {
        await client.close();
      }
    }
  });
}

test('the cache hint: cacheScope private for a session\'s list (2026-07-28), no hint for 2025-03-26; server/discover stays public', async () => {
  for (const [S, hasExec] of [[N, false], [X, true]]) {
    const r = (await post(S.agentToken, 1, 'tools/list')).result;
    assert.deepEqual([r.cacheScope, r.ttlMs, names(r.tools).includes('exec')], ['private', 300000, hasExec], JSON.stringify(r).slice(0, 300));
    const old = (await post(S.agentToken, 2, 'tools/list', {}, '2025-03-26')).result;
    assert.equal(names(old.tools).includes('exec'), hasExec);
    assert.deepEqual(Object.keys(old), ['tools'], 'a 2025-03-26 list carries only its tools');
  }
  const d = (await post(X.agentToken, 3, 'server/discover')).result;
  assert.deepEqual([d.cacheScope, d.ttlMs], ['public', 300000]);
});

test('a session still being launched: exec listed (not known yet), stale at once (ttlMs 0), private', async () => {
  const S = await srv.open({ mode: 'unsupervised' }); // not waited for: its sandbox is being launched
  const contract = async () => (await srv.db.query("SELECT walls->'exec' AS x FROM sessions WHERE job_id = $1", [S.jobId])).rows[0].x;
  const before = await contract();
  const r = (await post(S.agentToken, 1, 'tools/list')).result;
  const after = await contract();
  assert.equal(r.cacheScope, 'private');
  assert.ok(names(r.tools).includes('exec'));
  if (!before && !after) assert.equal(r.ttlMs, 0, 'no contract yet: stale at once');
  else console.log('# the contract was written before the list was answered; ttlMs', r.ttlMs);
});

test('exec on the session that cannot run commands: refused up front on every transport, no approval asked, nothing launched, audited', async () => {
  const buyer = await K.connect(N.buyerToken);
  // the Socket.IO mcp event: a JSON-RPC error naming why, at once (not a pending approval)
  const agent = await K.connect(N.agentToken);
  const r = await K.call(agent, 'exec', { command: 'echo hi' }, 15000);
  assert.equal(r.error?.code, -32602, JSON.stringify(r));
  assert.equal(r.error.data?.reason, 'exec_unavailable');
  assert.match(r.error.message, /this session offers no tool 'exec': its sandbox cannot run commands \(the image's launcher has no spawner/);
  // the SDK client over Streamable HTTP and over the bridge: the same protocol error
  for (const kind of ['http', 'stdio']) {
    const client = await connectClient(kind, K, N, 'jailbox-tools-offer');
    try {
      await assert.rejects(client.callTool({ name: 'exec', arguments: { argv: ['echo', 'hi'] } }),
        (e) => e.code === -32602 && /cannot run commands/.test(e.message), kind);
    } finally {
      await client.close();
    }
  }
  // a 2026-07-28 request too
  const m = await post(N.agentToken, 9, 'tools/call', { name: 'exec', arguments: { argv: ['echo'] } });
  assert.deepEqual([m.error?.code, m.error?.data?.reason], [-32602, 'exec_unavailable'], JSON.stringify(m));
  assert.equal(buyer.events.filter((e) => e.event === 'jailbox:approval_request').length, 0, 'the buyer was asked');
  const ops = await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool = 'exec'", [N.jobId]);
  assert.equal(ops.rows[0].n, 0, 'an exec op was stored');
  const audit = await srv.db.query("SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = $1 AND operation = 'exec'", [N.jobId]);
  assert.equal(audit.rows.length, 4);
  for (const { d } of audit.rows) assert.deepEqual([d.ok, d.error, d.why], [false, 'unavailable', NO_SPAWNER]);
  // the file tools of that session work as ever; the other session runs its command
  assert.ok(!toolFailure(await K.call(agent, 'read', { path: 'a.txt' })));
  const ax = await K.connect(X.agentToken);
  const x = await K.call(ax, 'exec', { argv: ['echo', 'ran'] });
  assert.equal(x.result?.structuredContent?.stdout, 'ran\n', JSON.stringify(x).slice(0, 400));
});
