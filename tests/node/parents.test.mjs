// parents.test.mjs — write and move make their missing parent folders (createParents, default
// true) through the whole real stack: socket.io-client agent → jailboxd → ops row →
// jailbox-worker → jailbox-shim in gVisor + Docker + bwrap. Unsupervised: the folders are made
// on the host workspace and named in the answer and the audit entry; createParents false keeps
// not_found; a folder the landing check covers (.git/hooks) is refused as a mkdir of it is; a
// parent that is a symlink (out of the workspace — an escape — or inside), an excluded folder or a file where
// a folder is expected makes nothing. Supervised: the approval request lists the folders, and
// the approved write makes those alone (a parent that appeared meanwhile is fine, one that
// vanished is not made). Needs root, Docker with runsc (as fileops.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

let K, U, S; // the kit, the unsupervised and the supervised session {…, agent, buyer}
const outside = mkdtempSync(join(tmpdir(), 'jb-parents-out-'));

before(async () => {
  K = await startSandboxServer('jailbox-sandbox:parents');
  U = await K.openSession((d) => {
    writeFileSync(join(d, 'file.txt'), 'a file\n');
    writeFileSync(join(d, 'm.txt'), 'moved\n');
    mkdirSync(join(d, 'sub'));
    mkdirSync(join(d, 'secrets'));
    mkdirSync(join(d, 'zzzzzzzzz/'.repeat(120)), { recursive: true }); // 72 KB of folders' paths
    symlinkSync('sub', join(d, 'lnk')); // stays inside
  }, { mode: 'unsupervised', exclude: ['secrets'] });
  S = await K.openSession((d) => mkdirSync(join(d, 'u')), { mode: 'supervised' });
  for (const x of [U, S]) {
    x.buyer = await K.connect(x.buyerToken);
    x.agent = await K.connect(x.agentToken);
  }
});

after(async () => {
  rmSync(outside, { recursive: true, force: true });
  if (!K) return;
  K.closeSockets();
  const log = K.srv.log();
  await K.srv.stop();
  assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
});

const auditOf = async (x, op, path) => (await K.srv.db.query(
  'SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = $1 AND operation = $2 AND path = $3',
  [x.jobId, op, path])).rows.map((r) => r.d);

test('unsupervised: write of a/b/c/new.txt makes a, a/b and a/b/c (0755), named in the answer and the audit entry', { timeout: 60000 }, async () => {
  const r = await K.ok(U.agent, 'write', { path: 'a/b/c/new.txt', content: 'new\n' });
  assert.deepEqual(r.createdFolders, ['a', 'a/b', 'a/b/c']);
  assert.equal(readFileSync(join(U.dir, 'a/b/c/new.txt'), 'utf8'), 'new\n');
  for (const f of ['a', 'a/b', 'a/b/c']) assert.equal(statSync(join(U.dir, f)).mode & 0o777, 0o755, f);
  const [d] = await auditOf(U, 'write', 'a/b/c/new.txt');
  assert.deepEqual(d?.createdFolders, ['a', 'a/b', 'a/b/c'], JSON.stringify(d));
  // into folders that exist: nothing is made, nothing is named
  const r2 = await K.ok(U.agent, 'write', { path: 'a/b/second.txt', content: '2\n' });
  assert.equal(r2.createdFolders, undefined);
  // a move's destination too
  const mr = await K.call(U.agent, 'move', { source: 'm.txt', destination: 'd1/d2/m.txt' });
  const m = mr.result?.structuredContent;
  assert.deepEqual(m?.createdFolders, ['d1', 'd1/d2'], JSON.stringify(mr));
  assert.match(mr.result.content[0].text, /created the folders d1, d1\/d2/);
  assert.equal(readFileSync(join(U.dir, 'd1/d2/m.txt'), 'utf8'), 'moved\n');
  const [md] = await auditOf(U, 'move', 'm.txt');
  assert.deepEqual(md?.createdFolders, ['d1', 'd1/d2'], JSON.stringify(md));
});

