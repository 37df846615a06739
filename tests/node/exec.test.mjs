// exec.test.mjs — the agent's exec through the real stack (socket.io-client agent → jailboxd →
// worker → the session's spawner inside gVisor + Docker): the tool's description and argument
// checks (sizes, the env allow-list, the path rules on cwd), an unsupervised echo and a non-zero
// exit as normal results, a supervised exec held for the buyer with argv, cwd, env names (never
// values) and writable — approved, rejected, killed while pending —, the buyer's kill of a
// running `sleep 60` over REST and over the socket (404, 409), jailbox:exec_output reaching the
// buyer in order, the audit entries (hashes and byte counts, never output), and redaction
// (a PEM key on stdout, a cloud key on stderr, a token written in two parts with a sleep
// between, a custom `redact` rule: markers in the result and the live events, the count and
// records, the secrets nowhere in the result, the ops rows or the audit export). The tests that
// need a command to run are skipped when the worker has no spawner (exec is refused:
// `exec_unavailable`). Needs root, Docker with runsc; the image gets /bin/sh, sleep and echo.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, realpathSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dirname } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { JAILBOXD } from './lib/server.mjs';

const IMAGE = 'jailbox-sandbox:exec';
const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');
const sha = (b) => createHash('sha256').update(b).digest('hex');

let K, srv;
let U, agentU, buyerU; // unsupervised
let S, agentS, buyerS; // supervised
let runs = false; // the worker runs commands (it has a spawner)

