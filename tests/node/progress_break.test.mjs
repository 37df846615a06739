// progress_break.test.mjs — progress notifications as an attacker meets them: a command's
// output line with terminal escapes, bidi overrides and CR reaches the client's progress
// message as one line of plain text; a session's progress never names another session's
// output; a client that goes away while its POST /mcp answer is a suspended event stream, and
// a server drained (SIGTERM) with such a stream open, end cleanly (run it against the sanitizer
// build: JAILBOXD=build-asan/jailboxd — the log is checked for its reports).
// Needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { realpathSync } from 'node:fs';
import { startSandboxServer } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox-test:progress-break';
const MODERN = '2026-07-28';
let K, srv, U, V;

before(async () => {
  K = await startSandboxServer(IMAGE, { JAILBOX_PROGRESS_INTERVAL_S: '1', JAILBOX_SHUTDOWN_GRACE_MS: '1000' },
    [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep', '/usr/bin/echo', '/usr/bin/printf']);
  srv = K.srv;
  U = await K.openSession(() => {}, { mode: 'unsupervised' });
  V = await K.openSession(() => {}, { mode: 'unsupervised' });
});

after(async () => {
  K?.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// POST /mcp tools/call exec `args` as session `S`'s agent, with a progress token, taking
// text/event-stream: the fetch Response (its body not read yet).
async function execCall(S, id, args, signal) {
  const meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientInfo': { name: 'b', version: '1' },
    'io.modelcontextprotocol/clientCapabilities': {}, progressToken: 'tok-' + id };
  return fetch(srv.url + '/mcp', { method: 'POST', signal,
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'exec', arguments: args, _meta: meta } }),
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: 'Bearer ' + S.agentToken,
      'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'exec' } });
}

// The SSE events of `res` as they come: calls onEvent(message) for each data line; resolves
// with all of them when the stream ends (or rejects when it is cut).
async function readEvents(res, onEvent = () => {}) {
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const dec = new TextDecoder();
  const all = [];
  let buf = '';
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const lines = ev.split('\n');
      assert.equal(lines[0], 'event: message', ev);
      assert.equal(lines.length, 2, 'one data line per event: ' + JSON.stringify(ev));
      assert.ok(lines[1].startsWith('data: '), ev);
      const m = JSON.parse(lines[1].slice(6));
      all.push(m);
      onEvent(m);
    }
  }
  return all;
}

test('a command\'s output line reaches the progress message as plain text; another session\'s output never does', { timeout: 120000 }, async () => {
  // V prints a marker while U's command runs and is watched
  const other = execCall(V, 1, { command: 'i=0; while [ $i -lt 8 ]; do i=$((i+1)); echo OTHER-SESSION-$i; sleep 0.5; done', timeoutSec: 60 })
    .then((r) => readEvents(r));
  const cmd = String.raw`i=0; while [ $i -lt 5 ]; do i=$((i+1)); printf 'a\033]52;c;ZXZpbA==\007b\033[2J\342\200\256c\302\233d\r\n'; sleep 1; done`;
  const events = await readEvents(await execCall(U, 2, { command: cmd, timeoutSec: 60 }));
  await other;
  const progress = events.filter((m) => m.method === 'notifications/progress');
  const result = events.at(-1);
  assert.equal(result.id, 2, JSON.stringify(result));
  assert.equal(result.result.structuredContent.exitCode, 0, JSON.stringify(result));
  assert.ok(progress.length >= 2, JSON.stringify(events));
  for (const p of progress) {
    assert.equal(p.params.progressToken, 'tok-2');
    // nothing a terminal or a bidi renderer acts on: C0, DEL, C1, bidi controls, zero-width marks
    assert.doesNotMatch(p.params.message, /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/, JSON.stringify(p));
    assert.doesNotMatch(p.params.message, /OTHER-SESSION/);
  }
  assert.ok(progress.some((p) => /^running, \d+ s: a\?\]52;c;ZXZpbA==\?b\?\[2J\?c\?d$/.test(p.params.message)), JSON.stringify(progress));
});

test('a client that goes away while its event stream waits: the call ends, the server goes on', { timeout: 120000 }, async () => {
  const ac = new AbortController();
  const res = await execCall(U, 3, { command: 'i=0; while [ $i -lt 4 ]; do i=$((i+1)); echo gone-$i; sleep 1; done', timeoutSec: 60 }, ac.signal);
  let first;
  const got = new Promise((r) => { first = r; });
  const reading = readEvents(res, (m) => { if (m.method === 'notifications/progress') first(m); }).catch((e) => e);
  await got;
  ac.abort(); // the connection closes while the stream is suspended between notifications
  assert.ok(await reading instanceof Error);
  // the command ends meanwhile: its notifications and answer go nowhere
  await new Promise((r) => setTimeout(r, 5000));
  const events = await readEvents(await execCall(U, 4, { command: 'echo again; sleep 2', timeoutSec: 60 }));
  assert.equal(events.at(-1).result.structuredContent.exitCode, 0, JSON.stringify(events.at(-1)));
  assert.match(events.at(-1).result.structuredContent.stdout, /^again\n$/);
});

test('SIGTERM while an event stream is open: the stream ends, the server exits cleanly', { timeout: 120000 }, async () => {
  const res = await execCall(U, 5, { command: 'i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo long-$i; sleep 1; done', timeoutSec: 120 });
  let first;
  const got = new Promise((r) => { first = r; });
  const reading = readEvents(res, (m) => { if (m.method === 'notifications/progress') first(m); }).catch((e) => e);
  await got;
  const log = srv.log();
  const s = srv;
  srv = null;
  K.closeSockets();
  const r = await s.stop();
  await reading; // ended or cut: either way it does not hang
  const all = s.log();
  assert.doesNotMatch(all, /ERROR: (Address|Leak)Sanitizer|runtime error:/, all.slice(log.length - 2000));
  assert.equal(r.code, 0, all.slice(-4000));
});