test('unsupervised: createParents false keeps not_found, for a write and a move', { timeout: 60000 }, async () => {
  await K.refused(U.agent, 'write', { path: 'x/y/new.txt', content: 'n\n', createParents: false }, 'not_found');
  await K.refused(U.agent, 'move', { source: 'file.txt', destination: 'x/y/f.txt', createParents: false }, 'not_found');
  assert.ok(!existsSync(join(U.dir, 'x')));
  const f = toolFailure(await K.call(U.agent, 'write', { path: 'x/n.txt', content: 'n\n', createParents: 'yes' }));
  assert.ok(f, 'a createParents that is no boolean is refused');
  // folders whose paths come to over 64 KiB: made with mkdir, not by a write
  await K.refused(U.agent, 'write', { path: 'x/'.repeat(300) + 'n.txt', content: 'n\n' }, 'too_large');
  assert.ok(!existsSync(join(U.dir, 'x')));
  // 255 folders (64 KiB of paths) would make an audit entry over its 64 KiB: refused before
  // anything is made, not made and then left unaudited
  await K.refused(U.agent, 'write', { path: 'y/'.repeat(255) + 'n.txt', content: 'n\n' }, 'too_large');
  assert.ok(!existsSync(join(U.dir, 'y')));
  // 100 of them: made, and named in the audit entry
  const deep = 'w/'.repeat(100) + 'n.txt';
  assert.equal((await K.ok(U.agent, 'write', { path: deep, content: 'n\n' })).createdFolders.length, 100);
  const [d] = await auditOf(U, 'write', deep);
  assert.equal(d?.createdFolders?.length, 100, JSON.stringify(d).slice(0, 300));
  // into a tree that deep that exists (made before the session): nothing to make, nothing
  // too large
  const w = await K.ok(U.agent, 'write', { path: 'zzzzzzzzz/'.repeat(120) + 'n.txt', content: 'n\n' });
  assert.equal(w.createdFolders, undefined);
});

test('unsupervised: a folder the landing check covers is refused as a mkdir of it is (.git/hooks without .git)', { timeout: 60000 }, async () => {
  const e = await K.refused(U.agent, 'write', { path: '.git/hooks/pre-commit', content: '#!/bin/sh\n' }, 'flagged');
  assert.match(e.message, /git_/);
  await K.refused(U.agent, 'move', { source: 'file.txt', destination: '.git/hooks/post-commit' }, 'flagged');
  assert.ok(!existsSync(join(U.dir, '.git')));
  // a folder whose own name is covered, with a file below it the path rules leave alone
  await K.refused(U.agent, 'write', { path: '.husky/_/notes.txt', content: 'n\n' }, 'flagged');
  assert.ok(!existsSync(join(U.dir, '.husky')));
});

test('a buyer\'s mkdir rule decides the folders a write or a move would make, as it decides a mkdir of them', { timeout: 60000 }, async () => {
  const R = await K.openSession((d) => {
    mkdirSync(join(d, 'vendor/lib'), { recursive: true });
    writeFileSync(join(d, 'f.txt'), 'f\n');
  }, { mode: 'unsupervised', policy: { rules: [
    { id: 'no-vendor-dirs', tool: 'mkdir', path: 'vendor/**', effect: 'deny' },
    { id: 'ask-docs-dirs', tool: 'mkdir', path: 'docs/**', effect: 'ask' },
  ] } });
  const agent = await K.connect(R.agentToken);
  const buyer = await K.connect(R.buyerToken);
  await K.refused(agent, 'mkdir', { path: 'vendor/new' }, 'denied');
  const e = await K.refused(agent, 'write', { path: 'vendor/new/x.c', content: 'x\n' }, 'denied');
  assert.match(e.message, /no-vendor-dirs/);
  await K.refused(agent, 'move', { source: 'f.txt', destination: 'vendor/new2/f.txt' }, 'denied');
  assert.deepEqual(readdirSync(join(R.dir, 'vendor')).sort(), ['lib']);
  // into folders that exist nothing is made: the rule has no say
  await K.ok(agent, 'write', { path: 'vendor/lib/x.c', content: 'x\n' });
  assert.equal(readFileSync(join(R.dir, 'vendor/lib/x.c'), 'utf8'), 'x\n');
  // an ask rule of a folder makes the write ask the buyer, who sees the folders
  const pending = K.call(agent, 'write', { path: 'docs/api/a.md', content: 'a\n' }, 60000);
  const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'docs/api/a.md');
  assert.deepEqual(req.createsFolders, ['docs', 'docs/api'], JSON.stringify(req));
  assert.ok(!existsSync(join(R.dir, 'docs')));
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  assert.deepEqual((await pending).result?.structuredContent?.createdFolders, ['docs', 'docs/api']);
});

