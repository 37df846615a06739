// changeset.test.mjs — a supervised writable command's effects held for the buyer, through the
// real stack (socket.io-client agent → jailboxd → worker → the session's spawner inside gVisor
// + Docker, on an overlay of the workspace). On a real source tree (this repository's lib/*.c
// and *.h) the agent runs `sed -i` over every C file: nothing lands while the command runs;
// the buyer is asked once, for one changeset listing every changed file with its diff; the
// buyer approves some files and the rest are rejected; the disk then holds exactly the
// approved files (the others byte for byte as at open); a rollback returns the whole tree to
// its tree hash at open (jailboxctl tree-hash against the pre-scan's treeSha256 in the chain).
// A hostile command's changeset: a link to /, a set-user-ID file, a folder replaced by
// a file, a git hook and a planted secret are listed but not approvable (or applied without
// their set-ID bits); approving a path that is not approvable is refused. Needs root, Docker
// with runsc; the image gets /bin/sh, sed and the coreutils the commands use.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSandboxServer } from './lib/agent.mjs';
import { CTL, verifiedChain } from './lib/mcp.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const IMAGE = 'jailbox-sandbox:changeset';
const TOOLS = ['sed', 'rm', 'mkdir', 'chmod', 'ln', 'printf', 'cat', 'seq', 'xargs', 'touch'];
const sha = (b) => createHash('sha256').update(b).digest('hex');

let K, srv;
let fault; // JB_TEST_FAULT's file: the worker exits at the point it names (sandbox/worker/worker.h)
const api = (S, suffix) => `/v1/jailbox/${S.jobId}${suffix}`;
const post = (S, suffix, body) => srv.req('POST', api(S, suffix), { token: S.buyerToken, body });
const get = (S, suffix) => srv.req('GET', api(S, suffix), { token: S.buyerToken });

// {path: sha256 | 'dir' | 'link:<target>'} of every entry under `root`
function tree(root, rel = '', out = {}) {
  for (const e of readdirSync(join(root, rel)).sort()) {
    const p = rel ? `${rel}/${e}` : e;
    const st = lstatSync(join(root, p));
    if (st.isDirectory()) {
      out[p] = 'dir';
      tree(root, p, out);
    } else {
      out[p] = sha(readFileSync(join(root, p)));
    }
  }
  return out;
}

const treeHash = (dir) => execFileSync(CTL, ['tree-hash', dir], { encoding: 'utf8' }).trim();

before(async () => {
  fault = join(mkdtempSync(join(tmpdir(), 'jb-fault-')), 'point');
  // 16 MiB of pre-images and changeset contents a session (the budget's refusal below)
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none', JB_TEST_FAULT: fault, JAILBOX_PREIMAGE_MAX_BYTES: String(16 << 20) },
    [`${realpathSync('/bin/sh')}:/bin/sh`, ...TOOLS.map((t) => `/usr/bin/${t}`)]);
  srv = K.srv;
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// A supervised session on `build`'s workspace with its buyer and agent sockets, active.
async function session(build) {
  const S = await K.openSession(build, { mode: 'supervised' });
  S.buyer = await K.connect(S.buyerToken);
  S.agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  return S;
}

// Runs `command` writable as the agent; the buyer approves the command line. Once the command
// ended its changes wait for the buyer: the changeset's approval request, and the call, which
// answers once the buyer decided the changeset ({ask, call}).
async function runWritable(S, command) {
  const call = K.call(S.agent, 'exec', { command, writable: true, timeoutSec: 120 }, 180000);
  const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === command, 60000);
  const ack = await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ask.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  const cs = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.execOpId === ask.opId, 120000);
  return { ask: cs, call };
}

// The exec's result once the call answered.
async function result(call) {
  const r = await call;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r).slice(0, 600));
  return r.result.structuredContent;
}

// Every file row of changeset `opId`, paged.
async function changeset(S, opId) {
  const files = [];
  let after = null, head;
  do {
    const r = await get(S, `/ops/${opId}/changeset?limit=50${after === null ? '' : `&after=${after}`}`);
    assert.equal(r.status, 200, r.text);
    head = r.json;
    files.push(...r.json.files);
    after = r.json.next;
  } while (after !== null && after !== undefined);
  return { ...head, files };
}