before(async () => {
  // the built-in rules and one custom redact rule (jailboxd passes the file to its worker)
  const rules = join(mkdtempSync(join(tmpdir(), 'jb-rules-')), 'scan-rules');
  writeFileSync(rules, readFileSync(new URL('../../deploy/scan-rules', import.meta.url), 'utf8') +
    '\ntest_canary  low  redact  CANARY-[0-9]{6}\n');
  K = await startSandboxServer(IMAGE, {
    JAILBOX_APPROVAL_TIMEOUT: '60', JAILBOX_ESCAPE_ABORT: 'none', JAILBOX_EXEC_MAX_TIMEOUT_S: '900',
    JAILBOX_SCAN_RULES: rules, JAILBOX_EXEC_ENV_ALLOW: 'TOKEN,SECRET_TOKEN',
  }, [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep', '/usr/bin/echo', '/usr/bin/cat', '/usr/bin/printf']);
  srv = K.srv;
  U = await K.openSession((d) => writeFileSync(join(d, 'hello.txt'), 'hello\n'), { mode: 'unsupervised' });
  agentU = await K.connect(U.agentToken);
  buyerU = await K.connect(U.buyerToken);
  S = await K.openSession((d) => writeFileSync(join(d, 'a.txt'), 'a\n'), { mode: 'supervised' });
  agentS = await K.connect(S.agentToken);
  buyerS = await K.connect(S.buyerToken);
  await K.waitFor('active', async () => (await K.sessionOf(U.jobId)).state === 'active');
  const r = await K.call(agentU, 'exec', { argv: ['echo', 'probe'] });
  runs = !toolFailure(r);
  if (!runs) console.log('# exec does not run commands on this worker:', JSON.stringify(toolFailure(r)));
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

const invalid = async (agent, args, code, word) => {
  const f = toolFailure(await K.call(agent, 'exec', args));
  assert.ok(f, `exec ${JSON.stringify(args).slice(0, 120)} was accepted`);
  assert.equal(f.code, code, JSON.stringify(f));
  if (word) assert.match(f.message, word);
  return f;
};

test('exec in tools/list, and its arguments checked before anything', async () => {
  const t0 = Date.now();
  const r = await agentU.timeout(10000).emitWithAck('mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const t = r.result.tools.find((x) => x.name === 'exec');
  assert.ok(t);
  assert.equal(t.annotations.destructiveHint, true);
  assert.equal(t.annotations.readOnlyHint, false);
  assert.equal(t.annotations.openWorldHint, false);
  assert.deepEqual(Object.keys(t.inputSchema.properties).sort(), ['argv', 'command', 'cwd', 'env', 'maxOutputBytes', 'memoryMiB', 'stdin', 'timeoutSec', 'writable']);
  for (const k of ['exitCode', 'signal', 'timedOut', 'durationMs', 'stdout', 'stderr', 'stdoutTruncated', 'stderrTruncated', 'redactions'])
    assert.ok(t.outputSchema.anyOf[0].required.includes(k), k);
  await invalid(agentU, {}, -32602, /exactly one/);
  await invalid(agentU, { argv: ['a'], command: 'b' }, -32602, /exactly one/);
  await invalid(agentU, { argv: Array.from({ length: 257 }, () => 'x') }, -32602, /at most 256/);
  await invalid(agentU, { command: 'x'.repeat(128 * 1024 + 1) }, -32016);
  await invalid(agentU, { argv: ['ls'], timeoutSec: 901 }, -32602, /1 to 900/);
  await invalid(agentU, { argv: ['ls'], maxOutputBytes: 8 * 1024 * 1024 + 1 }, -32602);
  for (const name of ['LD_PRELOAD', 'LD_LIBRARY_PATH', 'BASH_ENV', 'PATH', 'NODE_OPTIONS', 'GIT_CONFIG_COUNT', 'GIT_DIR', 'CC']) {
    const f = await invalid(agentU, { argv: ['ls'], env: { [name]: '/workspace/x' } }, -32010, new RegExp(`'${name}' is not allowed`));
    assert.equal(f.data.reason, 'denied');
  }
  await invalid(agentU, { argv: ['ls'], env: { 'A=B': 'x' } }, -32602, /not a variable name/);
  // cwd: the path rules (traversal is an escape signal, audited), excluded paths
  const f = toolFailure(await K.call(agentU, 'exec', { argv: ['ls'], cwd: '../..' }));
  assert.equal(f.data.reason, 'denied');
  assert.ok(Date.now() - t0 < 5000, `checks took ${Date.now() - t0} ms`);
});

test('unsupervised: echo, a non-zero exit, stdin, and the output as text', async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  let r = await K.ok(agentU, 'exec', { argv: ['echo', 'hi', 'there'] });
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hi there\n');
  assert.equal(r.stderr, '');
  assert.equal(r.timedOut, false);
  assert.equal(r.redactions, 0);
  assert.equal(r.stdoutTruncated, false);
  r = await K.ok(agentU, 'exec', { command: 'echo out; echo err >&2; exit 3' });
  assert.equal(r.exitCode, 3); // a normal result, not isError
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');
  r = await K.ok(agentU, 'exec', { argv: ['cat'], stdin: 'from stdin' });
  assert.equal(r.stdout, 'from stdin');
  r = await K.ok(agentU, 'exec', { command: 'printf "a\\377b\\000c"' });
  assert.equal(r.stdout, 'a\uFFFDb\uFFFDc');
  assert.equal(r.invalidUtf8, 2);
  r = await K.ok(agentU, 'exec', { command: 'cat hello.txt; echo x > new.txt', writable: false });
  assert.equal(r.stdout, 'hello\n');
  assert.notEqual(r.exitCode, 0); // the workspace is read-only for it
});

test('exec_output reaches the buyer in order, then the result', async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  const before = buyerU.events.length;
  const r = await K.ok(agentU, 'exec', { command: 'for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done' });
  assert.equal(r.stdout, 'line1\nline2\nline3\nline4\nline5\n');
  await K.waitFor('the last output event', () => buyerU.events.slice(before).filter((e) => e.event === 'jailbox:exec_output').map((e) => e.payload.data).join('').includes('line5'), 5000);
  const evs = buyerU.events.slice(before).filter((e) => e.event === 'jailbox:exec_output').map((e) => e.payload);
  const op = evs[0].opId;
  assert.ok(evs.every((e) => e.opId === op && e.stream === 'stdout'));
  assert.deepEqual(evs.map((e) => e.seq), evs.map((_, i) => i));
  assert.equal(evs.map((e) => e.data).join(''), r.stdout);
  assert.ok(!agentU.events.some((e) => e.event === 'jailbox:exec_output'), 'the agent gets no output events');
  const end = await K.waitEvent(buyerU, 'jailbox:op', (p) => p.opId === op && p.tool === 'exec', 5000);
  assert.equal(end.state, 'done');
  assert.equal(end.result.exitCode, 0);
  assert.equal(end.result.stdoutBytes, r.stdout.length);
  assert.equal(end.outputEvents, evs.length);
  assert.ok(!JSON.stringify(end).includes('line1'), 'no output in the end event');
});

test('supervised: held with argv, cwd, env names, masked values and writable; approved, rejected, killed while pending', async (t) => {
  // without a spawner the contract says so and exec is refused before the buyer is asked
  if (!runs) return t.skip('no spawner on this worker');
  const call = K.call(agentS, 'exec', { argv: ['echo', 'approved'], env: { TOKEN: 'hunter2-secret' }, writable: true });
  const ev = await K.waitEvent(buyerS, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.argv?.[1] === 'approved');
  assert.deepEqual(ev.argv, ['echo', 'approved']);
  assert.equal(ev.cwd, '.');
  assert.deepEqual(ev.envNames, ['TOKEN']);
  assert.equal(ev.writable, true);
  assert.match(ev.description, /run echo approved in \. with the workspace writable; env: TOKEN/);
  assert.deepEqual(ev.env, { TOKEN: '[REDACTED:name]' }); // a secret-looking name: masked
  assert.ok(!JSON.stringify(ev).includes('hunter2'), 'no secret env value in the request');
  const ops = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
  const row = ops.json.ops.find((o) => o.opId === ev.opId);
  assert.deepEqual([row.args.envNames, row.args.env], [['TOKEN'], { TOKEN: '[REDACTED:name]' }]);
  assert.ok(!JSON.stringify(ops.json).includes('hunter2'), 'no env value in GET ops');
  let a = await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${ev.opId}`, { token: S.buyerToken });
  assert.equal(a.status, 200, a.text);
  let r = await call;
  assert.equal(r.result.structuredContent.stdout, 'approved\n');
  // rejected
  const call2 = K.call(agentS, 'exec', { command: 'echo no' });
  const ev2 = await K.waitEvent(buyerS, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === 'echo no');
  assert.deepEqual(ev2.argv, ['/bin/sh', '-c', 'echo no']);
  a = await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${ev2.opId}`, { token: S.buyerToken });
  assert.equal(a.status, 200);
  assert.equal(toolFailure(await call2).data.reason, 'rejected');
  // killed while pending: a rejection, over the socket
  const call3 = K.call(agentS, 'exec', { command: 'echo killed' });
  const ev3 = await K.waitEvent(buyerS, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === 'echo killed');
  const k = await buyerS.timeout(10000).emitWithAck('jailbox:kill', { opId: ev3.opId });
  assert.equal(k.ok, true, JSON.stringify(k));
  assert.equal(k.outcome, 'rejected');
  assert.equal(toolFailure(await call3).data.reason, 'rejected');
  // kill: unknown op, an op that is not an exec, an exec that ended; bad arguments
  let x = await srv.req('POST', `/v1/jailbox/${S.jobId}/ops/999999/kill`, { token: S.buyerToken });
  assert.equal(x.status, 404);
  x = await srv.req('POST', `/v1/jailbox/${S.jobId}/ops/${ev.opId}/kill`, { token: S.buyerToken });
  assert.equal(x.status, 409, x.text);
  x = await srv.req('POST', `/v1/jailbox/${S.jobId}/ops/${ev.opId}/kill`, { token: S.agentToken });
  assert.ok([401, 403].includes(x.status), x.text);
  const bad = await buyerS.timeout(10000).emitWithAck('jailbox:kill', { opId: 'x' });
  assert.equal(bad.error.code, 'bad_request');
  const nf = await buyerS.timeout(10000).emitWithAck('jailbox:kill', { opId: 999999 });
  assert.equal(nf.error.code, 'not_found');
});

test('the buyer kills a running sleep 60 (REST, then the socket)', { timeout: 60000 }, async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  for (const via of ['rest', 'socket']) {
    const t0 = Date.now();
    const call = K.call(agentU, 'exec', { argv: ['sleep', '60'] });
    let opId;
    await K.waitFor('running', async () => {
      const ops = await srv.req('GET', `/v1/jailbox/${U.jobId}/ops?state=running`, { token: U.buyerToken });
      opId = ops.json.ops.find((o) => o.tool === 'exec')?.opId;
      return opId;
    }, 20000);
    if (via === 'rest') {
      const k = await srv.req('POST', `/v1/jailbox/${U.jobId}/ops/${opId}/kill`, { token: U.buyerToken });
      assert.equal(k.status, 200, k.text);
      assert.equal(k.json.outcome, 'killing');
    } else {
      const k = await buyerU.timeout(10000).emitWithAck('jailbox:kill', { opId });
      assert.equal(k.ok, true, JSON.stringify(k));
    }
    const f = toolFailure(await call);
    assert.equal(f.data.reason, 'killed', JSON.stringify(f));
    assert.ok(Date.now() - t0 < 20000, 'killed, not waited out');
    const again = await srv.req('POST', `/v1/jailbox/${U.jobId}/ops/${opId}/kill`, { token: U.buyerToken });
    assert.equal(again.status, 409);
  }
  // the session goes on
  const r = await K.ok(agentU, 'exec', { argv: ['echo', 'after'] });
  assert.equal(r.stdout, 'after\n');
});

// inside gVisor a stopped process group that is orphaned gets SIGHUP whenever a member exits
// (here each `sleep`): the helper keeps the command's group from being orphaned
test('a pause stops a running command, a resume continues it', { timeout: 60000 }, async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  const before = buyerU.events.length;
  const seen = () => buyerU.events.slice(before).filter((e) => e.event === 'jailbox:exec_output').map((e) => e.payload.data).join('');
  // a sleep cut by the pause is restarted by the kernel after the resume (restart_syscall,
  // which Wall 2's profile must allow): one that fails instead ends the command with 7
  const call = K.call(agentU, 'exec', { command: 'i=0; while [ $i -lt 12 ]; do echo tick$i; sleep 0.2 || exit 7; i=$((i+1)); done' });
  await K.waitFor('ticking', () => seen().includes('tick2'), 10000);
  const p = await srv.req('POST', `/v1/jailbox/${U.jobId}/pause`, { token: U.buyerToken });
  assert.equal(p.status, 200, p.text);
  await new Promise((r) => setTimeout(r, 600));
  const n = seen().length;
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal(seen().length, n, 'no output while paused: ' + seen());
  assert.ok(!seen().includes('tick11'));
  const q = await srv.req('POST', `/v1/jailbox/${U.jobId}/resume`, { token: U.buyerToken });
  assert.equal(q.status, 200, q.text);
  const r = await call;
  assert.ok(!toolFailure(r), JSON.stringify(r).slice(0, 300));
  assert.equal(r.result.structuredContent.exitCode, 0, JSON.stringify(r.result.structuredContent));
  assert.equal(r.result.structuredContent.stderr, '', 'a sleep failed across the pause');
  assert.match(r.result.structuredContent.stdout, /tick11\n$/);
});