test('a folder that would hold the target of a hook that is a symlink is not made by a write below it', { timeout: 60000 }, async () => {
  // .git/hooks/pre-commit -> ../../tools/hooks/pre-commit, tools/ not there yet: a mkdir of
  // tools is refused, and so is a write of tools/readme.txt, which would make it
  const L = await K.openSession((d) => {
    mkdirSync(join(d, '.git/hooks'), { recursive: true });
    writeFileSync(join(d, '.git/HEAD'), 'ref: refs/heads/main\n');
    symlinkSync('../../tools/hooks/pre-commit', join(d, '.git/hooks/pre-commit'));
  }, { mode: 'unsupervised' });
  const agent = await K.connect(L.agentToken);
  await K.refused(agent, 'mkdir', { path: 'tools' }, 'flagged');
  const e = await K.refused(agent, 'write', { path: 'tools/readme.txt', content: 'r\n' }, 'flagged');
  assert.match(e.message, /tools/);
  assert.ok(!existsSync(join(L.dir, 'tools')));
  // in another case: one folder with it where the buyer's copy is on a case-insensitive disk
  await K.refused(agent, 'write', { path: 'TOOLS/readme.txt', content: 'r\n' }, 'flagged');
  await K.refused(agent, 'write', { path: 'Tools/Hooks/pre-commit', content: '#!/bin/sh\n' }, 'flagged');
  // with a code point HFS+ ignores in names (ZWNJ), or a letter APFS folds to ASCII (U+212A)
  await K.refused(agent, 'write', { path: 'tools\u200c/readme.txt', content: 'r\n' }, 'flagged');
  await K.refused(agent, 'write', { path: 'tools/hoo\u212As/pre-commit', content: '#!/bin/sh\n' }, 'flagged');
  assert.deepEqual(readdirSync(L.dir).sort(), ['.git']);
});

test('unsupervised: a symlink inside on the way, an excluded folder or a file where a folder is expected makes nothing', { timeout: 60000 }, async () => {
  await K.refused(U.agent, 'write', { path: 'lnk/new/x.txt', content: 'x\n' }, 'denied');
  assert.ok(!existsSync(join(U.dir, 'sub/new')));
  await K.refused(U.agent, 'write', { path: 'secrets/new/x.txt', content: 'x\n' }, 'excluded');
  assert.ok(!existsSync(join(U.dir, 'secrets/new')));
  await K.refused(U.agent, 'write', { path: 'file.txt/new/x.txt', content: 'x\n' });
  assert.equal(readFileSync(join(U.dir, 'file.txt'), 'utf8'), 'a file\n');
});