async function opDone(S, opId) {
  return K.waitFor(`op ${opId} done`, async () => {
    const r = await srv.req('GET', api(S, '/ops?limit=200'), { token: srv.serviceToken });
    const o = r.json.ops.find((x) => x.opId === opId);
    return o && ['done', 'failed'].includes(o.state) ? o : null;
  }, 60000);
}

test('sed -i over a real source tree: one changeset, every diff, a subset approved, the rest untouched, rollback to the tree hash at open', { timeout: 300000 }, async () => {
  const src = join(ROOT, 'lib');
  const names = readdirSync(src).filter((n) => /\.[ch]$/.test(n)).sort();
  let hashAtOpen; // jailboxctl's, before the session (and its grant of the jail's group bits)
  const S = await session((d) => {
    mkdirSync(join(d, 'lib'));
    for (const n of names) copyFileSync(join(src, n), join(d, 'lib', n));
    writeFileSync(join(d, 'README'), 'a real tree\n');
    hashAtOpen = treeHash(d);
  });
  const atOpen = tree(S.dir);
  const cFiles = names.filter((n) => n.endsWith('.c') && readFileSync(join(src, n), 'utf8').includes('jb_'));
  assert.ok(cFiles.length >= 10, `only ${cFiles.length} C files`);
  const { ask, call } = await runWritable(S, "sed -i 's/jb_/JB_/g' lib/*.c");
  assert.deepEqual(tree(S.dir), atOpen, 'the command changed the workspace before any approval');
  // the buyer is asked once, for the changeset
  const cs = { opId: ask.opId, changesetSha256: ask.changesetSha256 };
  assert.equal(ask.total, cFiles.length);
  assert.match(ask.changesetSha256, /^[0-9a-f]{64}$/);
  const view = await changeset(S, cs.opId);
  assert.equal(view.total, cFiles.length);
  assert.equal(view.changesetSha256, cs.changesetSha256);
  assert.deepEqual(view.files.map((f) => f.path), cFiles.map((n) => `lib/${n}`));
  for (const f of view.files) {
    const before = readFileSync(join(S.dir, f.path));
    assert.equal(f.change, 'modified');
    assert.equal(f.oldSha256, sha(before));
    assert.equal(f.newSha256, sha(before.toString('utf8').replaceAll('jb_', 'JB_')), f.path);
    assert.equal(f.approvable, true, `${f.path}: ${f.why}`);
    assert.equal(f.diff?.format, 'unified', f.path);
    assert.match(f.diff.text, /^-.*jb_/m);
    assert.match(f.diff.text, /^\+.*JB_/m);
  }
  // a subset: every other file
  const chosen = view.files.filter((_, i) => i % 2 === 0).map((f) => f.path);
  const ok = await post(S, `/approve/${cs.opId}`, { changesetSha256: cs.changesetSha256, files: chosen });
  assert.equal(ok.status, 200, ok.text);
  const op = await opDone(S, cs.opId);
  assert.equal(op.state, 'done', JSON.stringify(op));
  // the agent's call answers now, with what was applied
  const res = await result(call);
  assert.equal(res.exitCode, 0, JSON.stringify(res).slice(0, 400));
  assert.equal(res.changeset.state, 'applied', JSON.stringify(res.changeset));
  assert.equal(res.changeset.opId, cs.opId);
  assert.equal(res.changeset.applied, chosen.length);
  assert.equal(res.changeset.changesetSha256, cs.changesetSha256);
  const now = tree(S.dir);
  for (const f of view.files) {
    const want = chosen.includes(f.path) ? f.newSha256 : f.oldSha256;
    assert.equal(now[f.path], want, `${f.path}: ${chosen.includes(f.path) ? 'approved' : 'rejected'}`);
  }
  for (const p of Object.keys(atOpen)) if (!p.endsWith('.c')) assert.equal(now[p], atOpen[p], p);
  // the change summary names the command with what of it was applied
  const summary = await get(S, '/changes');
  assert.equal(summary.status, 200, summary.text);
  const exLine = summary.json.changes.find((c) => c.tool === 'exec');
  assert.deepEqual([exLine?.changesetOpId, exLine?.effectsTotal], [cs.opId, chosen.length], JSON.stringify(exLine));
  assert.deepEqual(exLine.effects.map((e) => e.path), chosen);
  const after = await changeset(S, cs.opId);
  for (const f of after.files) {
    assert.equal(f.decision, chosen.includes(f.path) ? 'approved' : 'rejected', f.path);
    assert.equal(f.outcome ?? null, chosen.includes(f.path) ? 'applied' : null, f.path);
  }
  // the chain: the exec names its changeset; the apply lists each file with tree hashes
  const rows = verifiedChain(srv, S.jobId);
  const entries = rows.map((r) => JSON.parse(Buffer.from(r.canonical, 'base64').toString('utf8')));
  const pre = entries.find((e) => e.operation === 'pre_scan');
  assert.equal(pre.details.treeSha256, hashAtOpen, 'the pre-scan\'s tree hash is not jailboxctl\'s');
  const ex = entries.find((e) => e.operation === 'exec');
  assert.equal(ex.details.changeset.opId, cs.opId);
  assert.equal(ex.details.changeset.changesetSha256, cs.changesetSha256);
  const ap = entries.find((e) => e.operation === 'changeset' && 'treeBefore' in e.details);
  const decided = entries.find((e) => e.operation === 'changeset' && 'approvedSha256' in e.details);
  assert.deepEqual([decided?.details.approved, decided?.details.rejected], [chosen.length, view.files.length - chosen.length], JSON.stringify(decided));
  assert.equal(ap.details.applied, chosen.length);
  assert.equal(ap.details.treeBefore, hashAtOpen);
  assert.ok(/^[0-9a-f]{64}$/.test(ap.details.treeAfter) && ap.details.treeAfter !== hashAtOpen, JSON.stringify(ap.details));
  // rollback: the tree back to its hash at open
  assert.equal((await post(S, '/pause', { reason: 'undo' })).status, 200);
  const rb = await post(S, '/rollback', {});
  assert.equal(rb.status, 202, rb.text);
  let g;
  await K.waitFor('the rollback', async () => {
    g = await get(S, `/rollbacks/${rb.json.rollbackId}`);
    return ['done', 'failed'].includes(g.json.state);
  }, 90000);
  assert.equal(g.json.state, 'done', JSON.stringify(g.json));
  assert.equal(g.json.result.conflicts, 0, JSON.stringify(g.json.result));
  assert.deepEqual(tree(S.dir), atOpen);
  const last = verifiedChain(srv, S.jobId).map((r) => JSON.parse(Buffer.from(r.canonical, 'base64').toString('utf8')))
    .find((e) => e.operation === 'rollback');
  assert.equal(last.details.treeAfter, hashAtOpen, 'the rollback\'s tree hash is not the pre-scan\'s');
  // offline, once the session ended and its grant was taken back: the same tree hash
  assert.equal((await post(S, '/abort', { reason: 'checked' })).status, 200);
  await K.waitFor('the workspace given back', () => treeHash(S.dir) === hashAtOpen, 60000).catch(() => {
    assert.equal(treeHash(S.dir), hashAtOpen, 'jailboxctl tree-hash after the session');
  });
  S.agent.close();
  S.buyer.close();
});