// The processes of a session's container as gVisor lists them (runsc ps): [{uid, pid, ppid, cmd}].
const RUNSC_ROOT = process.env.JB_RUNSC_ROOT ?? '/var/run/docker/runtime-runc/moby';
function containerProcs(cid) {
  const out = execFileSync('runsc', ['--root', RUNSC_ROOT, 'ps', cid]).toString();
  return out.trim().split('\n').slice(1).map((l) => {
    const f = l.trim().split(/\s+/);
    return { uid: Number(f[0]), pid: Number(f[1]), ppid: Number(f[2]), cmd: f[f.length - 1] };
  });
}

test('the jail built ahead: there while active, killed by a pause, built again on resume', { timeout: 90000 }, async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  const cid = (await K.sessionOf(U.jobId)).walls.walls.docker.containerId;
  // the spawner (pid 1) has two jails as children: the shim's bwrap and the one built ahead,
  // whose helper (uid 65534) waits for the next command
  const jails = () => containerProcs(cid).filter((p) => p.ppid === 1 && p.cmd === 'bwrap').length;
  const show = () => JSON.stringify(containerProcs(cid));
  await K.ok(agentU, 'exec', { argv: ['true'] });
  await K.waitFor('the jail built ahead', () => jails() === 2, 20000);
  const withAhead = containerProcs(cid).length;
  const p = await srv.req('POST', `/v1/jailbox/${U.jobId}/pause`, { token: U.buyerToken });
  assert.equal(p.status, 200, p.text);
  await K.waitFor('the jail ahead killed: ' + show(), () => jails() === 1, 10000);
  const paused = containerProcs(cid);
  // only the spawner and the shim's jail are left: no process of uid 65534 but the shim
  assert.equal(paused.filter((x) => x.uid === 65534).length, 1, JSON.stringify(paused));
  assert.ok(paused.length < withAhead, `${paused.length} processes paused, ${withAhead} before`);
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(jails(), 1, 'nothing built while paused: ' + show());
  const q = await srv.req('POST', `/v1/jailbox/${U.jobId}/resume`, { token: U.buyerToken });
  assert.equal(q.status, 200, q.text);
  await K.waitFor('the jail ahead built again: ' + show(), () => jails() === 2, 20000);
  const r = await K.ok(agentU, 'exec', { command: 'echo done' });
  assert.equal(r.stdout, 'done\n');
});