test('a symlink made after the pre-scan, inside or leading out, is never passed: nothing made', { timeout: 120000 }, async () => {
  // its own session: a write through a link that leads out is an escape that ends it
  const E = await K.openSession((d) => {
    mkdirSync(join(d, 'sub'));
    writeFileSync(join(d, 'f.txt'), 'f\n');
  }, { mode: 'unsupervised' });
  const agent = await K.connect(E.agentToken);
  symlinkSync('sub', join(E.dir, 'inside'));
  symlinkSync(outside, join(E.dir, 'late'));
  await K.refused(agent, 'write', { path: 'inside/new/x.txt', content: 'x\n' }, 'denied');
  await K.refused(agent, 'move', { source: 'f.txt', destination: 'inside/new/f.txt' }, 'denied');
  assert.deepEqual(readdirSync(join(E.dir, 'sub')), []);
  const f = await K.refused(agent, 'write', { path: 'late/new/x.txt', content: 'x\n' }, 'denied');
  assert.match(f.message, /symlink/);
  assert.deepEqual(readdirSync(outside), [], 'nothing made outside the workspace');
});

// a supervised write held for the buyer: its approval request
async function held(path) {
  const pending = K.call(S.agent, 'write', { path, content: 'held\n' }, 120000);
  const req = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.path === path);
  return { pending, req };
}

async function approve(req) {
  const ack = await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
}

test('supervised: the approval request lists the folders the write makes; approved, it makes them', { timeout: 120000 }, async () => {
  const { pending, req } = await held('p/q/r/new.txt');
  assert.deepEqual(req.createsFolders, ['p', 'p/q', 'p/q/r'], JSON.stringify(req));
  assert.ok(!existsSync(join(S.dir, 'p')), 'nothing made before the approval');
  await approve(req);
  const r = await pending;
  assert.equal(r.result?.isError, false, JSON.stringify(r));
  assert.deepEqual(r.result.structuredContent.createdFolders, ['p', 'p/q', 'p/q/r']);
  assert.equal(readFileSync(join(S.dir, 'p/q/r/new.txt'), 'utf8'), 'held\n');
  // below a folder that exists: only the missing ones are shown
  const h2 = await held('u/v/w.txt');
  assert.deepEqual(h2.req.createsFolders, ['u/v']);
  await approve(h2.req);
  assert.equal((await h2.pending).result?.isError, false);
  assert.ok(existsSync(join(S.dir, 'u/v/w.txt')));
  // a list that would not fit one notification: its first folder and how many
  const deep = Array.from({ length: 12 }, (_, i) => String(i).padEnd(200, 'd')).join('/') + '/f.txt';
  const h3 = await held(deep);
  assert.equal(h3.req.createsFolders, undefined);
  assert.equal(h3.req.createsFoldersFrom, '0'.padEnd(200, 'd'));
  assert.equal(h3.req.createsFoldersCount, 12);
  await approve(h3.req);
  assert.equal((await h3.pending).result?.isError, false);
  assert.ok(existsSync(join(S.dir, deep)));
});

test('supervised: the approved write makes what was shown — a parent that appeared meanwhile is fine, one that vanished is not made', { timeout: 120000 }, async () => {
  const a = await held('g/h/a.txt');
  assert.deepEqual(a.req.createsFolders, ['g', 'g/h']);
  const { uid, gid } = statSync(S.dir);
  mkdirSync(join(S.dir, 'g')); // the buyer made one meanwhile
  chownSync(join(S.dir, 'g'), uid, gid);
  chmodSync(join(S.dir, 'g'), 0o777);
  await approve(a.req);
  const ra = await a.pending;
  assert.equal(ra.result?.isError, false, JSON.stringify(ra));
  assert.deepEqual(ra.result.structuredContent.createdFolders, ['g/h']);
  mkdirSync(join(S.dir, 'k'));
  const b = await held('k/l/b.txt');
  assert.deepEqual(b.req.createsFolders, ['k/l']);
  rmSync(join(S.dir, 'k'), { recursive: true }); // k would have to be made: it was not shown
  await approve(b.req);
  const f = toolFailure(await b.pending);
  assert.equal(f?.data?.reason, 'not_found', JSON.stringify(f));
  assert.ok(!existsSync(join(S.dir, 'k')));
});