test('a hostile command: a link out, set-ID, a folder replaced, a git hook and a secret are held back', { timeout: 300000 }, async () => {
  const S = await session((d) => {
    mkdirSync(join(d, 'dir'));
    writeFileSync(join(d, 'dir/inner'), 'inner\n');
    mkdirSync(join(d, '.git/hooks'), { recursive: true });
    writeFileSync(join(d, 'keep'), 'keep\n');
  });
  const atOpen = tree(S.dir);
  const cmd = 'ln -s / root && printf "#!/bin/sh\\n" > suid && chmod 4755 suid && ' +
    'rm -r dir && printf "now a file\\n" > dir && printf "#!/bin/sh\\nid\\n" > .git/hooks/pre-commit && ' +
    'printf "AKIA%s\\n" ABCDEFGHIJKLMNOP > creds && printf "fine\\n" > ok.txt && ' +
    '{ printf "\\000"; seq 1 3000; } > obj.bin';
  const { ask, call } = await runWritable(S, cmd);
  const res = { changeset: { opId: ask.opId } };
  assert.deepEqual(tree(S.dir), atOpen, 'the command changed the workspace');
  const view = await changeset(S, res.changeset.opId);
  const by = Object.fromEntries(view.files.map((f) => [f.path, f]));
  assert.equal(by.root?.approvable, false, JSON.stringify(by.root));
  assert.equal(by['.git/hooks/pre-commit']?.approvable, false, JSON.stringify(by['.git/hooks/pre-commit']));
  assert.equal(by.creds?.approvable, false, JSON.stringify(by.creds));
  assert.equal(by.suid?.approvable, true, JSON.stringify(by.suid));
  assert.equal(by.suid.newMode & 0o4000, 0o4000);
  assert.equal(by['dir/inner']?.change, 'deleted', JSON.stringify(view.files.map((f) => [f.path, f.change])));
  assert.equal(by.dir?.change, 'type');
  assert.equal(by['ok.txt']?.approvable, true);
  // binary content (a compiler's objects): flagged for the buyer, not refused
  assert.equal(by['obj.bin']?.approvable, true, JSON.stringify(by['obj.bin']));
  assert.deepEqual(by['obj.bin'].flags?.map((f) => f.rule), ['binary_content']);
  // a path that cannot be approved is refused by name, and nothing is decided
  const bad = await post(S, `/approve/${res.changeset.opId}`, { files: ['ok.txt', 'creds'] });
  assert.equal(bad.status, 409, bad.text);
  assert.equal(bad.json.error.code, 'not_approvable');
  const missing = await post(S, `/approve/${res.changeset.opId}`, { files: ['ok.txt', 'nope'] });
  assert.equal(missing.status, 422, missing.text);
  assert.equal(missing.json.error.code, 'not_in_changeset');
  // approve all: only what can be approved lands; set-ID bits are never applied
  const ok = await post(S, `/approve/${res.changeset.opId}`, {});
  assert.equal(ok.status, 200, ok.text);
  const op = await opDone(S, res.changeset.opId);
  assert.equal(op.state, 'done', JSON.stringify(op));
  const done = await result(call);
  assert.equal(done.exitCode, 0, JSON.stringify(done).slice(0, 400));
  assert.equal(done.changeset.state, 'applied', JSON.stringify(done.changeset));
  assert.equal(readFileSync(join(S.dir, 'ok.txt'), 'utf8'), 'fine\n');
  assert.equal(readFileSync(join(S.dir, 'obj.bin'))[0], 0);
  // a file the command made is the jail's, as if it had written the workspace: the session's
  // next command may change it
  assert.equal(statSync(join(S.dir, 'ok.txt')).uid, 65534);
  assert.equal(statSync(join(S.dir, 'suid')).mode & 0o7777, 0o755);
  for (const p of ['root', '.git/hooks/pre-commit', 'creds'])
    assert.throws(() => lstatSync(join(S.dir, p)), /ENOENT/, `${p} landed`);
  assert.equal(readFileSync(join(S.dir, 'dir'), 'utf8'), 'now a file\n');
  S.agent.close();
  S.buyer.close();
});