test('jailboxctl: watch shows an exec approval request and its output as safe text; kill kills it', { timeout: 60000 }, async () => {
  const env = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: 'ws://' + K.wsAddr, JAILBOX_TOKEN: S.buyerToken };
  const w = spawn(CTL, ['watch', S.jobId], { env });
  let out = '';
  w.stdout.on('data', (d) => { out += d; });
  try {
    await K.waitFor('watch connected', () => out.includes('state active') || out.includes('state awaiting_agent'), 20000);
    const call = K.call(agentS, 'exec', { argv: ['echo', '\x1b[2Jx'], env: { SECRET_TOKEN: 'hunter3' }, cwd: '.', stdin: 'first line\n\x1b[31mred\n' });
    await K.waitFor('the request shown', () => out.includes('APPROVAL REQUESTED') && out.includes('workspace: read-only'), 20000);
    assert.match(out, /APPROVAL REQUESTED op #\d+: exec\n {4}argv: \[echo\] \[\?\[2Jx\]\n {4}cwd: \.\n {4}env: SECRET_TOKEN=\[\[REDACTED:name\]\]\n {4}workspace: read-only, timeout 120 s/);
    assert.ok(!out.includes('hunter3') && !out.includes('\x1b'), out);
    // what it is fed on stdin, as safe text
    assert.match(out, /    stdin: 20 bytes \(sha256 [0-9a-f]{16}…\):\n      \| first line\n      \| \?\[31mred\n/);
    const opId = Number(out.match(/APPROVAL REQUESTED op #(\d+): exec/)[1]);
    const a = await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${opId}`, { token: S.buyerToken });
    assert.equal(a.status, 200);
    const r = await call;
    if (runs) {
      assert.equal(r.result.structuredContent.stdout, '\x1b[2Jx\n'); // the agent gets the bytes
      await K.waitFor('the output shown', () => out.includes(`op #${opId} stdout| ?[2Jx`), 10000);
    }
    // kill through jailboxctl: a pending exec is rejected
    const call2 = K.call(agentS, 'exec', { command: 'echo never' });
    const ev = await K.waitEvent(buyerS, 'jailbox:approval_request', (p) => p.command === 'echo never');
    const k = await new Promise((res) => {
      const c = spawn(CTL, ['kill', S.jobId, String(ev.opId)], { env });
      let so = '';
      c.stdout.on('data', (d) => { so += d; });
      c.on('close', (code) => res({ code, so }));
    });
    assert.equal(k.code, 0, k.so);
    assert.match(k.so, new RegExp(`op #${ev.opId}: rejected before it ran`));
    assert.equal(toolFailure(await call2).data.reason, 'rejected');
  } finally {
    w.kill();
  }
});

test('jailboxctl watch: a line cut across two output events is printed whole, a last line without newline when the op ends', { timeout: 60000 }, async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  const env = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: 'ws://' + K.wsAddr, JAILBOX_TOKEN: U.buyerToken };
  const w = spawn(CTL, ['watch', U.jobId], { env });
  let out = '';
  w.stdout.on('data', (d) => { out += d; });
  try {
    await K.waitFor('watch connected', () => /state (active|awaiting_agent)/.test(out), 20000);
    // the sleeps put each part in an event of its own (events are at most one per 50 ms)
    const parts = [];
    const seen = (p) => { if (p.jobId === U.jobId) parts.push(p); };
    buyerU.on('jailbox:exec_output', seen);
    const r = await K.call(agentU, 'exec', {
      command: "printf 'checking for a... '; sleep 0.4; echo yes; echo whole; printf 'no '; sleep 0.4; printf 'newline at the end'" });
    buyerU.off('jailbox:exec_output', seen);
    assert.ok(!toolFailure(r), JSON.stringify(r).slice(0, 300));
    assert.equal(r.result.structuredContent.stdout, 'checking for a... yes\nwhole\nno newline at the end');
    const opId = parts[0]?.opId;
    assert.ok(parts.length >= 3, 'the output came in several events: ' + JSON.stringify(parts));
    assert.equal(parts[0].data, 'checking for a... ', 'the first event ends mid-line');
    await K.waitFor('the op shown as ended', () => new RegExp(`op #${opId} exec .*: done — exit 0`).test(out), 10000);
    const lines = out.split('\n').filter((l) => l.includes(`op #${opId} `));
    const text = lines.map((l) => l.replace(/^\d\d:\d\d:\d\d\.\d{3} /, ''));
    assert.deepEqual(text.filter((l) => l.includes('stdout|')), [
      `op #${opId} stdout| checking for a... yes`,
      `op #${opId} stdout| whole`,
      `op #${opId} stdout| no newline at the end`,
    ], out);
    // the unfinished last line comes before the op's end
    assert.ok(text.findIndex((l) => l.includes('newline at the end')) < text.findIndex((l) => / exec .*: done/.test(l)), out);
  } finally {
    w.kill();
  }
});

