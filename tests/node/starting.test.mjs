// starting.test.mjs — an agent that calls at once: tool calls made 0 ms after POST /v1/jailbox
// returns, while the session is still created or prescanning, wait for it to become active and
// are answered then (a read and a write; unsupervised over socket.io-client, supervised through
// the official MCP SDK client over Streamable HTTP with its default settings); a call waiting on
// a session whose launch fails is refused, naming the session's state and why. Needs root,
// Docker with runsc (as fileops.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './lib/jail.mjs';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { connectClient } from './lib/mcp.mjs';

const IMAGE = 'jailbox-sandbox:starting';
// a sandbox image whose shim exits at once: its launch fails a moment after the open
const BROKEN = 'jailbox-sandbox:broken' + (process.env.JB_IMAGE_SUFFIX ?? '');

let K;

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'jb-starting-'));
  writeFileSync(join(dir, 'exit.c'), 'int main(void) { return 3; }\n');
  execFileSync('gcc', ['-static', '-O2', '-o', join(dir, 'exit'), join(dir, 'exit.c')]);
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'), ['--shim', join(dir, 'exit'), '--tag', BROKEN], { stdio: 'inherit' });
  K = await startSandboxServer(IMAGE, { JAILBOX_SANDBOX_IMAGES: BROKEN });
});

after(async () => {
  if (K) K.closeSockets();
  if (K?.srv) {
    const log = K.srv.log();
    await K.srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// A workspace with a.txt, and the session opened on it (the answer of POST /v1/jailbox).
async function openNow(extra) {
  const name = 'ws-' + Math.random().toString(36).slice(2);
  const dir = join(K.srv.wsroot, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'a.txt'), 'hello\n');
  await K.srv.req('GET', '/healthz'); // a kept-alive connection closed meanwhile is found here
  return { ...(await K.srv.open({ workspace: name, ...extra })), dir };
}

test('unsupervised: a read and a write sent at once are answered once the session is active', { timeout: 120000 }, async () => {
  const S = await openNow({ mode: 'unsupervised' });
  const agent = await K.connect(S.agentToken);
  const read = K.call(agent, 'read', { path: 'a.txt' }, 90000);
  const write = K.call(agent, 'write', { path: 'new.txt', content: 'early\n' }, 90000);
  const list = K.call(agent, 'list', {}, 90000);
  const seen = (await K.sessionOf(S.jobId)).state; // while the calls wait
  assert.ok(['created', 'prescanning', 'awaiting_agent'].includes(seen), seen);
  const [r, w, l] = await Promise.all([read, write, list]);
  for (const x of [r, w, l]) assert.equal(toolFailure(x), undefined, JSON.stringify(x));
  assert.equal(r.result.structuredContent.content, 'hello\n');
  assert.equal(w.result.structuredContent.written, 6);
  assert.ok(l.result.structuredContent.entries.some((e) => e.name === 'a.txt'));
  assert.equal(readFileSync(join(S.dir, 'new.txt'), 'utf8'), 'early\n');
  assert.equal((await K.sessionOf(S.jobId)).state, 'active'); // the agent's arrival happened
});

test('supervised, MCP SDK client over HTTP: a read and a write at once wait, then run', { timeout: 120000 }, async () => {
  const S = await openNow({ mode: 'supervised' });
  const buyer = await K.connect(S.buyerToken);
  const client = await connectClient('http', K, S); // default settings (60 s request timeout)
  const read = client.callTool({ name: 'read', arguments: { path: 'a.txt' } });
  const write = client.callTool({ name: 'write', arguments: { path: 'b.txt', content: 'approved\n' } });
  const seen = (await K.sessionOf(S.jobId)).state;
  assert.ok(['created', 'prescanning', 'awaiting_agent'].includes(seen), seen);
  const r = await read;
  assert.ok(!r.isError, JSON.stringify(r));
  assert.equal(r.structuredContent.content, 'hello\n');
  const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'b.txt', 60000);
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.ok(!ack?.error, JSON.stringify(ack));
  const w = await write;
  assert.ok(!w.isError, JSON.stringify(w));
  assert.equal(readFileSync(join(S.dir, 'b.txt'), 'utf8'), 'approved\n');
  await client.close();
});

// The failure of an SDK client's tools/call: a JSON-RPC error (thrown) or an isError result.
async function sdkFailure(p) {
  try {
    const r = await p;
    return r.isError ? { message: r.content?.[0]?.text, data: r.structuredContent?.error ?? {} } : undefined;
  } catch (e) {
    return { code: e.code, message: e.message, data: e.data ?? {} };
  }
}

test('a session whose launch fails answers the waiting call with a refusal naming why', { timeout: 120000 }, async () => {
  const S = await openNow({ mode: 'unsupervised', image: BROKEN });
  const client = await connectClient('http', K, S);
  const pending = sdkFailure(client.callTool({ name: 'read', arguments: { path: 'a.txt' } }));
  const seen = (await K.sessionOf(S.jobId)).state;
  assert.ok(['created', 'prescanning'].includes(seen), seen); // the call waits
  const f = await pending;
  assert.ok(f, 'the read of a failed session was answered');
  assert.equal(f.data.reason, 'denied', JSON.stringify(f));
  assert.equal(f.data.state, 'failed', JSON.stringify(f));
  assert.match(f.message, /^the session is failed \(.+\): no file operations now$/, f.message);
  assert.equal(f.message, `the session is failed (${(await K.sessionOf(S.jobId)).stateReason}): no file operations now`);
  await client.close();
});

test('a session that ends while a call waits for it answers that call at once, naming why', { timeout: 120000 }, async () => {
  const S = await openNow({ mode: 'unsupervised' });
  const client = await connectClient('http', K, S);
  const t0 = Date.now();
  const pending = sdkFailure(client.callTool({ name: 'write', arguments: { path: 'c.txt', content: 'x' } }));
  await new Promise((r) => setTimeout(r, 200)); // the call is in, waiting
  const seen = (await K.sessionOf(S.jobId)).state;
  assert.ok(['created', 'prescanning'].includes(seen), seen);
  const ab = await K.srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: S.buyerToken, body: { reason: 'changed my mind' } });
  assert.equal(ab.status, 200, ab.text);
  const f = await pending;
  assert.ok(f, 'the write of an aborted session was answered');
  assert.ok(Date.now() - t0 < 5000, 'answered at the abort, not at a timeout');
  assert.equal(f.data.reason, 'denied', JSON.stringify(f));
  assert.equal(f.data.state, 'aborted', JSON.stringify(f));
  assert.match(f.message, /the session is aborted \(changed my mind\)/, f.message);
  await client.close();
});