test('a file the buyer changed meanwhile is a conflict, left alone; the worker killed half-way through the apply finishes it once', { timeout: 300000 }, async () => {
  const S = await session((d) => {
    for (let i = 0; i < 5; i++) writeFileSync(join(d, `f${i}.txt`), `line ${i}\n`);
  });
  const { ask, call } = await runWritable(S, "sed -i 's/line/LINE/' f0.txt f1.txt f2.txt f3.txt f4.txt");
  const cs = { opId: ask.opId };
  assert.equal(ask.total, 5, JSON.stringify(ask));
  writeFileSync(join(S.dir, 'f3.txt'), 'the buyer meanwhile\n'); // after the command, before the apply
  writeFileSync(fault, 'cs_after_first_file\n');
  const ok = await post(S, `/approve/${cs.opId}`, {});
  assert.equal(ok.status, 200, ok.text);
  const op = await opDone(S, cs.opId);
  assert.equal(existsSync(fault), false, 'the fault did not fire');
  assert.match(srv.log(), /"test fault".*"point":"cs_after_first_file"/);
  assert.equal(op.state, 'done', JSON.stringify(op));
  const res = await result(call);
  assert.deepEqual([res.changeset.state, res.changeset.applied, res.changeset.conflicts.map((c) => c.path)],
    ['applied', 4, ['f3.txt']], JSON.stringify(res.changeset));
  for (let i = 0; i < 5; i++)
    assert.equal(readFileSync(join(S.dir, `f${i}.txt`), 'utf8'), i === 3 ? 'the buyer meanwhile\n' : `LINE ${i}\n`);
  const view = await changeset(S, cs.opId);
  assert.deepEqual(view.files.map((f) => f.outcome), ['applied', 'applied', 'applied', 'conflict', 'applied']);
  const applies = verifiedChain(srv, S.jobId).map((r) => JSON.parse(Buffer.from(r.canonical, 'base64').toString('utf8')))
    .filter((e) => e.operation === 'changeset' && 'treeBefore' in e.details);
  assert.equal(applies.length, 1, 'the chain holds one apply');
  assert.deepEqual([applies[0].details.applied, applies[0].details.conflicts], [4, 1]);
  assert.deepEqual(applies[0].details.files.map((f) => f.outcome), ['applied', 'applied', 'applied', 'conflict', 'applied']);
  S.agent.close();
  S.buyer.close();
});

