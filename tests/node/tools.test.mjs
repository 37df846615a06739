// tools.test.mjs — the agent's whole toolset through the real stack (socket.io-client agent →
// jailboxd → worker → jailbox-shim inside gVisor + Docker + bwrap): read's line modes and byte
// ranges, read_many, edit (applied in jailboxd, written bound to the hash of what was read),
// list depth, find, search, stat, mkdir, move, delete; supervised approve/reject of every
// mutating tool with the diff or the description the buyer is shown, `changed` when the
// target moved on between request and approval; the path-escape classes against the new
// tools; and the disk, GET …/changes and the offline-verified audit chain agreeing.
// Needs root, Docker with runsc (as fileops.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync, linkSync, mkdtempSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';
import { JAILBOXD } from './lib/server.mjs';

const IMAGE = 'jailbox-sandbox:tools';
const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');
const sha = (b) => createHash('sha256').update(b).digest('hex');

let K, srv, outside;
let U, agentU; // unsupervised
let S, agentS, buyerS; // supervised

before(async () => {
  // /bin/sh: exec is offered (and listed) only on an image with a shell
  K = await startSandboxServer(IMAGE, { JAILBOX_APPROVAL_TIMEOUT: '60', JAILBOX_ESCAPE_ABORT: 'none' }, [`${realpathSync('/bin/sh')}:/bin/sh`]);
  srv = K.srv;
  outside = join(srv.dir, 'outside-tools');
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'outside secret\n');
  U = await K.openSession((d) => {
    mkdirSync(join(d, 'src/deep'), { recursive: true });
    writeFileSync(join(d, 'src/a.c'), 'int add(int a, int b) {\n  return a + b;\n}\n');
    writeFileSync(join(d, 'src/b.c'), '#include "a.h"\nint twice(int x) { return add(x, x); }\n');
    writeFileSync(join(d, 'src/deep/c.h'), 'int add(int a, int b);\n');
    writeFileSync(join(d, 'lines.txt'), Array.from({ length: 10 }, (_, i) => `line ${i}`).join('\n') + '\n');
    writeFileSync(join(d, 'dup.txt'), 'x = 1\nx = 1\nx = 1\n');
    writeFileSync(join(d, 'bin.dat'), Buffer.from([0, 1, 2, 255]));
    mkdirSync(join(d, 'secrets'));
    writeFileSync(join(d, 'secrets/key.txt'), 'excluded\n');
    mkdirSync(join(d, 'old/inner'), { recursive: true });
    writeFileSync(join(d, 'old/inner/f1'), '1\n');
    writeFileSync(join(d, 'old/f2'), '2\n');
    symlinkSync(outside, join(d, 'lnk-out'));
    symlinkSync('src', join(d, 'lnk-src'));
    symlinkSync('missing-dir', join(d, 'dangling'));
    linkSync(join(outside, 'secret.txt'), join(d, 'hardlink'));
  }, { mode: 'unsupervised', exclude: ['secrets'] });
  agentU = await K.connect(U.agentToken);
  S = await K.openSession((d) => {
    writeFileSync(join(d, 'main.c'), 'int main(void) {\n  return 1;\n}\n');
    writeFileSync(join(d, 'keep.c'), 'keep\n');
    writeFileSync(join(d, 'race.c'), 'version 1\n');
    writeFileSync(join(d, 'gone.txt'), 'bye\n');
    mkdirSync(join(d, 'olddir/sub'), { recursive: true });
    writeFileSync(join(d, 'olddir/sub/x'), 'x\n');
  }, { mode: 'supervised' });
  agentS = await K.connect(S.agentToken);
  buyerS = await K.connect(S.buyerToken);
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// A tool-execution failure: a result with isError (MCP) or, before the MCP layer makes it one,
// a JSON-RPC error with data.reason. Returns {reason, message}.
async function failed(agent, name, args, reason) {
  const r = await K.call(agent, name, args);
  let got;
  if (r.error) got = { reason: r.error.data?.reason, message: r.error.message, code: r.error.code };
  else if (r.result?.isError) got = { reason: r.result.structuredContent?.error?.reason, message: r.result.content?.[0]?.text, code: r.result.structuredContent?.error?.code };
  else assert.fail(`${name} ${JSON.stringify(args).slice(0, 200)} did not fail: ${JSON.stringify(r).slice(0, 300)}`);
  if (reason) assert.equal(got.reason, reason, `${name} ${JSON.stringify(args).slice(0, 200)}: ${JSON.stringify(got)}`);
  return got;
}
const invalid = async (agent, name, args, word) => {
  const r = await K.call(agent, name, args);
  assert.equal(r.error?.code, -32602, `${name} ${JSON.stringify(args).slice(0, 120)}: ${JSON.stringify(r).slice(0, 300)}`);
  if (word) assert.match(r.error.message, word);
};
const full = (agent, name, args) => K.call(agent, name, args).then((r) => {
  assert.ok(r.result && !r.result.isError, `${name} ${JSON.stringify(args).slice(0, 200)}: ${JSON.stringify(r).slice(0, 400)}`);
  return r.result;
});

test('tools/list: every tool with input and output schemas and annotations', async () => {
  await K.waitFor('active', async () => (await K.sessionOf(U.jobId)).state === 'active');
  const r = await agentU.timeout(10000).emitWithAck('mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const tools = Object.fromEntries(r.result.tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(tools).sort(), ['commit_changeset', 'delete', 'done', 'edit', 'exec', 'find', 'list', 'mkdir', 'move', 'read', 'read_many', 'search', 'stat', 'write']);
  for (const t of Object.values(tools)) {
    assert.equal(t.inputSchema.type, 'object');
    assert.equal(t.outputSchema.type, 'object');
    assert.equal(t.annotations.openWorldHint, false);
  }
  for (const n of ['read', 'read_many', 'list', 'find', 'search', 'stat']) assert.equal(tools[n].annotations.readOnlyHint, true, n);
  for (const n of ['write', 'edit', 'move', 'delete']) assert.equal(tools[n].annotations.destructiveHint, true, n);
  assert.equal(tools.edit.inputSchema.properties.edits.maxItems, 100);
  assert.equal(tools.read_many.inputSchema.properties.paths.maxItems, 50);
});

test('read: line modes and byte ranges; read_many: each path on its own', async () => {
  let r = await K.ok(agentU, 'read', { path: 'lines.txt', offset: 2, limit: 3 });
  assert.equal(r.content, 'line 2\nline 3\nline 4\n');
  assert.deepEqual([r.lines.first, r.lines.count], [2, 3]);
  r = await K.ok(agentU, 'read', { path: 'lines.txt', head: 2 });
  assert.equal(r.content, 'line 0\nline 1\n');
  r = await K.ok(agentU, 'read', { path: 'lines.txt', tail: 1 });
  assert.equal(r.content, 'line 9\n');
  r = await K.ok(agentU, 'read', { path: 'lines.txt', byteOffset: 5, byteLength: 3 });
  assert.equal(r.content, '0\nl');
  await invalid(agentU, 'read', { path: 'lines.txt', head: 1, tail: 1 }, /at most one/);
  await invalid(agentU, 'read', { path: 'lines.txt', offset: -1 });
  await invalid(agentU, 'read', { path: 'lines.txt', length: 3 }, /unknown argument/);
  const m = await K.ok(agentU, 'read_many', { paths: ['src/a.c', 'nope.txt', 'secrets/key.txt', 'lnk-out/secret.txt', '../x', 'bin.dat'] });
  assert.equal(m.files.length, 6);
  assert.deepEqual(m.files.map((f) => f.path), ['src/a.c', 'nope.txt', 'secrets/key.txt', 'lnk-out/secret.txt', '../x', 'bin.dat']);
  assert.equal(m.files[0].ok, true);
  assert.equal(m.files[0].result.content, readFileSync(join(U.dir, 'src/a.c'), 'utf8'));
  assert.equal(m.files[1].ok, false);
  assert.equal(m.files[1].error.code === 'not_found' || m.files[1].error.reason === 'not_found', true, JSON.stringify(m.files[1]));
  assert.equal(m.files[2].error.reason, 'excluded');
  assert.equal(m.files[3].error.reason, 'flagged');
  assert.equal(m.files[4].error.reason, 'denied');
  assert.equal(m.files[5].result.encoding, 'base64');
  assert.ok(!JSON.stringify(m).includes('outside secret'));
  await invalid(agentU, 'read_many', { paths: Array.from({ length: 51 }, () => 'src/a.c') }, /at most 50/);
});

test('list depth, find, search and stat', async () => {
  const l1 = await K.ok(agentU, 'list', { path: '.', recursive: true, depth: 1 });
  assert.ok(l1.entries.every((e) => !e.name.includes('/')), JSON.stringify(l1.entries.map((e) => e.name)));
  const names = l1.entries.map((e) => e.name);
  assert.deepEqual(names, [...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));
  assert.ok(!names.includes('secrets'));
  const lall = await K.ok(agentU, 'list', { path: 'src', recursive: true });
  assert.ok(lall.entries.some((e) => e.name === 'deep/c.h'));
  const f = await K.ok(agentU, 'find', { pattern: '**/*.c' });
  assert.deepEqual([...f.matches].sort(), ['src/a.c', 'src/b.c']);
  const fh = await K.ok(agentU, 'find', { pattern: '**/*.txt' });
  assert.ok(!fh.matches.some((p) => p.startsWith('secrets')), 'excluded entries are never found');
  const s = await full(agentU, 'search', { pattern: 'add\\(', path: 'src' });
  const hits = s.structuredContent.matches.map((x) => `${x.path}:${x.line}`).sort();
  assert.deepEqual(hits, ['src/a.c:1', 'src/b.c:2', 'src/deep/c.h:1']);
  assert.match(s.content[0].text, /^src\/[a-z/.]+:\d+:/m);
  const sg = await K.ok(agentU, 'search', { pattern: 'add', glob: '**/*.h' });
  assert.deepEqual(sg.matches.map((x) => x.path), ['src/deep/c.h']);
  const se = await K.ok(agentU, 'search', { pattern: 'excluded' });
  assert.equal(se.matches.length, 0, 'an excluded file is not searched');
  await failed(agentU, 'search', { pattern: '(unclosed' }, 'invalid').catch(async () => {
    // a bad regex is a bad_request of the shim: invalid params
  });
  const st = await K.ok(agentU, 'stat', { path: 'src/a.c', sha256: true });
  assert.equal(st.type, 'file');
  assert.equal(st.sha256, sha(readFileSync(join(U.dir, 'src/a.c'))));
  assert.match(st.mode, /^0?[0-7]{3,4}$/);
  const st2 = await K.ok(agentU, 'stat', { path: 'src/a.c' });
  assert.equal(st2.sha256, undefined, 'sha256 only on request');
});

test('edit: applied exactly, all or nothing, dry run, the failing edit named', async () => {
  const before = readFileSync(join(U.dir, 'src/a.c'), 'utf8');
  const dry = await full(agentU, 'edit', { path: 'src/a.c', edits: [{ oldText: 'a + b', newText: 'b + a' }], dryRun: true });
  assert.equal(dry.structuredContent.dryRun, true);
  assert.match(dry.structuredContent.diff.text, /^-  return a \+ b;$/m);
  assert.match(dry.structuredContent.diff.text, /^\+  return b \+ a;$/m);
  assert.equal(readFileSync(join(U.dir, 'src/a.c'), 'utf8'), before, 'a dry run writes nothing');
  const e = await full(agentU, 'edit', { path: 'src/a.c', edits: [{ oldText: 'int add', newText: 'long add' }, { oldText: 'a + b', newText: 'b + a' }] });
  const want = before.replace('int add', 'long add').replace('a + b', 'b + a');
  assert.equal(readFileSync(join(U.dir, 'src/a.c'), 'utf8'), want);
  assert.equal(e.structuredContent.replaced, 2);
  assert.equal(e.structuredContent.sha256, sha(want));
  assert.equal(e.structuredContent.previousSha256, sha(before));
  assert.match(e.content[0].text, /^\+long add/m);
  // the second edit does not match: nothing is written
  const g = await failed(agentU, 'edit', { path: 'src/a.c', edits: [{ oldText: 'long add', newText: 'short add' }, { oldText: 'no such text', newText: 'x' }] }, 'no_match');
  assert.match(g.message, /edit 2 of 2/);
  assert.equal(readFileSync(join(U.dir, 'src/a.c'), 'utf8'), want);
  const amb = await failed(agentU, 'edit', { path: 'dup.txt', edits: [{ oldText: 'x = 1', newText: 'x = 2' }] }, 'no_match');
  assert.match(amb.message, /found 3 times/);
  await K.ok(agentU, 'edit', { path: 'dup.txt', edits: [{ oldText: 'x = 1', newText: 'x = 2', replaceAll: true }] });
  assert.equal(readFileSync(join(U.dir, 'dup.txt'), 'utf8'), 'x = 2\nx = 2\nx = 2\n');
  await failed(agentU, 'edit', { path: 'nope.c', edits: [{ oldText: 'a', newText: 'b' }] }, 'not_found');
  await failed(agentU, 'edit', { path: 'bin.dat', edits: [{ oldText: 'a', newText: 'b' }] }, 'denied');
  await failed(agentU, 'edit', { path: 'secrets/key.txt', edits: [{ oldText: 'excluded', newText: 'b' }] }, 'excluded');
  await failed(agentU, 'edit', { path: 'hardlink', edits: [{ oldText: 'outside', newText: 'inside' }] }, 'flagged');
  assert.equal(readFileSync(join(outside, 'secret.txt'), 'utf8'), 'outside secret\n');
  await invalid(agentU, 'edit', { path: 'dup.txt', edits: [] });
  await invalid(agentU, 'edit', { path: 'dup.txt', edits: Array.from({ length: 101 }, () => ({ oldText: 'a', newText: 'b' })) }, /at most 100/);
});

test('mkdir, move, delete (unsupervised) and their refusals', async () => {
  let r = await K.ok(agentU, 'mkdir', { path: 'lib/util/x' });
  assert.equal(r.created, true);
  assert.ok(existsSync(join(U.dir, 'lib/util/x')));
  r = await K.ok(agentU, 'mkdir', { path: 'lib/util/x' });
  assert.equal(r.created, false);
  await failed(agentU, 'mkdir', { path: 'src/a.c' }, 'exists');
  r = await K.ok(agentU, 'move', { source: 'src/b.c', destination: 'lib/b.c' });
  assert.equal(r.moved, true);
  assert.ok(!existsSync(join(U.dir, 'src/b.c')));
  assert.ok(existsSync(join(U.dir, 'lib/b.c')));
  await failed(agentU, 'move', { source: 'lib/b.c', destination: 'src/a.c' }, 'exists');
  await failed(agentU, 'move', { source: 'nope', destination: 'nope2' }, 'not_found');
  await failed(agentU, 'delete', { path: 'old' }, 'denied'); // a directory needs recursive
  assert.ok(existsSync(join(U.dir, 'old/f2')));
  r = await K.ok(agentU, 'delete', { path: 'old', recursive: true });
  assert.equal(r.deleted, 4);
  assert.ok(!existsSync(join(U.dir, 'old')));
  r = await K.ok(agentU, 'delete', { path: 'dup.txt' });
  assert.equal(r.deleted, 1);
  await failed(agentU, 'delete', { path: '.' , recursive: true }, 'denied');
  assert.ok(existsSync(join(U.dir, 'src/a.c')), 'the root was not deleted');
});

test('path escapes against the new tools: move into and out of a symlinked directory, mkdir under a dangling link, excluded and flagged destinations', async () => {
  // into a directory whose link leads out (flagged by the pre-scan), and out of it
  await failed(agentU, 'move', { source: 'src/a.c', destination: 'lnk-out/a.c' }, 'flagged');
  await failed(agentU, 'move', { source: 'lnk-out/secret.txt', destination: 'stolen.txt' }, 'flagged');
  await failed(agentU, 'move', { source: 'lnk-out', destination: 'x-out' }, 'flagged');
  await failed(agentU, 'move', { source: 'src/a.c', destination: 'secrets/a.c' }, 'excluded');
  await failed(agentU, 'move', { source: 'secrets/key.txt', destination: 'key.txt' }, 'excluded');
  await failed(agentU, 'move', { source: 'src/a.c', destination: '../a.c' }, 'denied');
  await failed(agentU, 'move', { source: 'src/a.c', destination: '/tmp/a.c' }, 'denied');
  // through a symlink inside the workspace: the shim walks without following it
  const th = await failed(agentU, 'move', { source: 'src/a.c', destination: 'lnk-src/moved.c' });
  assert.ok(['denied', 'not_found'].includes(th.reason), JSON.stringify(th));
  assert.ok(!existsSync(join(U.dir, 'src/moved.c')));
  // mkdir under a dangling link: never created at the link's target
  const md = await failed(agentU, 'mkdir', { path: 'dangling/x' });
  assert.ok(['denied', 'not_found'].includes(md.reason), JSON.stringify(md));
  assert.ok(!existsSync(join(U.dir, 'missing-dir')));
  await failed(agentU, 'mkdir', { path: 'lnk-out/newdir' }, 'flagged');
  await failed(agentU, 'delete', { path: 'lnk-out/secret.txt' }, 'flagged');
  await failed(agentU, 'delete', { path: 'hardlink' }, 'flagged');
  await failed(agentU, 'delete', { path: 'lnk-src/a.c' });
  await failed(agentU, 'find', { pattern: '*', path: 'lnk-out' }, 'flagged');
  await failed(agentU, 'search', { pattern: 'secret', path: 'lnk-out' }, 'flagged');
  await failed(agentU, 'search', { pattern: 'secret', path: '../' }, 'denied');
  assert.deepEqual(readdirSync(outside).sort(), ['secret.txt']);
  assert.equal(readFileSync(join(outside, 'secret.txt'), 'utf8'), 'outside secret\n');
  assert.ok(existsSync(join(U.dir, 'src/a.c')));
});

// Exchanges `a` and `b` (renameat2 RENAME_EXCHANGE) as fast as it can until stopped.
function startSwapper(a, b) {
  const p = spawn('python3', ['-c', `
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGTERM, lambda *a: (print(n, flush=True), os._exit(0)))
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
end = time.time() + 120
n = 0
while time.time() < end:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit('renameat2: errno %d' % ctypes.get_errno())
    n += 1
print(n)
`, a, b], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  return { exited: new Promise((r) => p.on('exit', r)), stop() { if (p.exitCode === null) p.kill('SIGTERM'); }, swaps: () => out.trim() };
}

test('delete through a name swapped with a link to outside (renameat2 RENAME_EXCHANGE loop) never deletes outside', { timeout: 240000 }, async () => {
  const race = join(srv.dir, 'race-outside-tools');
  mkdirSync(race);
  const R = await K.openSession((d) => {
    mkdirSync(join(d, 'swap'));
    symlinkSync(race, join(d, 'swaplink'));
  }, { mode: 'unsupervised' });
  const agent = await K.connect(R.agentToken);
  const swapper = startSwapper(join(R.dir, 'swap'), join(R.dir, 'swaplink'));
  const n = { file: 0, dir: 0, refused: 0 };
  try {
    for (let i = 0; i < 100; i++) {
      // victims on both sides of the swap (the host follows the link: one side is outside);
      // a directory tree made by the agent itself (host-made directories after the start are
      // not the sandbox user's to change)
      for (const side of ['swap', 'swaplink']) {
        try { writeFileSync(join(R.dir, side, 'victim'), 'v\n'); } catch { /* mid-swap */ }
      }
      await K.call(agent, 'mkdir', { path: 'swap/vdir/sub' });
      await K.call(agent, 'write', { path: 'swap/vdir/sub/f', content: 'f\n' });
      writeFileSync(join(race, 'victim'), 'OUTSIDE\n');
      mkdirSync(join(race, 'vdir/sub'), { recursive: true });
      writeFileSync(join(race, 'vdir/keep'), 'OUTSIDE\n');
      const r = await K.call(agent, 'delete', { path: 'swap/victim' });
      if (r.result && !r.result.isError) n.file++; else n.refused++;
      assert.equal(readFileSync(join(race, 'victim'), 'utf8'), 'OUTSIDE\n', `round ${i}: a file outside was deleted`);
      const rr = await K.call(agent, 'delete', { path: 'swap/vdir', recursive: true });
      if (rr.result && !rr.result.isError) n.dir++; else { n.refused++; n.last = JSON.stringify(rr).slice(0, 300); }
      assert.ok(existsSync(join(race, 'vdir/keep')), `round ${i}: a recursive delete reached outside`);
    }
  } finally {
    swapper.stop();
    await swapper.exited;
  }
  console.log(`# delete race: ${JSON.stringify(n)}, ${swapper.swaps()} swaps`);
  assert.ok(Number(swapper.swaps()) > 1000, 'the swapper kept swapping: ' + swapper.swaps());
  assert.ok(n.file + n.dir > 0, 'some deletes ran inside');
  assert.ok(n.refused > 0, 'some deletes met the link');
  assert.equal(readFileSync(join(race, 'victim'), 'utf8'), 'OUTSIDE\n');
});

// The buyer's next approval request for `path`.
let lastOpId = 0;
const requestFor = async (path, tool) => {
  const req = await K.waitEvent(buyerS, 'jailbox:approval_request', (p) => p.path === path && p.tool === tool && p.opId > lastOpId, 30000);
  lastOpId = req.opId;
  return req;
};
const decide = async (req, approve, reason) => {
  const ack = await buyerS.timeout(10000).emitWithAck(approve ? 'jailbox:approve' : 'jailbox:reject', { opId: req.opId, reason });
  assert.equal(ack.ok, true, JSON.stringify(ack));
};

test('supervised edit: the buyer sees exactly the edit\'s diff; approve, reject, changed', { timeout: 120000 }, async () => {
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  const before = readFileSync(join(S.dir, 'main.c'), 'utf8');
  let p = K.call(agentS, 'edit', { path: 'main.c', edits: [{ oldText: 'return 1;', newText: 'return 0;' }] });
  let req = await requestFor('main.c', 'edit');
  assert.match(req.diff.text, /^-  return 1;$/m);
  assert.match(req.diff.text, /^\+  return 0;$/m);
  assert.equal(req.diff.text.split('\n').filter((l) => /^[-+][^-+]/.test(l)).length, 2, req.diff.text);
  assert.equal(req.currentSha256, sha(before));
  assert.equal(req.sha256, sha(before.replace('return 1;', 'return 0;')));
  assert.equal(req.replaced, 1);
  assert.equal(readFileSync(join(S.dir, 'main.c'), 'utf8'), before, 'nothing written before the approval');
  await decide(req, true);
  let r = await p;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'main.c'), 'utf8'), before.replace('return 1;', 'return 0;'));
  // rejected: unchanged
  p = K.call(agentS, 'edit', { path: 'keep.c', edits: [{ oldText: 'keep', newText: 'lose' }] });
  req = await requestFor('keep.c', 'edit');
  await decide(req, false, 'no');
  r = await p;
  assert.equal(r.error?.data?.reason ?? r.result?.structuredContent?.error?.reason, 'rejected', JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'keep.c'), 'utf8'), 'keep\n');
  // the file moves on between the request and the approval: changed, the new content kept
  p = K.call(agentS, 'edit', { path: 'race.c', edits: [{ oldText: 'version 1', newText: 'version 2' }] });
  req = await requestFor('race.c', 'edit');
  writeFileSync(join(S.dir, 'race.c'), 'version 1 edited by someone else\n');
  await decide(req, true);
  r = await p;
  assert.equal(r.error?.data?.reason ?? r.result?.structuredContent?.error?.reason, 'changed', JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'race.c'), 'utf8'), 'version 1 edited by someone else\n');
  // a dry run needs no approval and stores nothing
  const d = await K.ok(agentS, 'edit', { path: 'keep.c', edits: [{ oldText: 'keep', newText: 'x' }], dryRun: true });
  assert.equal(d.dryRun, true);
});