test('audit entries: what ran and how it ended, hashes and byte counts, never the output', async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  const ex = await srv.req('GET', `/v1/jailbox/${U.jobId}/audit`, { token: srv.serviceToken });
  assert.equal(ex.status, 200);
  const rows = ex.text.trim().split('\n').map((l) => JSON.parse(l)).filter((x) => x.operation === 'exec');
  const e = rows.find((x) => x.details.argv?.[1] === 'hi');
  assert.ok(e, JSON.stringify(rows.slice(0, 3)));
  const d = e.details;
  assert.deepEqual(d.argv, ['echo', 'hi', 'there']);
  assert.equal(d.cwd, '.');
  assert.equal(d.writable, false);
  // the image the session runs in, as its open recorded it
  const img = (await K.sessionOf(U.jobId)).image;
  assert.ok(img, 'the session names its image');
  assert.equal(d.image, img);
  assert.equal(d.decision, 'auto');
  assert.equal(d.exitCode, 0);
  assert.equal(d.timedOut, false);
  assert.equal(d.stdoutSha256, sha('hi there\n'));
  assert.equal(d.stderrSha256, sha(''));
  assert.deepEqual(d.bytes, { stdout: 9, stderr: 0 });
  assert.deepEqual(d.truncated, { stdout: false, stderr: false });
  assert.equal(d.redactions, 0);
  assert.deepEqual(d.changes, []);
  assert.equal(d.ok, true);
  assert.ok(rows.some((x) => x.details.error === 'killed'));
  assert.ok(!ex.text.includes('from stdin') && !ex.text.includes('line3'), 'no output in the chain');
  // the stored result keeps at most the first 4 KiB of each stream once delivered
  const big = await K.ok(agentU, 'exec', { command: 'i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done' });
  assert.equal(big.stdout.length, 22000);
  const ops = await srv.req('GET', `/v1/jailbox/${U.jobId}/ops?state=done&limit=500`, { token: U.buyerToken });
  const stored = ops.json.ops.filter((o) => o.tool === 'exec').pop();
  assert.ok(stored.result.result.stdout.length <= 4096);
  assert.equal(stored.result.result.stdoutBytes, 22000);
});