test('a rejected changeset: nothing lands, and the agent is told', { timeout: 300000 }, async () => {
  const S = await session((d) => writeFileSync(join(d, 'a.txt'), 'a\n'));
  const atOpen = tree(S.dir);
  const { ask, call } = await runWritable(S, 'printf b > a.txt && printf new > new.txt');
  const no = await post(S, `/reject/${ask.opId}`, { reason: 'not now' });
  assert.equal(no.status, 200, no.text);
  const res = await result(call);
  assert.equal(res.changeset.state, 'rejected', JSON.stringify(res.changeset));
  assert.deepEqual(tree(S.dir), atOpen);
  const view = await changeset(S, ask.opId);
  assert.deepEqual(view.files.map((f) => [f.path, f.decision]), [['a.txt', 'rejected'], ['new.txt', 'rejected']]);
  S.agent.close();
  S.buyer.close();
});

test('more paths than a changeset holds, a name that is not UTF-8, or more bytes than the session may keep: refused whole, nothing lands, the agent is told', { timeout: 300000 }, async () => {
  const S = await session((d) => writeFileSync(join(d, 'a.txt'), 'a\n'));
  const atOpen = tree(S.dir);
  for (const [command, code] of [
    ['mkdir many && cd many && seq 1 10001 | xargs touch', 'too_large'],
    ["printf x > a.txt && touch \"$(printf 'bad\\377name')\"", 'bad_name'],
    ['seq 1 2500000 > big.txt', 'preimage_budget'], // 18 MB: past the session's budget
  ]) {
    const call = K.call(S.agent, 'exec', { command, writable: true, timeoutSec: 120 }, 180000);
    const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === command, 60000);
    assert.equal((await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ask.opId })).ok, true);
    const res = await result(call);
    assert.equal(res.exitCode, 0, JSON.stringify(res).slice(0, 400));
    assert.deepEqual([res.changeset?.state, res.changeset?.code], ['refused', code], JSON.stringify(res.changeset));
    assert.deepEqual(tree(S.dir), atOpen, command);
    assert.ok(!S.buyer.events.some((e) => e.event === 'jailbox:approval_request' && e.payload.tool === 'changeset' && e.payload.execOpId === ask.opId));
  }
  S.agent.close();
  S.buyer.close();
});