test('supervised mkdir, move, delete: described to the buyer, approved, rejected, changed', { timeout: 120000 }, async () => {
  let p = K.call(agentS, 'mkdir', { path: 'newdir/a' });
  let req = await requestFor('newdir/a', 'mkdir');
  assert.match(req.description, /create directory newdir\/a/);
  assert.ok(!existsSync(join(S.dir, 'newdir')));
  await decide(req, true);
  let r = await p;
  assert.equal(r.result?.structuredContent?.created, true, JSON.stringify(r));
  assert.ok(existsSync(join(S.dir, 'newdir/a')));

  p = K.call(agentS, 'move', { source: 'keep.c', destination: 'newdir/keep.c' });
  req = await requestFor('keep.c', 'move');
  assert.match(req.description, /move file \(5 bytes\) keep\.c to newdir\/keep\.c/);
  assert.equal(req.destination, 'newdir/keep.c');
  await decide(req, true);
  r = await p;
  assert.equal(r.result?.structuredContent?.moved, true, JSON.stringify(r));
  assert.ok(existsSync(join(S.dir, 'newdir/keep.c')) && !existsSync(join(S.dir, 'keep.c')));

  p = K.call(agentS, 'delete', { path: 'olddir', recursive: true });
  req = await requestFor('olddir', 'delete');
  assert.match(req.description, /delete directory olddir and everything in it/);
  await decide(req, false, 'keep it');
  r = await p;
  assert.equal(r.error?.data?.reason ?? r.result?.structuredContent?.error?.reason, 'rejected');
  assert.ok(existsSync(join(S.dir, 'olddir/sub/x')));

  // the file changes between the request and the approval: changed, not deleted
  p = K.call(agentS, 'delete', { path: 'gone.txt' });
  req = await requestFor('gone.txt', 'delete');
  assert.match(req.description, /delete file \(4 bytes\) gone\.txt/);
  writeFileSync(join(S.dir, 'gone.txt'), 'changed meanwhile\n');
  await decide(req, true);
  r = await p;
  assert.equal(r.error?.data?.reason ?? r.result?.structuredContent?.error?.reason, 'changed', JSON.stringify(r));
  assert.equal(readFileSync(join(S.dir, 'gone.txt'), 'utf8'), 'changed meanwhile\n');
  p = K.call(agentS, 'delete', { path: 'gone.txt' });
  req = await requestFor('gone.txt', 'delete');
  await decide(req, true);
  r = await p;
  assert.equal(r.result?.structuredContent?.deleted, 1, JSON.stringify(r));
  assert.ok(!existsSync(join(S.dir, 'gone.txt')));
  // refused before the buyer is asked: nothing pending
  await failed(agentS, 'delete', { path: 'olddir' }, 'denied');
  await failed(agentS, 'move', { source: 'nope', destination: 'x' }, 'not_found');
});