// Secrets are put together by the shell, so that the command text (stored as the op's args and
// in the audit entry's argv) does not hold them; the output does.
const PEM_BODY = 'MIIEowIBAAKCAQEA2a2rwplBQLzHPZe5TNJNm9kHlGnqAkZk';
const AWS_KEY = 'AKIAIOSFODNN7EXAMPLE';
const GH_TOKEN = 'ghp_0123456789abcdefghijklmnopqrstuvwxyz';
const CANARY = 'CANARY-424242';

test('redaction: secrets on stdout, stderr, split across two writes, a custom rule', { timeout: 60000 }, async (t) => {
  if (!runs) return t.skip('no spawner on this worker');
  const before = buyerU.events.length;
  const raw = await K.call(agentU, 'exec', {
    command: 'B=MIIEowIBAAKCAQEA; P=PRIVATE; A=AKIA; C=CANARY; G=ghp_0123456789; ' +
      'echo "err ${A}IOSFODNN7EXAMPLE" >&2; sleep 0.2; ' +
      'printf "%s\\n" "one" "-----BEGIN RSA $P KEY-----" "${B}2a2rwplBQLzHPZe5TNJNm9kHlGnqAkZk" "-----END RSA $P KEY-----" "two $C-424242 three"; ' +
      'sleep 0.2; printf "token ${G}abcdefghij"; sleep 0.4; printf "klmnopqrstuvwxyz done\\n"',
  });
  const r = raw.result?.structuredContent;
  assert.ok(r && !raw.result.isError, JSON.stringify(raw).slice(0, 300));
  assert.equal(r.stdout, 'one\n[REDACTED:private_key_block]\ntwo [REDACTED:test_canary] three\n' +
    'token [REDACTED:github_token] done\n');
  assert.equal(r.stderr, 'err [REDACTED:aws_access_key_id]\n');
  assert.equal(r.redactions, 4);
  const pemAt = 'one\n'.length, canaryAt = pemAt + '-----BEGIN RSA PRIVATE KEY-----\n'.length + PEM_BODY.length + 1 + '-----END RSA PRIVATE KEY-----\n'.length + 'two '.length;
  const tokenAt = canaryAt + CANARY.length + ' three\n'.length + 'token '.length;
  assert.deepEqual(r.redacted, [
    { rule: 'private_key_block', stream: 'stdout', offset: pemAt },
    { rule: 'test_canary', stream: 'stdout', offset: canaryAt },
    { rule: 'github_token', stream: 'stdout', offset: tokenAt },
    { rule: 'aws_access_key_id', stream: 'stderr', offset: 4 },
  ]);
  // the live events: the same redacted text; the token's first write goes out without the
  // part that may begin a secret, which waits for the second write
  await K.waitFor('the last output event', () => buyerU.events.slice(before).filter((e) => e.event === 'jailbox:exec_output').map((e) => e.payload.data).join('').includes('done'), 5000);
  const evs = buyerU.events.slice(before).filter((e) => e.event === 'jailbox:exec_output').map((e) => e.payload);
  const op = evs[0].opId;
  assert.equal(evs.filter((e) => e.stream === 'stdout').map((e) => e.data).join(''), r.stdout);
  assert.equal(evs.filter((e) => e.stream === 'stderr').map((e) => e.data).join(''), r.stderr);
  assert.ok(evs.some((e) => e.data === 'token '), `no event held the token back: ${JSON.stringify(evs)}`);
  assert.ok(evs.some((e) => e.data.startsWith('[REDACTED:github_token] done')), JSON.stringify(evs));
  const end = await K.waitEvent(buyerU, 'jailbox:op', (p) => p.opId === op && p.tool === 'exec', 5000);
  assert.equal(end.result.redactions, 4);
  // nowhere: the agent's answer, the live events, the op's row, the audit export
  const secrets = [PEM_BODY, AWS_KEY, GH_TOKEN, 'abcdefghijklmnopqrstuvwxyz', CANARY];
  const rows = await srv.db.query('SELECT row_to_json(o)::text AS j FROM ops o WHERE op_id = $1', [op]);
  assert.equal(rows.rows.length, 1);
  const ex = await srv.req('GET', `/v1/jailbox/${U.jobId}/audit`, { token: srv.serviceToken });
  assert.equal(ex.status, 200);
  const entry = ex.text.trim().split('\n').map((l) => JSON.parse(l)).find((x) => x.operation === 'exec' && x.details.redactions === 4);
  assert.ok(entry, 'the audit entry of the exec');
  assert.deepEqual(entry.details.redacted, r.redacted);
  for (const [where, text] of [['result', JSON.stringify(raw)], ['events', JSON.stringify(evs)],
    ['ops row', rows.rows[0].j], ['audit export', ex.text], ['server log', srv.log()]]) {
    for (const sec of secrets) assert.ok(!text.includes(sec), `${sec} in the ${where}`);
  }
});