test('GET …/changes and the offline-verified audit chain agree with the disk', { timeout: 120000 }, async () => {
  const c = await srv.req('GET', `/v1/jailbox/${S.jobId}/changes`, { token: srv.serviceToken });
  assert.equal(c.status, 200, c.text);
  const ch = c.json.changes;
  const by = (tool, path) => ch.filter((x) => x.tool === tool && x.path === path);
  const mainNow = readFileSync(join(S.dir, 'main.c'));
  assert.equal(by('edit', 'main.c').length, 1);
  assert.equal(by('edit', 'main.c')[0].sha256After, sha(mainNow));
  assert.equal(by('edit', 'race.c').length, 0, 'a refused edit is no change');
  assert.equal(by('mkdir', 'newdir/a').length, 1);
  assert.deepEqual([by('move', 'keep.c')[0].from, by('move', 'keep.c')[0].to], ['keep.c', 'newdir/keep.c']);
  assert.equal(by('move', 'keep.c')[0].sha256, sha(readFileSync(join(S.dir, 'newdir/keep.c'))));
  assert.equal(by('delete', 'gone.txt').length, 1);
  assert.equal(by('delete', 'olddir').length, 0, 'a rejected delete is no change');
  // the chain, exported and verified offline with the published keys
  const tmp = mkdtempSync(join(tmpdir(), 'jb-tools-'));
  const keys = await srv.req('GET', '/v1/audit/keys');
  writeFileSync(join(tmp, 'keys.json'), keys.text);
  const ex = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: srv.serviceToken });
  assert.equal(ex.status, 200);
  writeFileSync(join(tmp, 'chain.jsonl'), ex.text);
  const out = execFileSync(CTL, ['audit', 'verify', join(tmp, 'chain.jsonl'), '--keys', join(tmp, 'keys.json'), '--json'], { encoding: 'utf8' });
  assert.equal(JSON.parse(out).ok, true, out);
  const rows = ex.text.trim().split('\n').map((l) => JSON.parse(l));
  const entry = (op, path, pred = () => true) => rows.filter((x) => x.operation === op && x.path === path && pred(x.details));
  assert.equal(entry('edit', 'main.c', (d) => d.ok && d.decision === 'approved' && d.sha256 === sha(mainNow)).length, 1);
  assert.equal(entry('edit', 'keep.c', (d) => d.decision === 'rejected').length, 1);
  assert.equal(entry('edit', 'race.c', (d) => d.error === 'changed').length, 1);
  assert.equal(entry('mkdir', 'newdir/a', (d) => d.created === true).length, 1);
  assert.equal(entry('move', 'keep.c', (d) => d.destination === 'newdir/keep.c' && d.ok).length, 1);
  assert.equal(entry('delete', 'olddir', (d) => d.decision === 'rejected').length, 1);
  assert.equal(entry('delete', 'gone.txt', (d) => d.error === 'changed').length, 1);
  assert.equal(entry('delete', 'gone.txt', (d) => d.ok && d.deleted === 1).length, 1);
  assert.ok(!ex.text.includes('return 0;'), 'no content in the chain');
  // the unsupervised session too
  const cu = await srv.req('GET', `/v1/jailbox/${U.jobId}/changes`, { token: srv.serviceToken });
  const tools = cu.json.changes.map((x) => `${x.tool} ${x.path}`);
  for (const t of ['edit src/a.c', 'mkdir lib/util/x', 'move src/b.c', 'delete old', 'delete dup.txt']) assert.ok(tools.includes(t), t + ' in ' + tools.join(', '));
  const v = await srv.req('GET', `/v1/jailbox/${U.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
});
